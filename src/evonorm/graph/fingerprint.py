"""Functional fingerprint of a graph (AutoML-Zero's trick, SPEC "Equality and caching").

The graph runs in float64 on a fixed random input (N=4, C=6, H=W=3, 3 groups of 2 channels, so
batch / layer / instance / group statistics all differ) with fixed random v0 and v1: once in
training mode (batch statistics, which also updates the running buffers from their initial
values), then in eval mode on a second fixed input (running statistics). Every output value is
rounded to 6 significant digits (values below 1e-8 in magnitude count as 0; NaN and +-inf are kept
as such) and the whole is hashed. Float noise from a different order of operations (~1e-15
relative) does not change the rounded values, so x*x and square(x), or a+b and b+a, collide.
"""

from __future__ import annotations

import hashlib
import math

import torch

from evonorm.graph.graph import Graph

SHAPE = (4, 6, 3, 3)
GROUPS = 3
DIGITS = 6
TINY = 1e-8


def _inputs() -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(20200406)
    x1 = torch.randn(SHAPE, generator=gen, dtype=torch.float64)
    x2 = torch.randn(SHAPE, generator=gen, dtype=torch.float64) * 1.5 + 0.25
    v0 = torch.randn(SHAPE[1], generator=gen, dtype=torch.float64)
    v1 = torch.randn(SHAPE[1], generator=gen, dtype=torch.float64) + 1.0
    return x1, x2, v0, v1


def _round(v: float) -> str:
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if abs(v) < TINY:
        return "0"
    return f"{v:.{DIGITS - 1}e}"


def fingerprint_values(graph: Graph) -> torch.Tensor:
    """The (2, *SHAPE) float64 outputs that the fingerprint hashes: train mode on x1, eval on x2."""
    from evonorm.graph.compile import evaluate

    x1, x2, v0, v1 = _inputs()
    running: dict = {}
    with torch.no_grad():
        y1 = evaluate(graph, x1, v0, v1, groups=GROUPS, training=True, running=running)
        y2 = evaluate(graph, x2, v0, v1, groups=GROUPS, training=False, running=running)
    return torch.stack([y1, y2])


def fingerprint(graph: Graph) -> str:
    """16 hex digits; equal for graphs that compute the same function (up to rounding)."""
    text = ",".join(_round(v) for v in fingerprint_values(graph).flatten().tolist())
    return hashlib.sha256(text.encode()).hexdigest()[:16]
