"""Turn a layer description (registry name, graph, graph JSON, or factory) into a norm-act factory.

Every model takes a factory `(num_features) -> nn.Module` and calls it once per BN-activation pair,
so the same architecture code builds any candidate layer.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Callable

from torch import nn

from evonorm.graph.library import NAMED_GRAPHS, resolve_graph
from evonorm.layers import Affine2d, create_norm_act, list_norm_acts

NormActFactory = Callable[..., nn.Module]


def resolve_norm_act(norm_act: Any, **layer_kw) -> NormActFactory:
    """A factory `(num_features) -> nn.Module` for `norm_act`.

    `norm_act` is a registry name (`evonorm.layers.list_norm_acts()`), or a layer graph as
    `evonorm.graph.library.resolve_graph` reads it (a named graph, graph JSON as a dict or a
    string starting with "{", a `Graph`), or a callable. `layer_kw` (groups, eps, momentum, ...)
    are bound into the factory.
    """
    if isinstance(norm_act, str) and norm_act.strip() in list_norm_acts():
        return partial(create_norm_act, norm_act.strip(), **layer_kw)
    if isinstance(norm_act, (str, dict)):
        try:
            norm_act = resolve_graph(norm_act)
        except ValueError:
            if isinstance(norm_act, str) and not norm_act.strip().startswith("{"):
                raise ValueError(f"unknown layer {norm_act!r}: not a registered layer "
                                 f"({', '.join(list_norm_acts())}) nor a named graph "
                                 f"({', '.join(sorted(NAMED_GRAPHS))})") from None
            raise
    to_module = getattr(norm_act, "to_module", None)
    if callable(to_module):  # a Graph
        return partial(to_module, **layer_kw)
    if callable(norm_act):
        return partial(norm_act, **layer_kw) if layer_kw else norm_act
    raise TypeError(f"norm_act must be a layer name, a Graph, graph JSON or a factory, "
                    f"got {type(norm_act).__name__}")


def affine(num_features: int) -> nn.Module:
    """What a BN without an activation becomes: a per-channel affine (as in the paper's search,
    where only normalization-activation pairs are candidates)."""
    return Affine2d(num_features)


def make_divisible(value: float, divisor: int = 8) -> int:
    """Channel rounding of MobileNetV2/EfficientNet: nearest multiple of 8, never below 90%."""
    new = max(divisor, int(value + divisor / 2) // divisor * divisor)
    if new < 0.9 * value:
        new += divisor
    return new
