"""The reference panel's runs: a killed run resumes from its checkpoint and ends where an
uninterrupted one does; the panel file keeps what calibrate wrote into it."""

import json
import sys
from pathlib import Path

import pytest
from _processes import alive

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
import fidelity_panel as fp  # noqa: E402

SETTING = {**fp.SETTING, "dataset": "synthetic", "steps": 10, "n_train": 256, "n_test": 64,
           "lr_warmup": 2, "eval_batch_size": 64}


def test_a_killed_run_resumes_from_its_checkpoint_and_ends_alike(tmp_path, monkeypatch):
    from evonorm.train import Run

    job = ("evonorm_s0", "evonorm_s0", "resnet50_cifar", 0, str(tmp_path / "a"), SETTING)
    whole = fp.train_one(job)
    assert [p for p, _ in whole["curve"]] == [2, 4, 6, 8, 10]  # every fifth for EvoNorm-S0
    assert whole["graph"] == {"nodes": [["mul", 3, 0], ["sigmoid", 4], ["mul", 0, 5],
                                        ["group_std", 0], ["div", 6, 7]]}

    killed = (*job[:4], str(tmp_path / "b"), SETTING)
    advance = Run.advance

    def die_at_step_6(self, to_step=None, **kw):
        if to_step == 6:
            raise KeyboardInterrupt
        return advance(self, to_step, **kw)

    monkeypatch.setattr(Run, "advance", die_at_step_6)
    with pytest.raises(KeyboardInterrupt):
        fp.train_one(killed)
    assert Path(whole["ckpt"].replace("/a/", "/b/")).is_file()  # the step-4 checkpoint
    monkeypatch.setattr(Run, "advance", advance)
    resumed = fp.train_one(killed)
    assert resumed["curve"] == whole["curve"] and resumed["test_accuracy"] == whole["test_accuracy"]
    assert resumed["final_loss"] == whole["final_loss"]


def test_the_panel_file_keeps_the_proxies(tmp_path):
    (tmp_path / "panel.json").write_text(json.dumps({"reference": {}, "proxies": {"demo": {"x": 1}}}))
    row = {"layer": "bn_relu", "graph": None, "arch": "resnet50_cifar", "seed": 0,
           "test_accuracy": 0.5, "status": "ok", "curve": [[6, 0.4], [8, 0.5], [10, 0.5]],
           "seconds": 3.0}
    fp.write_panel(tmp_path, [row], 12.0, "python experiments/fidelity_panel.py", SETTING)
    data = json.loads((tmp_path / "panel.json").read_text())
    assert data["proxies"] == {"demo": {"x": 1}}
    assert data["reference"]["runs"] == [row] and data["reference"]["wall_seconds"] == 12.0
    assert len(data["reference"]["setting"]["layers"]) >= 16 and data["reference"]["machine"]


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
    old = {k: v for k, v in fp.SETTING.items() if k != "device"}  # written before --device existed
    (out / "panel.json").write_text(json.dumps({"reference": {"setting": {**old, "layers": ["x"]}}}))
    assert fp.stored_setting(out) == fp.SETTING  # an earlier panel ran on the CPU
    assert "holds a panel of another setting" in _refused(
        monkeypatch, capsys, ["--out", str(out), "--width", "0.25"])
    assert not (out / "runs.jsonl").exists()


