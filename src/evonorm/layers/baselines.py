"""The paper's baselines (Table 3): BN-ReLU, BN-PReLU, BN-Swish-1, BN-Swish, GN-ReLU, GN-Swish, FRN (with TLU),
LayerNorm-ReLU and PixelNorm-ReLU, with the same signature as the EvoNorms.

`apply_act=False` gives the normalization without its activation (so converting a lone BatchNorm with
`bn_relu` keeps a BatchNorm). Half/bfloat16 inputs are normalized in float32 and returned in their dtype.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from evonorm.runtime.common import affine, check_input, compute_dtype, resolve_groups
from evonorm.runtime.tracing import fx_leaf
from evonorm.layers.sync import batch_norm_synced
from evonorm.runtime.sync_stats import SyncGroup, sync_active


def _swish(x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """x * sigmoid(v * x), v per channel (trainable Swish)."""
    return x * torch.sigmoid(x * v.to(x.dtype).view([1, -1] + [1] * (x.dim() - 2)))


class _NormAct(nn.Module):
    """Shared plumbing: the float32 round trip, the input check and the optional activation."""

    def __init__(self, num_features: int, apply_act: bool, eps: float):
        super().__init__()
        self.num_features = num_features
        self.apply_act = apply_act
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.jit.is_scripting():  # TorchScript compiles only this branch
            return self._forward(x, "norm-act layer")
        else:
            leaf = fx_leaf(self, x)
            return leaf if leaf is not None else self._forward(x, type(self).__name__)

    def _forward(self, x: torch.Tensor, layer: str) -> torch.Tensor:
        check_input(x, self.num_features, layer)
        y = self.normalize(x.to(compute_dtype(x.dtype)))
        if self.apply_act:
            y = self.act(y)
        return y.to(x.dtype)

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def act(self, y: torch.Tensor) -> torch.Tensor:
        return F.relu(y)

    def extra_repr(self) -> str:
        return f"{self.num_features}, eps={self.eps}, apply_act={self.apply_act}"


class _BatchNormAct(nn.BatchNorm2d):
    """BatchNorm2d (its weight, bias and float32 running statistics) followed by an activation."""

    def __init__(self, num_features: int, *, apply_act: bool = True, eps: float = 1e-5, groups: int = 32,
                 momentum: float = 0.1, **kwargs):
        super().__init__(num_features, eps=eps, momentum=momentum)
        self.apply_act = apply_act

    sync: SyncGroup | None = None  # set by convert_sync_norm_act: all-reduce the batch statistics

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.jit.is_scripting():  # TorchScript compiles only this branch
            return self._forward(x, "norm-act layer")
        else:
            leaf = fx_leaf(self, x)
            if leaf is not None:
                return leaf
            if self.training and sync_active(self.sync):
                check_input(x, self.num_features, type(self).__name__)
                y = batch_norm_synced(x.to(compute_dtype(x.dtype)), self, self.sync)
                return (self.act(y) if self.apply_act else y).to(x.dtype)
            return self._forward(x, type(self).__name__)

    def _forward(self, x: torch.Tensor, layer: str) -> torch.Tensor:
        check_input(x, self.num_features, layer)
        xc = x.to(compute_dtype(x.dtype))
        if self.training:
            self.num_batches_tracked.add_(1)
        y = F.batch_norm(xc, self.running_mean, self.running_var, self.weight.to(xc.dtype),
                         self.bias.to(xc.dtype), self.training, self.momentum, self.eps)
        if self.apply_act:
            y = self.act(y)
        return y.to(x.dtype)

    def act(self, y: torch.Tensor) -> torch.Tensor:
        return F.relu(y)

    def _apply(self, fn, recurse=True):
        # the running statistics stay float32 under .half()/.to(bfloat16), like the EvoNorm-B layers
        super()._apply(fn, recurse)
        if self.running_var.dtype in (torch.float16, torch.bfloat16):
            self.running_mean, self.running_var = self.running_mean.float(), self.running_var.float()
        return self

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, apply_act={self.apply_act}"


class BatchNormReLU2d(_BatchNormAct):
    """BN-ReLU."""


class BatchNormPReLU2d(_BatchNormAct):
    """BN followed by a per-channel PReLU (slope 0.25 at init)."""

    def __init__(self, num_features: int, **kwargs):
        super().__init__(num_features, **kwargs)
        self.prelu = nn.PReLU(num_features) if self.apply_act else None

    def act(self, y):
        if self.prelu is None:  # apply_act=False (never called then; TorchScript compiles it anyway)
            return y
        return F.prelu(y, self.prelu.weight.to(y.dtype))


class BatchNormSwish1(_BatchNormAct):
    """BN-Swish-1: BN followed by x * sigmoid(x) (SiLU)."""

    def act(self, y):
        return F.silu(y)


class BatchNormSwish(_BatchNormAct):
    """BN-Swish: BN followed by x * sigmoid(v * x) with a trainable per-channel v (1 at init)."""

    def __init__(self, num_features: int, **kwargs):
        super().__init__(num_features, **kwargs)
        self.v = nn.Parameter(torch.ones(num_features)) if self.apply_act else None

    def act(self, y):
        if self.v is None:  # apply_act=False (never called then; TorchScript compiles it anyway)
            return y
        return _swish(y, self.v)


class _AffineNormAct(_NormAct):
    """A normalization with its own per-channel gamma (`weight`) and beta (`bias`)."""

    def __init__(self, num_features: int, *, apply_act: bool = True, eps: float = 1e-5, groups: int = 32,
                 group_size: int | None = None, momentum: float = 0.1, **kwargs):
        super().__init__(num_features, apply_act, eps)
        self.groups = resolve_groups(num_features, groups, group_size)
        self.weight = nn.Parameter(torch.ones(num_features))
        self.bias = nn.Parameter(torch.zeros(num_features))


class GroupNormReLU(_AffineNormAct):
    """GN-ReLU (groups: the largest divisor of C that is <= `groups`, so any channel count works)."""

    def normalize(self, x):
        return F.group_norm(x, self.groups, self.weight.to(x.dtype), self.bias.to(x.dtype), self.eps)


class GroupNormSwish(GroupNormReLU):
    """GN-Swish-1: group norm followed by x * sigmoid(x)."""

    def act(self, y):
        return F.silu(y)


class LayerNormReLU(_AffineNormAct):
    """LayerNorm over (C, H, W) per sample with per-channel gamma/beta, then ReLU."""

    def normalize(self, x):
        return F.group_norm(x, 1, self.weight.to(x.dtype), self.bias.to(x.dtype), self.eps)


class PixelNormReLU(_AffineNormAct):
    """PixelNorm (x / sqrt(mean_c(x^2) + eps) per position), per-channel gamma/beta, then ReLU."""

    def normalize(self, x):
        y = x * torch.rsqrt(x.square().mean(1, keepdim=True) + self.eps)
        return affine(y, self.weight, self.bias)


class FilterResponseNorm2d(_AffineNormAct):
    """FRN with TLU: max(gamma * x / sqrt(mean_hw(x^2) + eps) + beta, tau); `apply_act=False` drops the TLU."""

    def __init__(self, num_features: int, **kwargs):
        super().__init__(num_features, **kwargs)
        self.tau = nn.Parameter(torch.zeros(num_features)) if self.apply_act else None

    def normalize(self, x):
        dims = list(range(2, x.dim()))
        y = x * torch.rsqrt(x.square().mean(dims, keepdim=True) + self.eps)
        return affine(y, self.weight, self.bias)

    def act(self, y):
        if self.tau is None:  # apply_act=False (never called then; TorchScript compiles it anyway)
            return y
        return torch.maximum(y, self.tau.to(y.dtype).view([1, -1] + [1] * (y.dim() - 2)))
