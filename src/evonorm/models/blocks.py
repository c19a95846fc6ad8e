"""The inverted-residual network shared by MobileNetV2 and EfficientNet-B0.

Both are a stem conv, stages of inverted residual blocks (1x1 expansion, depthwise kxk, optional
squeeze-excitation, linear 1x1 projection) and a 1x1 head. Every BN-activation pair is the
factory's layer; the projection's BN (no activation) is a per-channel affine. `cifar=True` sets
stride 1 in the stem and in the first strided stage (the first two spatially reducing convs).
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import torch
from torch import nn

from evonorm.models._factory import NormActFactory, affine, make_divisible


class Stage(NamedTuple):
    expand: int
    kernel: int
    stride: int
    channels: int
    repeats: int


class SqueezeExcite(nn.Module):
    """Channel gating with its own Swish and sigmoid: no normalization, so not a layer slot."""

    def __init__(self, chs: int, squeeze: int):
        super().__init__()
        self.reduce = nn.Conv2d(chs, squeeze, 1)
        self.expand = nn.Conv2d(squeeze, chs, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = self.expand(nn.functional.silu(self.reduce(x.mean((2, 3), keepdim=True))))
        return x * torch.sigmoid(s)


class InvertedResidual(nn.Module):
    def __init__(self, in_chs: int, out_chs: int, stride: int, expand: int,
                 norm_act: NormActFactory, kernel: int = 3, se_ratio: float = 0.0, **kwargs):
        super().__init__()
        hidden = in_chs * expand
        layers: list[nn.Module] = []
        if expand != 1:
            layers += [nn.Conv2d(in_chs, hidden, 1, bias=False), norm_act(hidden)]
        layers += [nn.Conv2d(hidden, hidden, kernel, stride=stride, padding=kernel // 2,
                             groups=hidden, bias=False), norm_act(hidden)]
        if se_ratio > 0:
            layers.append(SqueezeExcite(hidden, max(1, int(in_chs * se_ratio))))
        layers += [nn.Conv2d(hidden, out_chs, 1, bias=False), affine(out_chs)]
        self.block = nn.Sequential(*layers)
        self.use_residual = stride == 1 and in_chs == out_chs

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.block(x)
        return x + out if self.use_residual else out


class InvertedResidualNet(nn.Module):
    def __init__(self, norm_act: NormActFactory, stages: Sequence[Stage], *, stem_chs: int,
                 head_chs: int, num_classes: int = 1000, width: float = 1.0, in_chans: int = 3,
                 cifar: bool = False, se_ratio: float = 0.0, drop_rate: float = 0.2, **kwargs):
        super().__init__()
        layers: list[nn.Module] = [
            nn.Conv2d(in_chans, stem_chs, 3, stride=1 if cifar else 2, padding=1, bias=False),
            norm_act(stem_chs)]
        in_chs, first_strided = stem_chs, True
        for st in stages:
            out_chs, stride = make_divisible(st.channels * width), st.stride
            if stride == 2 and first_strided:
                first_strided = False
                stride = 1 if cifar else 2
            for i in range(st.repeats):
                layers.append(InvertedResidual(in_chs, out_chs, stride if i == 0 else 1, st.expand,
                                               norm_act, kernel=st.kernel, se_ratio=se_ratio))
                in_chs = out_chs
        layers += [nn.Conv2d(in_chs, head_chs, 1, bias=False), norm_act(head_chs)]
        self.features = nn.Sequential(*layers)
        self.num_features = head_chs
        self.dropout = nn.Dropout(drop_rate)
        self.fc = nn.Linear(head_chs, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        return self.features(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.dropout(self.forward_features(x).mean((2, 3))))
