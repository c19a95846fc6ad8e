"""evonorm.layers: each layer against its formula written plainly here, gradients, group rule, edge shapes,
state, dtypes and the registry."""

import inspect

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import evonorm.runtime.common as common
from evonorm.layers import (
    Affine2d,
    EvoNormB0,
    EvoNormS0,
    create_norm_act,
    is_batch_dependent,
    list_norm_acts,
)
from evonorm.layers import resolve_groups

EVONORMS = ["evonorm_b0", "evonorm_b1", "evonorm_b2", "evonorm_s0", "evonorm_s1", "evonorm_s2"]
BASELINES = ["bn_relu", "bn_prelu", "bn_swish1", "bn_swish", "gn_relu", "gn_swish", "frn", "ln_relu",
             "pixelnorm_relu"]
EPS = 1e-5


def _randomize(layer: nn.Module) -> nn.Module:
    """Non-trivial parameters and running statistics, so the formulas are exercised away from their init."""
    with torch.no_grad():
        for name, p in layer.named_parameters():
            p.copy_(torch.randn_like(p) * 0.5 + (1.0 if name.endswith(("weight", "v")) else 0.0))
        for name, b in layer.named_buffers():
            if name.endswith("running_var"):
                b.uniform_(0.5, 2.0)
            elif name.endswith("running_mean"):
                b.normal_()
    return layer


def _c(t):
    return t.view(1, -1, 1, 1)


def _group_moments(x, groups):
    n, c, h, w = x.shape
    xg = x.reshape(n, groups, -1)
    mean = xg.mean(-1, keepdim=True).expand_as(xg).reshape(x.shape)
    var = xg.var(-1, unbiased=False, keepdim=True).expand_as(xg).reshape(x.shape)
    sq = (xg * xg).mean(-1, keepdim=True).expand_as(xg).reshape(x.shape)
    return mean, var, sq


def reference(name: str, layer: nn.Module, x: torch.Tensor, training: bool) -> torch.Tensor:
    """The paper's formulas, one line each, with plain torch ops."""
    w, b = _c(layer.weight), _c(layer.bias)
    if name.startswith("evonorm_s"):
        _, gvar, gsq = _group_moments(x, resolve_groups(x.shape[1], 32))
        if name == "evonorm_s0":
            return x * torch.sigmoid(_c(layer.v) * x) / torch.sqrt(gvar + EPS) * w + b
        if name == "evonorm_s1":
            return x * torch.sigmoid(x) / torch.sqrt(gvar + EPS) * w + b
        return x * torch.sigmoid(x) / torch.sqrt(gsq + EPS) * w + b
    if training:
        bstd = torch.sqrt(x.var((0, 2, 3), unbiased=False, keepdim=True) + EPS)
    else:
        bstd = torch.sqrt(_c(layer.running_var).to(x.dtype) + EPS)
    istd = torch.sqrt(x.var((2, 3), unbiased=False, keepdim=True) + EPS)
    irms = torch.sqrt((x * x).mean((2, 3), keepdim=True) + EPS)
    if name == "evonorm_b0":
        return x / torch.maximum(bstd, _c(layer.v) * x + istd) * w + b
    if name == "evonorm_b1":
        return x / torch.maximum(bstd, (x + 1) * irms) * w + b
    return x / torch.maximum(bstd, irms - x) * w + b


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("name", EVONORMS)
@pytest.mark.parametrize("c", [1, 3, 24, 48, 64])
def test_evonorm_matches_formula(name, c, training):
    layer = _randomize(create_norm_act(name, c)).double().train(training)
    assert getattr(layer, "groups", resolve_groups(c, 32)) == resolve_groups(c, 32)
    x = torch.randn(4, c, 5, 3, dtype=torch.float64) * 2 + 0.5
    expected = reference(name, layer, x, training)
    torch.testing.assert_close(layer(x), expected, rtol=1e-9, atol=1e-9)


