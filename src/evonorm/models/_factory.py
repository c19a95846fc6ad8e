"""What the models share: the norm-act factory type and how a layer is read (`resolve_norm_act`, the layers'
one rule), the per-channel affine of a BN without an activation, channel rounding.

Every model takes a factory `(num_features) -> nn.Module` and calls it once per BN-activation pair,
so the same architecture code builds any candidate layer.
"""

from __future__ import annotations

from typing import Callable

from torch import nn

from evonorm.layers import Affine2d, resolve_norm_act

NormActFactory = Callable[..., nn.Module]


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
