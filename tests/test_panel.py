"""The reference panel (`evonorm.measure.panel`, `evonorm calibrate --build-panel`): a killed run
resumes from its checkpoint and ends where an uninterrupted one does, the panel file keeps what
calibrate wrote into it, and a panel the package writes is one `calibrate --panel` reads."""

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from _search_fakes import demo_run

from evonorm.cli import main
from evonorm.measure import panel as pn

SETTING = replace(pn.REFERENCE, dataset="synthetic", steps=10, n_train=256, n_test=64, lr_warmup=2)


def _job(out: Path, layer: str = "evonorm_s0", arch: str = "resnet50_cifar", seed: int = 0) -> dict:
    return {"layer": layer, "spec": layer, "arch": arch, "seed": seed, "out": str(out),
            "setting": SETTING.to_dict(), "data_root": None}


def _row(layer: str, arch: str, seed: int, acc: float, curve: list) -> pn.PanelRow:
    return pn.PanelRow(layer, None, arch, seed, acc, "ok", None, curve, 0.5, 3.0)


def test_a_killed_run_resumes_from_its_checkpoint_and_ends_alike(tmp_path, monkeypatch):
    from evonorm.train import Run

    whole = pn.train_run(_job(tmp_path / "a"))
    assert [p for p, _ in whole["curve"]] == [2, 4, 6, 8, 10]  # every fifth for EvoNorm-S0
    assert whole["graph"] == {"nodes": [["mul", 3, 0], ["sigmoid", 4], ["mul", 0, 5],
                                        ["group_std", 0], ["div", 6, 7]]}

    killed = _job(tmp_path / "b")
    advance = Run.advance

    def die_at_step_6(self, to_step=None, **kw):
        if to_step == 6:
            raise KeyboardInterrupt
        return advance(self, to_step, **kw)

    monkeypatch.setattr(Run, "advance", die_at_step_6)
    with pytest.raises(KeyboardInterrupt):
        pn.train_run(killed)
    assert Path(whole["ckpt"].replace("/a/", "/b/")).is_file()  # the step-4 checkpoint
    monkeypatch.setattr(Run, "advance", advance)
    resumed = pn.train_run(killed)
    assert resumed["curve"] == whole["curve"] and resumed["test_accuracy"] == whole["test_accuracy"]
    assert resumed["final_loss"] == whole["final_loss"]


def test_the_panel_file_keeps_the_proxies(tmp_path):
    (tmp_path / "panel.json").write_text(json.dumps({"reference": {}, "proxies": {"demo": {"x": 1}}}))
    row = _row("bn_relu", "resnet50_cifar", 0, 0.5, [[6, 0.4], [8, 0.5], [10, 0.5]])
    pn.write_panel(tmp_path, [row], 12.0, "python experiments/fidelity_panel.py", SETTING)
    data = json.loads((tmp_path / "panel.json").read_text())
    assert data["proxies"] == {"demo": {"x": 1}}
    assert data["reference"]["runs"] == [{"layer": "bn_relu", "graph": None, "arch": "resnet50_cifar", "seed": 0,
                                          "test_accuracy": 0.5, "status": "ok",
                                          "curve": [[6, 0.4], [8, 0.5], [10, 0.5]], "seconds": 3.0}] and data["reference"]["wall_seconds"] == 12.0
    assert len(data["reference"]["setting"]["layers"]) >= 16 and data["reference"]["machine"]


def test_other_layers_name_themselves_in_the_panel_file(tmp_path):
    row = _row("winner", "resnet50_cifar", 0, 0.5, [[10, 0.5]])
    pn.write_panel(tmp_path, [row], 1.0, "cmd", SETTING, ["winner"])
    assert json.loads((tmp_path / "panel.json").read_text())["reference"]["setting"]["layers"] == [
        "winner"]


