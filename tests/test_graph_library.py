"""The named graphs: the six EvoNorm graphs equal the hand-written `evonorm.layers` modules.

Name mapping: the graph's `v1` is the hand-written layer's `v`; its `batch<i>.running_var` is the
layer's `running_var`. The graph's `div` adds eps * sign(divisor) (Table 1) where the hand-written
layers divide exactly, so with eps = 1e-5 outputs agree to ~eps relative; with eps = 0 they agree to
float64 precision, which pins down everything else.
"""

import collections

import pytest
import torch

from evonorm.graph.library import NAMED_GRAPHS, get_graph
from evonorm.layers import create_norm_act

EVONORMS = ["evonorm_b0", "evonorm_b1", "evonorm_b2", "evonorm_s0", "evonorm_s1", "evonorm_s2"]


def _mapped(state: dict) -> dict:
    out = {}
    for k, v in state.items():
        if k == "v1":
            k = "v"
        elif k.startswith("batch") and k.endswith(".running_var"):
            k = "running_var"
        out[k] = v
    return out


@pytest.mark.parametrize("eps,tol", [(0.0, 1e-10), (1e-5, 2e-4)])
@pytest.mark.parametrize("name", EVONORMS)
def test_graph_equals_hand_written_layer(name, eps, tol):
    c = 24  # groups 32 -> 24 by the group rule
    graph_layer = get_graph(name).to_module(c, eps=eps).double()
    hand = create_norm_act(name, c, eps=eps).double()
    g_params = dict(graph_layer.named_parameters())
    h_params = dict(hand.named_parameters())
    assert set(_mapped(g_params)) == set(h_params), (list(g_params), list(h_params))
    assert set(_mapped(dict(graph_layer.named_buffers()))) == set(dict(hand.named_buffers()))
    gen = torch.Generator().manual_seed(3)
    opt_g = torch.optim.SGD(graph_layer.parameters(), lr=0.1)
    opt_h = torch.optim.SGD(hand.parameters(), lr=0.1)
    for step in range(3):  # train steps: outputs, every gradient, running stats; params move identically
        x = (torch.randn(4, c, 5, 5, generator=gen, dtype=torch.float64) * 2 + 0.3).requires_grad_()
        target = torch.randn(4, c, 5, 5, generator=gen, dtype=torch.float64)
        yg, yh = graph_layer(x), hand(x)
        torch.testing.assert_close(yg, yh, rtol=tol, atol=tol)
        lg, lh = ((yg - target) ** 2).mean(), ((yh - target) ** 2).mean()
        dxg, = torch.autograd.grad(lg, x, retain_graph=True)
        dxh, = torch.autograd.grad(lh, x, retain_graph=True)
        torch.testing.assert_close(dxg, dxh, rtol=tol, atol=tol)
        opt_g.zero_grad(), opt_h.zero_grad()
        lg.backward(), lh.backward()
        for k, p in g_params.items():
            torch.testing.assert_close(p.grad, h_params[_mapped({k: 0}).popitem()[0]].grad, rtol=tol, atol=tol)
        opt_g.step(), opt_h.step()
        gb, hb = _mapped(dict(graph_layer.named_buffers())), dict(hand.named_buffers())
        for k in hb:
            torch.testing.assert_close(gb[k].double(), hb[k].double(), rtol=1e-6, atol=1e-6)
    graph_layer.eval(), hand.eval()
    tol = max(tol, 1e-6)  # the hand-written running_var stays float32 under .double()
    x = torch.randn(2, c, 5, 5, generator=gen, dtype=torch.float64, requires_grad=True)
    yg, yh = graph_layer(x), hand(x)
    torch.testing.assert_close(yg, yh, rtol=tol, atol=tol)
    torch.testing.assert_close(torch.autograd.grad(yg.sum(), x)[0], torch.autograd.grad(yh.sum(), x)[0],
                               rtol=tol, atol=tol)


