"""The anchor architectures: pre-activation ResNet-50, MobileNetV2, EfficientNet-B0.

`build_model(arch, norm_act)` builds any of them with any layer. The `_cifar` forms use the paper's
channel multipliers (0.25, 0.5, 0.5) and stride 1 in the first two spatially reducing convolutions
(appendix B); the names without `_cifar` are the full-size ImageNet forms (multiplier 1.0).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from torch import nn

from evonorm.models._factory import NormActFactory, affine, make_divisible, resolve_norm_act
from evonorm.models.efficientnet import efficientnet_b0
from evonorm.models.mobilenetv2 import mobilenetv2
from evonorm.models.resnet import resnet50

__all__ = ["ArchSpec", "ARCHS", "build_model", "list_archs", "resolve_norm_act", "affine",
           "make_divisible", "NormActFactory", "LAYER_KWARGS"]


@dataclass(frozen=True)
class ArchSpec:
    builder: Callable[..., nn.Module]
    width: float  # default channel multiplier
    cifar: bool   # stride 1 in the first two spatially reducing convs


ARCHS: dict[str, ArchSpec] = {
    "resnet50_cifar": ArchSpec(resnet50, 0.25, True),
    "mobilenetv2_cifar": ArchSpec(mobilenetv2, 0.5, True),
    "efficientnet_b0_cifar": ArchSpec(efficientnet_b0, 0.5, True),
    "resnet50": ArchSpec(resnet50, 1.0, False),
    "mobilenetv2": ArchSpec(mobilenetv2, 1.0, False),
    "efficientnet_b0": ArchSpec(efficientnet_b0, 1.0, False),
}

# build_model keywords that configure the layer rather than the architecture
LAYER_KWARGS = ("groups", "eps", "momentum")


def list_archs() -> list[str]:
    return list(ARCHS)


def build_model(arch: str, norm_act: Any, num_classes: int = 10, width: float | None = None,
                in_chans: int = 3, **kw) -> nn.Module:
    """Build `arch` with `norm_act` (registry name, Graph, graph JSON, or factory) in every
    BN-activation slot. `groups`/`eps`/`momentum` go to the layer, other keywords to the model."""
    if arch not in ARCHS:
        raise ValueError(f"unknown architecture {arch!r} (choose from {', '.join(ARCHS)})")
    spec = ARCHS[arch]
    layer_kw = {k: kw.pop(k) for k in LAYER_KWARGS if k in kw}
    factory = resolve_norm_act(norm_act, **layer_kw)
    width = spec.width if width is None else float(width)
    if width <= 0:
        raise ValueError(f"width must be > 0, got {width}")
    return spec.builder(factory, num_classes=num_classes, width=width, in_chans=in_chans,
                        cifar=spec.cifar, **kw)
