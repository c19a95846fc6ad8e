"""to_module (the fx-compiled layer), to_python (the exported file) and `evonorm show`."""

import os
import random
import subprocess
import sys

import pytest
import torch

from evonorm.graph import Graph, random_graph
from evonorm.graph.interpret import interpret
from evonorm.graph.library import NAMED_GRAPHS, get_graph


def _params(m):
    p = dict(m.named_parameters())
    return p.get("v0", torch.zeros(m.num_features)), p.get("v1", torch.ones(m.num_features))


def test_compiled_module_matches_the_interpreter_in_train_and_eval():
    rng = random.Random(0)
    for i in range(60):
        g = random_graph(rng)
        c = (3, 8)[i % 2]
        m = g.to_module(c, groups=4).double()
        with torch.no_grad():
            for p in m.parameters():
                p.uniform_(-1.5, 1.5)
        v0, v1 = _params(m)
        running = {}
        x = torch.randn(4, c, 3, 3, dtype=torch.float64)
        want = interpret(g, x, v0.detach(), v1.detach(), groups=m.groups, training=True, running=running)
        want = want * m.weight.view(1, -1, 1, 1) + m.bias.view(1, -1, 1, 1)
        torch.testing.assert_close(m(x), want, equal_nan=True)
        m.eval()
        want = interpret(g, x, v0.detach(), v1.detach(), groups=m.groups, training=False, running=running)
        want = want * m.weight.view(1, -1, 1, 1) + m.bias.view(1, -1, 1, 1)
        torch.testing.assert_close(m(x), want, equal_nan=True)


def test_only_live_nodes_are_computed_and_only_used_parameters_exist():
    g = Graph.from_json({"nodes": [["batch_std", 0], ["exp", 2], ["mul", 3, 0], ["sigmoid", 6], ["mul", 0, 7]]})
    m = g.to_module(4)
    calls = [n for n in m.graph.nodes if n.op in ("call_function", "call_module")]
    # live: mul(v1, x), sigmoid, mul; plus op_channel(v1) and the affine
    assert len(calls) == 3 + 3  # + the input check
    assert [k for k, _ in m.named_parameters()] == ["v1", "weight", "bias"]
    assert not list(m.buffers())  # the batch_std gene is dead: no running buffer
    assert "batch" not in m.code and "exp" not in m.code


def test_batch_nodes_get_running_buffers_and_outputs_have_the_input_shape():
    g = Graph.from_json({"nodes": [["batch_mean", 0], ["batch_rms", 4], ["batch_std", 0], ["add", 5, 6]]})
    m = g.to_module(5)
    assert sorted(k for k, _ in m.named_buffers()) == ["batch4.running_mean", "batch5.running_sq", "batch6.running_var"]
    x = torch.randn(2, 5, 3, 3)
    assert m(x).shape == x.shape and m(x).is_contiguous()
    constant = Graph.from_json({"nodes": [["neg", 2]]}).to_module(5)  # output -v0 does not depend on x at all
    assert constant(x).shape == x.shape


def test_bad_input_shape_is_a_clear_error():
    m = get_graph("evonorm_s0").to_module(8)
    with pytest.raises(ValueError, match=r"expects input of shape \(N, 8, H, W\), got \(2, 4, 3, 3\)"):
        m(torch.randn(2, 4, 3, 3))
    with pytest.raises(ValueError, match="expects input of shape"):
        m(torch.randn(2, 8, 3))


def test_apply_act_false_is_a_plain_affine():
    m = get_graph("exp_exp").to_module(4, apply_act=False)
    assert sorted(m.state_dict()) == ["bias", "weight"]
    x = torch.randn(2, 4, 3, 3)
    torch.testing.assert_close(m(x), x)


def test_state_dict_round_trip_after_training():
    g = get_graph("tanh_minus_batch_mean_relu")
    m = g.to_module(6)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    for _ in range(3):
        loss = m(torch.randn(4, 6, 5, 5)).square().mean()
        opt.zero_grad(), loss.backward(), opt.step()
    fresh = g.to_module(6)
    fresh.load_state_dict(m.state_dict())
    m.eval(), fresh.eval()
    x = torch.randn(2, 6, 5, 5)
    torch.testing.assert_close(fresh(x), m(x))
    assert fresh.batch6.running_mean.abs().sum() > 0


