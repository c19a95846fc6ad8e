"""Named graphs: the EvoNorm layers, the paper's appendix top-10 candidates, Table 2's random layers,
a layer a search found here, and a few known-bad layers for tests.

Node ids: 0 = x, 1 = zero, 2 = v0, 3 = v1, then 4, 5, ... for the entries in order.
Constant 1 (EvoNorm-B1's "x + 1") is exp(zero), exactly 1 and not trainable, like the hand-written
layer (v1 would be 1 only at init).
"""

from __future__ import annotations

import reprlib
from pathlib import Path

from types import MappingProxyType
from typing import Any, Mapping

from evonorm.graph.graph import Graph



def _b(z: list) -> list:
    """x / max(sqrt(s^2_{b,w,h}(x)), z) with z's nodes first (z is their last node)."""
    zid = 4 + len(z) - 1
    return z + [["batch_std", 0], ["max", zid + 1, zid], ["div", 0, zid + 2]]


_SPECS: dict[str, list] = {
    # The paper's Tables 2 and 3.
    "evonorm_b0": [["instance_std", 0], ["mul", 3, 0], ["add", 5, 4], ["batch_std", 0], ["max", 7, 6],
                   ["div", 0, 8]],  # x / max(sqrt(s2_bwh), v1 x + sqrt(s2_wh))
    "evonorm_b1": _b([["exp", 1], ["add", 0, 4], ["instance_rms", 0], ["mul", 5, 6]]),  # (x + 1) sqrt(mu_wh(x^2))
    "evonorm_b2": _b([["instance_rms", 0], ["neg", 0], ["add", 4, 5]]),  # sqrt(mu_wh(x^2)) - x
    "evonorm_s0": [["mul", 3, 0], ["sigmoid", 4], ["mul", 0, 5], ["group_std", 0], ["div", 6, 7]],
    "evonorm_s1": [["sigmoid", 0], ["mul", 0, 4], ["group_std", 0], ["div", 5, 6]],
    "evonorm_s2": [["sigmoid", 0], ["mul", 0, 4], ["group_rms", 0], ["div", 5, 6]],
    # Appendix B.1 / D.1: top-10 B candidates before reranking (duplicates as listed).
    "b_top1": _b([["exp", 1], ["add", 0, 4], ["instance_rms", 0], ["mul", 5, 6]]),  # (x + 1) sqrt(mu_wh(x^2))
    "b_top2": _b([["layer_rms", 0], ["add", 0, 4]]),  # x + sqrt(mu_whc(x^2))
    "b_top3": [["sigmoid", 0], ["mul", 0, 4], ["batch_std", 0], ["div", 5, 6], ["neg", 7]],  # -x sigma(x) / sqrt(s2_bwh)
    "b_top4": _b([["instance_rms", 0], ["mul", 0, 4]]),  # x sqrt(mu_wh(x^2))
    "b_top5": _b([["layer_rms", 0], ["neg", 0], ["add", 4, 5]]),  # sqrt(mu_whc(x^2)) - x
    # b_top6 prints "v1 x + sqrt(s2_wh(x))" without "z =": read as z, i.e. EvoNorm-B0.
    "b_top6": _b([["mul", 3, 0], ["instance_std", 0], ["add", 4, 5]]),
    "b_top7": _b([["instance_rms", 0], ["neg", 0], ["add", 4, 5]]),  # = EvoNorm-B2
    "b_top8": _b([["instance_rms", 0], ["mul", 0, 4]]),  # duplicate of b_top4
    "b_top9": _b([["instance_std", 0], ["add", 0, 4]]),  # x + sqrt(s2_wh(x))
    "b_top10": _b([["instance_std", 0], ["add", 0, 4]]),  # duplicate of b_top9
    # Appendix B.2 / D.2: top-10 S candidates.
    "s_top1": [["sigmoid", 0], ["tanh", 4], ["mul", 0, 5], ["group_rms", 0], ["div", 6, 7]],
    "s_top2": [["sigmoid", 0], ["mul", 0, 4], ["group_rms", 0], ["div", 5, 6]],  # = EvoNorm-S2
    "s_top3": [["sigmoid", 0], ["mul", 0, 4], ["group_rms", 0], ["div", 5, 6]],
    "s_top4": [["sigmoid", 0], ["mul", 0, 4], ["group_rms", 0], ["div", 5, 6]],
    "s_top5": [["sigmoid", 0], ["mul", 0, 4], ["group_std", 0], ["div", 5, 6]],  # = EvoNorm-S1
    "s_top6": [["mul", 3, 0], ["sigmoid", 4], ["mul", 0, 5], ["group_std", 0], ["div", 6, 7]],  # = S0
    "s_top7": [["sigmoid", 0], ["mul", 0, 4], ["group_std", 0], ["div", 5, 6]],
    "s_top8": [["sigmoid", 0], ["mul", 0, 4], ["group_rms", 0], ["div", 5, 6]],
    "s_top9": [["sigmoid", 0], ["mul", 0, 4], ["group_std", 0], ["div", 5, 6]],
    # s_top10 is printed only in the appendix (D.2): z sigma(max(x, z)), z = x / sqrt(mu_whc/g(x^2)).
    "s_top10": [["group_rms", 0], ["div", 0, 4], ["max", 0, 5], ["sigmoid", 6], ["mul", 5, 7]],
    # Table 2's random layers.
    # "Random": sign(z) sqrt(z), z = sqrt(s2_wh(sigma(x))): the sqrt op (sign(z) sqrt|z|) applied to
    # instance_std(sigmoid(x)); z >= 0, so the paper's sqrt(z) and the op's sqrt|z| agree.
    "random": [["sigmoid", 0], ["instance_std", 4], ["sqrt", 5]],
    "random_rej": [["tanh", 0], ["max", 0, 4], ["tanh", 5]],  # tanh(max(x, tanh(x)))
    "rs_rej": [["max", 0, 1], ["batch_rms", 0], ["div", 4, 5]],  # max(x, 0) / sqrt(mu_bwh(x^2))
    # Found here: random search from the `demo` seed layers (Fig. 10 run 6, seed 7), then confirmed on data
    # splits no search saw: above GN-ReLU at the `demo` proxy, EvoNorm-S0's equal; at full width (5 seeds)
    # above GN-ReLU, below EvoNorm-S0 (docs/findings.md).
    "tanh_group_rms": [["group_rms", 0], ["div", 0, 4], ["tanh", 5]],  # tanh(x / sqrt(mu_whc/g(x^2)))
    # Known-bad layers: what the quality and stability tests exist to catch.
    "zero": [["mul", 0, 1]],  # x * 0: passes stability (no gradient), fails quality
    "tanh_minus_batch_mean_relu": [["tanh", 0], ["max", 0, 1], ["batch_mean", 5], ["neg", 6], ["add", 4, 7]],
    "exp_exp": [["exp", 0], ["exp", 4]],
}