@pytest.mark.parametrize("name", EVONORMS)
def test_state_dict_moves_between_graph_and_hand_written_layer(name):
    hand = create_norm_act(name, 8)
    with torch.no_grad():
        for p in hand.parameters():
            p.uniform_(0.5, 1.5)
    if hasattr(hand, "running_var") and hand.running_var is not None:
        hand.running_var.uniform_(0.5, 2.0)
    graph_layer = get_graph(name).to_module(8)
    inverse = _mapped({k: k for k in graph_layer.state_dict()})  # hand-written name -> graph name
    graph_layer.load_state_dict({inverse[k]: v for k, v in hand.state_dict().items()})
    hand.eval(), graph_layer.eval()
    x = torch.randn(2, 8, 4, 4)
    torch.testing.assert_close(graph_layer(x), hand(x), rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("name", EVONORMS)
def test_apply_act_false_is_the_plain_affine_of_the_hand_written_layer(name):
    graph_layer = get_graph(name).to_module(6, apply_act=False)
    hand = create_norm_act(name, 6, apply_act=False)
    assert sorted(graph_layer.state_dict()) == sorted(k for k, v in hand.state_dict().items() if v is not None)
    with torch.no_grad():
        for m in (graph_layer, hand):
            m.weight.copy_(torch.arange(6.0)), m.bias.fill_(0.5)
    x = torch.randn(3, 6, 4, 4)
    torch.testing.assert_close(graph_layer(x), hand(x))


def test_library_names_and_batch_dependence():
    expected = set(EVONORMS) | {f"b_top{i}" for i in range(1, 11)} | {f"s_top{i}" for i in range(1, 11)} | {
        "random", "random_rej", "rs_rej", "zero", "tanh_minus_batch_mean_relu", "exp_exp"}
    assert expected <= set(NAMED_GRAPHS)
    for name, g in NAMED_GRAPHS.items():
        if name.startswith(("evonorm_b", "b_top")) or name in ("rs_rej", "tanh_minus_batch_mean_relu"):
            assert g.uses_batch_stats, name
        else:
            assert not g.uses_batch_stats, name
    with pytest.raises(KeyError, match="unknown graph 'nope'"):
        get_graph("nope")


def test_appendix_duplicates_share_keys_and_distinct_layers_separate():
    by_key = collections.defaultdict(set)
    for name, g in NAMED_GRAPHS.items():
        by_key[g.key()].add(name)
    for group in [{"evonorm_b0", "b_top6"}, {"evonorm_b1", "b_top1"}, {"evonorm_b2", "b_top7"},
                  {"b_top4", "b_top8"}, {"b_top9", "b_top10"}, {"evonorm_s0", "s_top6"},
                  {"evonorm_s1", "s_top5", "s_top7", "s_top9"},
                  {"evonorm_s2", "s_top2", "s_top3", "s_top4", "s_top8"}]:
        assert group in by_key.values(), group
    fingerprints = {g.fingerprint() for g in {NAMED_GRAPHS[min(names)] for names in by_key.values()}}
    assert len(fingerprints) == len(by_key)  # every distinct named layer has its own fingerprint


def test_named_formulas_in_paper_notation():
    assert get_graph("evonorm_b0").to_latex() == (
        "\\frac{x}{\\max(\\sqrt{s^2_{b,w,h}(x)}, v_1 x + \\sqrt{s^2_{w,h}(x)})}\\gamma + \\beta")
    assert get_graph("evonorm_s0").to_latex() == "\\frac{x \\sigma(v_1 x)}{\\sqrt{s^2_{w,h,c/g}(x)}}\\gamma + \\beta"
    assert get_graph("evonorm_b1").to_text() == (
        "(x / max(sqrt(s^2_{b,w,h}(x)), (x + 1)*sqrt(mu_{w,h}(x^2))))*gamma + beta")
    assert get_graph("evonorm_b2").to_text() == (
        "(x / max(sqrt(s^2_{b,w,h}(x)), sqrt(mu_{w,h}(x^2)) - x))*gamma + beta")
    assert get_graph("evonorm_s2").to_latex() == "\\frac{x \\sigma(x)}{\\sqrt{\\mu_{w,h,c/g}(x^2)}}\\gamma + \\beta"
    assert get_graph("s_top10").to_text() == "(z*sigma(max(x, z)))*gamma + beta, z = x / sqrt(mu_{w,h,c/g}(x^2))"
    assert get_graph("random").to_text() == "(sign(z)*sqrt(|z|))*gamma + beta, z = sqrt(s^2_{w,h}(sigma(x)))"
    assert get_graph("random_rej").to_text() == "tanh(max(x, tanh(x)))*gamma + beta"
    assert get_graph("rs_rej").to_latex() == "\\frac{\\max(x, 0)}{\\sqrt{\\mu_{b,w,h}(x^2)}}\\gamma + \\beta"
    assert get_graph("tanh_minus_batch_mean_relu").to_text() == "(tanh(x) - mu_{b,w,h}(max(x, 0)))*gamma + beta"
