import pytest
import torch
from torch import nn

from evonorm.models import ARCHS, build_model, list_archs, make_divisible, resolve_norm_act

CIFAR_ARCHS = ["resnet50_cifar", "mobilenetv2_cifar", "efficientnet_b0_cifar"]


def bn_relu(num_features, **kw):
    return nn.Sequential(nn.BatchNorm2d(num_features), nn.ReLU())


def n_params(model):
    return sum(p.numel() for p in model.parameters())


def test_archs_are_registered():
    assert set(CIFAR_ARCHS) | {"resnet50", "mobilenetv2", "efficientnet_b0"} == set(list_archs())
    assert [ARCHS[a].width for a in CIFAR_ARCHS] == [0.25, 0.5, 0.5]  # paper appendix B


def test_full_size_parameter_counts_match_the_reference_architectures():
    # MobileNetV2 1.0 and EfficientNet-B0: the reference counts (torchvision / the papers' 3.4M,
    # 5.3M) exactly, since a BN with no activation becomes an affine with the same 2C parameters.
    assert n_params(build_model("mobilenetv2", bn_relu, num_classes=1000)) == 3_504_872
    assert n_params(build_model("efficientnet_b0", bn_relu, num_classes=1000)) == 5_288_548
    # Pre-activation ResNet-50 has the convolutions and fc of ResNet-50 v1 (25,557,032 with BN)
    # but other BNs: v1 normalizes the stem (64), each block's conv3 output (4w) and each projection
    # (256..2048); v2 normalizes each block's input instead (in_chs) and once at the end (2048).
    # Difference in BN channels: 64 + sum(4w - in_chs over first blocks) + 3840 - 2048
    #   = 64 + (192 + 256 + 512 + 1024) + 3840 - 2048 = 3840 -> 7,680 fewer parameters.
    assert n_params(build_model("resnet50", bn_relu, num_classes=1000)) == 25_557_032 - 7_680


def _reducing_convs(model):
    return [name for name, m in model.named_modules()
            if isinstance(m, nn.Conv2d) and m.stride != (1, 1)]


@pytest.mark.parametrize("arch", CIFAR_ARCHS)
def test_cifar_forms_reduce_stride_of_first_two_reducing_convs(arch):
    full = _reducing_convs(build_model(arch.replace("_cifar", ""), bn_relu, width=ARCHS[arch].width))
    cifar_model = build_model(arch, bn_relu)
    cifar = _reducing_convs(cifar_model)
    # the CIFAR form drops exactly the first two reducing convs (a projection shortcut that shares
    # its block's stride goes with it) and keeps the rest
    dropped = [n for n in full if n not in cifar]
    assert dropped[:2] == full[:2] and set(cifar) <= set(full)
    assert cifar[0] not in full[:2]
    # 32x32 -> 4x4 features (ImageNet: 224 -> 7), 24x24 crops -> 3x3
    cifar_model.eval()
    with torch.no_grad():
        f32 = cifar_model.forward_features(torch.randn(2, 3, 32, 32))
        f24 = cifar_model.forward_features(torch.randn(2, 3, 24, 24))
    assert f32.shape[-2:] == (4, 4) and f24.shape[-2:] == (3, 3)
    assert f32.shape[1] == {"resnet50_cifar": 512, "mobilenetv2_cifar": 1280,
                            "efficientnet_b0_cifar": 640}[arch]


def test_resnet_cifar_feature_map_sizes_per_stage():
    model = build_model("resnet50_cifar", bn_relu)
    sizes = []
    x = model.stem(torch.randn(1, 3, 32, 32))
    sizes.append((x.shape[1], x.shape[-1]))
    for stage in model.stages:
        x = stage(x)
        sizes.append((x.shape[1], x.shape[-1]))
    # stem conv stride 1 (was 2), max-pool kept; stage 2 stride 1 (was 2)
    assert sizes == [(16, 16), (64, 16), (128, 16), (256, 8), (512, 4)]


def test_lone_bn_becomes_affine_and_pairs_use_the_factory():
    from evonorm.layers import Affine2d
    calls = []

    def factory(c):
        calls.append(c)
        return bn_relu(c)

    mb = build_model("mobilenetv2_cifar", factory)
    n_affine = sum(isinstance(m, Affine2d) for m in mb.modules())
    assert n_affine == 17  # one per inverted residual block (linear bottleneck)
    assert len(calls) == 1 + 16 * 2 + 1 + 1  # stem, (expand, depthwise) x 16 + first dw, head
    eff = build_model("efficientnet_b0_cifar", bn_relu)
    assert sum(isinstance(m, Affine2d) for m in eff.modules()) == 16
    res = build_model("resnet50_cifar", bn_relu)
    assert not any(isinstance(m, Affine2d) for m in res.modules())  # pre-act: every BN has a ReLU


def _registry_names():
    from evonorm.layers import list_norm_acts
    return list_norm_acts()


@pytest.mark.parametrize("arch", CIFAR_ARCHS)
def test_every_registry_layer_trains_forward_backward(arch):
    for name in _registry_names():
        torch.manual_seed(0)
        model = build_model(arch, name, width=ARCHS[arch].width / 4, num_classes=10)
        for size in (24, 32):
            x = torch.randn(4, 3, size, size)
            out = model(x)
            assert out.shape == (4, 10), name
            out.square().mean().backward()
            grads = [p.grad for p in model.parameters() if p.requires_grad]
            assert all(g is not None and torch.isfinite(g).all() for g in grads), (arch, name)
            model.zero_grad()
        model.eval()
        with torch.no_grad():
            assert torch.isfinite(model(torch.randn(2, 3, 32, 32))).all(), (arch, name)


@pytest.mark.parametrize("arch", CIFAR_ARCHS)
def test_graph_layer_builds_into_every_arch(arch):
    from evonorm.graph import Graph
    b0 = Graph.from_json({"nodes": [["instance_std", 0], ["mul", 3, 0], ["add", 5, 4],
                                    ["batch_std", 0], ["max", 7, 6], ["div", 0, 8]]})
    for layer in (b0, b0.to_json()):
        model = build_model(arch, layer, width=ARCHS[arch].width / 4, in_chans=1)
        out = model(torch.randn(4, 1, 24, 24))
        out.sum().backward()
        assert out.shape == (4, 10)
        assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_resolve_norm_act_errors_and_kwargs():
    with pytest.raises(ValueError, match="not_a_layer"):
        resolve_norm_act("not_a_layer")
    with pytest.raises(TypeError):
        resolve_norm_act(42)
    with pytest.raises(ValueError):
        resolve_norm_act("{not json")
    seen = {}

    def factory(c, **kw):
        seen.update(kw)
        return bn_relu(c)

    build_model("resnet50_cifar", factory, width=0.0625, groups=4, drop_rate=0.0)
    assert seen == {"groups": 4}
    with pytest.raises(ValueError, match="unknown architecture"):
        build_model("vgg16", bn_relu)


def test_make_divisible_matches_reference_rounding():
    assert [make_divisible(v) for v in (16, 12, 8 * 0.5, 1280 * 0.5, 320 * 0.5, 96 * 0.5)] == \
        [16, 16, 8, 640, 160, 48]
