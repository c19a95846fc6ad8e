"""EvoNorm-B0, B1, B2: layers with a batch statistic, paper Table 2 / appendix A.

In training the batch std comes from the batch and updates `running_var` (float32, momentum as in
BatchNorm, unbiased like BatchNorm's running estimate); in eval mode the running estimate is used.
"""

from __future__ import annotations

import torch

from evonorm.layers._base import EvoNormBase
from evonorm.runtime.common import check_input, update_running_var
from evonorm.layers.impl import compiled, resolve_impl, triton_kernels
from evonorm.runtime.paths import fell_back, ran
from evonorm.layers.kernels.evonorm_b_cpu import B0, B1, B2, EvoNormBFunction
from evonorm.layers._plain import b_plain
from evonorm.layers.sync import b_norm_act_synced
from evonorm.runtime.sync_stats import SyncGroup, sync_active

torch.fx.wrap("b_plain")  # one leaf node under torch.fx.symbolic_trace


class _EvoNormB(EvoNormBase):
    """Shared body of the B layers: the float32 running variance on top of EvoNormBase."""

    sync: SyncGroup | None = None  # set by convert_sync_norm_act: all-reduce the batch statistics

    def __init__(self, num_features: int, *, apply_act: bool = True, eps: float = 1e-5, groups: int = 32,
                 momentum: float = 0.1, impl: str = "auto", **kwargs):
        super().__init__(num_features, apply_act=apply_act, eps=eps, momentum=momentum, impl=impl)
        running_var = torch.ones(num_features, dtype=torch.float32) if apply_act else None
        self.register_buffer("running_var", running_var)

    def _apply(self, fn, recurse=True):
        # .half()/.to(bfloat16) must not lower the running variance's precision: it stays float32,
        # since a bfloat16 running average loses the small updates of late training
        super()._apply(fn, recurse)
        if self.running_var is not None and self.running_var.dtype in (torch.float16, torch.bfloat16):
            self.running_var = self.running_var.float()
        return self

    def _norm_act(self, x: torch.Tensor) -> torch.Tensor:
        if self.training and sync_active(self.sync):
            if self.impl == "triton":
                fell_back("triton", "synced", "batch statistics synced across processes")
            else:
                ran("synced")
            return b_norm_act_synced(x, self.v, self.weight, self.bias, self.running_var, self.momentum, self.eps,
                                     self.variant, self.sync)
        impl = resolve_impl(self.impl, x)
        ran(impl)
        if impl == "plain":  # (synced statistics returned above, so `_plain` takes the formula)
            return self._plain(x, type(self).__name__)
        if impl == "compile":
            y, var = compiled("b")(x, self.v, self.weight, self.bias, self.running_var, self.training, self.eps,
                                   self.variant)
            if self.training:
                update_running_var(self.running_var, var, x.numel() // x.shape[1], self.momentum)
            return y
        fn = triton_kernels().EvoNormBTriton if impl == "triton" else EvoNormBFunction
        return fn.apply(x, self.v, self.weight, self.bias, self.running_var, self.training, self.momentum, self.eps,
                        self.variant)

    def _plain(self, x: torch.Tensor, layer: str) -> torch.Tensor:
        if not torch.jit.is_scripting():  # synced statistics under torch.compile / export too (not TorchScript)
            if self.training and sync_active(self.sync):
                check_input(x, self.num_features, layer)
                return self._norm_act(x)
        return b_plain(x, self.v, self.weight, self.bias, layer, self.num_features, self.apply_act,
                       self.running_var, self.training, self.momentum, self.eps, self.variant)

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
