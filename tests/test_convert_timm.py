"""convert_norm_act on timm's layers and models, and the cases around them: pass-through modules between a
BatchNorm and its activation, SyncBatchNorm, in-place activations, BatchNorm subclasses it cannot read."""

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from _timm import load_timm
from evonorm.layers import BatchNormReLU2d, BatchNormSwish1, EvoNormB0, EvoNormS0, convert_norm_act


def _same_function(ref: nn.Module, new: nn.Module, x: torch.Tensor, steps: int = 2) -> None:
    """Equal outputs in train mode (same RNG for dropouts), over `steps` batches, then in eval mode."""
    for step in range(steps):
        xs = x + step
        torch.manual_seed(step)
        a = ref.train()(xs)
        torch.manual_seed(step)
        b = new.train()(xs)
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(new.eval()(x), ref.eval()(x), rtol=1e-5, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("arch, baseline, fused", [
    ("resnet18", "bn_relu", 9),
    ("efficientnet_b0", "bn_swish1", 33),
    ("mobilenetv3_small_100", "bn_relu", 5),  # its 19 Hardswish pairs: kept after a plain BatchNorm
    ("regnetx_002", "bn_relu", 27),
])
@pytest.mark.extras
def test_timm_model_keeps_its_function_with_the_equal_baseline(monkeypatch, arch, baseline, fused):
    timm = load_timm(monkeypatch)
    model = timm.create_model(arch, pretrained=False, num_classes=10)
    ref = copy.deepcopy(model)
    n_bn = sum(isinstance(m, nn.BatchNorm2d) for m in model.modules())
    new, report = convert_norm_act(model, baseline)
    assert len(report) == n_bn and len(report.fused) == fused
    assert not any(type(m).__name__ in ("BatchNormAct2d", "BatchNorm2d") for m in new.modules())
    _same_function(ref, new, torch.randn(2, 3, 48, 48))
    evo, evo_report = convert_norm_act(copy.deepcopy(ref), "evonorm_b0")
    assert len(evo_report.fused) == fused and evo(torch.randn(2, 3, 48, 48)).shape == (2, 10)


@pytest.mark.extras
def test_timm_batchnormact_layers(monkeypatch):
    timm = load_timm(monkeypatch)
    from timm.layers import BatchNormAct2d, DropBlock2d

    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        BatchNormAct2d(8, act_layer=nn.ReLU, drop_layer=lambda: DropBlock2d(0.2, 3)),  # bn -> drop -> act
        nn.Conv2d(8, 8, 3, padding=1),
        BatchNormAct2d(8, act_layer=nn.Hardswish),  # an activation no layer fuses: kept after the BN
        nn.Conv2d(8, 8, 3, padding=1),
        BatchNormAct2d(8, apply_act=False),  # act is Identity: the next module is the activation
        nn.SiLU(),
    )
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)
    ref = copy.deepcopy(model)
    new, report = convert_norm_act(model, "bn_relu")
    assert [r.apply_act for r in report.replaced] == [True, False, True]
    assert report.replaced[0].activation == "ReLU module 1.act"
    assert isinstance(new[1], nn.Sequential) and isinstance(new[1][1], DropBlock2d)  # drop now after the act
    assert isinstance(new[3][1], nn.Hardswish) and not new[3][0].apply_act
    assert any("Hardswish" in n for n in report.notes) and any("DropBlock2d" in n for n in report.notes)
    # the SiLU after the Identity-act BN is fused (bn_relu then computes ReLU there: compare the first two)
    _same_function(ref[:5], new[:5], torch.randn(2, 3, 10, 10))
    evo, _ = convert_norm_act(copy.deepcopy(ref), "evonorm_s0", groups=4)
    assert isinstance(evo[1][0], EvoNormS0) and evo(torch.randn(2, 3, 10, 10)).shape == (2, 8, 10, 10)


@pytest.mark.extras
def test_timm_sync_batchnormact_becomes_a_synced_layer(monkeypatch):
    load_timm(monkeypatch)
    from timm.layers import BatchNormAct2d, SyncBatchNormAct, convert_sync_batchnorm

    model = convert_sync_batchnorm(nn.Sequential(nn.Conv2d(3, 4, 1), BatchNormAct2d(4, act_layer=nn.SiLU)))
    assert isinstance(model[1], SyncBatchNormAct)
    new, report = convert_norm_act(model, "bn_swish1")
    assert isinstance(new[1], BatchNormSwish1) and new[1].sync is not None and report.replaced[0].apply_act


