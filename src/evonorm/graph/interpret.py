"""The graph's semantics as a plain interpreter over its node list, without building a module: the
reference the compiled layers are tested against, and what fingerprints and formulas evaluate."""

from __future__ import annotations

import torch

from evonorm.graph import primitives as P
from evonorm.graph.batch import RUNNING, batch_stat_eval, batch_stat_train
from evonorm.graph.primitives import NUM_INPUTS, LayerGraph


def interpret(graph: LayerGraph, x: torch.Tensor, v0: torch.Tensor, v1: torch.Tensor, *, groups: int,
              eps: float = 1e-5, training: bool = True, running: dict | None = None,
              momentum: float = 0.1) -> torch.Tensor:
    """The graph's raw output (no affine) broadcast to x's shape, by interpreting the node list.

    `running` maps batch node ids to their running buffers (created at their initial values when
    missing; updated in place in training, read in eval)."""
    running = {} if running is None else running
    vals: dict[int, torch.Tensor] = {0: x, 1: P.op_zeros(x), 2: P.op_channel(v0, x), 3: P.op_channel(v1, x)}
    count = x.numel() // x.shape[1]
    for nid in graph.live_nodes():
        if nid < NUM_INPUTS:
            continue
        op, *args = graph.node(nid)
        prim = P.PRIMITIVES[op]
        inputs = [vals[a] for a in args]
        if prim.batch_dependent:
            buf = running.setdefault(nid, torch.full((x.shape[1],), RUNNING[prim.statistic][1], dtype=x.dtype))
            if training:
                r, update = batch_stat_train(inputs[0], prim.statistic, eps, count)
                with torch.no_grad():
                    buf.mul_(1.0 - momentum).add_(update.to(buf.dtype), alpha=momentum)
                vals[nid] = r
            else:
                vals[nid] = batch_stat_eval(buf, prim.statistic, eps, x.dtype)
        else:
            vals[nid] = prim.fn(*inputs, *prim.extra_args(groups, eps))
    return vals[graph.output].expand(x.shape)
