"""The anchor architectures: pre-activation ResNet-50, MobileNetV2, EfficientNet-B0, and yours.

`build_model(arch, norm_act)` builds any of them with any layer; `arch` may also be `timm:NAME` (a timm
model, the layer put in by `convert_norm_act`) or `MODULE:FUNCTION` (your builder
`fn(norm_act, num_classes, in_chans)`; `evonorm.models.external`). The `_cifar` forms use the paper's
channel multipliers (0.25, 0.5, 0.5) and stride 1 in the first two spatially reducing convolutions
(appendix B); the names without `_cifar` are the full-size ImageNet forms (multiplier 1.0).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from torch import nn

from evonorm import catalog

from evonorm.models._factory import NormActFactory, affine, make_divisible, resolve_norm_act
from evonorm.models.efficientnet import efficientnet_b0
from evonorm.models.external import (FORMS, arch_kind, build_external, check_arch,
                                     check_named_again, is_user_code, probe_arch)
from evonorm.models.mobilenetv2 import mobilenetv2
from evonorm.models.resnet import resnet50

__all__ = ["ArchSpec", "ARCHS", "build_model", "list_archs", "resolve_norm_act", "affine",
           "make_divisible", "NormActFactory", "LAYER_KWARGS", "is_builtin", "check_arch_name",
           "check_arch", "check_named_again", "is_user_code", "probe_arch"]


@dataclass(frozen=True)
class ArchSpec:
    builder: Callable[..., nn.Module]
    width: float  # default channel multiplier
    cifar: bool   # stride 1 in the first two spatially reducing convs


# the names and shapes are data in evonorm.catalog, so that `evonorm list` names them without torch
ARCHS: dict[str, ArchSpec] = {
    name: ArchSpec({"resnet50": resnet50, "mobilenetv2": mobilenetv2, "efficientnet_b0": efficientnet_b0}[builder],
                   width, cifar)
    for name, (builder, width, cifar) in catalog.ARCHS.items()}

# build_model keywords that configure the layer rather than the architecture
LAYER_KWARGS = ("groups", "eps", "momentum")


def list_archs() -> list[str]:
    return list(ARCHS)


def is_builtin(arch: str) -> bool:
    return arch in ARCHS


def check_arch_name(arch: str) -> None:
    """ValueError unless `arch` is a built-in name or a well-formed external one (nothing imported)."""
    if arch not in ARCHS and arch_kind(arch) is None:
        raise ValueError(f"unknown architecture {arch!r} (choose from {', '.join(ARCHS)}, or {FORMS})")


def build_model(arch: str, norm_act: Any, num_classes: int = 10, width: float | None = None,
                in_chans: int = 3, **kw) -> nn.Module:
    """Build `arch` with `norm_act` (registry name, Graph, graph JSON, or factory) in every
    BN-activation slot. `groups`/`eps`/`momentum` go to the layer, other keywords to the model.

    `arch` is a built-in name (`list_archs()`), `timm:NAME` or `MODULE:FUNCTION`; `width` applies to
    the built-in ones only (an external model's channels are its builder's)."""
    check_arch_name(arch)
    layer_kw = {k: kw.pop(k) for k in LAYER_KWARGS if k in kw}
    factory = resolve_norm_act(norm_act, **layer_kw)
    if arch not in ARCHS:
        if width is not None:
            raise ValueError(f"width does not apply to {arch}: its channels are its builder's")
        return build_external(arch, factory, num_classes=num_classes, in_chans=in_chans, **kw)
    spec = ARCHS[arch]
    width = spec.width if width is None else float(width)
    if width <= 0:
        raise ValueError(f"width must be > 0, got {width}")
    return spec.builder(factory, num_classes=num_classes, width=width, in_chans=in_chans,
                        cifar=spec.cifar, **kw)
