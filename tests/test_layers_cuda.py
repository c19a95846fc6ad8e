"""The EvoNorm kernels on a GPU agree with the CPU ones (skipped where CUDA is unavailable)."""

import pytest
import torch

from evonorm.layers import convert_norm_act, create_norm_act

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

EVONORMS = ["evonorm_b0", "evonorm_b1", "evonorm_b2", "evonorm_s0", "evonorm_s1", "evonorm_s2"]


def _pair(name, c, impl="auto"):
    cpu = create_norm_act(name, c, impl="fast")
    with torch.no_grad():
        for p in cpu.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    gpu = create_norm_act(name, c, impl=impl).cuda()
    gpu.load_state_dict(cpu.state_dict())
    return cpu, gpu


@pytest.mark.parametrize("impl", ["auto", "plain", "fast", "compile", "triton"])  # auto: the Triton kernels on CUDA
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("name", EVONORMS)
def test_cuda_matches_cpu(name, training, impl):
    cpu, gpu = _pair(name, 48, impl)
    cpu.train(training)
    gpu.train(training)
    x = torch.randn(8, 48, 7, 7, requires_grad=True)
    g = torch.randn(8, 48, 7, 7)
    xg = x.detach().cuda().requires_grad_(True)
    y, yg = cpu(x), gpu(xg)
    y.backward(g)
    yg.backward(g.cuda())
    torch.testing.assert_close(yg.cpu(), y, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(xg.grad.cpu(), x.grad, rtol=1e-3, atol=1e-4)
    for (n, p), pg in zip(cpu.named_parameters(), gpu.parameters()):
        torch.testing.assert_close(pg.grad.cpu(), p.grad, rtol=1e-3, atol=1e-3, msg=n)
    for (n, b), bg in zip(cpu.named_buffers(), gpu.buffers()):
        torch.testing.assert_close(bg.cpu(), b, msg=n)


@pytest.mark.parametrize("impl", ["auto", "plain", "fast", "compile", "triton"])
@pytest.mark.parametrize("name", EVONORMS)
def test_cuda_gradcheck_float64(name, impl):
    layer = create_norm_act(name, 6, groups=3, impl=impl).double().cuda()
    x = torch.randn(3, 6, 4, 4, dtype=torch.float64, device="cuda", requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, *ps: layer(x), (x, *layer.parameters()), eps=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", EVONORMS)
def test_cuda_bfloat16(name):
    layer = create_norm_act(name, 32).cuda()
    x = (torch.randn(4, 32, 8, 8, device="cuda") * 30 + 10).bfloat16().requires_grad_(True)
    y = layer(x)
    y.float().sum().backward()
    assert y.dtype == torch.bfloat16 and torch.isfinite(y).all() and torch.isfinite(x.grad).all()


def test_cuda_convert():
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                torch.nn.Conv2d(8, 8, 3), torch.nn.BatchNorm2d(8)).cuda()
    new, report = convert_norm_act(model, "evonorm_s0")
    assert len(report) == 2 and len(report.fused) == 1
    assert all(p.is_cuda for p in new.parameters())
    new(torch.randn(2, 3, 9, 9, device="cuda")).sum().backward()


def test_cuda_default_is_the_triton_kernels():
    from evonorm.layers.impl import resolve_impl

    assert resolve_impl("auto", torch.zeros(1, device="cuda")) == "triton"
