"""MobileNetV2 (Sandler et al. 2018) with a norm-act factory.

Every BN-ReLU6 (stem, expansion, depthwise, head) becomes the factory's layer; the linear
bottleneck's BN (after the projection, no activation) becomes a per-channel affine. Channel
rounding and the unreduced 1280-wide head for width < 1 follow the reference implementation.
`cifar=True`: stride 1 in the stem and in the first block of the 24-channel stage.
"""

from __future__ import annotations

import torch
from torch import nn

from evonorm.models._factory import NormActFactory, affine, make_divisible

# expansion t, channels c, repeats n, stride s (paper Table 2)
MOBILENETV2_CFG = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                   (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))


class InvertedResidual(nn.Module):
    def __init__(self, in_chs: int, out_chs: int, stride: int, expand: int,
                 norm_act: NormActFactory, **kwargs):
        super().__init__()
        hidden = in_chs * expand
        layers: list[nn.Module] = []
        if expand != 1:
            layers += [nn.Conv2d(in_chs, hidden, 1, bias=False), norm_act(hidden)]
        layers += [nn.Conv2d(hidden, hidden, 3, stride=stride, padding=1, groups=hidden, bias=False),
                   norm_act(hidden),
                   nn.Conv2d(hidden, out_chs, 1, bias=False), affine(out_chs)]
        self.block = nn.Sequential(*layers)
        self.use_residual = stride == 1 and in_chs == out_chs

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.block(x)
        return x + out if self.use_residual else out


class MobileNetV2(nn.Module):
    def __init__(self, norm_act: NormActFactory, num_classes: int = 1000, width: float = 1.0,
                 in_chans: int = 3, cifar: bool = False, drop_rate: float = 0.2, **kwargs):
        super().__init__()
        stem = make_divisible(32 * width)
        self.num_features = make_divisible(1280 * max(1.0, width))
        layers: list[nn.Module] = [
            nn.Conv2d(in_chans, stem, 3, stride=1 if cifar else 2, padding=1, bias=False),
            norm_act(stem)]
        in_chs, reduced = stem, 0
        for t, c, n, s in MOBILENETV2_CFG:
            out_chs = make_divisible(c * width)
            if s == 2 and cifar and reduced == 0:  # the second spatially reducing conv
                s = 1
                reduced += 1
            for i in range(n):
                layers.append(InvertedResidual(in_chs, out_chs, s if i == 0 else 1, t, norm_act))
                in_chs = out_chs
        layers += [nn.Conv2d(in_chs, self.num_features, 1, bias=False), norm_act(self.num_features)]
        self.features = nn.Sequential(*layers)
        self.dropout = nn.Dropout(drop_rate)
        self.fc = nn.Linear(self.num_features, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        return self.features(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.dropout(self.forward_features(x).mean((2, 3))))


def mobilenetv2(norm_act: NormActFactory, **kwargs) -> MobileNetV2:
    return MobileNetV2(norm_act, **kwargs)
