"""The compiled CPU kernel of graph layers: when it runs, how it is turned off or missing, its program, and
that threads do not change its result. (That it computes the plain path's function is in test_graph_fast.py.)"""

import os
import shutil
import sys

import pytest
import torch

from evonorm.graph import Graph
from evonorm.graph import module as graph_module
from evonorm.graph import cpp as K
from evonorm.graph.fast import make_plan
from evonorm.graph.library import get_graph
from evonorm.search.settings import norm_relu

GN_RELU = Graph.from_json(norm_relu("group"))


def _backward_name(layer, x) -> str:
    return type(layer(x.requires_grad_()).grad_fn).__name__


def test_auto_runs_the_kernel_for_cpu_float_input_and_the_plain_path_for_bfloat16():
    layer = get_graph("evonorm_s0").to_module(8, groups=4)
    assert _backward_name(layer, torch.randn(2, 8, 3, 3)) == "CppGraphFunctionBackward"
    assert _backward_name(layer.double(), torch.randn(2, 8, 3, 3, dtype=torch.float64)) == "CppGraphFunctionBackward"
    assert "Kernel" not in _backward_name(layer.bfloat16(), torch.randn(2, 8, 3, 3, dtype=torch.bfloat16))
    fast = get_graph("evonorm_s0").to_module(8, groups=4, impl="fast")
    assert _backward_name(fast, torch.randn(2, 8, 3, 3)) == "FastGraphFunctionBackward"


def test_where_the_kernel_cannot_be_built_auto_runs_the_fast_path(monkeypatch):
    monkeypatch.setattr(graph_module, "load_kernel", lambda: K.CppStatus(False, "no C++ compiler"))
    layer = GN_RELU.to_module(8, groups=4)
    assert _backward_name(layer, torch.randn(2, 8, 3, 3)) == "FastGraphFunctionBackward"
    with pytest.raises(ValueError, match=r"could not be built \(no C\+\+ compiler\)"):
        GN_RELU.to_module(8, impl="cpp")


def test_the_kernel_is_turned_off_by_its_environment_variable(monkeypatch):
    monkeypatch.setenv("EVONORM_CPP", "0")
    status = K.load_kernel.__wrapped__()  # the uncached call: this process keeps its loaded kernel
    assert not status.ok and "EVONORM_CPP=0" in status.reason


def test_the_build_folder_follows_its_environment_variable(monkeypatch, tmp_path):
    monkeypatch.setenv("EVONORM_CPP_CACHE", str(tmp_path))
    assert K.cache_dir().parent == tmp_path


def test_each_python_environment_gets_its_own_build_folder(monkeypatch, tmp_path):
    """Two environments (a checkout's venv, a clean clone's) name different torch headers in the build: in
    one folder each would rebuild the other's kernel."""
    monkeypatch.setenv("EVONORM_CPP_CACHE", str(tmp_path))
    mine = K.cache_dir()
    assert K.cache_dir() == mine
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "other-venv"))
    assert K.cache_dir() != mine and K.cache_dir().parent == tmp_path


def test_the_environments_own_ninja_goes_first(monkeypatch, tmp_path):
    """Another ninja earlier on PATH (the system's) would read the environment's build records as stale."""
    env_bin, other = tmp_path / "env" / "bin", tmp_path / "usr" / "bin"
    for folder in (env_bin, other):
        folder.mkdir(parents=True)
        (folder / "ninja").write_text("#!/bin/sh\n")
        (folder / "ninja").chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(env_bin / "python"))
    monkeypatch.setenv("PATH", str(other))
    K.environment_ninja_first()
    assert shutil.which("ninja") == str(env_bin / "ninja")
    K.environment_ninja_first()  # already first: PATH is left as it is
    assert os.environ["PATH"] == str(env_bin) + os.pathsep + str(other)


def test_batch_statistics_are_refused():
    with pytest.raises(ValueError, match="batch"):
        get_graph("evonorm_b0").to_module(8, impl="cpp")
    assert get_graph("evonorm_b0").to_module(8).cpp_program is None  # auto: the plain path


def test_a_plan_becomes_rows_of_op_codes_with_the_fused_steps():
    codes = K.CODES
    assert K.program(make_plan(GN_RELU)).tolist() == [[codes["norm"], K.AXES["group"], 0, -1], [codes["max"], 0, 4, 1]]
    s0 = K.program(make_plan(get_graph("evonorm_s0"))).tolist()
    assert s0 == [[codes["swish"], 0, 0, 3], [codes["std"], K.AXES["group"], 0, -1], [codes["div"], 0, 4, 5]]


def test_the_kernel_ops_take_a_shape_only_implementation():
    """torch.compile traces a network through the layer only where the kernel's ops can have a fake (shape-only)
    implementation beside their CPU kernel: a catch-all kernel refuses one (benchmarks/bench_compile.py adds them)."""
    assert K.load_kernel().ok
    lib = torch.library.Library("evonorm_graph", "FRAGMENT")  # its registrations go when it does
    torch.library.register_fake("evonorm_graph::backward",
                                lambda dy, x, v0, v1, w, saved, prog, groups, eps:
                                [torch.empty_like(x)] + [w.new_empty(x.shape[1]) for _ in range(4)], lib=lib)
    with torch._subclasses.fake_tensor.FakeTensorMode():
        x, p = torch.empty(2, 4, 3, 3), torch.empty(4)
        shapes = [t.shape for t in torch.ops.evonorm_graph.backward(x, x, p, p, p, torch.empty(2, 9, dtype=torch.float64),
                                                                   torch.empty(2, 4, dtype=torch.int64), 2, 1e-5)]
    del lib
    assert shapes == [(2, 4, 3, 3)] + [(4,)] * 4


def test_a_malformed_program_is_refused():
    assert K.load_kernel().ok
    x, p = torch.randn(2, 4, 3, 3), torch.ones(4)
    bad = torch.tensor([[K.CODES["add"], 0, 0, 5]])  # an argument that comes later
    with pytest.raises(RuntimeError, match="program: bad row 0"):
        torch.ops.evonorm_graph.forward(x, p, p, p, p, bad, 2, 1e-5)
    with pytest.raises(RuntimeError, match="program"):
        torch.ops.evonorm_graph.forward(x, p, p, p, p, torch.tensor([[99, 0, 0, -1]]), 2, 1e-5)


@pytest.mark.parametrize("name", ["evonorm_s0", "tanh_group_rms", "s_top1"])
def test_threads_do_not_change_the_result(name):
    """Samples run on any thread; per-sample sums are added in the samples' order, so the bits are the same."""
    layer = get_graph(name).to_module(8, groups=4)
    x = torch.randn(6, 8, 5, 5)
    out = []
    threads = torch.get_num_threads()
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            xr = x.clone().requires_grad_()
            layer.zero_grad()
            y = layer(xr)
            y.square().sum().backward()
            out.append([y.detach(), xr.grad] + [p.grad.clone() for p in layer.parameters()])
    finally:
        torch.set_num_threads(threads)
    for a, b in zip(*out):
        assert torch.equal(a, b)
