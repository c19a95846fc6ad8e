"""The batch aggregation ops (batch_mean, batch_std, batch_rms) as stateful modules.

Training: the statistic over (b, h, w) per channel, and a running average (momentum m) of what
eval needs to reproduce it:
  batch_mean -> `running_mean`, the batch mean (init 0);
  batch_std  -> `running_var`, the batch variance, unbiased by n/(n-1) with n = N*H*W of the
                layer input, like BatchNorm and the hand-written EvoNorm-B layers (init 1);
  batch_rms  -> `running_sq`, the batch mean of squares (already unbiased; init 1).
Eval: mean = running_mean, std = sqrt(running_var + eps), rms = sqrt(running_sq + eps).
Running buffers stay float32 under .half()/.bfloat16(), as in `evonorm.layers`.
"""

from __future__ import annotations

import torch
from torch import nn

from evonorm.runtime.sync_stats import SyncGroup, batch_stat_synced, sync_active

RUNNING = {"mean": ("running_mean", 0.0), "std": ("running_var", 1.0), "rms": ("running_sq", 1.0)}
"""Per statistic: the running buffer's name and initial value."""


def batch_stat_train(h: torch.Tensor, stat: str, eps: float, count: int):
    """(statistic as a (1, C, 1, 1) tensor in h's dtype, per-channel update for the running buffer)."""
    hc = h.float() if h.dtype in (torch.float16, torch.bfloat16) else h
    dims = (0, 2, 3)
    if stat == "mean":
        r = hc.mean(dims, keepdim=True)
        update = r
    elif stat == "std":
        var = hc.var(dims, correction=0, keepdim=True)
        r = (var + eps).sqrt()
        update = var * (count / (count - 1) if count > 1 else 1.0)
    else:
        sq = hc.square().mean(dims, keepdim=True)
        r = (sq + eps).sqrt()
        update = sq
    return r.to(h.dtype), update.detach().reshape(-1)


def batch_stat_eval(running: torch.Tensor, stat: str, eps: float, dtype: torch.dtype) -> torch.Tensor:
    """The eval-mode statistic from the running buffer, as a (1, C, 1, 1) tensor."""
    r = running.view(1, -1, 1, 1)
    if stat != "mean":
        r = (r + eps).sqrt()
    return r.to(dtype)


class BatchStat(nn.Module):
    """One batch aggregation node: batch statistic in training (updating its running buffer),
    the running estimate in eval. Called as `node(h, x)`; x (the layer input) gives the count n."""

    def __init__(self, num_features: int, stat: str, *, eps: float = 1e-5, momentum: float = 0.1):
        super().__init__()
        self.stat, self.eps, self.momentum = stat, eps, momentum
        self.buffer_name, init = RUNNING[stat]
        self.register_buffer(self.buffer_name, torch.full((num_features,), init, dtype=torch.float32))

    def _apply(self, fn, recurse=True):
        super()._apply(fn, recurse)
        buf = getattr(self, self.buffer_name)
        if buf.dtype in (torch.float16, torch.bfloat16):
            setattr(self, self.buffer_name, buf.float())
        return self

    def forward(self, h: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        running = getattr(self, self.buffer_name)
        if self.training:
            r, update = self.train_statistic(h, x)
            with torch.no_grad():
                running.mul_(1.0 - self.momentum).add_(update.to(running.dtype), alpha=self.momentum)
            return r
        return batch_stat_eval(running, self.stat, self.eps, h.dtype)

    def train_statistic(self, h: torch.Tensor, x: torch.Tensor):
        """(statistic, update for the running buffer) of this batch."""
        return batch_stat_train(h, self.stat, self.eps, x.numel() // x.shape[1])

    def extra_repr(self) -> str:
        return f"{self.stat}, eps={self.eps}, momentum={self.momentum}"

    def synced(self) -> SyncedBatchStat:
        """This node as one that can all-reduce: what `convert_sync_norm_act` puts in its place."""
        return SyncedBatchStat.from_plain(self)


class SyncedBatchStat(BatchStat):
    """A batch op whose training statistic covers every rank's batch: what `convert_sync_norm_act` puts
    in place of a BatchStat (a subclass, so the self-contained source `to_python` copies stays as is)."""

    sync: SyncGroup | None = None

    def synced(self) -> SyncedBatchStat:
        return self

    @classmethod
    def from_plain(cls, node: BatchStat) -> SyncedBatchStat:
        new = cls(getattr(node, node.buffer_name).numel(), node.stat, eps=node.eps, momentum=node.momentum)
        new.load_state_dict(node.state_dict())
        return new.to(getattr(node, node.buffer_name).device).train(node.training)

    def train_statistic(self, h: torch.Tensor, x: torch.Tensor):
        if sync_active(self.sync):
            return batch_stat_synced(h, x, self.stat, self.eps, self.sync)
        return super().train_statistic(h, x)
