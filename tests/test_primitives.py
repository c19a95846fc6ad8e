"""Each of the 24 primitives against its formula in the paper's Table 1, and the batch ops' running stats."""

import numpy as np
import pytest
import torch

from evonorm.graph import primitives as P
from evonorm.graph.batch import BatchStat
from evonorm.layers import resolve_groups

EPS = 1e-5


def test_table_has_24_ops_with_batch_flags():
    assert len(P.PRIMITIVES) == 24
    assert sum(not p.aggregation for p in P.PRIMITIVES.values()) == 12
    assert P.BATCH_OPS == {"batch_mean", "batch_std", "batch_rms"}
    for name, p in P.PRIMITIVES.items():
        assert p.batch_dependent == name.startswith("batch_")
        assert p.arity == (2 if name in ("add", "mul", "div", "max") else 1)


def _np(t):
    return t.detach().double().numpy()


@pytest.fixture
def xy():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, 4, 5, 5, generator=g, dtype=torch.float64)
    y = torch.randn(3, 4, 5, 5, generator=g, dtype=torch.float64)
    y[0, 0, 0, :3] = torch.tensor([0.0, 1e-7, -1e-7], dtype=torch.float64)  # exercise the divisor's sign rule
    x[0, 0, 1, :2] = 0.0  # log and sqrt at exactly 0
    return x, y


def test_elementwise_ops_match_their_formulas(xy):
    x, y = xy
    a, b = _np(x), _np(y)
    sign_b = np.where(b >= 0, 1.0, -1.0)  # sign(0) counts as +1 for the divisor
    expect = {
        "add": a + b, "mul": a * b, "div": a / (b + EPS * sign_b), "max": np.maximum(a, b),
        "neg": -a, "sigmoid": 1 / (1 + np.exp(-a)), "tanh": np.tanh(a), "exp": np.exp(a),
        "log": np.sign(a) * np.log(np.abs(a) + EPS), "abs": np.abs(a), "square": a ** 2,
        "sqrt": np.sign(a) * np.sqrt(np.abs(a)),
    }
    for name, want in expect.items():
        p = P.PRIMITIVES[name]
        args = (x, y)[: p.arity] + tuple(EPS for e in p.extra if e == "eps")
        np.testing.assert_allclose(_np(p.fn(*args)), want, rtol=1e-12, atol=1e-12, err_msg=name)
    assert torch.isfinite(P.op_div(x, torch.zeros_like(x), EPS)).all()
    assert P.op_div(torch.ones(1), torch.zeros(1), EPS).item() == pytest.approx(1 / EPS)
    assert P.op_log(torch.zeros(1), EPS).item() == 0.0


def _stat(a, stat, axes):
    if stat == "mean":
        return a.mean(axis=axes, keepdims=True)
    if stat == "std":
        return np.sqrt(a.var(axis=axes, keepdims=True) + EPS)  # biased variance (ddof=0)
    return np.sqrt((a ** 2).mean(axis=axes, keepdims=True) + EPS)


