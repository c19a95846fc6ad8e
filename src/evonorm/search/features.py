"""The engine's features of a candidate layer at birth, from the layer alone: no model, no data.

Two kinds, so that a surrogate can tell hopeless layers from promising ones before any training:

- structure: live nodes by op, depth, which statistics (mean/std/rms) over which axes the layer
  takes, whether it has an activation-like op on the path from x, whether it uses v0, v1;
- response to fixed probe tensors: output statistics, how the output moves when the input is
  scaled or shifted (normalisers are invariant to one or both), how much of the output one sample
  owes to the others (batch statistics), and gradient magnitudes through the layer, at the
  layer's initial parameters (what training starts from).

Every value is a plain float (None where it cannot be measured: a non-finite output), keyed by
name; the same graph gives the same values (fixed generators, float64 probes). A layer whose probe
output is non-finite, constant or independent of x gets no features (`layer_features` returns
None): the pre-checks of a task reject such layers in milliseconds, and a surrogate gains nothing
from ranking them.

torch and the graph library are imported where features are computed: reading this module does
not need them.
"""

from __future__ import annotations

import math
from typing import Any

# raised whenever a feature's definition changes: labelled features computed under another version
# (a prior shipped as data) no longer describe the same thing
FEATURES_VERSION = 1
PROBE_SHAPE = (8, 16, 6, 6)  # batch, channels, height, width: small, and 4 groups of 4 channels
PROBE_GROUPS = 4
PROBE_SEED = 0
ACTIVATION_OPS = frozenset({"max", "sigmoid", "tanh", "exp", "abs", "square", "sqrt", "log"})


def _log10(x: float) -> float | None:
    """log10 of a non-negative magnitude, floored at 1e-12 (None when it is not finite)."""
    return math.log10(max(x, 1e-12)) if math.isfinite(x) else None


def structure_features(graph: Any) -> dict[str, float]:
    """Counts over the live nodes: per op, per statistic and axis set, depth, inputs used."""
    from evonorm.graph.primitives import NUM_INPUTS, OP_NAMES, PRIMITIVES

    live = [n for n in graph.live_nodes() if n >= NUM_INPUTS]
    used = set(graph.live_nodes())
    feats: dict[str, float] = {f"op_{op}": 0.0 for op in OP_NAMES}
    for axes in ("batch", "layer", "instance", "group"):
        feats[f"axes_{axes}"] = 0.0
    for stat in ("mean", "std", "rms"):
        feats[f"stat_{stat}"] = 0.0
    depth: dict[int, int] = {i: 0 for i in range(NUM_INPUTS)}
    x_path: set[int] = {0}  # nodes whose value depends on x
    for nid in live:
        op, *args = graph.node(nid)
        prim = PRIMITIVES[op]
        feats[f"op_{op}"] += 1
        if prim.aggregation:
            feats[f"axes_{prim.axes}"] += 1
            feats[f"stat_{prim.statistic}"] += 1
        depth[nid] = 1 + max(depth[a] for a in args)
        if any(a in x_path for a in args):
            x_path.add(nid)
    full = graph.full_shape_nodes()
    feats.update(
        nodes=float(len(live)), depth=float(depth[graph.output]),
        full_shape_nodes=float(len(full) - 1),
        aggregations=float(sum(PRIMITIVES[graph.node(n)[0]].aggregation for n in live)),
        activation=float(any(graph.node(n)[0] in ACTIVATION_OPS and n in full for n in live)),
        uses_v0=float(2 in used), uses_v1=float(3 in used), uses_zero=float(1 in used),
        divides=float(any(graph.node(n)[0] == "div" for n in live)))
    return feats


def _rel(a, b) -> float:
    """||a - b|| / ||b||: how far `a` moved from `b`."""
    return float((a - b).norm() / b.norm().clamp_min(1e-12))


def probe_features(graph: Any) -> dict[str, float | None] | None:
    """The layer's response to fixed probe tensors at its initial parameters; None for a layer
    whose output is non-finite, constant or does not depend on x."""
    import torch

    gen = torch.Generator().manual_seed(PROBE_SEED)
    n, c, h, w = PROBE_SHAPE
    module = graph.to_module(c, groups=PROBE_GROUPS).double()
    module.train()
    x = torch.randn(PROBE_SHAPE, generator=gen, dtype=torch.float64) * 2.0 + 0.5
    x_other = torch.randn(PROBE_SHAPE, generator=gen, dtype=torch.float64) * 2.0 + 0.5
    r = torch.randn(PROBE_SHAPE, generator=gen, dtype=torch.float64)
    with torch.no_grad():
        y = module(x).expand(PROBE_SHAPE)
        y_other = module(x_other).expand(PROBE_SHAPE)
        if not (torch.isfinite(y).all() and torch.isfinite(y_other).all()):
            return None
        spread = float(y.max() - y.min())
        if spread <= 1e-9 * (1.0 + float(y.abs().max())) or torch.allclose(y, y_other, 1e-7, 1e-9):
            return None
        moved = {
            "scale_up": _rel(module(4.0 * x).expand(PROBE_SHAPE), y),
            "scale_down": _rel(module(0.25 * x).expand(PROBE_SHAPE), y),
            "shift": _rel(module(x + 3.0).expand(PROBE_SHAPE), y),
            "sign": _rel(module(-x).expand(PROBE_SHAPE), -y),  # 0 for an odd function
            # the first half of the batch alone: 0 unless the layer mixes samples
            "batch_mix": _rel(module(x[: n // 2]).expand((n // 2, c, h, w)), y[: n // 2]),
        }
    xf, yf = x.flatten(), y.flatten()
    corr = torch.corrcoef(torch.stack([xf, yf]))[0, 1]
    per_channel = y.transpose(0, 1).reshape(c, -1)
    feats: dict[str, float | None] = {
        "out_mean": float(y.mean()), "out_std": _log10(float(y.std())),
        "out_abs_mean": _log10(float(y.abs().mean())), "out_positive": float((y > 0).double().mean()),
        "out_zero": float((y.abs() < 1e-9).double().mean()),
        "out_max_abs": _log10(float(y.abs().max())),
        "out_channel_std_spread": _log10(float(per_channel.std(dim=1).std())),
        "corr_x": float(corr) if torch.isfinite(corr) else None,
    }
    for k, v in moved.items():
        feats[f"sens_{k}"] = _log10(v) if math.isfinite(v) else None
    xg = x.clone().requires_grad_(True)
    out = module(xg).expand(PROBE_SHAPE)
    params = [p for p in module.parameters() if p.requires_grad]
    grads = torch.autograd.grad((out * r).sum(), [xg, *params], allow_unused=True)
    gx = grads[0]
    feats["grad_x"] = _log10(float(gx.norm() / r.norm())) if gx is not None else None
    feats["grad_x_zero"] = float((gx.abs() < 1e-12).double().mean()) if gx is not None else 1.0
    gp = [g for g in grads[1:] if g is not None]
    feats["grad_params"] = (_log10(float(torch.sqrt(sum((g ** 2).sum() for g in gp))))
                            if gp else None)
    return feats


def layer_features(graph: Any) -> dict[str, float | None] | None:
    """Structure and probe response of one layer (a `Graph` or its JSON), or None for a
    degenerate layer (see the module docstring)."""
    from evonorm.graph import Graph

    g = Graph.from_json(graph)
    probe = probe_features(g)
    if probe is None:
        return None
    return {**{f"graph_{k}": v for k, v in structure_features(g).items()},
            **{f"probe_{k}": v for k, v in probe.items()}}
