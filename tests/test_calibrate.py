"""`evonorm calibrate`: the summary's numbers, resume from runs.jsonl, bad input, one real tiny run."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from _calibrate_fakes import fake_measure
from evonorm.cli import main
from evonorm.measure.calibrate import (RUNS_NAME, RunRecord, format_summary, load_runs, calibration_jobs,
                                      prepare_out, run_jobs, summarize)
from evonorm.graph.library import NAMED_GRAPHS
from evonorm.proxy.presets import get_preset
from evonorm.proxy.config import ProxyTask, configured, stored_task

EVONORM = str(Path(sys.executable).parent / "evonorm")
ARCHS = ["a1", "a2"]


def _ref(name, seed, fit, passes=(True, True), status="valid"):
    return RunRecord("reference", name, seed, status, None if status == "valid" else "quality:a2",
                     quality=dict(zip(ARCHS, (0.4, 0.3))), quality_pass=dict(zip(ARCHS, passes)),
                     accuracies={a: fit for a in ARCHS}, fitness=fit)


def _rand(i, fit=None):
    if fit is None:
        return RunRecord("random", f"random{i}", 0, "rejected", "quality:a1")
    return RunRecord("random", f"random{i}", 0, "valid", None, accuracies={a: fit for a in ARCHS},
                     fitness=fit)


def test_summary_numbers():
    recs = [_ref("x", 0, 0.80), _ref("x", 1, 0.82), _ref("x", 2, 0.84),
            _ref("y", 0, 0.70), _ref("y", 1, 0.72), _ref("y", 2, 0.74, (True, False), "rejected"),
            _rand(0), _rand(1, 0.30), _rand(2, 0.20)]
    s = summarize(recs, ARCHS)
    assert s.all_pass is False  # y failed the quality test on a2 in seed 2
    assert s.worst_reference == pytest.approx(0.72) and s.best_random == pytest.approx(0.30)
    assert s.margin == pytest.approx(0.42)
    assert s.seed_std == pytest.approx(0.02)  # both references: std 0.02 over 3 seeds
    assert s.min_gap == pytest.approx(0.10) and s.max_gap == pytest.approx(0.10)
    assert s.random_valid == [pytest.approx(0.30), pytest.approx(0.20)]
    assert s.random_rejected == {"quality": 1}
    text = format_summary(s, 0.2)
    assert "| y | a1 | P(40.0) P(40.0) P(40.0) |" in text
    assert "| | a2 | P(30.0) P(30.0) F(30.0) |" in text.replace("|  |", "| |")
    assert "72.0 +- 2.0 (n=3)" in text and "passes rejection in every seed: NO" in text
    assert "margin, worst reference - best random layer: 42.0 points" in text
    assert "ratio seed spread / smallest gap: 0.20" in text
    assert "training runs" not in text
    assert "mean of its 2 training runs, as" in format_summary(s, 0.2, train_runs=2)
    assert "mean of its 2 training runs (4 at the last stage" in format_summary(s, 0.2, 2, 4)
    assert "training runs" not in format_summary(s, 0.2, 1, 1)


def test_summary_all_pass_and_no_valid_random():
    s = summarize([_ref("x", 0, 0.8), _ref("x", 1, 0.8), _rand(0)], ARCHS)
    assert s.all_pass and s.margin is None and s.min_gap is None and s.seed_std == 0.0
    assert "no valid random layer" in format_summary(s, 0.2)


def test_run_jobs_saves_each_run_and_resumes(tmp_path):
    cfg = get_preset("tiny", n_train=-9)  # marker: the fake's second random graph kills its worker
    jobs = calibration_jobs(cfg, seeds=2, n_random=3)
    assert [j.kind for j in jobs].count("reference") == 6 and len(jobs) == 9
    assert len({j.key for j in jobs}) == 9
    setup = {"config": cfg.to_dict(), "seeds": 2, "random": 3}
    assert prepare_out(tmp_path / "c", setup) == []
    lines = []
    run_jobs(jobs[:4], cfg, tmp_path / "c", workers=2, timeout=60, fn=fake_measure,
             on_done=lambda r, i, n: lines.append((r.name, i, n)))
    assert [(i, n) for _, i, n in lines] == [(1, 4), (2, 4), (3, 4), (4, 4)]
    # a kill mid-write leaves a partial line: ignored, its run is done again
    with open(tmp_path / "c" / RUNS_NAME, "a") as f:
        f.write('{"kind": "reference", "na')
    done = prepare_out(tmp_path / "c", setup)
    assert len(done) == 4
    new = run_jobs(jobs, cfg, tmp_path / "c", workers=2, timeout=60, fn=fake_measure)
    # rounds: every reference at seed 0 and random0, then the references at seed 1 and the rest
    assert [j.name for j in jobs[:4]] == ["bn_relu", "gn_relu", "evonorm_s0", "random0"]
    assert sorted(r.name for r in new) == ["bn_relu", "evonorm_s0", "gn_relu", "random1",
                                          "random2"]
    died = next(r for r in new if r.name == "random1")
    assert died.status == "failed" and "died" in died.reason
    assert len(load_runs(tmp_path / "c")) == 9
    assert run_jobs(jobs, cfg, tmp_path / "c", workers=2, timeout=60, fn=fake_measure) == []
    s = summarize(load_runs(tmp_path / "c"), list(stored_task(cfg).archs))
    assert s.all_pass and s.random_rejected == {"stability": 2, "worker died (exit code 3)": 1}
    # another setup in the same folder is refused
    with pytest.raises(ValueError, match="other settings"):
        prepare_out(tmp_path / "c", {**setup, "seeds": 3})


@pytest.mark.parametrize("argv, message", [
    (["calibrate", "--preset", "nope"], "invalid choice: 'nope'"),
    (["calibrate", "--preset", "tiny", "--seeds", "0", "--out", "X"], "--seeds must be >= 1"),
    (["calibrate", "--preset", "tiny", "--random", "-1", "--out", "X"], "--random must be >= 0"),
    (["calibrate", "--preset", "tiny", "--workers", "-1", "--out", "X"], "--workers must be >= 0"),
    (["calibrate", "--preset", "tiny", "--space", "q", "--out", "X"], "invalid choice: 'q'"),
    (["calibrate", "--preset", "tiny", "--dataset", "mnist", "--out", "X"], "unknown dataset"),
    (["calibrate", "--preset", "tiny", "--out", "afile"], "is not a folder"),
    (["calibrate", "--preset", "tiny", "--out", "full"], "is not empty and holds no calibration"),
])
def test_bad_input_is_one_line_exit_2(tmp_path, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("x")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "other.txt").write_text("x")
    proc = subprocess.run([EVONORM, *argv], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "X").exists()  # nothing half-written


def test_calibrate_tiny_end_to_end_and_resume(tmp_path, capsys):
    out = tmp_path / "cal"
    argv = ["calibrate", "--preset", "tiny", "--seeds", "1", "--random", "2", "--workers", "2",
            "--out", str(out)]
    assert main(argv) == 0
    cap = capsys.readouterr()
    assert cap.err.count("] ") >= 5  # a progress line per finished run
    assert "[5/5]" in cap.err
    assert "| bn_relu | resnet50_cifar | P(" in cap.out and "random layers: 2 drawn" in cap.out
    assert (out / "table.md").read_text().strip() == cap.out.strip()
    recs = load_runs(out)
    assert len(recs) == 5
    ref = next(r for r in recs if r.name == "evonorm_s0")
    assert set(ref.quality) == set(ref.accuracies) == {"resnet50_cifar", "mobilenetv2_cifar"}
    assert ref.fitness == pytest.approx(sum(ref.accuracies.values()) / 2)
    # run again (another worker count is the same calibration): nothing is re-run
    assert main(argv[:-4] + ["--workers", "1", "--out", str(out)]) == 0
    assert "resuming: 5 done" in capsys.readouterr().err
    assert len((out / RUNS_NAME).read_text().splitlines()) == 5
    assert json.loads((out / "calibration.json").read_text())["seeds"] == 1


def test_a_calibration_depends_on_the_proxy_not_on_the_search_strategy():
    from evonorm.measure.calibrate import calibration_setup

    demo = get_preset("demo")
    same = calibration_setup(configured(demo, budget=7, window=3, workers=1), 3, 20)
    assert calibration_setup(demo, 3, 20) == same
    assert calibration_setup(configured(demo, train_runs=2, final_train_runs=2), 3, 20) != same
    assert calibration_setup(demo, 4, 20) != same
    # the prescreen is how the search proposes: on, tuned, or not yet a field when the folder
    # was written, the same calibration
    assert calibration_setup(configured(demo, prescreen=True, prescreen_pool=8), 3, 20) == same
    older = {"config": demo.to_dict(), "seeds": 3, "random": 20}
    del older["config"]["evolution"]["prescreen_prior"]
    assert "prescreen_prior" in json.dumps(demo.to_dict())
    assert _same_folder(older, calibration_setup(demo, 3, 20))


def _same_folder(stored: dict, setup: dict) -> bool:
    """Whether a calibration folder written with `stored` takes runs of `setup` (else it raises)."""
    import tempfile

    from evonorm.measure.calibrate import prepare_out

    with tempfile.TemporaryDirectory() as d:
        prepare_out(Path(d) / "c", stored)
        return prepare_out(Path(d) / "c", setup) == []


@pytest.mark.slow
@pytest.mark.fashion_mnist
@pytest.mark.parametrize("arch", stored_task(get_preset("demo")).archs)
@pytest.mark.parametrize("name", ["bn_relu", "gn_relu", "evonorm_s0"])
def test_demo_references_pass_the_quality_test_on_fashion_mnist(name, arch):
    """The calibrated `demo` preset's quality test (what a search runs: its first training
    stage, the mean of its `train_runs` runs per architecture, scored against the bar) passes
    every S reference on every architecture, search seed 0 (docs/calibration.md). One test per
    reference and architecture (a run's seeds do not depend on the others), so that two test
    processes share them."""
    import torch

    from evonorm.graph import Graph
    from evonorm.measure.calibrate import reference_graphs
    from evonorm.proxy.training import search_dataset, train_stages

    torch.set_num_threads(1)  # as in a 2-worker search on 2 cores: the calibration's numbers
    assert sorted(reference_graphs("s")) == sorted(["bn_relu", "gn_relu", "evonorm_s0"])
    cfg = get_preset("demo", dataset="fashion_mnist")
    ds = search_dataset(ProxyTask.of_run(cfg))
    assert len(ds.test_y) == 1000 and cfg.hurdles.stage_steps and stored_task(cfg).quality_steps == 0
    assert stored_task(cfg).train_runs == 1 and cfg.hurdles.stage_steps == (150,)
    # a hurdle no layer clears stops each after the first stage, as the quality test does
    res = train_stages(Graph.from_json(reference_graphs("s")[name]), ds, ProxyTask.of_run(configured(cfg, archs=(arch,))),
                       hurdles=[1.01])
    assert res.status == "valid" and res.stage == 1, (res.reason, res.scores)


def test_staged_calibration_trains_random_layers_past_the_bar():
    """In a staged config every layer trains to the end: a random layer that fails the quality
    test (the first stage) is rejected but keeps its fitness, so the table has a margin."""
    from evonorm.measure.calibrate import measure, summarize

    cfg = get_preset("tiny", dataset="synthetic", n_train=96, quality_steps=0, stage_steps=(2,),
                     quality_factor=100.0, stability_steps=0, prechecks=False,
                     train={"steps": 4, "batch_size": 8, "width": 0.0625})
    graph = NAMED_GRAPHS["evonorm_s0"].to_json()
    rec = RunRecord(**measure({"job": {"kind": "random", "name": "random0", "seed": 0,
                                       "graph": graph}, "config": cfg.to_dict()}))
    assert rec.status == "rejected" and rec.reason == f"quality:{stored_task(cfg).archs[0]}"
    assert rec.fitness is not None and set(rec.accuracies) == set(stored_task(cfg).archs)
    assert rec.quality_pass == {a: False for a in stored_task(cfg).archs}
    ref = RunRecord(**measure({"job": {"kind": "reference", "name": "s0", "seed": 0,
                                       "graph": graph}, "config": cfg.to_dict()}))
    s = summarize([rec, ref], list(stored_task(cfg).archs))
    assert s.random_valid == [] and s.random_trained == [rec.fitness]
    assert s.margin is None and s.margin_trained == pytest.approx(ref.fitness - rec.fitness)


def test_a_folder_written_with_search_fields_in_its_setup_still_resumes(tmp_path):
    from evonorm.measure.calibrate import calibration_setup

    setup = calibration_setup(get_preset("demo"), 3, 20)
    out = tmp_path / "c"
    out.mkdir()
    config = setup["config"]
    old = {**setup, "config": {**config, "evolution": {**config["evolution"], "budget": 100,
                                                        "window": 16}}}
    (out / "calibration.json").write_text(json.dumps(old))
    assert prepare_out(out, setup) == []
    with pytest.raises(ValueError, match="other settings"):
        prepare_out(out, calibration_setup(get_preset("demo", train_runs=2, final_train_runs=2), 3, 20))


def test_runs_are_read_as_the_ledger_reads_its_rows(tmp_path, capsys):
    """A record that cannot be true (a NaN stage score) is dropped with one warning and its job
    runs again; a file of no format version is refused naming it, not misread."""
    from dataclasses import asdict

    from evonorm.files import DamagedFile

    good, bad = _ref("x", 0, 0.8), RunRecord("panel", "y", 0, "valid", None, stage_scores=[{"a1": float("nan")}])
    (tmp_path / RUNS_NAME).write_text("".join(json.dumps(asdict(r)) + "\n" for r in (good, bad)))
    assert load_runs(tmp_path) == [good]
    assert "dropped 1 row(s)" in capsys.readouterr().err
    (tmp_path / RUNS_NAME).write_text(json.dumps({k: v for k, v in asdict(good).items() if k != "version"}) + "\n")
    with pytest.raises(DamagedFile, match="no format version"):
        load_runs(tmp_path)
