"""Normalization-activation layers by name or by graph: `create_norm_act`, `resolve_norm_act`,
`list_norm_acts`, `is_batch_dependent`.

A layer a search found is a layer: wherever a layer is read, a layer graph (a `Graph`, its dict, its JSON
text, a named graph) builds its module as a registered name builds its class. The graph package is
imported where a layer is read and is not a registered name: it loads torch.fx and the graph compiler.
"""

from __future__ import annotations

import reprlib
from functools import partial
from importlib import import_module
from types import MappingProxyType
from typing import Any, Callable

from torch import nn

from evonorm.catalog import BATCH_DEPENDENT_LAYERS, LAYERS, did_you_mean


def _class(where: str) -> type[nn.Module]:
    module, name = where.split(":")
    return getattr(import_module(f"evonorm.layers.{module}"), name)


# the names are data in evonorm.catalog, so that `evonorm list` names them without torch
NORM_ACTS: MappingProxyType[str, type[nn.Module]] = MappingProxyType({n: _class(w) for n, w in LAYERS.items()})


def registered_name(name: Any) -> str | None:
    """`name` as a key of NORM_ACTS (case and "-" for "_" forgiven), or None when it is not one."""
    if not isinstance(name, str):
        return None
    key = name.strip().lower().replace("-", "_")
    return key if key in NORM_ACTS else None


def _key(name: str) -> str:
    key = registered_name(name)
    if key is None:
        raise ValueError(f"unknown norm-act layer {reprlib.repr(name)}{did_you_mean(name)} "
                         "(`evonorm list layers` names them)")
    return key


def list_norm_acts() -> list[str]:
    """The registered names, EvoNorms first."""
    return list(NORM_ACTS)


def get_norm_act(name: str) -> type[nn.Module]:
    """The class registered under `name` (ValueError with the nearest names otherwise)."""
    return NORM_ACTS[_key(name)]


def as_graph(layer: Any):
    """`layer` as an `evonorm.graph.Graph`: a Graph, its dict, its JSON text or a named graph.
    ValueError in one line otherwise; for a mistyped name, with the nearest names."""
    from evonorm.graph.library import resolve_graph

    try:
        return resolve_graph(layer)
    except ValueError:
        if isinstance(layer, str) and not layer.strip().startswith("{"):
            raise ValueError(f"unknown layer {reprlib.repr(layer)}: not a registered layer, a named graph "
                             f"or graph JSON{did_you_mean(layer)} (`evonorm list` names them)") from None
        raise


def resolve_norm_act(layer: Any, **kwargs) -> Callable[..., nn.Module]:
    """A factory `(num_features) -> nn.Module` for `layer`, `kwargs` (groups, eps, ...) bound: a registered
    name, a layer graph (`as_graph`), or a callable. The one rule for reading a layer: `create_norm_act`,
    `convert_norm_act`, `build_model` and the commands' `--layer` all read it so."""
    key = registered_name(layer)
    if key is not None:
        return partial(NORM_ACTS[key], **kwargs)
    if isinstance(layer, (str, dict)):
        layer = as_graph(layer)
    to_module = getattr(layer, "to_module", None)
    if callable(to_module):  # a Graph
        return partial(to_module, **kwargs)
    if callable(layer):
        return partial(layer, **kwargs) if kwargs else layer
    raise TypeError(f"a layer is a registered name, a layer graph (Graph, its dict or JSON text) or a "
                    f"factory (num_features) -> nn.Module, got {type(layer).__name__}")


def create_norm_act(layer: Any, num_features: int, **kwargs) -> nn.Module:
    """A new layer: `create_norm_act("evonorm_s0", 64, groups=16)`, or a search's find as it is stored
    (`create_norm_act(candidate.graph, 64)`: a Graph, its dict or its JSON text). A registered layer
    ignores keywords it does not take, as a graph layer does."""
    return resolve_norm_act(layer, **kwargs)(num_features)


def is_batch_dependent(name: str) -> bool:
    """Whether the layer uses batch statistics (the B layers and the bn_* baselines)."""
    return _key(name) in BATCH_DEPENDENT_LAYERS
