"""Per-channel affine: what a BatchNorm with no activation becomes in the searched architectures (as in the
paper's search: only normalization-activation pairs are candidates)."""

from __future__ import annotations

import torch
from torch import nn

from evonorm.runtime.common import affine, check_input
from evonorm.runtime.tracing import fx_leaf


class Affine2d(nn.Module):
    """gamma * x + beta per channel (gamma = 1, beta = 0 at init); extra keyword arguments are ignored."""

    def __init__(self, num_features: int, **kwargs):
        super().__init__()
        self.num_features = num_features
        self.weight = nn.Parameter(torch.ones(num_features))
        self.bias = nn.Parameter(torch.zeros(num_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.jit.is_scripting():
            check_input(x, self.num_features, "Affine2d")
        else:
            leaf = fx_leaf(self, x)
            if leaf is not None:
                return leaf
            check_input(x, self.num_features, type(self).__name__)
        return affine(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return str(self.num_features)
