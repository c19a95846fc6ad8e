"""The EvoNorm formulas written plainly, for two uses.

1. Under torch.compile (impl="compile", the default on CUDA): Inductor fuses these formulas into a few
   Triton kernels on a GPU (its min-cut partitioner saves about the input alone for backward). On CPU the
   default is the hand-written autograd kernels (`kernels/evonorm_*_cpu.py`); the hand-written Triton
   kernels (`kernels/evonorm_triton.py`) run only when asked for (impl="triton").
2. Double backprop (create_graph=True, e.g. the search's stability test): the hand-written kernels' backward
   then differentiates these formulas with autograd, so second derivatives are exact too.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

from evonorm.runtime.common import compute_dtype


def s_formula(x: torch.Tensor, v: Optional[torch.Tensor], weight: torch.Tensor, bias: torch.Tensor, groups: int,
              eps: float, variant: int) -> torch.Tensor:
    """EvoNorm-S{variant}: x * sigmoid(v x) / group_std (S0, S1 with v = 1) or / group_rms (S2) * gamma + beta.
    (TorchScript-able, like `b_formula`: the layers' exportable path.)"""
    n, c = x.shape[0], x.shape[1]
    ct = compute_dtype(x.dtype)
    xg = x.to(ct).reshape(n, groups, -1)
    if variant == 2:
        den = (xg.square().mean(-1, keepdim=True) + eps).sqrt()
    else:
        den = (xg.var(-1, unbiased=False, keepdim=True) + eps).sqrt()
    x3 = xg.reshape(n, c, -1)
    den = den.expand_as(xg).reshape(n, c, -1)
    if variant == 0:
        assert v is not None
        act = x3 * torch.sigmoid(v.to(ct).view(1, -1, 1) * x3)
    else:
        act = F.silu(x3)
    y = act / den * weight.to(ct).view(1, -1, 1) + bias.to(ct).view(1, -1, 1)
    return y.reshape(x.shape).to(x.dtype)


def b_formula(x: torch.Tensor, v: Optional[torch.Tensor], weight: torch.Tensor, bias: torch.Tensor,
              running_var: Optional[torch.Tensor], training: bool, eps: float,
              variant: int) -> tuple[torch.Tensor, torch.Tensor]:
    """EvoNorm-B{variant}: x / max(batch_std, instance branch) * gamma + beta; also returns the batch variance
    (in eval: `running_var`, through which gradients then flow, as the synced training path uses)."""
    n, c = x.shape[0], x.shape[1]
    ct = compute_dtype(x.dtype)
    x3 = x.to(ct).reshape(n, c, -1)
    if training:
        var_c = x3.var([0, 2], unbiased=False, keepdim=True)
    else:
        assert running_var is not None
        var_c = running_var.to(ct).view(1, -1, 1)
    bstd = (var_c + eps).sqrt()
    if variant == 0:
        assert v is not None
        inst = v.to(ct).view(1, -1, 1) * x3 + (x3.var(-1, unbiased=False, keepdim=True) + eps).sqrt()
    else:
        rms = (x3.square().mean(-1, keepdim=True) + eps).sqrt()
        inst = (x3 + 1) * rms if variant == 1 else rms - x3
    y = x3 / torch.maximum(bstd, inst) * weight.to(ct).view(1, -1, 1) + bias.to(ct).view(1, -1, 1)
    return y.reshape(x.shape).to(x.dtype), var_c.detach().flatten()

