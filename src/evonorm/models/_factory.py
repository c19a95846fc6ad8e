"""Turn a layer description (registry name, graph, graph JSON, or factory) into a norm-act factory.

Every model takes a factory `(num_features) -> nn.Module` and calls it once per BN-activation pair,
so the same architecture code builds any candidate layer (SPEC, "Anchor architectures").
"""

from __future__ import annotations

import json
from functools import partial
from typing import Any, Callable

from torch import nn

NormActFactory = Callable[..., nn.Module]


def resolve_norm_act(norm_act: Any, **layer_kw) -> NormActFactory:
    """A factory `(num_features) -> nn.Module` for `norm_act`.

    `norm_act` is a registry name (`evonorm.layers.list_norm_acts()`), a named graph from
    `evonorm.graph.library`, a `Graph`, graph JSON (a dict or a string starting with "{"), or a
    callable. `layer_kw` (groups, eps, momentum, ...) are bound into the factory.
    """
    if isinstance(norm_act, str):
        text = norm_act.strip()
        if text.startswith("{"):
            try:
                norm_act = json.loads(text)
            except json.JSONDecodeError as err:
                raise ValueError(f"layer JSON does not parse: {err}") from None
        else:
            return _named_factory(text, layer_kw)
    if isinstance(norm_act, dict):
        from evonorm.graph import Graph
        norm_act = Graph.from_json(norm_act)
    to_module = getattr(norm_act, "to_module", None)
    if callable(to_module):  # a Graph
        return partial(to_module, **layer_kw)
    if callable(norm_act):
        return partial(norm_act, **layer_kw) if layer_kw else norm_act
    raise TypeError(f"norm_act must be a layer name, a Graph, graph JSON or a factory, "
                    f"got {type(norm_act).__name__}")


def _named_factory(name: str, layer_kw: dict) -> NormActFactory:
    from evonorm.layers import create_norm_act, list_norm_acts
    names = list_norm_acts()
    if name in names:
        return partial(create_norm_act, name, **layer_kw)
    graphs: list[str] = []
    try:
        from evonorm.graph.library import NAMED_GRAPHS, get_graph
        graphs = sorted(NAMED_GRAPHS)
        if name in NAMED_GRAPHS:
            return partial(get_graph(name).to_module, **layer_kw)
    except ImportError:
        pass
    raise ValueError(f"unknown layer {name!r}: not a registered layer ({', '.join(names)})"
                     + (f" nor a named graph ({', '.join(graphs)})" if graphs else ""))


def affine(num_features: int) -> nn.Module:
    """What a BN without an activation becomes: a per-channel affine (SPEC)."""
    from evonorm.layers import Affine2d
    return Affine2d(num_features)


def make_divisible(value: float, divisor: int = 8) -> int:
    """Channel rounding of MobileNetV2/EfficientNet: nearest multiple of 8, never below 90%."""
    new = max(divisor, int(value + divisor / 2) // divisor * divisor)
    if new < 0.9 * value:
        new += divisor
    return new
