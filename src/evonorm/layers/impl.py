"""How a layer runs in eager mode (`impl`): one vocabulary for the EvoNorm layers and for graph layers, so a
name means the same path wherever it is given. Triton and torch.compile are imported only when a layer
first needs them.
"""

from __future__ import annotations

import functools

import torch

from evonorm.layers._formula import b_formula, s_formula

IMPLS = ("auto", "plain", "fast", "compile", "cpp", "triton")
"""Every path a layer can be asked for:
- "plain": the formula as ordinary tensor ops, one autograd node per op (what tracing and export run);
- "fast": one autograd function with a hand-derived backward (fewer, larger steps; no saved intermediates);
- "compile": the plain formula under torch.compile (Inductor fuses it);
- "cpp": the whole layer as one C++ kernel compiled on first use, for CPU tensors;
- "triton": Triton kernels, for CUDA tensors;
- "auto": the best of these that applies to the input.
A layer family takes the subset it implements (`EVONORM_IMPLS`, `GRAPH_IMPLS` in `evonorm.graph.module`)."""
EVONORM_IMPLS = ("auto", "plain", "fast", "compile", "triton")


def check_impl(impl: str, takes: tuple[str, ...], family: str) -> str:
    """`impl` as `family` runs it: a name outside `takes` is refused in one line that says what the family
    takes."""
    if impl not in takes:
        known = "" if impl in IMPLS else " (not a path this package has)"
        raise ValueError(f"{family} take impl {' | '.join(takes)}, got {impl!r}{known}")
    if impl == "triton" and not _has_triton():  # here, not at the first forward of a built model
        raise ValueError("impl='triton' needs the triton package (pip install triton; CUDA builds "
                         "of torch bundle it)")
    return impl


@functools.cache
def compiled(kind: str):
    """torch.compile'd `s_formula` or `b_formula` (compiled on first call, per shape class)."""
    return torch.compile(s_formula if kind == "s" else b_formula)


def resolve_impl(impl: str, x: torch.Tensor) -> str:
    """The path an EvoNorm layer takes for `x`: "auto" is the Triton kernels on CUDA (when Triton imports; on
    an H100 they ran faster than the compiled formula at every shape measured, with no compile wait), the
    fast path (hand-written autograd kernel) elsewhere; any other impl as named."""
    if impl == "auto":
        return "triton" if x.is_cuda and _has_triton() else "fast"
    return impl


def triton_kernels():
    """The Triton kernel module, imported on first use (Triton is optional)."""
    if not _has_triton():
        raise ImportError("impl='triton' needs the triton package (pip install triton)")
    from evonorm.layers.kernels import evonorm_triton  # optional dependency: on use

    return evonorm_triton


@functools.cache
def _has_triton() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True
