"""How a layer runs in eager mode (`impl`): one vocabulary for the EvoNorm layers and for graph layers, so a
name means the same path wherever it is given. Triton is imported only when a layer first needs it.
"""

from __future__ import annotations

import functools

IMPLS = ("auto", "plain", "fast", "compile", "cpp", "triton")
"""Every path a layer can be asked for:
- "plain": the formula as ordinary tensor ops, one autograd node per op (what tracing and export run);
- "fast": one autograd function with a hand-derived backward (fewer, larger steps; no saved intermediates);
- "compile": the plain formula under torch.compile (Inductor fuses it);
- "cpp": the whole layer as one C++ kernel compiled on first use, for CPU tensors;
- "triton": Triton kernels, for CUDA tensors;
- "auto": the best of these that applies to the input.
A layer family takes the subset it implements (`EVONORM_IMPLS` in `evonorm.layers.impl`, `GRAPH_IMPLS` in
`evonorm.graph.module`)."""


def check_impl(impl: str, takes: tuple[str, ...], family: str) -> str:
    """`impl` as `family` runs it: a name outside `takes` is refused in one line that says what the family
    takes."""
    if impl not in takes:
        known = "" if impl in IMPLS else " (not a path this package has)"
        raise ValueError(f"{family} take impl {' | '.join(takes)}, got {impl!r}{known}")
    if impl == "triton" and not has_triton():  # here, not at the first forward of a built model
        raise ValueError("impl='triton' needs the triton package (pip install triton; CUDA builds "
                         "of torch bundle it)")
    return impl


@functools.cache
def has_triton() -> bool:
    """Whether Triton imports here (it is optional)."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True
