"""impl="triton": every Triton kernel against the plain formulas (outputs, input and parameter gradients,
running statistics), in NCHW and channels_last, train and eval, float64 (tight) and float32/bfloat16/float16
(float32 statistics). Without CUDA they run in Triton's interpreter on CPU tensors (conftest.py sets
TRITON_INTERPRET=1 before Triton is imported); small shapes keep the interpreter fast. With CUDA they run on
the GPU."""

import pytest
import torch

from evonorm.layers import create_norm_act
from evonorm.runtime.common import update_running_var
from evonorm.layers._formula import b_formula, s_formula
from evonorm.layers.impl import resolve_impl
from evonorm.runtime.paths import recording

pytestmark = pytest.mark.extras
triton_evonorm = pytest.importorskip("evonorm.layers.kernels.evonorm_triton",
                                     reason="triton is not installed (the `triton` extra)")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

EVONORMS = ["evonorm_b0", "evonorm_b1", "evonorm_b2", "evonorm_s0", "evonorm_s1", "evonorm_s2"]
def _layer(name: str, c: int, training: bool, dtype=torch.float64, groups: int = 4):
    layer = create_norm_act(name, c, groups=groups, impl="triton")
    with torch.no_grad():
        for pname, p in layer.named_parameters():
            p.copy_(torch.randn_like(p) * 0.5 + (1.0 if pname.endswith(("weight", "v")) else 0.0))
        if getattr(layer, "running_var", None) is not None:
            layer.running_var.uniform_(0.5, 2.0)
    return layer.to(DEVICE, dtype).train(training)


def _input(shape, dtype, channels_last: bool):
    x = (torch.randn(shape, dtype=torch.float64) * 2 + 0.5).to(DEVICE, dtype)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    return x


def _reference(layer, x: torch.Tensor, g: torch.Tensor):
    """Output, gradients (input, then parameters in layer order) and running variance from the formulas."""
    x64 = x.detach().double().requires_grad_()
    v, w, b = (None if p is None else p.detach().double().requires_grad_() for p in (layer.v, layer.weight,
                                                                                     layer.bias))
    running = None
    if hasattr(layer, "groups"):
        y = s_formula(x64, v, w, b, layer.groups, layer.eps, layer.variant)
    else:
        running = layer.running_var.detach().double().clone()
        y, var = b_formula(x64, v, w, b, running, layer.training, layer.eps, layer.variant)
        if layer.training:
            update_running_var(running, var, x.numel() // x.shape[1], layer.momentum)
    wanted = [t for t in (x64, w, b, v) if t is not None]  # layer.parameters() order: weight, bias, v
    return y, torch.autograd.grad(y, wanted, g.double()), running


def _run(layer, x: torch.Tensor, g: torch.Tensor):
    x = x.detach().requires_grad_()
    with recording() as calls:
        y = layer(x)
    assert dict(calls) == {"triton": 1}  # the Triton kernel ran, no other path
    y.backward(g)
    return y, [x.grad] + [p.grad for p in layer.parameters()], getattr(layer, "running_var", None)


def _check(name, layer, x, rtol, atol):
    g = torch.randn(x.shape, dtype=torch.float64).to(DEVICE, x.dtype)
    y_ref, grads_ref, running_ref = _reference(layer, x, g)
    y, grads, running = _run(layer, x, g)
    assert y.dtype == x.dtype and y.shape == x.shape
    assert y.is_contiguous(memory_format=torch.channels_last) == x.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(y.double(), y_ref, rtol=rtol, atol=atol)
    for got, want in zip(grads, grads_ref, strict=True):
        torch.testing.assert_close(got.double(), want, rtol=rtol, atol=atol)
    if running_ref is not None:
        assert running.dtype in (torch.float32, torch.float64)
        torch.testing.assert_close(running.double(), running_ref, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "channels_last"])
@pytest.mark.parametrize("name", EVONORMS)
def test_kernels_match_formula_float64(name, channels_last, training):
    """Odd sizes (8 channels in 4 groups, 5x3 positions) exercise the tiles' masks."""
    layer = _layer(name, 8, training)
    _check(name, layer, _input((3, 8, 5, 3), torch.float64, channels_last), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize(("dtype", "channels_last", "tol"), [
    (torch.float32, False, 1e-4), (torch.bfloat16, True, 8e-2), (torch.float16, False, 1e-2)],
    ids=["float32-nchw", "bfloat16-channels_last", "float16-nchw"])
@pytest.mark.parametrize("name", EVONORMS)
def test_kernels_low_precision(name, dtype, channels_last, tol):
    """Half/bfloat16 inputs with float32 parameters and statistics: the output and dx keep the input dtype."""
    layer = _layer(name, 8, True, dtype=torch.float32)
    x = _input((3, 8, 4, 4), dtype, channels_last)
    g = torch.randn(x.shape).to(DEVICE, dtype)
    y_ref, grads_ref, running_ref = _reference(layer, x, g)
    y, grads, running = _run(layer, x, g)
    assert y.dtype == dtype and grads[0].dtype == dtype and all(p.dtype == torch.float32 for p in grads[1:])
    torch.testing.assert_close(y.double(), y_ref, rtol=tol, atol=tol)
    for got, want in zip(grads, grads_ref, strict=True):
        scale = want.abs().max().item() + 1.0
        torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol * scale)
    if running_ref is not None:
        assert running.dtype == torch.float32
        torch.testing.assert_close(running.double(), running_ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", EVONORMS)
def test_kernels_many_tiles(name, monkeypatch):
    """Tiny tiles: every kernel loops over several channel and position blocks (and channel blocks of the
    per-channel reductions), as on large shapes on a GPU."""
    monkeypatch.setattr(triton_evonorm, "_TILE", 8)
    monkeypatch.setattr(triton_evonorm, "_CHAN_BLOCK", 4)
    layer = _layer(name, 12, True, groups=2)  # 6 channels per group, not a power of two
    _check(name, layer, _input((2, 12, 7, 3), torch.float64, name.endswith("1")), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("name", ["evonorm_b0", "evonorm_s0"])
def test_double_backward_differentiates_the_formula(name):
    layer = _layer(name, 8, True)
    x = _input((2, 8, 3, 2), torch.float64, False).requires_grad_()
    (gx,) = torch.autograd.grad(layer(x).square().sum(), x, create_graph=True)
    (ggx,) = torch.autograd.grad(gx.sum(), x)
    ref = create_norm_act(name, 8, groups=4, impl="fast").to(DEVICE, torch.float64)
    ref.load_state_dict(layer.state_dict())
    (rx,) = torch.autograd.grad(ref(x).square().sum(), x, create_graph=True)
    (rgx,) = torch.autograd.grad(rx.sum(), x)
    torch.testing.assert_close(ggx, rgx, rtol=1e-8, atol=1e-8)


@pytest.mark.skipif(DEVICE == "cuda", reason="about CPU tensors where no GPU is")
def test_triton_on_cpu_needs_the_interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(ValueError, match="needs CUDA tensors"):
        create_norm_act("evonorm_s0", 8, impl="triton")(torch.randn(2, 8, 3, 3))


def test_auto_picks_the_cpu_kernel_on_cpu():
    assert resolve_impl("auto", torch.randn(1)) == "fast"
    assert resolve_impl("triton", torch.randn(1)) == "triton"
