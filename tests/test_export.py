"""A model holding any of the layers scripts (torch.jit.script), traces (torch.fx), exports with a dynamic batch
(torch.export) and exports to ONNX (dynamo and legacy, run with ONNX Runtime) on the default implementation,
matching eager within 1e-5 on a batch size other than the one it was exported with."""

import io
import warnings

import pytest
import torch
from torch import nn

from evonorm.graph.library import get_graph
from evonorm.layers import Affine2d, create_norm_act, list_norm_acts

LAYERS = list_norm_acts()
GRAPHS = ["evonorm_b0", "evonorm_s0", "tanh_minus_batch_mean_relu"]  # compiled graph layers (batch ops too)
ONNX_FAST = ["evonorm_b0", "evonorm_s0", "bn_relu", "graph:evonorm_b0"]


def _model(name: str, apply_act: bool = True) -> nn.Module:
    if name == "affine":
        layer = Affine2d(8)
    elif name.startswith("graph:"):
        layer = get_graph(name[6:]).to_module(8, groups=4, apply_act=apply_act)
    else:
        layer = create_norm_act(name, 8, groups=4, apply_act=apply_act)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), layer, nn.Conv2d(8, 4, 1))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))  # gamma, beta, v away from 1 and 0
        model.train()
        for _ in range(3):  # running statistics away from their initial values
            model(torch.randn(6, 3, 6, 6))
    return model.eval()


X, X2 = torch.randn(4, 3, 6, 6), torch.randn(7, 3, 6, 6)


def _close(a, b):
    torch.testing.assert_close(torch.as_tensor(a), torch.as_tensor(b), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", LAYERS + ["affine"])
@pytest.mark.parametrize("apply_act", [True, False])
def test_jit_script(name, apply_act):
    model = _model(name, apply_act)
    scripted = torch.jit.script(model)
    with torch.no_grad():
        _close(scripted(X2), model(X2))
    if apply_act and hasattr(model[1], "running_var"):  # training: same output and running statistics
        scripted.train(), model.train()
        _close(scripted(X), model(X))
        _close(scripted[1].running_var, model[1].running_var)


@pytest.mark.parametrize("name", LAYERS + ["affine"] + [f"graph:{g}" for g in GRAPHS])
def test_fx_symbolic_trace_keeps_the_layer_as_one_node(name):
    model = _model(name)
    traced = torch.fx.symbolic_trace(model)
    assert [n.op for n in traced.graph.nodes] == ["placeholder"] + ["call_module"] * 3 + ["output"]
    with torch.no_grad():
        _close(traced(X2), model(X2))
    traced.train(), model.train()
    _close(traced(X), model(X))


@pytest.mark.parametrize("name", LAYERS + ["affine"] + [f"graph:{g}" for g in GRAPHS])
def test_torch_export_with_a_dynamic_batch(name):
    model = _model(name)
    batch = torch.export.Dim("batch", min=1, max=1024)
    program = torch.export.export(model, (X,), dynamic_shapes={"input": {0: batch}})
    with torch.no_grad():
        _close(program.module()(X2), model(X2))


def _onnx_run(model: nn.Module, dynamo: bool):
    import onnxruntime as ort

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            program = torch.onnx.export(model, (X,), dynamo=True, verbose=False,
                                        dynamic_shapes={"input": {0: torch.export.Dim("batch")}})
            data = program.model_proto.SerializeToString()
        else:
            buf = io.BytesIO()
            torch.onnx.export(model, (X,), buf, dynamo=False, input_names=["x"], output_names=["y"],
                              dynamic_axes={"x": {0: "n"}, "y": {0: "n"}})
            data = buf.getvalue()
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    assert len(session.get_inputs()) == 1
    return session.run(None, {session.get_inputs()[0].name: X2.numpy()})[0]


def _check_onnx(name: str, dynamo: bool) -> None:
    pytest.importorskip("onnxruntime", reason="onnxruntime is in the `test` extra")
    if dynamo:
        pytest.importorskip("onnxscript", reason="onnxscript is in the `test` extra")
    model = _model(name)
    with torch.no_grad():
        _close(_onnx_run(model, dynamo), model(X2))


@pytest.mark.extras
@pytest.mark.parametrize("name", ONNX_FAST)
@pytest.mark.parametrize("dynamo", [True, False])
def test_onnx(name, dynamo):
    _check_onnx(name, dynamo)


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in LAYERS + ["affine"] + [f"graph:{g}" for g in GRAPHS]
                                  if n not in ONNX_FAST])
@pytest.mark.extras
@pytest.mark.parametrize("dynamo", [True, False])
def test_onnx_every_layer(name, dynamo):
    _check_onnx(name, dynamo)


def test_export_takes_the_plain_path_and_eager_keeps_the_kernel(monkeypatch):
    """The hand-written kernel runs in eager use; tracing and exporting never reach it."""
    from evonorm.layers.kernels import evonorm_b_cpu

    calls = []
    original = evonorm_b_cpu.EvoNormBFunction.apply
    monkeypatch.setattr(evonorm_b_cpu.EvoNormBFunction, "apply",
                        staticmethod(lambda *a: calls.append(1) or original(*a)))
    model = _model("evonorm_b0")
    calls.clear()
    model(X)
    assert calls == [1]
    torch.export.export(model, (X,))
    torch.jit.trace(model, (X,), check_trace=False)  # (its check re-runs the model eagerly)
    assert calls == [1]