def test_a_panel_folder_holds_one_setting_and_another_is_refused(tmp_path):
    out = tmp_path / "panel"
    out.mkdir()
    old = {k: v for k, v in pn.REFERENCE.to_dict().items() if k != "device"}  # before --device
    (out / "panel.json").write_text(json.dumps({"reference": {"setting": {**old, "layers": ["x"]}}}))
    assert pn.stored_setting(out) == pn.REFERENCE  # an earlier panel ran on the CPU
    with pytest.raises(ValueError, match="holds a panel of another setting"):
        pn.build_panel(out, replace(pn.REFERENCE, width=0.25))
    assert not (out / "runs.jsonl").exists()


def test_a_second_panel_on_the_same_folder_is_refused(tmp_path):
    from evonorm.search.lock import RunLock

    with RunLock(tmp_path):
        with pytest.raises(ValueError, match="in use by another panel process"):
            pn.build_panel(tmp_path, SETTING, only=["bn_relu"], seeds=[0])
    assert not (tmp_path / "runs.jsonl").exists()


def test_the_table_ranks_by_reference_and_shows_the_last_fifth():
    def row(layer, arch, seed, acc, before):
        return _row(layer, arch, seed, acc, [[1200, 0.5], [1600, before], [2000, acc]])

    rows = [row("a", "resnet50_cifar", 0, 0.70, 0.72), row("a", "resnet50_cifar", 1, 0.74, 0.70),
            row("a", "mobilenetv2_cifar", 0, 0.60, 0.60),
            row("b", "resnet50_cifar", 0, 0.80, 0.79)]  # b: one architecture so far
    lines = pn.panel_table(rows).splitlines()
    assert lines[2].startswith("| b | 80.0 (0) |  | 80.0 |")
    # a: ResNet50 72.0 over seeds 0 and 1, reference (72 + 60) / 2; moved -2 and +4 points
    assert lines[3] == "| a | 72.0 (0, 1) | 60.0 (0) | 66.0 | +1.0 (largest +4.0) | +0.0 (largest +0.0) |"
    assert lines[-1].endswith("not measurable before two seeds are done on every architecture")


def test_the_table_states_the_references_agreement_with_itself():
    rows = [_row(layer, arch, seed, acc, []) for seed in (0, 1) for arch in ("resnet50_cifar", "mobilenetv2_cifar")
            for layer, acc in (("a", 0.8), ("b", 0.7), ("c", 0.6 if seed == 0 else 0.75))]
    # seed 0 ranks a > b > c, seed 1 a > c > b: Spearman 0.5 each way
    assert pn.panel_table(rows).splitlines()[-1].endswith("would reach): 0.50")


def test_other_layers_are_read_as_evonorm_train_reads_them(tmp_path):
    graph = {"nodes": [["group_mean", 0], ["neg", 4], ["add", 0, 5], ["group_std", 0],
                       ["div", 6, 7], ["add", 8, 8]]}
    (tmp_path / "top.json").write_text(json.dumps(graph))
    got = pn.named_layers(["winner=@" + str(tmp_path / "top.json"), "gn=gn_relu",
                           "inline=" + json.dumps(graph), "s0=evonorm_s0"])
    assert got[0] == ("winner", graph) and got[1] == ("gn", "gn_relu")
    assert got[2] == ("inline", graph) and got[3][0] == "s0" and isinstance(got[3][1], str)
    for bad, problem in (("winner", "expected NAME=LAYER"), ("w=nonsense", "nonsense"),
                         ("w=@" + str(tmp_path / "absent.json"), "cannot read layer JSON")):
        with pytest.raises(ValueError, match=problem):
            pn.named_layers([bad])


def test_a_runs_found_layers_are_those_retrain_picks_named_by_id(tmp_path):
    run = demo_run(tmp_path / "run")  # one found layer (id 2), one seed layer
    got = pn.found_layers(run, 3)
    assert [name for name, _ in got] == ["found_2"]
    assert got[0][1]["nodes"][1] == ["square", 2]  # the found layer's graph, not the seed's
    for folder, top, problem in ((tmp_path, 3, "not a run folder"), (run, 0, "--top must be")):
        with pytest.raises(ValueError, match=problem):
            pn.found_layers(folder, top)


