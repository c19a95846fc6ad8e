"""Architectures from outside the package: `timm:NAME` and `MODULE:FUNCTION` in `build_model`, TrainConfig
and every command; a wrong one is one line (exit 2) before any work, and a run folder's MODULE:FUNCTION is
never imported unless the user names it again."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from _timm import load_timm
from evonorm.models import build_model, check_arch
from evonorm.search.driver import init_run
from evonorm.proxy.config import ProxyTask, stored_task
from evonorm.proxy.presets import get_preset
from evonorm.train import TrainConfig
from test_cli_fuzz import check_refused

BUILDERS = textwrap.dedent('''
    from torch import nn

    def build(norm_act, num_classes, in_chans):
        return nn.Sequential(nn.Conv2d(in_chans, 8, 3, padding=1, bias=False), norm_act(8),
                             nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False), norm_act(16),
                             nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, num_classes))

    def one_argument(norm_act):
        return None

    def returns_none(norm_act, num_classes, in_chans):
        return None

    def raises(norm_act, num_classes, in_chans):
        raise RuntimeError("no model today")

    def no_norm_act(norm_act, num_classes, in_chans):  # every candidate would score alike
        return nn.Sequential(nn.Conv2d(in_chans, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                             nn.Flatten(), nn.Linear(8, num_classes))

    class Unused(nn.Module):  # builds the layer, never runs it
        def __init__(self, norm_act, num_classes, in_chans):
            super().__init__()
            self.conv, self.layer = nn.Conv2d(in_chans, 8, 3, padding=1), norm_act(8)
            self.head = nn.Linear(8, num_classes)

        def forward(self, x):
            return self.head(self.conv(x).mean((2, 3)))

    def unused_layer(norm_act, num_classes, in_chans):
        return Unused(norm_act, num_classes, in_chans)

    def three_channels(norm_act, num_classes, in_chans):  # cannot take the search's 1-channel images
        return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), norm_act(8), nn.AdaptiveAvgPool2d(1),
                             nn.Flatten(), nn.Linear(8, num_classes))

    def no_logits(norm_act, num_classes, in_chans):  # features, not one score per class
        return nn.Sequential(nn.Conv2d(in_chans, 8, 3, padding=1), norm_act(8))

    not_callable = 3
''')


@pytest.fixture
def user_modules(tmp_path, monkeypatch):
    """A folder with the user's builders (archmods.py), another module that raises on import, and one
    that writes a marker file on import; the working directory, sys.path and sys.modules restored."""
    (tmp_path / "archmods.py").write_text(BUILDERS)
    (tmp_path / "archbroken.py").write_text("raise ImportError('needs a GPU library')\n")
    (tmp_path / "archplanted.py").write_text(
        f"open({str(tmp_path / 'ran')!r}, 'w').write('imported')\n"
        "def build(norm_act, num_classes, in_chans):\n    return None\n")
    monkeypatch.setattr(sys, "path", list(sys.path))
    _forget_modules(monkeypatch)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _forget_modules(monkeypatch) -> None:
    """The test's modules are imported afresh, and forgotten after it."""
    for name in ("archmods", "archbroken", "archplanted"):
        monkeypatch.delitem(sys.modules, name, raising=False)
        monkeypatch.setitem(sys.modules, name, None)  # recorded, so monkeypatch restores it...
        monkeypatch.delitem(sys.modules, name)  # ...to absent, after the test


def test_module_function_builds_with_the_layer(user_modules):
    from evonorm.layers import EvoNormS0

    model = build_model("archmods:build", "evonorm_s0", num_classes=5, in_chans=1, groups=4)
    layers = [m for m in model.modules() if isinstance(m, EvoNormS0)]
    assert len(layers) == 2 and model(torch.randn(2, 1, 8, 8)).shape == (2, 5)
    with pytest.raises(ValueError, match="width does not apply"):
        build_model("archmods:build", "bn_relu", width=0.5)


@pytest.mark.extras
def test_timm_model_gets_the_layer_at_every_pair(monkeypatch):
    load_timm(monkeypatch)
    from evonorm.layers import Affine2d, EvoNormB0

    model = build_model("timm:resnet18", "evonorm_b0", num_classes=7, in_chans=1)
    assert not any(isinstance(m, nn.BatchNorm2d) and not isinstance(m, EvoNormB0)
                   for m in model.modules())
    # resnet18: 9 BatchNorm-ReLU pairs take the layer; the 11 others (before the residual add) the affine
    assert sum(isinstance(m, EvoNormB0) for m in model.modules()) == 9
    assert sum(isinstance(m, Affine2d) for m in model.modules()) == 11
    assert model(torch.randn(2, 1, 32, 32)).shape == (2, 7)
    with pytest.raises(ValueError, match="timm has no model 'no_such_net'"):
        check_arch("timm:no_such_net")


