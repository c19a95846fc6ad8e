"""The fast eager paths of compiled graph layers (`impl="fast"`, the Python sweep, and `impl="cpp"`, the
compiled CPU kernel) compute the plain fx path's function: output, input gradient, v0/v1/weight/bias gradients,
in float64, for every primitive, the fused patterns and random graphs; shapes, dtypes, non-finite outputs and
double backward as the plain path has them."""

import copy
import pickle
import random

import pytest
import torch

from evonorm.graph import OP_NAMES, PRIMITIVES, Graph, random_graph
from evonorm.graph.fast import make_plan
from evonorm.graph.library import get_graph
from evonorm.runtime.paths import recording
from evonorm.search.settings import norm_relu

NORM_RELU = {k: Graph.from_json(norm_relu(k)) for k in ("group", "layer", "instance")}


@pytest.fixture(params=["fast", "cpp"])
def impl(request) -> str:
    """Each comparison runs for both eager paths (the kernel must build here: a C++ compiler is part of the
    test setup)."""
    return request.param


def _pair(graph: Graph, c: int, groups: int, seed: int = 0, device: str = "cpu", impl: str = "fast"):
    """(plain on the CPU, `impl` on `device`) float64 modules with the same random parameters (v0, v1, gamma,
    beta away from init). A graph with batch ops gets impl="auto" (the plain path)."""
    plain = graph.to_module(c, groups=groups, impl="plain").double()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in plain.parameters():
            p.copy_(torch.rand(p.shape, generator=gen, dtype=p.dtype) * 3 - 1.5)
    fast = graph.to_module(c, groups=groups, impl="auto" if graph.uses_batch_stats else impl).double()
    fast.load_state_dict(plain.state_dict())
    fast.to(device)
    return plain, fast


def _run(m, x, dy):
    device = next(iter(m.parameters()), x).device
    x = x.detach().clone().to(device).requires_grad_()
    for p in m.parameters():
        p.grad = None
    y = m(x)
    y.backward(dy.to(device))
    out = [y.detach(), x.grad] + [p.grad for _, p in sorted(m.named_parameters())]
    return [None if t is None else t.cpu() for t in out] + [b.cpu() for _, b in sorted(m.named_buffers())]


def _assert_same(graph: Graph, shape=(3, 8, 4, 5), groups=4, *, x=None, training=True, seed=0, device="cpu",
                 impl="fast"):
    plain, fast = _pair(graph, shape[1], groups, seed, device, impl)
    plain.train(training), fast.train(training)
    gen = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(shape, generator=gen, dtype=torch.float64) if x is None else x
    dy = torch.randn(x.shape, generator=gen, dtype=torch.float64)
    with recording() as calls:
        want, got = _run(plain, x, dy), _run(fast, x, dy)
    if fast.fast_spec is not None and device == "cpu":  # the path under test ran, and no other beside plain's
        assert set(calls) == {"plain", impl} and calls[impl] == 1, calls
    for i, (a, b) in enumerate(zip(want, got)):
        if a is None or b is None:  # no gradient reached it on one path: it must be zero on the other
            assert (a if b is None else b) is None or not (a if b is None else b).any(), (graph.dumps(), i)
            continue
        torch.testing.assert_close(b, a, rtol=1e-9, atol=1e-10, equal_nan=True, msg=lambda m: f"{graph.dumps()} "
                                   f"tensor {i}: {m}")
    return fast


def _unary_and_binary_graphs(op: str) -> list[Graph]:
    """The op on the input, on a parameter and on a statistic (shapes that broadcast), both argument orders."""
    if PRIMITIVES[op].arity == 1:
        nodes = [[[op, 0]], [["mul", 0, 3], [op, 4]], [["instance_mean", 0], [op, 4], ["mul", 0, 5]],
                 [[op, 2], ["add", 0, 4]]]
    else:
        nodes = [[[op, 0, 3]], [[op, 3, 0]], [[op, 0, 2]], [[op, 0, 1]], [[op, 1, 0]], [[op, 0, 0]],
                 [["layer_std", 0], [op, 0, 4]], [["group_rms", 0], [op, 4, 0]],
                 [["instance_mean", 0], [op, 4, 2], ["mul", 0, 5]]]
    return [Graph.from_json({"nodes": n}) for n in nodes]


@pytest.mark.parametrize("op", [o for o in OP_NAMES if not PRIMITIVES[o].batch_dependent])
@pytest.mark.parametrize("training", [True, False])
def test_every_primitive_matches_the_plain_path(op, training, impl):
    for g in _unary_and_binary_graphs(op):
        fast = _assert_same(g, training=training, impl=impl)
        assert fast.fast_spec is not None


