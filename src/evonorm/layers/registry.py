"""Normalization-activation layers by name: `create_norm_act`, `list_norm_acts`, `is_batch_dependent`."""

from __future__ import annotations

from types import MappingProxyType

from torch import nn

from evonorm.layers import baselines
from evonorm.layers.evonorm_b import EvoNormB0, EvoNormB1, EvoNormB2
from evonorm.layers.evonorm_s import EvoNormS0, EvoNormS1, EvoNormS2

NORM_ACTS: MappingProxyType[str, type[nn.Module]] = MappingProxyType({
    "evonorm_b0": EvoNormB0,
    "evonorm_b1": EvoNormB1,
    "evonorm_b2": EvoNormB2,
    "evonorm_s0": EvoNormS0,
    "evonorm_s1": EvoNormS1,
    "evonorm_s2": EvoNormS2,
    "bn_relu": baselines.BatchNormReLU2d,
    "bn_prelu": baselines.BatchNormPReLU2d,
    "bn_swish1": baselines.BatchNormSwish1,
    "bn_swish": baselines.BatchNormSwish,
    "gn_relu": baselines.GroupNormReLU,
    "gn_swish": baselines.GroupNormSwish,
    "frn": baselines.FilterResponseNorm2d,
    "ln_relu": baselines.LayerNormReLU,
    "pixelnorm_relu": baselines.PixelNormReLU,
})

_BATCH_DEPENDENT = frozenset({"evonorm_b0", "evonorm_b1", "evonorm_b2", "bn_relu", "bn_prelu", "bn_swish1",
                              "bn_swish"})


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
    return _key(name) in _BATCH_DEPENDENT