@pytest.mark.parametrize("name", ["evonorm_b0", "evonorm_s0", "evonorm_b1", "s_top10", "rs_rej", "random_rej"])
@pytest.mark.parametrize("training", [True, False])
def test_gradcheck_float64(name, training):
    m = get_graph(name).to_module(4, groups=2).double()
    with torch.no_grad():
        m.bias.uniform_(-1, 1), m.weight.uniform_(0.5, 1.5)
    m.train(training)
    if not training:
        m.train()(torch.randn(3, 4, 3, 3, dtype=torch.float64))  # move the running stats off their init
        m.eval()
    x = (torch.randn(3, 4, 3, 3, dtype=torch.float64) + 0.1).requires_grad_()
    params = [p for p in m.parameters()]
    assert torch.autograd.gradcheck(lambda x, *ps: m(x), (x, *params), eps=1e-6, atol=1e-5, fast_mode=True)


def test_low_precision_input_keeps_its_dtype():
    m = get_graph("evonorm_b0").to_module(8).to(torch.bfloat16)
    x = torch.randn(4, 8, 4, 4, dtype=torch.bfloat16)
    assert m(x).dtype == torch.bfloat16 and m.batch7.running_var.dtype == torch.float32


def test_module_pickles_and_deepcopies():
    import copy
    import io

    m = get_graph("evonorm_b0").to_module(8)
    x = torch.randn(2, 8, 3, 3)
    m.eval()
    buf = io.BytesIO()
    torch.save(m, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    torch.testing.assert_close(loaded(x), m(x))
    clone = copy.deepcopy(m)
    torch.testing.assert_close(clone(x), m(x))
    assert clone.layer_graph == m.layer_graph and clone.num_features == 8 and not clone.training
    assert clone.batch7.running_var.data_ptr() != m.batch7.running_var.data_ptr()
    buf = io.BytesIO()
    torch.save(clone, buf)  # a copy pickles too
    buf.seek(0)
    torch.testing.assert_close(torch.load(buf, weights_only=False)(x), m(x))


def test_works_under_torch_compile():
    pytest.importorskip("torch._inductor")
    for name in ("evonorm_b0", "evonorm_s0"):
        m = get_graph(name).to_module(8)
        x = torch.randn(4, 8, 6, 6, requires_grad=True)
        ref = m(x)
        (gx,) = torch.autograd.grad(ref.sum(), x)
        compiled = torch.compile(m)
        out = compiled(x)
        (cx,) = torch.autograd.grad(out.sum(), x)
        torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(cx, gx, rtol=1e-4, atol=1e-5)


RUNNER = """
import importlib.abc, sys

class _NoEvonorm(importlib.abc.MetaPathFinder):  # behave as if evonorm were not installed
    def find_spec(self, name, path=None, target=None):
        if name == "evonorm" or name.startswith("evonorm."):
            raise ImportError("evonorm is blocked in this interpreter")
        return None

sys.meta_path.insert(0, _NoEvonorm())
sys.path[:] = [p for p in sys.path if not p.rstrip("/").endswith("/src")]
import importlib.util, torch
results = []
for task in torch.load(sys.argv[1]):
    spec = importlib.util.spec_from_file_location("layer_export", task["file"])
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    m = mod.MyLayer(task["x"].shape[1], groups=4)
    m.load_state_dict(task["state"])
    m.train(task["training"])
    results.append({"y": m(task["x"]).detach(), "state": m.state_dict()})
assert not any(k.startswith("evonorm") for k in sys.modules)
torch.save(results, sys.argv[2])
"""

EXPORTED = ["evonorm_b0", "s_top10", "tanh_minus_batch_mean_relu", "random", "rs_rej"]


def test_exported_python_runs_without_evonorm_and_matches(tmp_path):
    """Each exported file, run in one fresh interpreter (isolated mode, no PYTHONPATH, evonorm import
    blocked), gives the compiled module's output and running-stat updates, in train and eval mode."""
    tasks, expected = [], []
    for name in EXPORTED:
        g = get_graph(name)
        path = tmp_path / f"{name}.py"
        path.write_text(g.to_python("MyLayer"))
        m = g.to_module(8, groups=4)
        with torch.no_grad():
            for p in m.parameters():
                p.add_(torch.randn_like(p) * 0.1)
        for training in (True, False):
            x = torch.randn(4, 8, 5, 5)
            tasks.append({"file": str(path), "state": {k: v.clone() for k, v in m.state_dict().items()},
                          "x": x, "training": training})
            m.train(training)
            expected.append((m(x).detach(), {k: v.clone() for k, v in m.state_dict().items()}))
    (tmp_path / "runner.py").write_text(RUNNER)
    torch.save(tasks, tmp_path / "tasks.pt")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    subprocess.run([sys.executable, "-I", str(tmp_path / "runner.py"), str(tmp_path / "tasks.pt"),
                    str(tmp_path / "out.pt")], env=env, cwd=tmp_path, check=True, capture_output=True, text=True)
    results = torch.load(tmp_path / "out.pt")
    assert len(results) == len(expected)
    for got, (y, state) in zip(results, expected):
        torch.testing.assert_close(got["y"], y)
        assert got["state"].keys() == state.keys()
        for k, v in state.items():
            torch.testing.assert_close(got["state"][k], v)


def test_exported_python_random_graphs_define_the_same_parameters():
    ns = {}
    rng = random.Random(4)
    for _ in range(30):
        g = random_graph(rng)
        src = g.to_python()
        ns = {}
        exec(compile(src, "<export>", "exec"), ns)  # our own generated code, not user input
        exported = ns["EvoLayer"](6)
        assert sorted(exported.state_dict()) == sorted(g.to_module(6).state_dict())
    with pytest.raises(ValueError, match="identifier"):
        get_graph("zero").to_python("not a name")


def test_show_command(capsys, tmp_path):
    from evonorm.cli import main

    assert main(["show", "evonorm_b0", "--latex"]) == 0
    out = capsys.readouterr().out
    assert "v1*x + sqrt(s^2_{w,h}(x))" in out and "\\frac{x}" in out and "batch-dependent: yes" in out
    assert get_graph("evonorm_b0").key() in out and get_graph("evonorm_b0").fingerprint() in out
    path = tmp_path / "g.json"
    path.write_text('{"nodes": [["sigmoid", 0], ["mul", 0, 4]]}')
    assert main(["show", str(path), "--python"]) == 0
    out = capsys.readouterr().out
    assert "batch-dependent: no" in out and "class EvoLayer(nn.Module)" in out
    assert main(["show", '{"nodes": [["tanh", 0]]}']) == 0
    assert "tanh(x)*gamma + beta" in capsys.readouterr().out
    assert main(["show", '{"nodes": [["tanh", 5]]}']) == 2
    err = capsys.readouterr().err
    assert "reference to node 5" in err and err.count("\n") == 1
    assert main(["show", "no_such_layer"]) == 2
    assert "is not a layer name" in capsys.readouterr().err


def test_every_named_graph_compiles_and_runs():
    x = torch.randn(4, 24, 5, 5)
    for name, g in NAMED_GRAPHS.items():
        m = g.to_module(24)
        y = m(x)
        assert y.shape == x.shape, name
        m.eval()
        assert m(x).shape == x.shape


def test_double_backward_for_the_stability_test():
    """Rejection's stability test differentiates a gradient norm: every primitive must allow it."""
    rng = random.Random(12)
    graphs = [get_graph("evonorm_b0"), get_graph("evonorm_s0")] + [random_graph(rng) for _ in range(20)]
    for g in graphs:
        m = g.to_module(4, groups=2).double()
        w = torch.randn(4, 4, 1, 1, dtype=torch.float64, requires_grad=True)  # a conv in front of the layer
        x = torch.randn(3, 4, 3, 3, dtype=torch.float64)
        y = m(torch.nn.functional.conv2d(x, w))
        (gw,) = torch.autograd.grad(y.square().mean(), w, create_graph=True, allow_unused=True)
        if gw is not None and gw.requires_grad:  # layers whose output ignores x have a constant gradient
            (ggw,) = torch.autograd.grad(gw.norm(), w, allow_unused=True)
            assert ggw is None or ggw.shape == w.shape


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_runs_on_cuda_like_on_cpu():
    for name in ("evonorm_b0", "evonorm_s0", "tanh_minus_batch_mean_relu", "zero"):
        cpu = get_graph(name).to_module(8)
        gpu = get_graph(name).to_module(8).cuda()
        x = torch.randn(4, 8, 5, 5)
        torch.testing.assert_close(gpu(x.cuda()).cpu(), cpu(x), rtol=1e-4, atol=1e-5)
        cpu.eval(), gpu.eval()
        torch.testing.assert_close(gpu(x.cuda()).cpu(), cpu(x), rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(gpu.state_dict()["bias"].cpu(), cpu.state_dict()["bias"])


def test_show_takes_the_registry_layers_evonorm_list_shows(capsys):
    from evonorm.cli import main as cli
    from evonorm.layers import list_norm_acts

    for name in list_norm_acts():
        assert cli(["show", name]) == 0, name
    out = capsys.readouterr().out
    assert "formula:         max((x - mu_{b,w,h}(x))" in out  # bn_relu, as its graph
    assert "frn: a layer of the registry (evonorm.layers." in out
    assert cli(["show", "evonorm_s9"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "did you mean evonorm_s2 or evonorm_s1" in err and len(err) < 200
