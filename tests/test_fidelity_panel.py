"""experiments/fidelity_panel.py: the project's panel folder, chosen layers and seeds, each refused
in one line where it would mix with the panel's (the runs themselves: tests/test_panel.py)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from _scripts import load_script
from _search_fakes import demo_run

from evonorm.measure.panel import read_rows

fp = load_script("fidelity_panel")
ROOT = Path(fp.__file__).parents[1]  # where `python -m experiments.fidelity_panel` runs from


def _refused(monkeypatch, capsys, argv: list[str]) -> str:
    """The script run with `argv` must stop with exit 2 and one line on stderr: that line."""
    monkeypatch.setattr(sys, "argv", ["fidelity_panel.py", *argv])
    with pytest.raises(SystemExit) as stop:
        fp.main()
    err = capsys.readouterr().err.splitlines()
    assert stop.value.code == 2 and len(err) == 1
    return err[0]


def test_a_panel_folder_holds_one_setting_and_another_is_refused_in_one_line(tmp_path, monkeypatch, capsys):
    out = tmp_path / "panel"
    out.mkdir()
    old = {k: v for k, v in fp.REFERENCE.to_dict().items() if k != "device"}  # before --device
    (out / "panel.json").write_text(json.dumps({"reference": {"setting": {**old, "layers": ["x"]}}}))
    assert "holds a panel of another setting" in _refused(
        monkeypatch, capsys, ["--out", str(out), "--width", "0.25"])
    assert not (out / "runs.jsonl").exists()


def test_a_second_panel_on_the_same_folder_is_refused_in_one_line(tmp_path):
    from evonorm.search.lock import RunLock

    with RunLock(tmp_path):
        proc = subprocess.run([sys.executable, "-m", "experiments.fidelity_panel", "--out", str(tmp_path),
                               "--dry-run", "--seeds", "0", "--only", "bn_relu"],
                              capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "in use by another panel process" in proc.stderr
    assert not (tmp_path / "runs.jsonl").exists()


@pytest.mark.parametrize("extra,problem", [([], "folder of their own"),
                                           (["--out", "OUT"], "expected NAME=LAYER")])
def test_other_layers_refuse_the_panels_folder_and_bad_input_in_one_line(
        tmp_path, monkeypatch, capsys, extra, problem):
    layer = "w=gn_relu" if not extra else "w"
    argv = ["--layer", layer, *[str(tmp_path) if a == "OUT" else a for a in extra]]
    assert problem in _refused(monkeypatch, capsys, argv)
    assert not (tmp_path / "runs.jsonl").exists()


def test_a_runs_layers_refuse_the_panels_folder_in_one_line(tmp_path, monkeypatch, capsys):
    run = demo_run(tmp_path / "run")
    assert "folder of their own" in _refused(monkeypatch, capsys, ["--run", str(run), "--top", "1"])


@pytest.mark.parametrize("argv,problem", [(["--seeds", "3"], "not the panel's [0, 1, 2]"),
                                          (["--seeds", "-1", "--layer", "w=gn_relu", "--out", "OUT"],
                                           "seeds must be >= 0")])
def test_other_seeds_are_for_chosen_layers_in_a_folder_of_their_own(
        tmp_path, monkeypatch, capsys, argv, problem):
    argv = [str(tmp_path / "x") if a == "OUT" else a for a in argv]
    assert problem in _refused(monkeypatch, capsys, argv)
    assert not (tmp_path / "x").exists()


@pytest.mark.fashion_mnist
def test_a_layer_of_ones_own_trains_at_the_reference_setting_with_fresh_seeds(tmp_path):
    """A lead found at the setting's seeds is checked at seeds no one chose it at; the folder
    records them, so resuming it with the setting's seeds is refused as another setting."""

    def panel(*seeds: str):
        return subprocess.run([sys.executable, "-m", "experiments.fidelity_panel", "--out", str(tmp_path),
                               "--dry-run", "--seeds", *seeds, "--workers", "1",
                               "--layer", "w=gn_relu"], capture_output=True, text=True,
                              timeout=300, cwd=ROOT)

    proc = panel("4")
    assert proc.returncode == 0, proc.stderr
    rows = read_rows(tmp_path / "runs.jsonl")
    assert sorted((r.layer, r.arch, r.seed) for r in rows) == [
        ("w", "mobilenetv2_cifar", 4), ("w", "resnet50_cifar", 4)]
    setting = json.loads((tmp_path / "panel.json").read_text())["reference"]["setting"]
    assert setting["layers"] == ["w"] and setting["seeds"] == [4]
    proc = panel("0")
    assert proc.returncode == 2 and "another setting" in proc.stderr
    assert len(read_rows(tmp_path / "runs.jsonl")) == 2