def _npz(path: Path) -> Path:
    rng = np.random.default_rng(0)
    y = np.arange(200) % 4
    x = (rng.random((200, 16, 16, 3)) * 60 + y[:, None, None, None] * 40).astype(np.uint8)
    np.savez(path, x=x, y=y)
    return path


def test_a_panel_the_package_builds_is_one_calibrate_reads(tmp_path, capsys):
    data = _npz(tmp_path / "mine.npz")
    setting = replace(pn.with_dataset(pn.REFERENCE, str(data)), steps=10, lr_warmup=2, seeds=(0,))
    assert setting.n_train is None and setting.n_test is None  # a file of one's own: all of it
    out = tmp_path / "panel"
    layers = [("bn_relu", "bn_relu"), ("gn_relu", "gn_relu"), ("evonorm_s0", "evonorm_s0")]
    seen = []
    assert pn.build_panel(out, setting, workers=2, layers=layers, on_done=seen.append) == 0
    assert sorted(p.index for p in seen) == [1, 2, 3, 4, 5, 6] and all(p.row for p in seen)
    rows = pn.read_rows(out / "runs.jsonl")
    assert sorted((r.layer, r.arch) for r in rows) == sorted(
        (name, arch) for name, _ in layers for arch in pn.ARCH_LR)
    assert not list((out / "ckpt").glob("*.pt"))  # a finished run's checkpoint is gone
    assert (out / "panel.md").read_text().startswith("| layer |")
    assert pn.build_panel(out, setting, layers=layers) == 0  # done: nothing trains again
    assert len(pn.read_rows(out / "runs.jsonl")) == 6
    cal = tmp_path / "cal"
    assert main(["calibrate", "--preset", "tiny", "--seeds", "1", "--random", "0", "--workers", "2",
                 "--panel", str(out / "panel.json"), "--out", str(cal)]) == 0
    assert "rank fidelity of tiny against the reference panel (3 layers, " in capsys.readouterr().out
    assert "tiny" in json.loads((out / "panel.json").read_text())["proxies"]


@pytest.mark.parametrize("argv,problem", [
    (["--steps", "100"], "--steps applies to --build-panel only"),
    (["--build-panel", "OUT", "--steps", "5"], "--steps must be >= 10"),
    (["--build-panel", "OUT", "--panel", "OUT/panel.json"], "build the panel first"),
    (["--build-panel", "OUT", "--data", "OUT/absent.npz"], "absent.npz"),
    (["--build-panel", "OUT", "--preset", "tiny"], "--preset does not apply to --build-panel"),
    (["--build-panel", "OUT", "--random", "0"], "--random does not apply to --build-panel"),
    (["--build-panel", "OUT", "--out", "OUT"], "--out does not apply to --build-panel"),
    (["--random", "-1"], "--random must be >= 0"),
])
def test_build_panel_refuses_bad_input_in_one_line(tmp_path, capsys, argv, problem):
    argv = [a.replace("OUT", str(tmp_path / "p")) for a in argv]
    assert main(["calibrate", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and problem in err[0]
    assert not (tmp_path / "p" / "runs.jsonl").exists()


def test_the_panels_runs_are_read_as_the_ledger_reads_its_rows(tmp_path, capsys):
    """A line torn by a kill is skipped and a run that cannot be true (a NaN on its curve) is
    dropped with one warning, both trained again; a folder of no format version is refused."""
    from dataclasses import asdict

    good = _row("a", "resnet50_cifar", 0, 0.5, [[10, 0.5]])
    bad = replace(good, layer="b", curve=[[10, float("nan")]])
    path = tmp_path / "runs.jsonl"
    path.write_text("".join(json.dumps(asdict(r)) + "\n" for r in (good, bad)) + '{"layer": "c", "gra')
    assert pn.read_rows(path) == [good]
    assert "dropped 1 row(s)" in capsys.readouterr().err
    path.write_text(json.dumps({k: v for k, v in asdict(good).items() if k != "version"}) + "\n")
    with pytest.raises(ValueError, match="no format version"):
        pn.build_panel(tmp_path, SETTING, only=["bn_relu"], seeds=[0])
    assert not list(tmp_path.glob("ckpt/*"))  # refused before any training