def test_b_layers_take_both_branches_of_the_max():
    """The formula test above would not notice a broken mask if one branch always won."""
    layer = EvoNormB0(8).double()
    x = torch.randn(6, 8, 4, 4, dtype=torch.float64)
    bstd = torch.sqrt(x.var((0, 2, 3), unbiased=False, keepdim=True) + EPS)
    inst = x + torch.sqrt(x.var((2, 3), unbiased=False, keepdim=True) + EPS)
    frac = (inst > bstd).double().mean().item()
    assert 0.2 < frac < 0.8
    torch.testing.assert_close(layer(x), reference("evonorm_b0", layer, x, True))


@pytest.mark.parametrize(("training", "chunk_bytes"), [(True, None), (False, None), (True, 256)],
                         ids=["train", "eval", "train-many-chunks"])
@pytest.mark.parametrize("name", EVONORMS)
def test_gradcheck_float64(name, training, chunk_bytes, monkeypatch):
    if chunk_bytes:
        monkeypatch.setattr(common, "CPU_CHUNK_BYTES", chunk_bytes)  # a few samples per chunk
    layer = _randomize(create_norm_act(name, 6, groups=3)).double().train(training)
    x = torch.randn(5, 6, 3, 4, dtype=torch.float64, requires_grad=True)
    params = list(layer.parameters())
    assert torch.autograd.gradcheck(lambda x, *ps: layer(x), (x, *params), eps=1e-6, atol=1e-6)


