"""convert_norm_act on models written here: a ResNet (shared ReLU module, functional ReLU, downsample BN) and a
MobileNetV2 (Conv-BN-ReLU6 Sequentials, linear bottleneck BN), plus a model fx cannot trace."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from evonorm.layers import convert_norm_act, create_norm_act


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)  # used twice, as in torchvision
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        identity = x if self.downsample is None else self.downsample(x)
        return self.relu(out + identity)


class TinyResNet(nn.Module):
    """Stem BN + functional ReLU; 3 stages of basic blocks. 9 BatchNorms, 4 of them followed by a ReLU."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.layer1 = BasicBlock(16, 16)
        self.layer2 = BasicBlock(16, 32, 2)
        self.layer3 = BasicBlock(32, 64, 2)
        self.fc = nn.Linear(64, num_classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def conv_bn_relu6(cin, cout, k=3, stride=1, groups=1):
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout),
                         nn.ReLU6(inplace=True))


class InvertedResidual(nn.Module):
    def __init__(self, cin, cout, stride, expand):
        super().__init__()
        hidden = cin * expand
        self.use_res = stride == 1 and cin == cout
        layers = [conv_bn_relu6(cin, hidden, 1)] if expand != 1 else []
        layers += [conv_bn_relu6(hidden, hidden, 3, stride, groups=hidden),
                   nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        self.conv = nn.Sequential(*layers)

    def forward(self, x):
        return x + self.conv(x) if self.use_res else self.conv(x)


class TinyMobileNetV2(nn.Module):
    """Stem, 4 inverted residuals, a head conv: every BN-ReLU6 fused; the 4 projection BNs stay lone."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.features = nn.Sequential(
            conv_bn_relu6(3, 16, 3, 1),
            InvertedResidual(16, 8, 1, 1),
            InvertedResidual(8, 12, 2, 6),
            InvertedResidual(12, 12, 1, 6),
            InvertedResidual(12, 16, 2, 6),
            conv_bn_relu6(16, 64, 1),
        )
        self.classifier = nn.Linear(64, num_classes)

    def forward(self, x):
        x = F.adaptive_avg_pool2d(self.features(x), 1).flatten(1)
        return self.classifier(x)


class Untraceable(TinyMobileNetV2):
    """Data-dependent control flow at the top: fx cannot trace it, its children it can."""

    def forward(self, x):
        x = self.features(x)
        if x.mean() > -1e9:
            x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.classifier(x)


def _count_bn(model):
    return sum(type(m) is nn.BatchNorm2d for m in model.modules())


def _check_runs(model, x):
    model.train()
    y = model(x)
    assert y.shape == (x.shape[0], 10) and torch.isfinite(y).all()
    y.square().mean().backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert grads and all(g is not None and torch.isfinite(g).all() for g in grads)


@pytest.mark.parametrize("name", ["evonorm_b0", "evonorm_s0", "bn_relu", "gn_relu", "frn"])
def test_resnet(name):
    model = TinyResNet()
    assert _count_bn(model) == 9
    x = torch.randn(4, 3, 16, 16)
    shape = model(x).shape
    new, report = convert_norm_act(model, name)
    assert _count_bn(new) == 0
    assert len(report) == 9
    fused = sorted(r.name for r in report.fused)
    assert fused == ["bn1", "layer1.bn1", "layer2.bn1", "layer3.bn1"]
    assert sorted(r.name for r in report.replaced if not r.apply_act) == [
        "layer1.bn2", "layer2.bn2", "layer2.downsample.1", "layer3.bn2", "layer3.downsample.1"]
    assert report.mode == "fx"  # a functional ReLU and a shared ReLU module: the graph is rewritten
    assert "F.relu" in str(report) and "ReLU module layer1.relu" in str(report)
    assert new(x).shape == shape
    layer = new.get_submodule("layer2.bn1")
    assert layer.apply_act and type(layer) is type(create_norm_act(name, 32))
    assert not new.get_submodule("layer2.bn2").apply_act
    _check_runs(new, x)


def test_resnet_conversion_keeps_the_residual_relu():
    """The shared ReLU after the residual add is not a BN's consumer and must stay in the graph."""
    new, _ = convert_norm_act(TinyResNet(), "evonorm_s0")
    relus = [n for n in new.graph.nodes if n.op == "call_module" and isinstance(new.get_submodule(n.target), nn.ReLU)]
    assert len(relus) == 3  # one per block, after `out + identity`
    fused_relus = [n for n in new.graph.nodes if n.op == "call_function" and n.target is F.relu]
    assert fused_relus == []


@pytest.mark.parametrize("name", ["evonorm_b0", "evonorm_s0", "evonorm_s2", "bn_swish", "ln_relu"])
def test_mobilenetv2(name):
    model = TinyMobileNetV2()
    n_bn = _count_bn(model)
    x = torch.randn(4, 3, 16, 16)
    new, report = convert_norm_act(model, name, groups=4)
    assert new is model and type(new) is TinyMobileNetV2  # only Identity swaps needed: changed in place
    assert report.mode == "module"
    assert _count_bn(new) == 0 and len(report) == n_bn == 13
    assert len(report.fused) == 9 and len(report.replaced) - len(report.fused) == 4
    assert all(r.activation.startswith("ReLU6 module") for r in report.fused)
    assert sum(isinstance(m, nn.ReLU6) for m in new.modules()) == 0
    assert new(x).shape == (4, 10)
    if hasattr(new.features[0][1], "groups"):
        assert new.features[0][1].groups == 4
    _check_runs(new, x)


def test_untraceable_model_falls_back_to_children():
    model = Untraceable()
    new, report = convert_norm_act(model, "evonorm_s0")
    assert _count_bn(new) == 0 and len(report) == 13 and len(report.fused) == 9
    assert any("fx could not trace <root>" in n for n in report.notes)
    _check_runs(new, torch.randn(2, 3, 16, 16))


def test_lone_bn_with_bn_relu_stays_a_batchnorm():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4))
    new, report = convert_norm_act(model, "bn_relu")
    layer = new[1]
    assert isinstance(layer, nn.BatchNorm2d) and not layer.apply_act
    x = torch.randn(2, 3, 6, 6)
    assert (new(x) < 0).any()
    assert str(report).startswith("convert_norm_act('bn_relu'): 1 BatchNorm2d replaced, 0 fused")