def test_a_second_panel_on_the_same_folder_is_refused_in_one_line(tmp_path):
    import subprocess

    from evonorm.search.lock import RunLock

    script = Path(fp.__file__)
    with RunLock(tmp_path):
        proc = subprocess.run([sys.executable, str(script), "--out", str(tmp_path), "--dry-run",
                               "--seeds", "0", "--only", "bn_relu"], capture_output=True, text=True,
                              timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "in use by another panel process" in proc.stderr
    assert not (tmp_path / "runs.jsonl").exists()


def test_a_worker_ends_with_the_process_that_started_it(tmp_path):
    """A killed panel leaves no worker training on into its checkpoints; a worker started from a
    thread that has ended lives on (a pool starts its replacement workers from a thread that ends
    when the pool closes: killing them there hung the pool)."""
    import os
    import signal
    import subprocess
    import time

    code = ("import os, sys, time; sys.path.insert(0, sys.argv[1]); "
            "from _common import die_with_parent; die_with_parent(); "
            "print('ready', os.getpid(), flush=True); time.sleep(120)")
    # the thread that starts the worker ends 3 s later, after the worker is ready
    parent = ("import subprocess, sys, threading, time; "
              "t = threading.Thread(target=lambda: (subprocess.Popen("
              "[sys.executable, '-c', sys.argv[1], sys.argv[2]]), time.sleep(3))); t.start(); "
              "t.join(); time.sleep(120)")
    proc = subprocess.Popen([sys.executable, "-c", parent, code, str(Path(fp.__file__).parent)],
                            stdout=subprocess.PIPE, text=True)
    try:
        word, pid = proc.stdout.readline().split()
        assert word == "ready"
        child = int(pid)
        time.sleep(4.5)  # the thread has ended; the worker's watch looks every second
        assert alive(child), "the worker ended with the thread that started it"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if not alive(child):
            break
        time.sleep(0.2)
    else:
        os.kill(child, signal.SIGKILL)
        raise AssertionError("the worker outlived the process that started it")


def test_the_table_ranks_by_reference_and_shows_the_last_fifth():
    def row(layer, arch, seed, acc, before):
        return {"layer": layer, "arch": arch, "seed": seed, "test_accuracy": acc,
                "curve": [[1200, 0.5], [1600, before], [2000, acc]]}

    rows = [row("a", "resnet50_cifar", 0, 0.70, 0.72), row("a", "resnet50_cifar", 1, 0.74, 0.70),
            row("a", "mobilenetv2_cifar", 0, 0.60, 0.60),
            row("b", "resnet50_cifar", 0, 0.80, 0.79)]  # b: one architecture so far
    lines = fp.panel_table(rows).splitlines()
    assert lines[2].startswith("| b | 80.0 (0) |  | 80.0 |")
    # a: ResNet50 72.0 over seeds 0 and 1, reference (72 + 60) / 2; moved -2 and +4 points
    assert lines[3] == "| a | 72.0 (0, 1) | 60.0 (0) | 66.0 | +1.0 (largest +4.0) | +0.0 (largest +0.0) |"
    assert lines[-1].endswith("not measurable before two seeds are done on every architecture")


def test_the_table_states_the_references_agreement_with_itself():
    rows = [{"layer": layer, "arch": arch, "seed": seed, "test_accuracy": acc, "curve": []}
            for seed in (0, 1) for arch in ("resnet50_cifar", "mobilenetv2_cifar")
            for layer, acc in (("a", 0.8), ("b", 0.7), ("c", 0.6 if seed == 0 else 0.75))]
    # seed 0 ranks a > b > c, seed 1 a > c > b: Spearman 0.5 each way
    assert fp.panel_table(rows).splitlines()[-1].endswith("would reach): 0.50")


def test_other_layers_are_read_as_evonorm_train_reads_them(tmp_path):
    graph = {"nodes": [["group_mean", 0], ["neg", 4], ["add", 0, 5], ["group_std", 0],
                       ["div", 6, 7], ["add", 8, 8]]}
    (tmp_path / "top.json").write_text(json.dumps(graph))
    got = fp.other_layers(["winner=@" + str(tmp_path / "top.json"), "gn=gn_relu",
                           "inline=" + json.dumps(graph), "s0=evonorm_s0"])
    assert got[0] == ("winner", graph) and got[1] == ("gn", "gn_relu")
    assert got[2] == ("inline", graph) and got[3][0] == "s0" and isinstance(got[3][1], str)
    for bad, problem in (("winner", "expected NAME=LAYER"), ("w=nonsense", "nonsense"),
                         ("w=@" + str(tmp_path / "absent.json"), "cannot read layer JSON")):
        with pytest.raises(ValueError, match=problem):
            fp.other_layers([bad])


@pytest.mark.parametrize("extra,problem", [([], "folder of their own"),
                                           (["--out", "OUT"], "expected NAME=LAYER")])
def test_other_layers_refuse_the_panels_folder_and_bad_input_in_one_line(
        tmp_path, monkeypatch, capsys, extra, problem):
    layer = "w=gn_relu" if not extra else "w"
    argv = ["--layer", layer, *[str(tmp_path) if a == "OUT" else a for a in extra]]
    assert problem in _refused(monkeypatch, capsys, argv)
    assert not (tmp_path / "runs.jsonl").exists()


def _run_with_a_found_and_a_seed_layer(tmp_path) -> Path:
    """A run folder holding one valid seed layer (GN-ReLU) and, after it, one valid found layer."""
    import time

    from evonorm.graph.library import NAMED_GRAPHS
    from evonorm.proxy.presets import get_preset
    from evonorm.search.driver import init_run
    from evonorm.search.evaluation import Evaluation
    from evonorm.search.settings import norm_relu
    from evonorm.search.store import PendingProposal, Store

    run = tmp_path / "run"
    init_run(run, get_preset("tiny"))
    found = {"nodes": [["sigmoid", 0], ["square", 2], ["mul", 0, 4]]}
    seed = json.loads(norm_relu("group"))
    assert found != NAMED_GRAPHS["evonorm_s0"].to_json()
    with Store(run) as s:
        for i, (graph, origin, fitness) in enumerate(((seed, "seed", 0.4), (found, "mutation", 0.5))):
            idx = s.add_proposal(graph, None, origin, [3, [i], None])
            s.add_candidate(PendingProposal(idx, graph, None, origin, time.time()),
                            Evaluation.valid({"resnet50_cifar": fitness, "mobilenetv2_cifar": fitness}),
                            key=f"k{i}", fingerprint=f"f{i}")
    return run


def test_a_runs_found_layers_are_those_retrain_picks_named_by_id(tmp_path):
    run = _run_with_a_found_and_a_seed_layer(tmp_path)  # one found layer, one seed layer
    got = fp.found_layers(run, 3)
    assert [name for name, _ in got] == ["found_2"]
    assert got[0][1]["nodes"][1] == ["square", 2]  # the found layer's graph, not the seed's
    for folder, top, problem in ((tmp_path, 3, "not a run folder"), (run, 0, "--top must be")):
        with pytest.raises(ValueError, match=problem):
            fp.found_layers(folder, top)


def test_a_runs_layers_refuse_the_panels_folder_in_one_line(tmp_path, monkeypatch, capsys):
    run = _run_with_a_found_and_a_seed_layer(tmp_path)
    assert "folder of their own" in _refused(monkeypatch, capsys, ["--run", str(run), "--top", "1"])


def test_other_layers_name_themselves_in_the_panel_file(tmp_path):
    row = {"layer": "winner", "graph": None, "arch": "resnet50_cifar", "seed": 0,
           "test_accuracy": 0.5, "status": "ok", "curve": [[10, 0.5]], "seconds": 3.0}
    fp.write_panel(tmp_path, [row], 1.0, "cmd", SETTING, ["winner"])
    assert json.loads((tmp_path / "panel.json").read_text())["reference"]["setting"]["layers"] == [
        "winner"]


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
    import subprocess

    def panel(*seeds: str):
        return subprocess.run([sys.executable, str(Path(fp.__file__)), "--out", str(tmp_path),
                               "--dry-run", "--seeds", *seeds, "--workers", "1",
                               "--layer", "w=gn_relu"], capture_output=True, text=True,
                              timeout=300)

    proc = panel("4")
    assert proc.returncode == 0, proc.stderr
    rows = fp.read_rows(tmp_path / "runs.jsonl")
    assert sorted((r["layer"], r["arch"], r["seed"]) for r in rows) == [
        ("w", "mobilenetv2_cifar", 4), ("w", "resnet50_cifar", 4)]
    setting = json.loads((tmp_path / "panel.json").read_text())["reference"]["setting"]
    assert setting["layers"] == ["w"] and setting["seeds"] == [4]
    proc = panel("0")
    assert proc.returncode == 2 and "another setting" in proc.stderr
    assert len(fp.read_rows(tmp_path / "runs.jsonl")) == 2