def test_timm_not_installed_is_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "timm", None)  # import timm -> ImportError
    with pytest.raises(ValueError, match="needs timm: pip install timm"):
        build_model("timm:resnet18", "bn_relu")


@pytest.mark.parametrize("arch, words", [
    ("nosuchmodule_xyz:build", "no module named 'nosuchmodule_xyz'"),
    ("archmods:nothere", "archmods has no attribute 'nothere'"),
    ("archmods:not_callable", "not_callable is a int, not callable"),
    ("archmods:one_argument", "cannot be called as fn(norm_act, num_classes=..., in_chans=...)"),
    ("archbroken:build", "importing archbroken raised ImportError: needs a GPU library"),
])
def test_bad_builders_are_one_line(user_modules, arch, words):
    with pytest.raises(ValueError) as err:
        check_arch(arch)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_builder_that_fails_when_called(user_modules):
    from evonorm.models import probe_arch

    with pytest.raises(TypeError, match="returned NoneType, not an nn.Module"):
        build_model("archmods:returns_none", "bn_relu")
    with pytest.raises(ValueError, match="raised RuntimeError: no model today"):
        probe_arch("archmods:raises", num_classes=3, in_chans=1)


@pytest.mark.parametrize("arch, words", [
    ("archmods:no_norm_act", "never calls a layer built by norm_act"),
    ("archmods:unused_layer", "never calls a layer built by norm_act"),
    ("archmods:three_channels", "raised RuntimeError"),
    ("archmods:no_logits", "not 2x3 logits"),
])
def test_the_probe_runs_the_model_on_the_data_and_counts_the_layer(user_modules, arch, words):
    """Built is not enough: one forward pass on a batch of the search's images must give a score per class and
    run a layer that norm_act built (a builder that never does would score every candidate alike)."""
    from evonorm.models import probe_arch

    probe_arch(arch, num_classes=3, in_chans=1)  # it builds: only running it tells
    with pytest.raises(ValueError) as err:
        probe_arch(arch, num_classes=3, in_chans=1, batch=torch.randn(2, 1, 6, 6))
    assert words in str(err.value) and "\n" not in str(err.value) and arch in str(err.value)
    probe_arch("archmods:build", num_classes=3, in_chans=1, batch=torch.randn(2, 1, 6, 6))


def test_train_config_takes_external_names_without_importing(user_modules):
    cfg = TrainConfig(arch="archplanted:build")  # its form only: nothing imported
    assert cfg.resolved_width() is None and not (user_modules / "ran").exists()
    assert TrainConfig(arch="timm:resnet18").resolved_width() is None
    with pytest.raises(ValueError, match="width does not apply to archmods:build"):
        TrainConfig(arch="archmods:build", width=0.5)
    with pytest.raises(ValueError, match="unknown architecture"):
        TrainConfig(arch="not an arch")
    search = ProxyTask.of_run(get_preset("tiny", archs=("archmods:build", "resnet50_cifar")))
    assert search.training["archmods:build"].width is None  # the preset's width: built-ins only
    assert search.training["resnet50_cifar"].width == 0.0625


def _npz(ws: Path, n=500) -> Path:
    rng = np.random.default_rng(0)
    y = np.arange(n) % 3
    x = (rng.random((n, 8, 8)) * 80 + y[:, None, None] * 60).astype(np.uint8)
    np.savez(ws / "mine.npz", x=x, y=y)
    return ws / "mine.npz"


