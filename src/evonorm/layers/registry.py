"""Normalization-activation layers by name: `create_norm_act`, `list_norm_acts`, `is_batch_dependent`."""

from __future__ import annotations

from importlib import import_module
from types import MappingProxyType

from torch import nn

from evonorm.catalog import BATCH_DEPENDENT_LAYERS, LAYERS


def _class(where: str) -> type[nn.Module]:
    module, name = where.split(":")
    return getattr(import_module(f"evonorm.layers.{module}"), name)


# the names are data in evonorm.catalog, so that `evonorm list` names them without torch
NORM_ACTS: MappingProxyType[str, type[nn.Module]] = MappingProxyType({n: _class(w) for n, w in LAYERS.items()})


def _key(name: str) -> str:
    key = str(name).strip().lower().replace("-", "_")
    if key not in NORM_ACTS:
        raise ValueError(f"unknown norm-act layer {name!r}; known: {', '.join(NORM_ACTS)}")
    return key


def list_norm_acts() -> list[str]:
    """The registered names, EvoNorms first."""
    return list(NORM_ACTS)


def get_norm_act(name: str) -> type[nn.Module]:
    """The class registered under `name` (ValueError naming the known ones otherwise)."""
    return NORM_ACTS[_key(name)]


def create_norm_act(name: str, num_features: int, **kwargs) -> nn.Module:
    """A new layer: `create_norm_act("evonorm_s0", 64, groups=16)`; unknown keywords are ignored by the layer."""
    return get_norm_act(name)(num_features, **kwargs)


def is_batch_dependent(name: str) -> bool:
    """Whether the layer uses batch statistics (the B layers and the bn_* baselines)."""
    return _key(name) in BATCH_DEPENDENT_LAYERS
