"""What `evonorm list` prints, as plain data: the registered layers, the named graphs' nodes and the
built-in architectures. It imports nothing but the standard library, so that listing names starts
without torch; the registries that build the layers, graphs and models read their tables here.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

# name -> "module:Class" in evonorm.layers; EvoNorms first (the order `list_norm_acts` gives)
LAYERS: Mapping[str, str] = MappingProxyType({
    "evonorm_b0": "evonorm_b:EvoNormB0",
    "evonorm_b1": "evonorm_b:EvoNormB1",
    "evonorm_b2": "evonorm_b:EvoNormB2",
    "evonorm_s0": "evonorm_s:EvoNormS0",
    "evonorm_s1": "evonorm_s:EvoNormS1",
    "evonorm_s2": "evonorm_s:EvoNormS2",
    "bn_relu": "baselines:BatchNormReLU2d",
    "bn_prelu": "baselines:BatchNormPReLU2d",
    "bn_swish1": "baselines:BatchNormSwish1",
    "bn_swish": "baselines:BatchNormSwish",
    "gn_relu": "baselines:GroupNormReLU",
    "gn_swish": "baselines:GroupNormSwish",
    "frn": "baselines:FilterResponseNorm2d",
    "ln_relu": "baselines:LayerNormReLU",
    "pixelnorm_relu": "baselines:PixelNormReLU",
})

BATCH_DEPENDENT_LAYERS = frozenset({"evonorm_b0", "evonorm_b1", "evonorm_b2", "bn_relu", "bn_prelu",
                                    "bn_swish1", "bn_swish"})

# name -> (builder in evonorm.models, default channel multiplier, stride 1 in the first two
# spatially reducing convs)
ARCHS: Mapping[str, tuple[str, float, bool]] = MappingProxyType({
    "resnet50_cifar": ("resnet50", 0.25, True),
    "mobilenetv2_cifar": ("mobilenetv2", 0.5, True),
    "efficientnet_b0_cifar": ("efficientnet_b0", 0.5, True),
    "resnet50": ("resnet50", 1.0, False),
    "mobilenetv2": ("mobilenetv2", 1.0, False),
    "efficientnet_b0": ("efficientnet_b0", 1.0, False),
})

# The named graphs of `evonorm.graph.library`: the EvoNorm layers, the paper's appendix top-10
# candidates, Table 2's random layers, a layer a search found here, and a few known-bad layers for
# tests. Node ids: 0 = x, 1 = zero, 2 = v0, 3 = v1, then 4, 5, ... for the entries in order.
# Constant 1 (EvoNorm-B1's "x + 1") is exp(zero), exactly 1 and not trainable, like the hand-written
# layer (v1 would be 1 only at init).


def _b(z: list) -> list:
    """x / max(sqrt(s^2_{b,w,h}(x)), z) with z's nodes first (z is their last node)."""
    zid = 4 + len(z) - 1
    return z + [["batch_std", 0], ["max", zid + 1, zid], ["div", 0, zid + 2]]


GRAPH_SPECS: Mapping[str, list] = MappingProxyType({
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
})


def did_you_mean(name: object) -> str:
    """"; did you mean X or Y?" for the layer names (registered layers and named graphs) nearest a
    mistyped `name`, else "": what every place that reads a layer name adds to its refusal."""
    import difflib

    near = difflib.get_close_matches(str(name).strip().lower().replace("-", "_"),
                                     list(dict.fromkeys([*LAYERS, *GRAPH_SPECS])), n=3, cutoff=0.5)
    return f"; did you mean {' or '.join(near)}?" if near else ""
