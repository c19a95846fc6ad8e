"""Pre-activation ResNet-50 (v2, He et al. 2016 "Identity Mappings") with a norm-act factory.

Each bottleneck starts with norm-act; the projection shortcut (first block of a stage) reads the
pre-activated input; a final norm-act follows the last stage. The stem conv has no norm after it
(v2). So every BN in this network precedes a ReLU: every one becomes the factory's layer.
`cifar=True` sets stride 1 in the first two spatially reducing convolutions (the 7x7 stem and the
first 3x3 of stage 2); the max-pool and everything else stay (paper appendix B).
"""

from __future__ import annotations

import torch
from torch import nn

from evonorm.models._factory import NormActFactory

RESNET50_LAYERS = (3, 4, 6, 3)


class PreActBottleneck(nn.Module):
    expansion = 4

    def __init__(self, in_chs: int, width: int, stride: int, norm_act: NormActFactory, **kwargs):
        super().__init__()
        out_chs = width * self.expansion
        self.norm1 = norm_act(in_chs)
        self.conv1 = nn.Conv2d(in_chs, width, 1, bias=False)
        self.norm2 = norm_act(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.norm3 = norm_act(width)
        self.conv3 = nn.Conv2d(width, out_chs, 1, bias=False)
        self.shortcut = (nn.Conv2d(in_chs, out_chs, 1, stride=stride, bias=False)
                         if stride != 1 or in_chs != out_chs else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pre = self.norm1(x)
        shortcut = x if self.shortcut is None else self.shortcut(pre)
        out = self.conv1(pre)
        out = self.conv2(self.norm2(out))
        out = self.conv3(self.norm3(out))
        return out + shortcut


class PreActResNet(nn.Module):
    """Pre-activation bottleneck ResNet; `width` multiplies every channel count."""

    def __init__(self, norm_act: NormActFactory, layers=RESNET50_LAYERS, num_classes: int = 1000,
                 width: float = 1.0, in_chans: int = 3, cifar: bool = False, **kwargs):
        super().__init__()
        chs = lambda c: max(1, int(round(c * width)))  # noqa: E731
        stem = chs(64)
        self.stem = nn.Sequential(
            nn.Conv2d(in_chans, stem, 7, stride=1 if cifar else 2, padding=3, bias=False),
            nn.MaxPool2d(3, stride=2, padding=1))
        strides = (1, 1, 2, 2) if cifar else (1, 2, 2, 2)
        in_chs, stages = stem, []
        for i, (n, stride) in enumerate(zip(layers, strides)):
            w = chs(64 * 2 ** i)
            blocks = []
            for j in range(n):
                blocks.append(PreActBottleneck(in_chs, w, stride if j == 0 else 1, norm_act))
                in_chs = w * PreActBottleneck.expansion
            stages.append(nn.Sequential(*blocks))
        self.stages = nn.Sequential(*stages)
        self.final_norm = norm_act(in_chs)
        self.num_features = in_chs
        self.fc = nn.Linear(in_chs, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        return self.final_norm(self.stages(self.stem(x)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.forward_features(x).mean((2, 3)))


def resnet50(norm_act: NormActFactory, **kwargs) -> PreActResNet:
    return PreActResNet(norm_act, RESNET50_LAYERS, **kwargs)