def test_functional_activations_are_fused():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.bns = nn.ModuleList(nn.BatchNorm2d(4) for _ in range(5))

        def forward(self, x):
            x = F.relu6(self.bns[0](x))
            x = F.silu(self.bns[1](x))
            x = F.gelu(self.bns[2](x))
            x = self.bns[3](x).relu()
            return torch.sigmoid(self.bns[4](x))  # not a supported activation: lone

    new, report = convert_norm_act(Net(), "evonorm_b0")
    assert [r.apply_act for r in report.replaced] == [True, True, True, True, False]
    targets = {n.target for n in new.graph.nodes if n.op in ("call_function", "call_method")}
    assert F.silu not in targets and F.gelu not in targets and "relu" not in targets
    assert torch.sigmoid in targets
    assert new(torch.randn(2, 4, 3, 3)).shape == (2, 4, 3, 3)


def test_eval_mode_and_device_are_kept():
    model = TinyMobileNetV2().eval()
    new, _ = convert_norm_act(model, "evonorm_b0")
    assert not any(m.training for m in new.modules())


def test_unknown_name_changes_nothing():
    model = TinyMobileNetV2()
    with pytest.raises(ValueError, match="unknown layer 'batchnorm_tanh'"):
        convert_norm_act(model, "batchnorm_tanh")
    assert _count_bn(model) == 13


def test_a_factory_or_a_graph_takes_every_bn_activation_pair():
    from evonorm.graph.library import NAMED_GRAPHS
    from evonorm.layers import Affine2d, EvoNormS0

    built = []

    def factory(num_features, **kw):
        built.append((num_features, kw))
        return EvoNormS0(num_features, **kw)

    x = torch.randn(4, 3, 16, 16)
    for layer, kw in ((factory, {"groups": 4}), (NAMED_GRAPHS["evonorm_s0"], {}), ("evonorm_b0", {})):
        built.clear()
        new, report = convert_norm_act(TinyResNet(), layer, **kw)
        assert _count_bn(new) == 0 and len(report) == 9 and len(report.fused) == 4
        lone = new.get_submodule("layer2.bn2")
        if isinstance(layer, str):
            assert not lone.apply_act  # a registered layer is told apply_act=False
        else:  # a factory's or a graph's layer is a norm-act: a lone BatchNorm becomes the affine
            assert type(lone) is Affine2d
        _check_runs(new, x)
        if layer is factory:  # once per pair (and once first, a check before anything changes)
            assert [n for n, _ in built] == [16, 16, 16, 32, 64] and built[0][1] == {"groups": 4}
    label = convert_norm_act(TinyResNet(), NAMED_GRAPHS["evonorm_b0"])[1].norm_act
    assert label == f"graph {NAMED_GRAPHS['evonorm_b0']}"


def test_a_bad_factory_changes_nothing():
    model = TinyMobileNetV2()

    def raises(num_features):
        raise RuntimeError("no layer today")

    with pytest.raises(RuntimeError, match="no layer today"):
        convert_norm_act(model, raises)
    with pytest.raises(TypeError, match="not an nn.Module"):
        convert_norm_act(model, lambda n: "a string")
    with pytest.raises(TypeError, match="factory"):
        convert_norm_act(model, 3)
    with pytest.raises(ValueError, match="unknown op"):  # graph JSON converts (below); a broken one is refused
        convert_norm_act(model, '{"nodes": [["no_such_op", 0]]}')
    assert _count_bn(model) == 13


def test_a_found_layer_converts_as_a_candidate_holds_it():
    """A search stores a layer as its graph's dict: that dict, its JSON text and the Graph convert alike."""
    import json

    from evonorm.graph.library import NAMED_GRAPHS

    graph = NAMED_GRAPHS["evonorm_s0"]
    x = torch.randn(4, 3, 16, 16)
    outputs = []
    for layer in (graph, graph.to_json(), json.dumps(graph.to_json())):
        torch.manual_seed(0)
        new, report = convert_norm_act(TinyResNet(), layer)
        assert _count_bn(new) == 0 and report.norm_act == f"graph {graph}"
        outputs.append(new(x))
    torch.testing.assert_close(outputs[0], outputs[1])
    torch.testing.assert_close(outputs[0], outputs[2])
