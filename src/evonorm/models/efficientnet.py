"""EfficientNet-B0 (Tan & Le 2019) with a norm-act factory.

Every BN-Swish (stem, expansion, depthwise, head) becomes the factory's layer; the projection's BN
(no activation) becomes a per-channel affine. Squeeze-excitation keeps its own Swish and sigmoid
(no normalization there). Channel rounding as in the reference (multiples of 8; the head scales
with width). `cifar=True`: stride 1 in the stem and in the first block of the 24-channel stage.
"""

from __future__ import annotations

import torch
from torch import nn

from evonorm.models._factory import NormActFactory, affine, make_divisible

# expansion, kernel, stride, out channels, repeats (B0: depth and width 1.0)
EFFICIENTNET_B0_CFG = ((1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3),
                       (6, 5, 1, 112, 3), (6, 5, 2, 192, 4), (6, 3, 1, 320, 1))


class SqueezeExcite(nn.Module):
    def __init__(self, chs: int, squeeze: int):
        super().__init__()
        self.reduce = nn.Conv2d(chs, squeeze, 1)
        self.expand = nn.Conv2d(squeeze, chs, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = self.expand(nn.functional.silu(self.reduce(x.mean((2, 3), keepdim=True))))
        return x * torch.sigmoid(s)


class MBConv(nn.Module):
    def __init__(self, in_chs: int, out_chs: int, kernel: int, stride: int, expand: int,
                 norm_act: NormActFactory, se_ratio: float = 0.25, **kwargs):
        super().__init__()
        hidden = in_chs * expand
        layers: list[nn.Module] = []
        if expand != 1:
            layers += [nn.Conv2d(in_chs, hidden, 1, bias=False), norm_act(hidden)]
        layers += [nn.Conv2d(hidden, hidden, kernel, stride=stride, padding=kernel // 2,
                             groups=hidden, bias=False), norm_act(hidden),
                   SqueezeExcite(hidden, max(1, int(in_chs * se_ratio))),
                   nn.Conv2d(hidden, out_chs, 1, bias=False), affine(out_chs)]
        self.block = nn.Sequential(*layers)
        self.use_residual = stride == 1 and in_chs == out_chs

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.block(x)
        return x + out if self.use_residual else out


class EfficientNet(nn.Module):
    def __init__(self, norm_act: NormActFactory, num_classes: int = 1000, width: float = 1.0,
                 in_chans: int = 3, cifar: bool = False, drop_rate: float = 0.2, **kwargs):
        super().__init__()
        stem = make_divisible(32 * width)
        layers: list[nn.Module] = [
            nn.Conv2d(in_chans, stem, 3, stride=1 if cifar else 2, padding=1, bias=False),
            norm_act(stem)]
        in_chs, reduced = stem, 0
        for e, k, s, c, n in EFFICIENTNET_B0_CFG:
            out_chs = make_divisible(c * width)
            if s == 2 and cifar and reduced == 0:  # the second spatially reducing conv
                s = 1
                reduced += 1
            for i in range(n):
                layers.append(MBConv(in_chs, out_chs, k, s if i == 0 else 1, e, norm_act))
                in_chs = out_chs
        self.num_features = make_divisible(1280 * width)
        layers += [nn.Conv2d(in_chs, self.num_features, 1, bias=False), norm_act(self.num_features)]
        self.features = nn.Sequential(*layers)
        self.dropout = nn.Dropout(drop_rate)
        self.fc = nn.Linear(self.num_features, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                bound = 1.0 / m.out_features ** 0.5
                nn.init.uniform_(m.weight, -bound, bound)
                nn.init.zeros_(m.bias)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        return self.features(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.dropout(self.forward_features(x).mean((2, 3))))


def efficientnet_b0(norm_act: NormActFactory, **kwargs) -> EfficientNet:
    return EfficientNet(norm_act, **kwargs)
