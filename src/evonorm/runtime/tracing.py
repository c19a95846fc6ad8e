"""How a layer knows it is being traced, exported or compiled, and how it stays one node under torch.fx.

The layers (and the compiled graph layers) use these two checks to take their exportable path
(`evonorm.layers._plain`) and to appear as a single call_module node in a model traced by
`torch.fx.symbolic_trace`, as torch.nn's own layers do.
"""

from __future__ import annotations

import torch
from torch import fx, nn


def exporting(x: torch.Tensor) -> bool:
    """Whether `x` is being traced, exported or compiled (not plain eager execution)."""
    return (isinstance(x, fx.Proxy) or torch.jit.is_tracing() or torch.onnx.is_in_onnx_export()
            or torch.compiler.is_compiling())


def fx_leaf(module: nn.Module, x) -> torch.Tensor | None:
    """Under torch.fx tracing of a model holding `module`: a call_module node for it, so fx keeps it as a
    leaf (as it keeps torch.nn's layers) and the traced model runs its forward, fast kernels included;
    None when not fx-tracing or when `module` is the traced root itself."""
    if not isinstance(x, fx.Proxy) or module is x.tracer.root:
        return None
    return x.tracer.create_proxy("call_module", x.tracer.path_of_module(module), (x,), {})