def test_train_on_my_data_with_my_architecture(user_modules, capsys):
    from evonorm.cli import main

    path = _npz(user_modules)
    out = user_modules / "r.json"
    assert main(["train", "--layer", "evonorm_s0", "--data", str(path), "--arch", "archmods:build",
                 "--train-preset", "tiny", "--steps", "4", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "archmods:build" in printed and str(path) in printed and "accuracy" in printed
    record = json.loads(out.read_text())
    assert record["status"] == "ok" and record["config"]["arch"] == "archmods:build"
    assert set(record["layer_calls"]) == {"fast"}  # EvoNorm-S0 on the CPU: its hand-written kernel (the fast path)
    assert record["dataset"] == str(path)


BAD_ARCHS = ["nosuchmodule_xyz:build", "archmods:nothere", "archmods:not_callable",
             "archmods:one_argument", "archbroken:build", "archmods:raises", "archmods:returns_none",
             "not an arch", "archmods:no_norm_act", "archmods:unused_layer", "archmods:three_channels",
             "archmods:no_logits"]


def _workspace(ws: Path) -> None:
    (ws / "archmods.py").write_text(BUILDERS)
    (ws / "archbroken.py").write_text("raise ImportError('needs a GPU library')\n")
    _npz(ws)


@pytest.mark.parametrize("command", ["train", "search", "calibrate"])
def test_bad_archs_exit_2_in_one_line_writing_nothing(command, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    _forget_modules(monkeypatch)
    flag = "--arch" if command == "train" else "--archs"
    tail = {"train": ["--layer", "bn_relu", "--train-preset", "tiny", "--steps", "2"],
            "search": ["--preset", "tiny", "--out", "new"],
            "calibrate": ["--preset", "tiny", "--out", "cal"]}[command]
    for arch in BAD_ARCHS:
        def case(ws, arch=arch):
            _workspace(ws)
            arch_arg = arch if command == "train" else f"resnet50_cifar,{arch}"
            return [command, "--data", "mine.npz", flag, arch_arg, *tail]
        check_refused(case)
    check_refused(lambda ws: (_workspace(ws), ["train", "--data", "mine.npz", "--arch", "archmods:build",
                                                "--width", "0.5", "--layer", "bn_relu"])[1])


def test_a_run_folder_never_makes_a_command_import_its_code(user_modules, capsys):
    """A run naming MODULE:FUNCTION (planted or real): resume, rerank and retrain exit 2 naming
    the flag, and import nothing, until the user passes the same --arch again."""
    from evonorm.cli import main
    from evonorm.search.store import Store

    run = user_modules / "run"
    init_run(run, get_preset("tiny", archs=("archplanted:build", "resnet50_cifar")))
    with Store(run) as store:
        assert stored_task(store.search_config()).archs[0] == "archplanted:build"
    for argv in (["resume", str(run)], ["rerank", str(run)], ["retrain", str(run), "--seeds", "2"],
                 ["resume", str(run), "--arch", "archmods:build"]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "Traceback" not in err
        assert ("name it again to use it (--arch archplanted:build" in err
                or "is not one of the run's architectures" in err), err
    assert not (user_modules / "ran").exists()
    # named again, it is imported
    main(["rerank", str(run), "--arch", "archplanted:build"])
    assert (user_modules / "ran").exists()


def test_timm_names_in_a_run_need_no_flag():
    from evonorm.commands._common import check_run_archs

    check_run_archs("run", ("timm:resnet18", "resnet50_cifar"), None)  # not user code: no import


def test_the_python_api_asks_for_the_names_again_too(user_modules):
    from evonorm.measure.references import train_references
    from evonorm.measure.rerank import rerank
    from evonorm.measure.retrain import retrain

    run = user_modules / "run"
    init_run(run, get_preset("tiny", archs=("archplanted:build", "resnet50_cifar")))
    for call in (lambda: rerank(run), lambda: retrain(run, seeds=2),
                 lambda: train_references(run, ["bn_relu"]),
                 lambda: rerank(run, user_archs=["archmods:build"])):
        with pytest.raises(ValueError, match="archplanted:build|not one of the run's"):
            call()
    assert not (user_modules / "ran").exists()
    assert rerank(run, user_archs=["archplanted:build"], log=lambda s: None) == []  # no valid layer yet


@pytest.mark.extras
def test_train_a_timm_model_on_my_data(user_modules, monkeypatch, capsys):
    from evonorm.cli import main

    load_timm(monkeypatch)  # in-process: the command imports the timm loaded here
    path = _npz(user_modules, n=80)
    assert main(["train", "--layer", "evonorm_s0", "--data", str(path), "--arch", "timm:resnet18",
                 "--train-preset", "tiny", "--steps", "2", "--batch-size", "8", "--groups", "8"]) == 0
    out = capsys.readouterr().out
    assert "timm:resnet18" in out and "accuracy" in out
    assert main(["train", "--layer", "bn_relu", "--data", str(path), "--arch", "timm:no_such_net",
                 "--train-preset", "tiny", "--steps", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "timm has no model 'no_such_net'" in err
