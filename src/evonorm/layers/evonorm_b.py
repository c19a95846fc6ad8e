"""EvoNorm-B0, B1, B2: layers with a batch statistic, paper Table 2 / appendix A.

In training the batch std comes from the batch and updates `running_var` (float32, momentum as in
BatchNorm, unbiased like BatchNorm's running estimate); in eval mode the running estimate is used.
"""

from __future__ import annotations

import torch
from torch import nn

from evonorm.layers._common import affine, check_input
from evonorm.layers._formula import IMPLS, compiled, use_compiled
from evonorm.layers._evonorm_b_fn import B0, B1, B2, EvoNormBFunction


class _EvoNormB(nn.Module):
    """Shared body: gamma/beta (and v for B0), running_var, and `apply_act=False` as a plain affine."""

    variant: int = B0
    has_v: bool = False

    def __init__(self, num_features: int, *, apply_act: bool = True, eps: float = 1e-5, groups: int = 32,
                 momentum: float = 0.1, impl: str = "auto", **kwargs):
        super().__init__()
        if impl not in IMPLS:
            raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")
        self.impl = impl  # "auto": torch.compile'd formula on CUDA, the hand-written autograd kernel elsewhere
        self.num_features = num_features
        self.apply_act = apply_act
        self.eps = eps
        self.momentum = momentum
        self.weight = nn.Parameter(torch.ones(num_features))
        self.bias = nn.Parameter(torch.zeros(num_features))
        if apply_act and self.has_v:
            self.v = nn.Parameter(torch.ones(num_features))
        else:
            self.register_parameter("v", None)
        if apply_act:
            self.register_buffer("running_var", torch.ones(num_features, dtype=torch.float32))
        else:
            self.register_buffer("running_var", None)

    def _apply(self, fn, recurse=True):
        # .half()/.to(bfloat16) must not lower the running variance's precision (SPEC: float32).
        super()._apply(fn, recurse)
        if self.running_var is not None and self.running_var.dtype in (torch.float16, torch.bfloat16):
            self.running_var = self.running_var.float()
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_input(x, self.num_features, type(self).__name__)
        if not self.apply_act:
            return affine(x, self.weight, self.bias)
        if use_compiled(self.impl, x):
            y, var = compiled("b")(x, self.v, self.weight, self.bias, self.running_var, self.training, self.eps,
                                   self.variant)
            if self.training:
                with torch.no_grad():
                    count = x.numel() // x.shape[1]
                    unbiased = count / (count - 1) if count > 1 else 1.0
                    self.running_var.mul_(1 - self.momentum).add_(var.float(), alpha=self.momentum * unbiased)
            return y
        return EvoNormBFunction.apply(x, self.v, self.weight, self.bias, self.running_var, self.training,
                                      self.momentum, self.eps, self.variant)

    def extra_repr(self) -> str:
        return f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, apply_act={self.apply_act}"


class EvoNormB0(_EvoNormB):
    """x / max(batch_std(x), v * x + instance_std(x)) * gamma + beta."""

    variant, has_v = B0, True


class EvoNormB1(_EvoNormB):
    """x / max(batch_std(x), (x + 1) * instance_rms(x)) * gamma + beta."""

    variant = B1


class EvoNormB2(_EvoNormB):
    """x / max(batch_std(x), instance_rms(x) - x) * gamma + beta."""

    variant = B2
