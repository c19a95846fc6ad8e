"""Batch statistics over every rank of a process group: the leaf that both the EvoNorm/BatchNorm layers
(`evonorm.layers.sync`) and the compiled graph layers' batch ops (`evonorm.graph.batch`) build on.

Outside an initialised process group of more than one rank nothing here all-reduces.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from evonorm.runtime.common import compute_dtype


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
