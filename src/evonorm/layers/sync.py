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

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from evonorm.layers._common import compute_dtype, update_running_var
from evonorm.layers._formula import b_formula


@dataclass(frozen=True)
class SyncGroup:
    """Set as `layer.sync` by `convert_sync_norm_act`: the group to all-reduce over (None: the default)."""

    group: Any = None


def sync_active(sync: SyncGroup | None) -> bool:
    """Whether a layer with this `sync` setting all-reduces now (an initialised group with > 1 rank)."""
    return (sync is not None and dist.is_available() and dist.is_initialized()
            and dist.get_world_size(sync.group) > 1)


def global_moments(x: torch.Tensor, sync: SyncGroup) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Per-channel mean and biased variance of `x` (N, C, ...) over every rank's batch, differentiably,
    and the number of values per channel summed over the ranks (two all-reduces: sums and count, then the
    centred sums of squares, which keeps the variance exact where sum(x^2) - n mean^2 would cancel)."""
    from torch.distributed.nn.functional import all_reduce

    dims = [0] + list(range(2, x.dim()))
    local = x.numel() // x.shape[1]
    sums = all_reduce(torch.cat([x.sum(dims), x.new_tensor([float(local)])]), group=sync.group)
    count = sums[-1].detach()
    shape = (1, -1) + (1,) * (x.dim() - 2)
    mean = sums[:-1] / count
    var = all_reduce((x - mean.view(shape)).square().sum(dims), group=sync.group) / count
    return mean, var, int(count.item())


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


def batch_stat_synced(h: torch.Tensor, x: torch.Tensor, stat: str, eps: float,
                      sync: SyncGroup) -> tuple[torch.Tensor, torch.Tensor]:
    """A graph layer's batch op over every rank: (statistic (1, C, 1, 1), update for its running buffer),
    as `evonorm.graph.batch.batch_stat_train` computes them on one process's batch."""
    hc = h.to(compute_dtype(h.dtype))
    mean, var, count_h = global_moments(hc, sync)
    if stat == "mean":
        r, update = mean, mean
    elif stat == "std":
        per_h = h.numel() // h.shape[1]
        count = count_h * (x.numel() // x.shape[1]) // per_h  # the layer input's count, as on one process
        r, update = (var + eps).sqrt(), var * (count / (count - 1) if count > 1 else 1.0)
    else:
        sq = var + mean.square()
        r, update = (sq + eps).sqrt(), sq
    return r.view(1, -1, 1, 1).to(h.dtype), update.detach()


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
    from evonorm.graph.batch import BatchStat, SyncedBatchStat  # graph builds on layers: imported here

    if type(module) is BatchStat:
        module = SyncedBatchStat.from_plain(module)
    if _syncable(module):
        module.sync = sync
    if type(module) in _TORCH_BATCHNORMS:
        return nn.SyncBatchNorm.convert_sync_batchnorm(module, sync.group)
    for name, child in module.named_children():
        new = _convert(child, sync)
        if new is not child:
            setattr(module, name, new)
    return module
