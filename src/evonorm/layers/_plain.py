"""The EvoNorm layers' exportable path: the plain formulas (`_formula.py`), with the input check, the
apply_act=False affine and the running-variance update, as TorchScript-able functions.

The hand-written autograd kernels (and impl="compile"/"triton") run Python loops over sample chunks and
out= ops that torch.jit.script cannot compile, that a tracer bakes into constants (the legacy ONNX exporter
wrote a graph with no inputs) and that pin the batch size in torch.export. So a layer takes this path by
itself while scripted, traced (torch.jit.trace), exported (torch.export, ONNX) or compiled: see
`evonorm.runtime.tracing.exporting`. Under torch.fx a layer inside the traced model is one call_module node (`tracing.fx_leaf`); a layer
traced as the root calls these functions as single leaf nodes (`torch.fx.wrap` where they are called), so no
shape check runs as Python control flow on a Proxy.
"""

from __future__ import annotations

from typing import Optional

import torch

from evonorm.runtime.common import affine, check_input, update_running_var
from evonorm.layers._formula import b_formula, s_formula


def s_plain(x: torch.Tensor, v: Optional[torch.Tensor], weight: torch.Tensor, bias: torch.Tensor, layer: str,
            num_features: int, apply_act: bool, groups: int, eps: float, variant: int) -> torch.Tensor:
    """An EvoNorm-S layer's forward as plain tensor ops."""
    check_input(x, num_features, layer)
    if not apply_act:
        return affine(x, weight, bias)
    return s_formula(x, v, weight, bias, groups, eps, variant)


def b_plain(x: torch.Tensor, v: Optional[torch.Tensor], weight: torch.Tensor, bias: torch.Tensor, layer: str,
            num_features: int, apply_act: bool, running_var: Optional[torch.Tensor], training: bool,
            momentum: float, eps: float, variant: int) -> torch.Tensor:
    """An EvoNorm-B layer's forward as plain tensor ops (updates `running_var` in training)."""
    check_input(x, num_features, layer)
    if not apply_act:
        return affine(x, weight, bias)
    y, var = b_formula(x, v, weight, bias, running_var, training, eps, variant)
    if training and running_var is not None:
        update_running_var(running_var, var, x.numel() // x.shape[1], momentum)
    return y
