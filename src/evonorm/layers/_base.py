"""What every EvoNorm module shares: gamma/beta (and v), `apply_act=False` as a plain affine, `impl`."""

from __future__ import annotations

import torch
from torch import nn

from evonorm.runtime.common import affine, check_input
from evonorm.layers.impl import EVONORM_IMPLS
from evonorm.runtime.impl import check_impl
from evonorm.runtime.paths import fell_back
from evonorm.runtime.tracing import exporting, fx_leaf


class EvoNormBase(nn.Module):
    """Subclasses set `variant`, `has_v` and implement `_norm_act(x)` (the apply_act=True path)."""

    variant: int = 0
    has_v: bool = False
    __constants__ = ["variant"]  # TorchScript reads the class attribute

    def __init__(self, num_features: int, *, apply_act: bool = True, eps: float = 1e-5, momentum: float = 0.1,
                 impl: str = "auto"):
        super().__init__()
        # "auto": the Triton kernels on CUDA, the fast path (hand-written autograd kernel) elsewhere
        self.impl = check_impl(impl, EVONORM_IMPLS, "EvoNorm layers")
        self.num_features = num_features
        self.apply_act = apply_act
        self.eps = eps
        self.momentum = momentum
        self.weight = nn.Parameter(torch.ones(num_features))
        self.bias = nn.Parameter(torch.zeros(num_features))
        if apply_act and self.has_v:
            self.v = nn.Parameter(torch.ones(num_features))
        else:
            self.register_parameter("v", None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.jit.is_scripting():  # TorchScript compiles only this branch
            return self._plain(x, "EvoNorm")
        else:
            leaf = fx_leaf(self, x)
            if leaf is not None:
                return leaf
            if exporting(x):  # traced, exported or compiled: the plain formulas, whatever `impl` says
                if self.impl == "triton":
                    fell_back("triton", "plain", "traced, exported or compiled")
                return self._plain(x, type(self).__name__)
            check_input(x, self.num_features, type(self).__name__)
            if not self.apply_act:
                return affine(x, self.weight, self.bias)
            return self._norm_act(x)

    def _norm_act(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _plain(self, x: torch.Tensor, layer: str) -> torch.Tensor:
        """The exportable path (evonorm.layers._plain): the whole forward as plain tensor ops."""
        raise NotImplementedError
