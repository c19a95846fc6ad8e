"""EvoNorm-S0, S1, S2: sample-based layers (no batch statistics), paper Table 2 / appendix A."""

from __future__ import annotations

import torch

from evonorm.layers._base import EvoNormBase
from evonorm.runtime.common import resolve_groups
from evonorm.layers.impl import compiled, resolve_impl, triton_kernels
from evonorm.runtime.paths import ran
from evonorm.layers.kernels.evonorm_s_cpu import S0, S1, S2, EvoNormSFunction
from evonorm.layers._plain import s_plain

torch.fx.wrap("s_plain")  # one leaf node under torch.fx.symbolic_trace


class _EvoNormS(EvoNormBase):
    """Shared body of the S layers: the group rule on top of EvoNormBase."""

    def __init__(self, num_features: int, *, apply_act: bool = True, eps: float = 1e-5, groups: int = 32,
                 group_size: int | None = None, momentum: float = 0.1, impl: str = "auto", **kwargs):
        super().__init__(num_features, apply_act=apply_act, eps=eps, momentum=momentum, impl=impl)
        self.groups = resolve_groups(num_features, groups, group_size)

    def _norm_act(self, x: torch.Tensor) -> torch.Tensor:
        impl = resolve_impl(self.impl, x)
        ran(impl)
        if impl == "plain":
            return self._plain(x, type(self).__name__)
        args = (x, self.v, self.weight, self.bias, self.groups, self.eps, self.variant)
        if impl == "compile":
            return compiled("s")(*args)
        if impl == "triton":
            return triton_kernels().EvoNormSTriton.apply(*args)
        return EvoNormSFunction.apply(*args)

    def _plain(self, x: torch.Tensor, layer: str) -> torch.Tensor:
        return s_plain(x, self.v, self.weight, self.bias, layer, self.num_features, self.apply_act, self.groups,
                       self.eps, self.variant)

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
