"""`evonorm search / resume / rerank` end to end on the tiny preset (synthetic data, real training)."""

import subprocess
import sys

from pathlib import Path

import pytest

from evonorm.cli import main
from evonorm.measure.rerank import read_reranks
from evonorm.search.store import Store
from evonorm.proxy.config import configured, stored_task


EVONORM = str(Path(sys.executable).parent / "evonorm")  # the installed console script


def _run(argv):
    return main(argv)


@pytest.mark.parametrize("argv, message", [
    (["search", "--preset", "nope", "--out", "X"], "invalid choice: 'nope'"),
    (["search", "--preset", "tiny", "--budget", "0", "--out", "X"], "budget must be >= 1"),
    (["search", "--preset", "tiny", "--space", "q", "--out", "X"], "invalid choice: 'q'"),
    (["search", "--preset", "tiny", "--archs", "vgg", "--out", "X"], "unknown architecture 'vgg'"),
    (["search", "--preset", "tiny", "--dataset", "mnist", "--out", "X"], "unknown dataset 'mnist'"),
    (["search", "--preset", "tiny", "--seed-layers", "nope", "--out", "X"], "seed layer 'nope'"),
    (["search", "--preset", "tiny", "--address", "a:1", "--out", "X"], "--address applies to"),
    (["search", "--preset", "tiny", "--seed-layers", "evonorm_b0", "--out", "X"],
     "uses batch statistics"),
    (["resume", "nowhere"], "no search store in nowhere"),
    (["rerank", "nowhere"], "no search store in nowhere"),
])
def test_bad_arguments_are_one_line_exit_2(tmp_path, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    proc = subprocess.run([EVONORM, *argv], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "X").exists()  # nothing half-written


def test_search_resume_rerank_tiny(tmp_path, capsys):
    run = tmp_path / "run"
    argv = ["search", "--preset", "tiny", "--out", str(run), "--budget", "4", "--workers", "2",
            "--seed-layers", "evonorm_s0,zero", "--data-seed", "3", "--final-train-runs", "2", "--quiet"]
    assert _run(argv) == 0
    out = capsys.readouterr().out
    assert "search complete: 4/4" in out and "rank" in out and "sigma(v1*x)" in out
    with Store(run, readonly=True) as s:
        cands = s.candidates()
        assert len(cands) == 4 and s.get_meta("status") == "complete"
        cfg = s.search_config()
        assert stored_task(cfg).data_seed == 3 and cfg.seed == 0 and stored_task(cfg).final_train_runs == 2
        by_proposal = sorted(cands, key=lambda c: c.proposal)
        assert [c.origin for c in by_proposal] == ["seed", "seed", "random", "random"]
        s0 = next(c for c in cands if c.origin == "seed" and c.status == "valid")
        assert set(s0.scores) == {"resnet50_cifar", "mobilenetv2_cifar"}
        assert s0.timings.get("train", 0) > 0 and s0.seconds > 0
        zero = next(c for c in cands if c.origin == "seed" and c.status != "valid")
        assert zero.reason == "precheck:constant" and zero.reason_step == 0
    # a non-empty run folder needs --force
    assert _run(argv) == 2
    assert "not empty" in capsys.readouterr().err
    # complete: resume says so and exits 0
    assert _run(["resume", str(run)]) == 0
    assert "already complete" in capsys.readouterr().out
    # rerank the best layer in the preset's larger setting, scored on the test split
    assert _run(["rerank", str(run), "--top", "1"]) == 0
    out, err = capsys.readouterr()
    assert "scored on the synthetic test split (256 of 512 images), never seen by the search" in out
    assert "rerank [1/1] candidate" in err and "rerank 6 steps of 16, 1024 training images" in err
    (r,) = read_reranks(run)
    assert r.candidate_id == s0.id and r.status == "ok" and f"  1  id {s0.id} " in out  # ranked first
    assert set(r.scores) == {"resnet50_cifar", "mobilenetv2_cifar"}
    assert r.setting.startswith("tiny[") and r.split.startswith("synthetic test split")
    # a setting no larger than the search's is refused in one line, before anything is written
    assert _run(["rerank", str(run), "--top", "1", "--steps", "4"]) == 2
    assert "not larger than the search's" in capsys.readouterr().err
    # raising the budget continues the same run
    assert _run(["resume", str(run), "--budget", "5", "--quiet"]) == 0
    with Store(run, readonly=True) as s:
        assert s.num_candidates() == 5


def test_the_start_line_says_how_far_the_preset_is_calibrated(tmp_path, capsys):
    from evonorm.proxy.presets import calibration_note

    assert "18 of 18" in calibration_note("demo", "s") and "900-step" in calibration_note("demo", "s")
    assert "not measured" in calibration_note("scratch", "s")  # at its 900 steps staged at 75
    assert "not measured" in calibration_note("demo", "b")  # not at its 900 steps
    assert "not measured" in calibration_note("paper-s", "s")
    assert "24 of 24" in calibration_note("demo-b", "b")
    assert _run(["search", "--preset", "tiny", "--out", str(tmp_path / "r"), "--budget", "1",
                 "--workers", "1", "--seed-layers", "zero"]) == 0
    err = capsys.readouterr().err
    assert "calibration of tiny (S space): not measured" in err
    assert "evonorm calibrate --preset tiny --space s" in err


def test_each_shipped_measurement_names_its_preset_numbers_and_command():
    import json

    from evonorm.proxy import presets

    data = json.loads((Path(presets.__file__).parent / "measured.json").read_text())
    for entry in data["calibration"] + data["fidelity"] + data["cost"]:
        assert entry["preset"] in presets.list_presets() and entry["space"] in ("s", "b")
        assert entry["command"].split()[0] in ("evonorm", "python") and entry["measured"]
        assert entry["numbers"] and entry["summary"].format(**entry["numbers"])
    assert "Spearman 0.90 (95% interval 0.68-0.97)" in presets.fidelity_note("demo", "s")


def test_a_run_off_its_presets_settings_is_not_lent_the_presets_numbers():
    from evonorm.proxy.presets import calibration_note, fidelity_note, get_preset, list_presets, unmeasured

    for name in list_presets():  # every preset, as a run stores it, is what was measured
        cfg = get_preset(name)
        stored = configured(cfg, dataset=stored_task(cfg).dataset or "fashion_mnist", workers=1,
                            budget=3, seed=7)
        assert unmeasured(name, stored.to_dict()) == []
    off = get_preset("demo", train_runs=2, final_train_runs=4, dataset="fashion_mnist").to_dict()
    assert unmeasured("demo", off) == ["train_runs", "final_train_runs"]
    note = calibration_note("demo", "s", off)
    assert note.startswith("calibration of demo (S space): not measured at this run's settings")
    assert "train_runs and final_train_runs differ" in note and "18 of 18" not in note
    synthetic = get_preset("demo", dataset="synthetic").to_dict()
    assert "its dataset differs" in fidelity_note("demo", "s", synthetic)
    longer = get_preset("demo", stage_steps=(50,), dataset="fashion_mnist").to_dict()
    assert unmeasured("demo", longer) == ["stage_steps"]
    # a stored config older than a setting is not compared on it; an unknown preset on nothing
    older = {**off, "task": {k: v for k, v in off["task"].items()
                             if k not in ("train_runs", "final_train_runs")}}
    assert unmeasured("demo", older) == []
    assert unmeasured("mine", off) == [] and "not measured;" in calibration_note("mine", "s", off)


def test_the_start_line_says_threads_and_a_synthetic_dataset_and_a_file_is_no_run_folder(tmp_path,
                                                                                        capsys):
    assert _run(["search", "--preset", "tiny", "--out", str(tmp_path / "r"), "--budget", "1",
                 "--workers", "1", "--threads", "1", "--seed-layers", "zero"]) == 0
    err = capsys.readouterr().err
    assert "1 local worker(s) of 1 torch thread ->" in err
    assert "dataset synthetic: generated images for tests" in err
    (tmp_path / "f").write_text("x")
    for extra in ([], ["--force"]):
        assert _run(["search", "--preset", "tiny", "--out", str(tmp_path / "f"), *extra]) == 2
        line = capsys.readouterr().err.strip()
        assert "is a file, not a folder" in line and line.count(str(tmp_path / "f")) == 1


def test_the_preset_help_quotes_no_measurement_and_the_performance_page_has_each_with_its_command():
    import json

    from evonorm.commands.search import build_parser
    from evonorm.proxy import presets

    text = " ".join(build_parser().format_help().split())  # as wrapped, at any width
    assert "docs/performance.md" in text and "worker-seconds" not in text
    page = " ".join((Path(__file__).parents[1] / "docs" / "performance.md").read_text().split())
    for entry in json.loads((Path(presets.__file__).parent / "measured.json").read_text())["cost"]:
        assert f"{entry['numbers']['seconds_per_candidate']:g} worker-seconds" in page
        assert entry["command"].split(" (")[0] in page


def test_the_task_hands_the_engine_its_presets_measured_cost_at_the_presets_settings_only():
    import json

    from evonorm.proxy import presets
    from evonorm.proxy.objective import ProxyObjective

    data = json.loads((Path(presets.__file__).parent / "measured.json").read_text())
    demo = next(e for e in data["cost"] if e["preset"] == "demo")["numbers"]["seconds_per_candidate"]
    at = presets.get_preset("demo", dataset="fashion_mnist", budget=8, workers=1)
    cost = ProxyObjective.for_run(at).expected_cost()
    assert cost.seconds == demo and cost.source == "demo's measured cost"
    off = presets.get_preset("demo", dataset="fashion_mnist", n_train=500)
    assert ProxyObjective.for_run(off).expected_cost() is None  # not what was measured
    paper = presets.get_preset("paper-s")
    assert ProxyObjective.for_run(paper).expected_cost() is None  # not measured
