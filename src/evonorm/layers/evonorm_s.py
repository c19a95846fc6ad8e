"""EvoNorm-S0, S1, S2: sample-based layers (no batch statistics), paper Table 2 / appendix A."""

from __future__ import annotations

import torch
from torch import nn

from evonorm.layers._common import affine, check_input
from evonorm.layers._formula import IMPLS, compiled, use_compiled
from evonorm.layers._evonorm_s_fn import S0, S1, S2, EvoNormSFunction
from evonorm.stats import resolve_groups


class _EvoNormS(nn.Module):
    """Shared body: gamma/beta (and v for S0), the group rule, and `apply_act=False` as a plain affine."""

    variant: int = S0
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
        self.groups = resolve_groups(num_features, groups)
        self.weight = nn.Parameter(torch.ones(num_features))
        self.bias = nn.Parameter(torch.zeros(num_features))
        if apply_act and self.has_v:
            self.v = nn.Parameter(torch.ones(num_features))
        else:
            self.register_parameter("v", None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_input(x, self.num_features, type(self).__name__)
        if not self.apply_act:
            return affine(x, self.weight, self.bias)
        if use_compiled(self.impl, x):
            return compiled("s")(x, self.v, self.weight, self.bias, self.groups, self.eps, self.variant)
        return EvoNormSFunction.apply(x, self.v, self.weight, self.bias, self.groups, self.eps, self.variant)

    def extra_repr(self) -> str:
        return f"{self.num_features}, groups={self.groups}, eps={self.eps}, apply_act={self.apply_act}"


class EvoNormS0(_EvoNormS):
    """x * sigmoid(v * x) / group_std(x) * gamma + beta."""

    variant, has_v = S0, True


class EvoNormS1(_EvoNormS):
    """x * sigmoid(x) / group_std(x) * gamma + beta."""

    variant = S1


class EvoNormS2(_EvoNormS):
    """x * sigmoid(x) / group_rms(x) * gamma + beta (group_rms = sqrt(mean_{hw,c/g}(x^2) + eps))."""

    variant = S2
