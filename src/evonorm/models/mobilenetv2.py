"""MobileNetV2 (Sandler et al. 2018) with a norm-act factory.

Every BN-ReLU6 (stem, expansion, depthwise, head) becomes the factory's layer; the linear
bottleneck's BN becomes a per-channel affine. Channel rounding and the unreduced 1280-wide head for
width < 1 follow the reference implementation.
"""

from __future__ import annotations

from evonorm.models._factory import NormActFactory, make_divisible
from evonorm.models.blocks import InvertedResidualNet, Stage

# expansion, kernel, stride, channels, repeats (paper Table 2)
MOBILENETV2_STAGES = (Stage(1, 3, 1, 16, 1), Stage(6, 3, 2, 24, 2), Stage(6, 3, 2, 32, 3),
                      Stage(6, 3, 2, 64, 4), Stage(6, 3, 1, 96, 3), Stage(6, 3, 2, 160, 3),
                      Stage(6, 3, 1, 320, 1))


def mobilenetv2(norm_act: NormActFactory, width: float = 1.0, **kwargs) -> InvertedResidualNet:
    return InvertedResidualNet(norm_act, MOBILENETV2_STAGES, width=width,
                               stem_chs=make_divisible(32 * width),
                               head_chs=make_divisible(1280 * max(1.0, width)), **kwargs)
