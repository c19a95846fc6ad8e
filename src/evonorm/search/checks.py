"""Checks of the layer alone, which every search runs before its objective (any objective: a
layer whose output ignores its input learns nothing in anyone's task), switchable with the
engine's `evolution.prechecks`.

torch and the graph library are imported where a layer is checked: this module itself is stdlib.
"""

from __future__ import annotations

from evonorm.search.reject import Reject


def layer_checks(graph, *, num_features: int = 8, batch: int = 4, size: int = 6,
                 groups: int = 4, seed: int = 0) -> Reject | None:
    """Reject a layer whose output is non-finite, constant, or independent of x on random input:
    what the layer alone tells, in milliseconds, before any objective trains it.

    The layer's own trainable vectors (v0, v1, ...) are set to random values first: at their init
    (0 and 1) a learnable layer such as v0 * x is constant, but it is not constant as a function.
    The final affine (`weight`/`bias`) stays at identity so it cannot mask a constant output.
    """
    import torch

    gen = torch.Generator().manual_seed(seed)
    module = graph.to_module(num_features, groups=groups)
    module.train()
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.rsplit(".", 1)[-1] not in ("weight", "bias"):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.5 + 1.0)
        x1 = torch.randn(batch, num_features, size, size, generator=gen)
        x2 = torch.randn(batch, num_features, size, size, generator=gen)
        y1, y2 = module(x1), module(x2)
    if not (torch.isfinite(y1).all() and torch.isfinite(y2).all()):
        return Reject("precheck:nonfinite", step=0)
    scale = 1e-6 * (1.0 + float(y1.abs().max()))
    if float(y1.max() - y1.min()) <= scale and float(y2.max() - y2.min()) <= scale:
        return Reject("precheck:constant", step=0)
    if torch.allclose(y1, y2, rtol=1e-5, atol=1e-6):
        return Reject("precheck:x_independent", step=0)
    return None