NAMED_GRAPHS: Mapping[str, Graph] = MappingProxyType({k: Graph.from_json({"nodes": v}) for k, v in _SPECS.items()})
"""Every named graph, read-only."""


def get_graph(name: str) -> Graph:
    """The named graph; KeyError listing the names when unknown."""
    try:
        return NAMED_GRAPHS[name]
    except KeyError:
        raise KeyError(f"unknown graph {name!r} (choose from {', '.join(NAMED_GRAPHS)})") from None


def resolve_graph(spec: Any) -> Graph:
    """A layer given as a named graph, graph JSON (text or dict) or a Graph, as a Graph.

    The one rule behind `--seed-layers`, `evonorm show` and `build_model(arch, norm_act)`;
    ValueError naming the problem otherwise.
    """
    if isinstance(spec, Graph):
        return spec
    if isinstance(spec, str):
        text = spec.strip()
        if text in NAMED_GRAPHS:
            return NAMED_GRAPHS[text]
        if not text.startswith("{"):
            raise ValueError(f"{reprlib.repr(spec)} is neither a named graph "
                             f"({', '.join(sorted(NAMED_GRAPHS)[:6])}, ...) nor graph JSON")
        spec = text
    return Graph.from_json(spec)


def read_layer(text: str) -> str | Graph:
    """A layer argument as `evonorm train --layer` reads it: a name or inline JSON (kept as text),
    or @path to a graph JSON file (read); ValueError, one line, for a file that cannot be read."""
    if not text.startswith("@"):
        return text
    path = Path(text[1:])
    try:
        return Graph.from_json(path.read_bytes())
    except OSError as err:
        raise ValueError(f"cannot read layer JSON from {path}: {err.strerror or err}") from None
    except ValueError as err:
        raise ValueError(f"invalid layer JSON in {path}: {err}") from None