class _Chain(nn.Module):
    """BN -> Identity -> Dropout -> ReLU(inplace) in a traced forward, plus functional in-place forms."""

    def __init__(self):
        super().__init__()
        self.bn1, self.bn2, self.bn3, self.bn4 = (nn.BatchNorm2d(4) for _ in range(4))
        self.ident, self.drop, self.act = nn.Identity(), nn.Dropout(0.3), nn.ReLU(inplace=True)

    def forward(self, x):
        x = self.act(self.drop(self.ident(self.bn1(x))))
        x = F.relu(self.bn2(x), inplace=True)
        x = self.bn3(x).relu_()
        y = self.bn4(x)
        F.relu(y, inplace=True)  # in place on a tensor used afterwards: not a pair, and kept
        return y + 1


def test_pass_through_and_in_place_activations():
    model = _Chain()
    ref = copy.deepcopy(model)
    new, report = convert_norm_act(model, "bn_relu")
    assert [r.apply_act for r in report.replaced] == [True, True, True, False]
    assert any("drop" in n for n in report.notes)
    _same_function(ref, new, torch.randn(3, 4, 5, 5))


def test_sequential_fallback_looks_through_dropout():
    class Untraceable(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Conv2d(3, 4, 1), nn.BatchNorm2d(4), nn.Identity(), nn.Dropout2d(0.1),
                                      nn.ReLU())

        def forward(self, x):
            return self.body(x) if x.sum() > -1e9 else x  # data-dependent: fx fails at the root

    new, report = convert_norm_act(Untraceable(), "evonorm_b0")
    assert isinstance(new.body[1], EvoNormB0) and new.body[1].apply_act and isinstance(new.body[4], nn.Identity)
    assert isinstance(new.body[3], nn.Dropout2d)


def test_sync_batchnorm_is_converted_and_stays_synced():
    group = object()  # convert_norm_act passes the SyncBatchNorm's group on; no process group is needed
    model = nn.Sequential(nn.Conv2d(3, 4, 1), nn.SyncBatchNorm(4, process_group=group), nn.ReLU())
    new, report = convert_norm_act(model, "bn_relu")
    assert isinstance(new[1], BatchNormReLU2d) and new[1].apply_act and new[1].sync.group is group
    new, _ = convert_norm_act(nn.Sequential(nn.SyncBatchNorm(4), nn.ReLU()), "evonorm_b0")
    assert new[0].sync is not None


def test_gamma_beta_and_statistics_are_carried_over():
    bn = nn.BatchNorm2d(4, eps=1e-3, momentum=0.01)
    with torch.no_grad():
        bn.weight.zero_()  # as timm's zero_init_last does
        bn.bias.fill_(0.5)
        bn.running_mean.fill_(2.0)
    new, _ = convert_norm_act(nn.Sequential(bn), "bn_relu")
    assert new[0].eps == 1e-3 and new[0].momentum == 0.01 and torch.equal(new[0].running_mean, bn.running_mean)
    evo, _ = convert_norm_act(nn.Sequential(copy.deepcopy(bn)), "evonorm_s0")
    assert torch.equal(evo[0].weight, bn.weight) and torch.equal(evo[0].bias, bn.bias) and evo[0].eps == 1e-5


def test_unreadable_batchnorm_subclass_raises_and_changes_nothing():
    class BNWithAct(nn.BatchNorm2d):
        def __init__(self, c):
            super().__init__(c)
            self.relu = nn.ReLU()

        def forward(self, x):
            return self.relu(super().forward(x))

    model = nn.Sequential(nn.BatchNorm2d(4), nn.Conv2d(4, 4, 1), BNWithAct(4))
    with pytest.raises(ValueError, match=r"^2: BNWithAct is a BatchNorm with its own forward"):
        convert_norm_act(model, "evonorm_b0")
    assert type(model[0]) is nn.BatchNorm2d and type(model[2]) is BNWithAct