@pytest.mark.parametrize("stat", ["mean", "std", "rms"])
@pytest.mark.parametrize("axes", ["layer", "instance", "group"])
def test_sample_aggregations_match_their_formulas(stat, axes):
    x = torch.randn(3, 6, 4, 5, dtype=torch.float64)
    a = _np(x)
    p = P.PRIMITIVES[f"{axes}_{stat}"]
    groups = 3
    args = [x] + [groups if e == "groups" else EPS for e in p.extra]
    got = np.broadcast_to(_np(p.fn(*args)), a.shape)
    if axes == "layer":
        want = _stat(a, stat, (1, 2, 3))
    elif axes == "instance":
        want = _stat(a, stat, (2, 3))
    else:  # per sample and group of 2 consecutive channels
        want = _stat(a.reshape(3, groups, 2, 4, 5), stat, (2, 3, 4)).repeat(2, axis=2).reshape(3, 6, 1, 1)
    np.testing.assert_allclose(got, np.broadcast_to(want, a.shape), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", [n for n in P.OP_NAMES if P.PRIMITIVES[n].aggregation and n not in P.BATCH_OPS])
def test_aggregation_of_a_broadcast_tensor_equals_aggregation_of_its_expansion(name):
    """Compiled graphs keep statistics at size 1 along reduced axes; that must not change any result."""
    p = P.PRIMITIVES[name]
    extra = [3 if e == "groups" else EPS for e in p.extra]
    for shape in [(1, 6, 1, 1), (4, 1, 1, 1), (4, 6, 1, 1), (1, 1, 1, 1), (4, 1, 3, 3)]:
        t = torch.randn(shape, dtype=torch.float64)
        full = t.expand(4, 6, 3, 3).contiguous()
        torch.testing.assert_close(p.fn(t, *extra).expand(full.shape), p.fn(full, *extra).expand(full.shape),
                                   rtol=1e-12, atol=1e-12)


def test_group_rule_uses_resolve_groups():
    assert resolve_groups(24, 32) == 24 and resolve_groups(48, 32) == 24 and resolve_groups(3, 32) == 3
    from evonorm.graph.library import get_graph
    m = get_graph("evonorm_s0").to_module(48)
    assert m.groups == 24


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_statistics_run_in_float32_for_low_precision(dtype):
    x = torch.randn(2, 8, 4, 4) * 100 + 1000  # variance of large-offset data is hopeless in half precision
    for name in ("instance_std", "layer_rms", "group_std"):
        p = P.PRIMITIVES[name]
        extra = [4 if e == "groups" else EPS for e in p.extra]
        got = p.fn(x.to(dtype), *extra)
        assert got.dtype == dtype
        want = p.fn(x.to(dtype).float(), *extra)
        torch.testing.assert_close(got.float(), want, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("stat,init", [("mean", 0.0), ("std", 1.0), ("rms", 1.0)])
def test_batch_ops_train_on_batch_and_eval_on_running_average(stat, init):
    x = torch.randn(4, 3, 5, 5, dtype=torch.float64) * 2 + 0.5
    a = _np(x)
    m = BatchStat(3, stat, eps=EPS, momentum=0.1).double()
    m.train()
    got = m(x, x)
    np.testing.assert_allclose(_np(got), _stat(a, stat, (0, 2, 3)), rtol=1e-12)
    n = 4 * 5 * 5
    batch = {"mean": a.mean((0, 2, 3)), "std": a.var((0, 2, 3)) * n / (n - 1), "rms": (a ** 2).mean((0, 2, 3))}[stat]
    running = _np(getattr(m, m.buffer_name))
    np.testing.assert_allclose(running, 0.9 * init + 0.1 * batch, rtol=1e-12)
    m.eval()
    want = running if stat == "mean" else np.sqrt(running + EPS)
    np.testing.assert_allclose(_np(m(x, x)).reshape(-1), want, rtol=1e-12)
    assert m.buffer_name == {"mean": "running_mean", "std": "running_var", "rms": "running_sq"}[stat]


def test_batch_running_estimate_converges_to_the_train_statistic():
    """Eval is consistent with training: after many steps on one batch, running stat = batch stat
    (up to the n/(n-1) unbiasing of the variance, as in BatchNorm)."""
    x = torch.randn(8, 3, 6, 6, dtype=torch.float64) * 3 + 1
    for stat in ("mean", "std", "rms"):
        m = BatchStat(3, stat, momentum=0.5).double()
        for _ in range(80):
            train = m(x, x)
        m.eval()
        tol = 2e-3 if stat == "std" else 1e-9
        torch.testing.assert_close(m(x, x), train, rtol=tol, atol=tol)


def test_batch_buffer_stays_float32_under_half():
    m = BatchStat(4, "std").half()
    assert m.running_var.dtype == torch.float32
    assert m(torch.randn(2, 4, 3, 3).half(), torch.randn(2, 4, 3, 3)).dtype == torch.float16
