"""The discovered EvoNorm layers, the paper's baselines, a registry by name, and a model converter.

>>> from evonorm.layers import create_norm_act, convert_norm_act
>>> layer = create_norm_act("evonorm_s0", 64)           # drop-in for BatchNorm2d(64) + ReLU
>>> model, report = convert_norm_act(model, "evonorm_b0")  # every BatchNorm2d (+ its activation)
>>> model = convert_sync_norm_act(model)                  # DDP: batch statistics over every rank
"""

from evonorm.runtime.common import groups_to_channels, resolve_groups
from evonorm.layers.affine import Affine2d
from evonorm.layers.baselines import (
    BatchNormPReLU2d,
    BatchNormReLU2d,
    BatchNormSwish,
    BatchNormSwish1,
    FilterResponseNorm2d,
    GroupNormReLU,
    GroupNormSwish,
    LayerNormReLU,
    PixelNormReLU,
)
from evonorm.layers.convert import ConvertReport, Replacement, convert_norm_act
from evonorm.layers.evonorm_b import EvoNormB0, EvoNormB1, EvoNormB2
from evonorm.layers.evonorm_s import EvoNormS0, EvoNormS1, EvoNormS2
from evonorm.layers.registry import (NORM_ACTS, create_norm_act, get_norm_act, is_batch_dependent, list_norm_acts,
                                     resolve_norm_act)
from evonorm.layers.sync import convert_sync_norm_act
from evonorm.layers.timm_compat import TIMM_EVONORMS, convert_timm_evonorm, from_timm, timm_settings

__all__ = [
    "groups_to_channels",
    "resolve_groups",
    "Affine2d",
    "BatchNormPReLU2d",
    "BatchNormReLU2d",
    "BatchNormSwish",
    "BatchNormSwish1",
    "ConvertReport",
    "TIMM_EVONORMS",
    "EvoNormB0",
    "EvoNormB1",
    "EvoNormB2",
    "EvoNormS0",
    "EvoNormS1",
    "EvoNormS2",
    "FilterResponseNorm2d",
    "GroupNormReLU",
    "GroupNormSwish",
    "LayerNormReLU",
    "NORM_ACTS",
    "PixelNormReLU",
    "Replacement",
    "convert_norm_act",
    "convert_sync_norm_act",
    "convert_timm_evonorm",
    "create_norm_act",
    "from_timm",
    "get_norm_act",
    "is_batch_dependent",
    "list_norm_acts",
    "resolve_norm_act",
    "timm_settings",
]
