"""`convert_sync_norm_act`: batch statistics all-reduced across a process group, for DDP.

By default every batch-statistic layer (EvoNorm-B*, the bn_* baselines, the batch ops of compiled graph
layers) normalises with its own rank's batch, as `nn.BatchNorm2d` does under DDP. After
`convert_sync_norm_act(model, group)` each of them all-reduces its per-channel sums across `group` in
training, so N ranks compute what one process computes on the concatenated batch: outputs, gradients (the
all-reduce is differentiable: its backward all-reduces the statistics' gradients) and running statistics.
The counterpart of `torch.nn.SyncBatchNorm.convert_sync_batchnorm` (which does not know these layers);
gloo (CPU) and nccl (CUDA). Outside an initialised process group the layers compute as before.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from evonorm.runtime.common import compute_dtype, update_running_var
from evonorm.layers._formula import b_formula
from evonorm.runtime.sync_stats import SyncGroup, global_moments


def b_norm_act_synced(x: torch.Tensor, v, weight, bias, running_var: torch.Tensor, momentum: float, eps: float,
                      variant: int, sync: SyncGroup) -> torch.Tensor:
    """EvoNorm-B{variant} in training with the batch variance of every rank (updates `running_var`)."""
    _, var, count = global_moments(x.to(compute_dtype(x.dtype)), sync)
    y, _ = b_formula(x, v, weight, bias, var, False, eps, variant)  # "eval" with the global variance
    update_running_var(running_var, var.detach(), count, momentum)
    return y


def batch_norm_synced(x: torch.Tensor, bn: nn.BatchNorm2d, sync: SyncGroup) -> torch.Tensor:
    """BatchNorm in training with the mean and variance of every rank (updates the running statistics)."""
    mean, var, count = global_moments(x, sync)
    shape = (1, -1) + (1,) * (x.dim() - 2)
    y = (x - mean.view(shape)) * torch.rsqrt(var.view(shape) + bn.eps)
    y = y * bn.weight.to(x.dtype).view(shape) + bn.bias.to(x.dtype).view(shape)
    with torch.no_grad():
        bn.num_batches_tracked.add_(1)
        m = bn.momentum if bn.momentum is not None else 1.0 / float(bn.num_batches_tracked)
        bn.running_mean.mul_(1.0 - m).add_(mean.detach().to(bn.running_mean.dtype), alpha=m)
    update_running_var(bn.running_var, var.detach(), count, m)
    return y


_TORCH_BATCHNORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)


def _syncable(m: nn.Module) -> bool:
    """evonorm's batch-statistic layers declare a `sync` attribute (None: per-rank statistics)."""
    return hasattr(type(m), "sync")


def convert_sync_norm_act(module: nn.Module, process_group: Any = None) -> nn.Module:
    """Make every batch-statistic layer in `module` all-reduce its batch statistics across `process_group`
    (None: the default group) in training; torch's BatchNorms become `nn.SyncBatchNorm` as with
    `convert_sync_batchnorm`. Changes `module` in place and returns it (or what replaces a root BatchNorm).
    Another BatchNorm subclass (e.g. timm's BatchNormAct2d) raises before anything changes: its own
    library's converter, or `convert_norm_act` first."""
    for qual, m in module.named_modules():
        if (isinstance(m, nn.modules.batchnorm._BatchNorm) and not _syncable(m)
                and type(m) not in _TORCH_BATCHNORMS and not isinstance(m, nn.SyncBatchNorm)):
            raise ValueError(f"{qual or '<root>'}: {type(m).__name__} is a BatchNorm subclass that "
                             "convert_sync_norm_act cannot synchronise (for timm's: timm.layers."
                             "convert_sync_batchnorm, or convert_norm_act first); nothing was changed")
    sync = SyncGroup(process_group)
    return _convert(module, sync)


def _convert(module: nn.Module, sync: SyncGroup) -> nn.Module:
    synced = getattr(module, "synced", None)  # a module that must change class to synchronise says how
    if callable(synced):
        module = synced()
    if _syncable(module):
        module.sync = sync
    if type(module) in _TORCH_BATCHNORMS:
        return nn.SyncBatchNorm.convert_sync_batchnorm(module, sync.group)
    for name, child in module.named_children():
        new = _convert(child, sync)
        if new is not child:
            setattr(module, name, new)
    return module