def test_s0_with_v_near_zero_matches_formula():
    """S0's forward divides silu(v x) by v unless some |v| is tiny; both paths against the formula."""
    layer = _randomize(EvoNormS0(8)).double()
    x = torch.randn(4, 8, 5, 3, dtype=torch.float64, requires_grad=True)
    tiny = torch.tensor([0.0, 1e-8, -1e-4, 0.5, -2.0, 1.0, 3.0, -0.3])
    for v in (tiny, torch.tensor([-2.0, -1.5, -1.0, -0.5, 0.5, 1.0, 1.5, 2.0])):
        with torch.no_grad():
            layer.v.copy_(v)
        torch.testing.assert_close(layer(x), reference("evonorm_s0", layer, x, True), rtol=1e-9, atol=1e-9)
        assert torch.autograd.gradcheck(lambda x, *ps: layer(x), (x, *layer.parameters()), eps=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", EVONORMS)
def test_chunking_does_not_change_results(name, monkeypatch):
    layer = _randomize(create_norm_act(name, 16))
    x = torch.randn(9, 16, 6, 6, requires_grad=True)
    g = torch.randn(9, 16, 6, 6)
    y1 = layer(x)
    (gx1,) = torch.autograd.grad(y1, x, g)
    monkeypatch.setattr(common, "CPU_CHUNK_BYTES", 3000)
    y2 = layer(x)
    (gx2,) = torch.autograd.grad(y2, x, g)
    torch.testing.assert_close(y1, y2)
    torch.testing.assert_close(gx1, gx2)


def test_running_var_update_and_eval_use():
    layer = EvoNormB0(8, momentum=0.1)
    x = torch.randn(4, 8, 5, 5) * 3
    layer(x)
    expected = 0.9 * torch.ones(8) + 0.1 * x.var((0, 2, 3), unbiased=True)
    assert layer.running_var.dtype == torch.float32
    torch.testing.assert_close(layer.running_var, expected)
    layer.eval()
    before = layer.running_var.clone()
    y1 = layer(x)
    torch.testing.assert_close(layer.running_var, before)  # eval does not update
    assert torch.allclose(layer(x[:1]), y1[:1], atol=1e-6)  # and no longer depends on the batch


@pytest.mark.parametrize("name", EVONORMS + BASELINES)
def test_spatial_one_by_one_is_finite(name):
    layer = _randomize(create_norm_act(name, 48)).train()
    x = torch.randn(2, 48, 1, 1, requires_grad=True)
    y = layer(x)
    y.square().sum().backward()
    assert torch.isfinite(y).all() and torch.isfinite(x.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in layer.parameters() if p.grad is not None)


@pytest.mark.parametrize("name", ["evonorm_s0", "evonorm_s1", "evonorm_s2", "gn_relu", "frn", "ln_relu"])
def test_sample_based_layers_work_on_batch_one_and_ignore_other_samples(name):
    layer = _randomize(create_norm_act(name, 24))
    x = torch.randn(3, 24, 6, 6)
    y = layer(x)
    torch.testing.assert_close(layer(x[1:2]), y[1:2])
    assert not is_batch_dependent(name)


@pytest.mark.parametrize("name", EVONORMS + BASELINES)
def test_state_dict_round_trip(name):
    a = _randomize(create_norm_act(name, 12)).train()
    a(torch.randn(4, 12, 3, 3))  # moves the running statistics where there are some
    b = create_norm_act(name, 12)
    b.load_state_dict(a.state_dict())
    x = torch.randn(4, 12, 3, 3)
    a.eval()
    b.eval()
    torch.testing.assert_close(a(x), b(x))


@pytest.mark.parametrize("name", EVONORMS)
def test_apply_act_false_is_plain_affine(name):
    layer = _randomize(create_norm_act(name, 8, apply_act=False))
    assert getattr(layer, "v", None) is None and getattr(layer, "running_var", None) is None
    x = torch.randn(3, 8, 4, 4)
    torch.testing.assert_close(layer(x), x * _c(layer.weight) + _c(layer.bias))


@pytest.mark.parametrize("name", BASELINES)
def test_apply_act_false_baselines_keep_the_normalization_only(name):
    full = _randomize(create_norm_act(name, 8))
    bare = create_norm_act(name, 8, apply_act=False)
    bare.load_state_dict(full.state_dict(), strict=False)
    x = torch.randn(4, 8, 5, 5)
    y = bare(x)
    assert (y < 0).any()  # no ReLU/TLU clamped it
    if name in ("bn_relu", "gn_relu", "ln_relu", "pixelnorm_relu"):
        torch.testing.assert_close(full(x), F.relu(y))


def _baseline_reference(name, layer, x):
    c = x.shape[1]
    if name.startswith("bn_"):
        z = F.batch_norm(x, None, None, layer.weight, layer.bias, True, 0.1, EPS)
        acts = {"bn_relu": F.relu, "bn_swish1": F.silu,
                "bn_prelu": lambda z: torch.where(z > 0, z, _c(layer.prelu.weight) * z),
                "bn_swish": lambda z: z * torch.sigmoid(_c(layer.v) * z)}
        return acts[name](z)
    w, b = _c(layer.weight), _c(layer.bias)
    if name in ("gn_relu", "gn_swish"):
        m, v, _ = _group_moments(x, resolve_groups(c, 32))
        z = (x - m) / torch.sqrt(v + EPS) * w + b
        return F.relu(z) if name == "gn_relu" else z * torch.sigmoid(z)
    if name == "ln_relu":
        m, v, _ = _group_moments(x, 1)
        return F.relu((x - m) / torch.sqrt(v + EPS) * w + b)
    if name == "frn":
        z = x / torch.sqrt((x * x).mean((2, 3), keepdim=True) + EPS) * w + b
        return torch.maximum(z, _c(layer.tau))
    z = x / torch.sqrt((x * x).mean(1, keepdim=True) + EPS) * w + b
    return F.relu(z)


@pytest.mark.parametrize("name", BASELINES)
def test_baselines_match_formula(name):
    layer = _randomize(create_norm_act(name, 24)).double()
    x = torch.randn(4, 24, 5, 5, dtype=torch.float64)
    torch.testing.assert_close(layer(x), _baseline_reference(name, layer, x))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", EVONORMS + BASELINES)
def test_low_precision_input_uses_float32_statistics(name, dtype):
    layer = _randomize(create_norm_act(name, 16)).train()
    x = (torch.randn(4, 16, 6, 6) * 50 + 20).to(dtype)  # a large mean: half-precision statistics would drift
    x.requires_grad_(True)
    y = layer(x)
    assert y.dtype == dtype and torch.isfinite(y).all()
    y.float().sum().backward()
    assert x.grad.dtype == dtype and torch.isfinite(x.grad).all()
    for name_, buf in layer.named_buffers():
        if name_.endswith(("running_var", "running_mean")):
            assert buf.dtype == torch.float32
    ref = _randomize(create_norm_act(name, 16)).train()
    ref.load_state_dict(layer.state_dict())
    expected = ref(x.detach().float())
    tol = 2e-2 if dtype == torch.bfloat16 else 4e-3
    torch.testing.assert_close(y.float(), expected, rtol=tol, atol=tol)


def test_half_module_keeps_float32_running_var():
    layer = EvoNormB0(8).to(torch.bfloat16)
    assert layer.running_var.dtype == torch.float32 and layer.weight.dtype == torch.bfloat16
    y = layer(torch.randn(2, 8, 3, 3, dtype=torch.bfloat16))
    assert y.dtype == torch.bfloat16 and torch.isfinite(y).all()


def test_channels_last_input():
    layer = _randomize(EvoNormS0(16))
    x = torch.randn(2, 16, 5, 5)
    y = layer(x.contiguous(memory_format=torch.channels_last))
    assert y.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(y, layer(x))


def test_b0_is_scale_invariant():
    layer = _randomize(EvoNormB0(8)).double()
    x = torch.randn(4, 8, 6, 6, dtype=torch.float64)
    torch.testing.assert_close(layer(x * 100.0), layer(x), rtol=1e-5, atol=1e-5)


def test_wrong_channel_count_is_refused_clearly():
    with pytest.raises(ValueError, match=r"expects input of shape \(N, 8"):
        EvoNormS0(8)(torch.randn(2, 4, 3, 3))


def test_registry():
    names = list_norm_acts()
    assert names == EVONORMS + BASELINES
    for name in names:
        layer = create_norm_act(name, 32, apply_act=True, eps=1e-5, groups=32, momentum=0.1, unknown_option=1)
        assert isinstance(layer, nn.Module)
        sig = inspect.signature(type(layer).__init__)
        for kw in ("apply_act", "eps", "groups", "momentum"):
            assert kw in sig.parameters or any(p.kind == p.VAR_KEYWORD for p in sig.parameters.values())
        assert layer.weight.shape == (32,)
    assert [n for n in names if is_batch_dependent(n)] == ["evonorm_b0", "evonorm_b1", "evonorm_b2", "bn_relu",
                                                            "bn_prelu", "bn_swish1", "bn_swish"]
    assert create_norm_act("EvoNorm-S0", 8).groups == 8
    with pytest.raises(ValueError, match="unknown layer 'nope'.*`evonorm list` names them"):
        create_norm_act("nope", 8)
    with pytest.raises(ValueError):
        is_batch_dependent("nope")


def test_affine2d():
    layer = _randomize(Affine2d(5, groups=2))
    x = torch.randn(2, 5, 3, 3)
    torch.testing.assert_close(layer(x), x * _c(layer.weight) + _c(layer.bias))


@pytest.mark.slow
@pytest.mark.parametrize("name", EVONORMS)
def test_compiled_formula_matches_kernel(name):
    """impl="compile" (the default on CUDA) against the hand-written kernel, values and gradients."""
    kernel = _randomize(create_norm_act(name, 16, impl="fast"))
    comp = create_norm_act(name, 16, impl="compile")
    comp.load_state_dict(kernel.state_dict())
    x = torch.randn(4, 16, 5, 5, requires_grad=True)
    x2 = x.detach().clone().requires_grad_(True)
    g = torch.randn(4, 16, 5, 5)
    y1, y2 = kernel(x), comp(x2)
    y1.backward(g)
    y2.backward(g)
    torch.testing.assert_close(y2, y1)
    torch.testing.assert_close(x2.grad, x.grad)
    for (n, p1), p2 in zip(kernel.named_parameters(), comp.parameters()):
        torch.testing.assert_close(p2.grad, p1.grad, msg=n)
    for (n, b1), b2 in zip(kernel.named_buffers(), comp.buffers()):
        torch.testing.assert_close(b2, b1, msg=n)


def test_impl_is_validated():
    with pytest.raises(ValueError, match="EvoNorm layers take impl auto"):
        create_norm_act("evonorm_s0", 8, impl="cuda")


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("name", EVONORMS)
def test_double_backward(name, training):
    """create_graph=True (the search's stability test) works and its gradients are the kernel's."""
    layer = _randomize(create_norm_act(name, 6, groups=3)).double().train(training)
    x = torch.randn(4, 6, 3, 3, dtype=torch.float64, requires_grad=True)
    params = list(layer.parameters())
    assert torch.autograd.gradgradcheck(lambda x, *ps: layer(x), (x, *params), eps=1e-6, atol=1e-5)
    g = torch.randn(4, 6, 3, 3, dtype=torch.float64)
    first = torch.autograd.grad(layer(x), [x, *params], g)
    second = torch.autograd.grad(layer(x), [x, *params], g, create_graph=True)
    for a, b in zip(first, second):
        torch.testing.assert_close(a, b)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["evonorm_s0", "evonorm_b0"])
