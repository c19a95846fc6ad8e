"""The EvoNorm layers' paths (`impl`, whose vocabulary is `evonorm.runtime.impl`): the compiled formulas,
the Triton kernels, and which one `auto` takes. Triton and torch.compile are imported only when a layer
first needs them.
"""

from __future__ import annotations

import functools

import torch

from evonorm.layers._formula import b_formula, s_formula
from evonorm.runtime.impl import has_triton

EVONORM_IMPLS = ("auto", "plain", "fast", "compile", "triton")


@functools.cache
def compiled(kind: str):
    """torch.compile'd `s_formula` or `b_formula` (compiled on first call, per shape class)."""
    return torch.compile(s_formula if kind == "s" else b_formula)


def resolve_impl(impl: str, x: torch.Tensor) -> str:
    """The path an EvoNorm layer takes for `x`: "auto" is the Triton kernels on CUDA (when Triton imports; on
    an H100 they ran faster than the compiled formula at every shape measured, with no compile wait), the
    fast path (hand-written autograd kernel) elsewhere; any other impl as named."""
    if impl == "auto":
        return "triton" if x.is_cuda and has_triton() else "fast"
    return impl


def triton_kernels():
    """The Triton kernel module, imported on first use (Triton is optional)."""
    if not has_triton():
        raise ImportError("impl='triton' needs the triton package (pip install triton)")
    from evonorm.layers.kernels import evonorm_triton  # optional dependency: on use

    return evonorm_triton