@pytest.mark.parametrize("training", [True, False])
def test_random_graphs_match_the_plain_path(training, impl):
    rng = random.Random(7 if training else 8)
    fast_count = 0
    for i in range(120):
        g = random_graph(rng, allow_batch=i % 4 == 0)  # a quarter may hold batch ops: those run the plain path
        c, groups = ((8, 4), (6, 3), (4, 1))[i % 3]
        fast = _assert_same(g, (3, c, 3, 4), groups, training=training, seed=i, impl=impl)
        assert (fast.fast_spec is None) == g.uses_batch_stats
        fast_count += fast.fast_spec is not None
    assert fast_count > 80


@pytest.mark.parametrize("name", ["evonorm_s0", "evonorm_s1", "evonorm_s2", "s_top1", "s_top10", "random",
                                  "random_rej", "zero", "exp_exp"])
def test_named_graphs_match_the_plain_path(name, impl):
    _assert_same(get_graph(name), impl=impl)


@pytest.mark.parametrize("nodes", [
    [["layer_mean", 0], ["mul", 4, 3], ["sigmoid", 5], ["mul", 4, 6], ["mul", 0, 7]],  # swish wider than its input
    [["mul", 0, 3], ["sigmoid", 4], ["mul", 0, 5], ["instance_std", 0], ["div", 6, 7]],  # S0 per instance
    [["mul", 0, 3], ["sigmoid", 4], ["mul", 0, 5], ["layer_std", 0], ["div", 6, 7]],  # ... per sample
    [["group_std", 0], ["mul", 0, 4], ["sigmoid", 0], ["mul", 0, 6], ["add", 5, 7]],  # x reached three ways
    [["sigmoid", 0], ["mul", 0, 4], ["group_std", 5], ["mul", 5, 2], ["div", 7, 6]],  # a std of a swish
])
def test_gradients_that_meet_at_one_node_add_up(nodes, impl):
    """The sweep adds contributions into a gradient it already holds, in place, and folds swish's two terms
    into one tensor: every order and shape of meeting must give the plain path's sums."""
    for shape, groups in (((3, 8, 4, 5), 4), ((2, 6, 1, 1), 3), ((1, 1, 3, 3), 1)):
        _assert_same(Graph.from_json({"nodes": nodes}), shape, groups, impl=impl)


def test_the_fused_patterns_are_recognised():
    for axes, g in NORM_RELU.items():
        plan = make_plan(g)
        assert [s.kind for s in plan.steps] == ["norm", "relu"] and plan.norm_relu == axes
    assert [s.kind for s in make_plan(get_graph("evonorm_s0")).steps] == ["swish", "group_std", "div"]
    assert make_plan(get_graph("evonorm_b0")) is None  # batch statistics: the plain path


@pytest.mark.parametrize("shape,groups", [((3, 8, 1, 1), 4), ((2, 1, 3, 3), 1), ((1, 8, 4, 4), 4),
                                          ((1, 8, 1, 1), 8), ((4, 6, 2, 3), 3)])
def test_shapes_the_plain_path_takes(shape, groups, impl):
    """1x1 maps (every normalized value is 0: maximum's tie rule), one channel, batch 1."""
    for g in [*NORM_RELU.values(), get_graph("evonorm_s0"), get_graph("s_top10")]:
        _assert_same(g, shape, groups, impl=impl)


def test_ties_and_constant_groups_follow_maximums_rule(impl):
    x = torch.randn(3, 8, 4, 4, dtype=torch.float64)
    x[0, :2] = 1.5  # a constant group: its normalized values are exactly 0
    x[1, 4:6, 0, 0] = x[1, 4:6].mean()  # may or may not tie exactly; either way the paths agree
    for g in NORM_RELU.values():
        _assert_same(g, x=x, impl=impl)


def test_channels_last_input_keeps_its_memory_format(impl):
    x = torch.randn(3, 8, 5, 5, dtype=torch.float64).to(memory_format=torch.channels_last)
    for g in [NORM_RELU["group"], get_graph("evonorm_s0"), get_graph("s_top1")]:
        _assert_same(g, x=x, impl=impl)
        m = g.to_module(8, groups=4, impl=impl).double()
        xr = x.clone().requires_grad_()
        y = m(xr)
        y.sum().backward()
        assert y.is_contiguous(memory_format=torch.channels_last)
        assert xr.grad.is_contiguous(memory_format=torch.channels_last)


