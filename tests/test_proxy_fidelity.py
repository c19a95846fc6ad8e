"""The chart's derived settings: other ways to score a measured setting's runs, with their cost."""

import json
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from evonorm.proxy.calibrate import RunRecord

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
import proxy_fidelity as pf  # noqa: E402

R, M = "resnet50_cifar", "mobilenetv2_cifar"


def _record(name: str, seed: int, stage1: float, runs: list[float], mobile: float = 0.5) -> RunRecord:
    """A demo-like panel record: 2 runs to the first stage, 4 at the end, on two architectures."""
    run_scores = {R: runs, M: [mobile] * 4}
    final = {a: sum(v) / 4 for a, v in run_scores.items()}
    return RunRecord("panel", name, seed, "valid", None, accuracies=final,
                     fitness=sum(final.values()) / 2, seconds=100.0,
                     stage_scores=[{R: stage1, M: mobile}, final], run_scores=run_scores,
                     arch_seconds={R: 30.0, M: 70.0})


def test_each_rule_scores_the_runs_and_costs_what_it_trains():
    rec = _record("a", 0, stage1=0.4, runs=[0.6, 0.8, 0.5, 0.9])
    kw = {"train_seeds": 2, "stage_share": 0.25, "ahead_panel": 4.0, "chance": 0.1}
    assert pf.rescore(rec, "arch:resnet50_cifar", **kw) == pytest.approx((0.7, 30.0))
    assert pf.rescore(rec, "stage1", **kw) == pytest.approx((0.45, 25.0))
    assert pf.rescore(rec, "runs:2", **kw) == pytest.approx(((0.7 + 0.5) / 2, 50.0))
    assert pf.rescore(rec, "median", **kw) == pytest.approx(((0.7 + 0.5) / 2, 100.0))
    # ResNet50 gained 0.7 - 0.4 = 0.3 from the first stage to the end (its first two runs)
    assert pf.rescore(rec, "ahead:1", **kw) == pytest.approx(((0.7 + 0.3 + 0.5) / 2, 100.0))
    assert pf.rescore(rec, "ahead:panel", **kw) == pytest.approx(((0.7 + 1.2 + 0.5) / 2, 100.0))
    bad = RunRecord("panel", "b", 0, "rejected", "nonfinite", seconds=7.0)
    assert pf.rescore(bad, "median", **kw) == (0.1, 7.0)
    old = RunRecord("panel", "c", 0, "valid", None, accuracies={R: 0.5}, fitness=0.5)
    with pytest.raises(ValueError, match="keeps no per-run scores"):
        pf.rescore(old, "median", **kw)


def test_a_derived_setting_is_measured_from_its_settings_runs(tmp_path):
    panel = tmp_path / "panel.json"
    ref = {"a": 0.9, "b": 0.8, "c": 0.7, "d": 0.6}
    panel.write_text(json.dumps({"reference": {
        "setting": {"steps": 2000, "batch_size": 64},
        "runs": [{"layer": n, "graph": None, "arch": R, "seed": 0, "test_accuracy": acc}
                 for n, acc in ref.items()]}}))
    runs = tmp_path / "runs"
    (runs / "demo").mkdir(parents=True)
    # ResNet50's runs rank the layers as the reference does, MobileNetV2's the other way round
    recs = [_record(n, s, stage1=0.3, runs=[acc - 0.1 * s] * 4, mobile=1.5 - acc)
            for n, acc in ref.items() for s in (0, 1)]
    (runs / "demo" / "runs.jsonl").write_text("".join(json.dumps(asdict(r)) + "\n" for r in recs))
    entry = pf.measure_derived("demo/resnet50", panel, runs)
    assert entry["spearman"] == pytest.approx(1.0) and entry["wrong_pairs"] == []
    assert entry["worker_seconds_per_candidate"] == pytest.approx(30.0)
    assert pf.measure_derived("demo/mobilenetv2", panel, runs)["spearman"] == pytest.approx(-1.0)
    stored = json.loads(panel.read_text())["proxies"]
    assert set(stored) == {"demo:demo/resnet50", "demo:demo/mobilenetv2"}
    assert stored["demo:demo/resnet50"]["setting"]["rule"] == "arch:resnet50_cifar"
    # demo trains 150 steps of batch 32 from a first stage of 75: the reference's 2000 x 64 lies
    # log2(128000 / 4800) = 4.74 doublings further
    assert pf.measure_derived("demo/ahead-panel", panel, runs)["setting"]["ahead_panel"] == \
        pytest.approx(4.737, abs=1e-3)
    with pytest.raises(SystemExit, match="no runs of demo"):
        pf.measure_derived("demo/median", panel, tmp_path / "elsewhere")