def test_inside_a_torch_compiled_model(name):
    """A model holding the hand-written kernels can itself be torch.compile'd (TrainConfig.compile)."""
    model = nn.Sequential(nn.Conv2d(3, 16, 3), create_norm_act(name, 16, impl="fast")).eval()
    x = torch.randn(4, 3, 8, 8, requires_grad=True)
    y = torch.compile(model)(x)
    y.sum().backward()
    torch.testing.assert_close(y, model(x))
    assert torch.isfinite(x.grad).all()


def test_impl_triton_without_triton_is_refused_when_the_layer_is_built(monkeypatch):
    import evonorm.runtime.impl as impl
    from evonorm.layers import create_norm_act

    monkeypatch.setattr(impl, "has_triton", lambda: False)
    with pytest.raises(ValueError, match="impl='triton' needs the triton package"):
        create_norm_act("evonorm_s0", 8, impl="triton")
    create_norm_act("evonorm_s0", 8, impl="fast")  # the other paths need nothing


def test_create_norm_act_builds_a_search_find_from_its_graph_dict_or_json():
    import json

    from evonorm.graph.library import NAMED_GRAPHS
    from evonorm.search import Candidate

    graph = NAMED_GRAPHS["evonorm_b0"]
    x = torch.randn(4, 16, 5, 5)
    stored = Candidate.from_dict({"id": 7, "status": "valid", "graph": graph.to_json()})
    layers = [create_norm_act(graph, 16, groups=4), create_norm_act(graph.to_json(), 16, groups=4),
              create_norm_act(json.dumps(graph.to_json()), 16, groups=4), create_norm_act("b_top1", 16),
              stored.layer(16, groups=4)]
    want = graph.to_module(16, groups=4)(x)
    for layer in layers[:3] + layers[4:]:
        torch.testing.assert_close(layer(x), want)
    assert type(layers[3]).__name__ == type(layers[0]).__name__  # a named graph builds the same way
    with pytest.raises(ValueError, match="holds no layer graph"):
        Candidate.from_dict({"id": 8, "status": "failed"}).layer(16)


@pytest.mark.parametrize("wrong, right", [("evnorm_s0", "evonorm_s0"), ("gn_rel", "gn_relu")])
def test_a_mistyped_layer_name_is_one_short_line_with_a_suggestion(wrong, right):
    with pytest.raises(ValueError) as err:
        create_norm_act(wrong, 16)
    message = str(err.value)
    assert f"did you mean {right}" in message and "\n" not in message and len(message) < 200
