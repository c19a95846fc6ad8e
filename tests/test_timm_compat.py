"""timm EvoNorm weights in evonorm layers: same function with timm's settings (eps 1e-3 for B0 and the `a`
variants), said per module; group_size like timm's."""

import pytest
import torch
from torch import nn

from _timm import load_timm
from evonorm.layers import (TIMM_EVONORMS, EvoNormS0, GroupNormReLU, convert_timm_evonorm, create_norm_act,
                            from_timm, timm_settings)


def _randomize(module: nn.Module) -> None:
    with torch.no_grad():
        for p in module.parameters():
            p.uniform_(0.5, 1.5)
        for name, b in module.named_buffers():
            if name.endswith("running_var"):
                b.uniform_(0.5, 2.0)


@pytest.mark.extras
@pytest.mark.parametrize("timm_name", list(TIMM_EVONORMS))
def test_every_timm_evonorm_converts_to_the_same_function(monkeypatch, timm_name):
    load_timm(monkeypatch)
    import timm.layers.evo_norm as evo

    torch.manual_seed(0)
    theirs = getattr(evo, timm_name)(16, groups=4) if "S" in timm_name else getattr(evo, timm_name)(16)
    _randomize(theirs)
    ours, note = from_timm(theirs, "blocks.0.norm")
    assert note.startswith(f"blocks.0.norm: {timm_name} -> ")
    assert ("default eps is 1e-05" in note) == (TIMM_EVONORMS[timm_name].eps != 1e-5)
    x = torch.randn(4, 16, 5, 5) * 3
    for training in (True, False):
        theirs.train(training), ours.train(training)
        torch.testing.assert_close(ours(x), theirs(x), rtol=1e-5, atol=1e-5)
    if hasattr(theirs, "running_var"):
        torch.testing.assert_close(ours.running_var, theirs.running_var)


@pytest.mark.extras
def test_timm_state_dict_loads_with_timm_settings_and_differs_with_ours(monkeypatch):
    load_timm(monkeypatch)
    from timm.layers.evo_norm import EvoNorm2dB0

    theirs = EvoNorm2dB0(8).eval()
    _randomize(theirs)
    x = torch.randn(2, 8, 4, 4)
    name, kwargs = timm_settings("EvoNorm2dB0")
    assert (name, kwargs) == ("evonorm_b0", {"eps": 1e-3})
    same = create_norm_act(name, 8, **kwargs).eval()
    same.load_state_dict(theirs.state_dict())
    torch.testing.assert_close(same(x), theirs(x))
    default = create_norm_act(name, 8).eval()
    default.load_state_dict(theirs.state_dict())  # loads strictly, but eps 1e-5 is another function
    assert (default(x) - theirs(x)).abs().max() > 1e-4


@pytest.mark.extras
def test_convert_timm_evonorm_in_a_model(monkeypatch):
    load_timm(monkeypatch)
    from timm.layers.evo_norm import EvoNorm2dB0, EvoNorm2dS0a, EvoNorm2dS1a

    model = nn.Sequential(nn.Conv2d(3, 8, 1), EvoNorm2dB0(8), nn.Conv2d(8, 8, 1), EvoNorm2dS0a(8, group_size=4))
    _randomize(model)
    x = torch.randn(2, 3, 4, 4)
    expected = model(x)
    new, notes = convert_timm_evonorm(model)
    assert isinstance(new[3], EvoNormS0) and new[3].groups == 2 and len(notes) == 2
    torch.testing.assert_close(new(x), expected)
    with pytest.raises(ValueError, match=r"^2: EvoNorm2dS1a\(apply_act=False\) divides by the group std"):
        convert_timm_evonorm(nn.Sequential(nn.Identity(), nn.Identity(), EvoNorm2dS1a(8, apply_act=False)))


def test_group_size():
    assert create_norm_act("evonorm_s0", 48, group_size=16).groups == 3
    assert GroupNormReLU(48, group_size=8).groups == 6
    with pytest.raises(ValueError, match="group_size must divide num_channels"):
        create_norm_act("evonorm_s1", 48, group_size=5)