def test_non_finite_outputs_stay_non_finite(impl):
    """A layer that overflows or divides to NaN does so on both paths (the search rejects it the same)."""
    x = torch.randn(2, 8, 3, 3, dtype=torch.float64) * 400
    for g in [get_graph("exp_exp"), Graph.from_json({"nodes": [["exp", 0], ["square", 4], ["mul", 5, 5]]})]:
        plain, fast = _pair(g, 8, 4, impl=impl)
        a, b = plain(x), fast(x)
        assert not torch.isfinite(a).all()
        torch.testing.assert_close(b, a, equal_nan=True)
    nan_x = x.clone()
    nan_x[0, 0, 0, 0] = float("nan")
    for g in NORM_RELU.values():
        plain, fast = _pair(g, 8, 4, impl=impl)
        a, b = plain(nan_x), fast(nan_x)
        torch.testing.assert_close(b, a, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_inputs_and_autocast_run_the_plain_path(dtype):
    for g in [NORM_RELU["group"], get_graph("evonorm_s0")]:
        m = g.to_module(8, groups=4)
        ref = g.to_module(8, groups=4, impl="plain")
        x = torch.randn(2, 8, 4, 4)
        half = m.to(dtype)(x.to(dtype))
        assert half.dtype == dtype
        torch.testing.assert_close(half, ref.to(dtype)(x.to(dtype)))
        conv = torch.nn.Conv2d(8, 8, 1)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = g.to_module(8, groups=4)(conv(x))
        assert y.dtype == torch.bfloat16 and torch.isfinite(y).all()


def test_double_backward_equals_the_plain_path(impl):
    """The stability test differentiates gradients: the fast layer's backward differentiates the plain formula."""
    for g in [NORM_RELU["group"], get_graph("evonorm_s0"), get_graph("s_top1")]:
        plain, fast = _pair(g, 4, 2, impl=impl)
        w0 = torch.randn(4, 4, 1, 1, dtype=torch.float64)
        x = torch.randn(3, 4, 3, 3, dtype=torch.float64)
        out = []
        for m in (plain, fast):
            w = w0.clone().requires_grad_()
            (gw,) = torch.autograd.grad(m(torch.nn.functional.conv2d(x, w)).square().mean(), w, create_graph=True)
            (ggw,) = torch.autograd.grad(gw.norm(), w)
            out.append((gw.detach(), ggw))
        torch.testing.assert_close(out[1], out[0], rtol=1e-9, atol=1e-10)


def test_impl_choice_and_round_trips():
    g = NORM_RELU["group"]
    assert g.to_module(8, impl="plain").fast_spec is None
    assert g.to_module(8, impl="fast").fast_spec is not None
    assert g.to_module(8, apply_act=False).fast_spec is None  # a plain affine has nothing to speed up
    assert get_graph("evonorm_b0").to_module(8).fast_spec is None  # auto: batch ops run the plain path
    with pytest.raises(ValueError, match="batch"):
        get_graph("evonorm_b0").to_module(8, impl="fast")
    with pytest.raises(ValueError, match="impl"):
        g.to_module(8, impl="fused")
    m = g.to_module(8, impl="plain")
    for clone in (copy.deepcopy(m), pickle.loads(pickle.dumps(m))):
        assert clone.impl == "plain" and clone.fast_spec is None


def test_fx_trace_of_a_model_keeps_the_fast_layer_as_one_node():
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 1), NORM_RELU["group"].to_module(8, groups=4))
    traced = torch.fx.symbolic_trace(model)
    assert sum(n.op == "call_module" for n in traced.graph.nodes) == 2
    x = torch.randn(2, 3, 4, 4)
    torch.testing.assert_close(traced(x), model(x))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_the_fast_path_computes_the_cpu_plain_path():
    """The fast path's aten calls (native group norm and its backward among them) have CUDA kernels of their
    own: on a GPU they must give the plain path's function too, for every primitive and random graphs."""
    graphs = [g for op in OP_NAMES if not PRIMITIVES[op].batch_dependent for g in _unary_and_binary_graphs(op)]
    graphs += [*NORM_RELU.values(), *(get_graph(n) for n in ("evonorm_s0", "evonorm_b0", "s_top1", "s_top10"))]
    rng = random.Random(9)
    graphs += [random_graph(rng, allow_batch=i % 4 == 0) for i in range(40)]
    for i, g in enumerate(graphs):
        for training in (True, False):
            fast = _assert_same(g, (3, 8, 3, 4), 4, training=training, seed=i, device="cuda")
            assert (fast.fast_spec is None) == g.uses_batch_stats
