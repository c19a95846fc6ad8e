"""Fuzz: random graphs on small odd shapes compile and run; numeric trouble is classified, never raised.

Shapes cycle over C in {1, 3, 24} x H = W in {1, 5} x batch in {1, 4} (with batch 1 and H = W = 1 the
batch statistics see a single value: variance 0, no n/(n-1) blow-up). The default suite runs 1,000
graphs; `pytest -m slow` runs 10,000.
"""

import collections
import itertools
import random

import pytest
import torch

from evonorm.graph import random_graph

SHAPES = list(itertools.product((1, 3, 24), (1, 5), (1, 4)))


def classify(graph, c, hw, n, seed):
    """'finite', 'nonfinite_output' or 'nonfinite_grad' for one train step and one eval forward.
    Anything raised is a bug in the compiler or a primitive and propagates."""
    torch.manual_seed(seed)
    m = graph.to_module(c)
    x = torch.randn(n, c, hw, hw, requires_grad=True)
    y = m(x)
    assert y.shape == x.shape, graph.to_json()
    y.square().mean().backward()
    m.eval()
    with torch.no_grad():
        y_eval = m(x)
    assert y_eval.shape == x.shape, graph.to_json()
    if not (torch.isfinite(y).all() and torch.isfinite(y_eval).all()):
        return "nonfinite_output"
    grads = [x.grad] + [p.grad for p in m.parameters() if p.grad is not None]
    if not all(torch.isfinite(g).all() for g in grads if g is not None):
        return "nonfinite_grad"
    return "finite"


def _fuzz(count, seed):
    rng = random.Random(seed)
    outcomes = collections.Counter()
    for i in range(count):
        g = random_graph(rng, allow_batch=i % 2 == 0, max_nodes=10)
        c, hw, n = SHAPES[i % len(SHAPES)]
        try:
            outcomes[classify(g, c, hw, n, i)] += 1
        except Exception as err:  # pragma: no cover - the failure message is the point
            raise AssertionError(f"graph {g.dumps()} on shape {(n, c, hw, hw)} raised {err!r}") from err
    return outcomes


def test_fuzz_random_graphs():
    outcomes = _fuzz(1000, seed=1)
    assert sum(outcomes.values()) == 1000
    assert outcomes["finite"] > 500  # most random layers are numerically harmless at init


@pytest.mark.slow
def test_fuzz_10000_random_graphs():
    outcomes = _fuzz(10_000, seed=2)
    assert sum(outcomes.values()) == 10_000
    print(dict(outcomes))
