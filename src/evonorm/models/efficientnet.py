"""EfficientNet-B0 (Tan & Le 2019) with a norm-act factory.

Every BN-Swish (stem, expansion, depthwise, head) becomes the factory's layer; the projection's BN
becomes a per-channel affine; squeeze-excitation (ratio 0.25 of the block input) keeps its own
Swish and sigmoid. Channels round to multiples of 8 and the head scales with width, as in the
reference.
"""

from __future__ import annotations

from evonorm.models._factory import NormActFactory, make_divisible
from evonorm.models.blocks import InvertedResidualNet, Stage

# expansion, kernel, stride, channels, repeats (B0: depth and width 1.0)
EFFICIENTNET_B0_STAGES = (Stage(1, 3, 1, 16, 1), Stage(6, 3, 2, 24, 2), Stage(6, 5, 2, 40, 2),
                          Stage(6, 3, 2, 80, 3), Stage(6, 5, 1, 112, 3), Stage(6, 5, 2, 192, 4),
                          Stage(6, 3, 1, 320, 1))


def efficientnet_b0(norm_act: NormActFactory, width: float = 1.0, **kwargs) -> InvertedResidualNet:
    return InvertedResidualNet(norm_act, EFFICIENTNET_B0_STAGES, width=width, se_ratio=0.25,
                               stem_chs=make_divisible(32 * width),
                               head_chs=make_divisible(1280 * width), **kwargs)
