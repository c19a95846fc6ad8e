"""The chart's derived settings: other ways to score a measured setting's runs, with their cost."""

import json
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from evonorm.measure.calibrate import RunRecord

from _scripts import load_script  # noqa: E402

pf = load_script("proxy_fidelity")

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
    kw = {"train_runs": 2, "stage_share": 0.25, "ahead_panel": 4.0, "chance": 0.1}
    assert pf.rescore(rec, "arch:resnet50_cifar", **kw) == pytest.approx((0.7, 30.0))
    assert pf.rescore(rec, "stage1", **kw) == pytest.approx((0.45, 25.0))
    assert pf.rescore(rec, "runs:2", **kw) == pytest.approx(((0.7 + 0.5) / 2, 50.0))
    assert pf.rescore(rec, "median", **kw) == pytest.approx(((0.7 + 0.5) / 2, 100.0))
    # ResNet50 gained 0.7 - 0.4 = 0.3 from the first stage to the end (its first two runs)
    assert pf.rescore(rec, "ahead:1", **kw) == pytest.approx(((0.7 + 0.3 + 0.5) / 2, 100.0))
    assert pf.rescore(rec, "ahead:panel", **kw) == pytest.approx(((0.7 + 1.2 + 0.5) / 2, 100.0))
    # where the job's CPU time is known it is the cost: wall seconds count a shared machine's waits
    rec.cpu_seconds = 50.0
    assert pf.rescore(rec, "arch:resnet50_cifar", **kw)[1] == pytest.approx(15.0)
    assert pf.rescore(rec, "runs:2", **kw)[1] == pytest.approx(25.0)
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
    with pytest.raises(SystemExit, match="are not all in"):
        pf.measure_derived("demo/resnet50", panel, runs)  # seed 2's runs are missing
    entry = pf.measure_derived("demo/resnet50", panel, runs, (0, 1))
    assert entry["spearman"] == pytest.approx(1.0) and entry["wrong_pairs"] == []
    assert entry["worker_seconds_per_candidate"] == pytest.approx(30.0)
    assert pf.measure_derived("demo/mobilenetv2", panel, runs, (0, 1))["spearman"] == \
        pytest.approx(-1.0)
    assert pf.measure_derived("demo/median", panel, runs, (1,))["seeds"] == 1
    stored = json.loads(panel.read_text())["proxies"]
    assert set(stored) == {"demo:demo/resnet50@seeds01", "demo:demo/mobilenetv2@seeds01",
                           "demo:demo/median@seeds1"}
    assert stored["demo:demo/resnet50@seeds01"]["setting"]["rule"] == "arch:resnet50_cifar"
    # demo trains 150 steps of batch 32 from a first stage of 75: the reference's 2000 x 64 lies
    # log2(128000 / 4800) = 4.74 doublings further
    assert pf.measure_derived("demo/ahead-panel", panel, runs, (0,))["setting"]["ahead_panel"] == \
        pytest.approx(4.737, abs=1e-3)
    with pytest.raises(SystemExit, match="are not all in"):
        pf.measure_derived("demo/median", panel, tmp_path / "elsewhere", (0,))


@pytest.mark.parametrize("confirm", [False, True])
def test_the_protocol_screens_confirms_the_two_best_and_chooses_among_fair_measurements(
        tmp_path, monkeypatch, capsys, confirm):
    """demo and the derived settings at every seed, the others screened at seed 0, the two best
    screened within 1.5x demo's cost confirmed at seeds 1-2, the choice among what was measured
    on its own seeds; --confirm trains the same runs and makes no choice."""
    screen = {"steps600-1run": 0.9, "steps300-2runs": 0.7, "images12k": 0.95, "nocrop": 0.5,
              "lr0.05": 0.6, "width0.125": 0.99, "batch64": 0.4, "resnet-only-450": 0.1,
              "mobilenet-only-300": 0.2, "steps900-1run": 0.3}
    cost = {"width0.125": 500.0, "images12k": 140.0}  # width0.125 is over the cap
    calls = []

    def fake(name, seeds, spearman, seconds):
        calls.append((name, tuple(seeds)))
        return {"spearman": spearman, "spearman_ci95": None, "worker_seconds_per_candidate": seconds,
                "layers": ["a", "b", "c"], "kendall": None, "spearman_of_mean": None,
                "wrong_pairs": []}

    def setting(name, panel, workers, runs, seeds):
        if name == "demo":
            return fake(name, seeds, 0.3, 100.0)
        confirmed = {"images12k": 0.5, "steps600-1run": 0.85}
        if seeds == (0,):
            return fake(name, seeds, screen[name], cost.get(name, 100.0))
        return fake(name, seeds, confirmed[name], 10.0)  # on a faster machine, a session later

    monkeypatch.setattr(pf, "measure_setting", setting)
    monkeypatch.setattr(pf, "measure_derived", lambda name, panel, runs, seeds: fake(
        name, seeds, 0.82 if name == "demo/2runs" else 0.2, 50.0))
    charted = []
    monkeypatch.setattr(pf, "chart", lambda rows, path, agreement: charted.append(agreement))
    panel = tmp_path / "p.json"  # two reference seeds that agree: the chart's line at 1.0
    panel.write_text(json.dumps({"reference": {"runs": [
        {"layer": layer, "graph": None, "arch": "resnet50_cifar", "seed": seed, "test_accuracy": acc}
        for seed in (0, 1) for layer, acc in (("a", 0.8), ("b", 0.7), ("c", 0.6))]}}))
    monkeypatch.setattr(sys, "argv", ["proxy_fidelity.py", "--panel", str(panel),
                                      "--side-by-side", str(tmp_path / "none.json")]
                        + ["--confirm"] * confirm)
    pf.main()
    assert charted == [pytest.approx(1.0)]
    assert calls[0] == ("demo", (0, 1, 2)) and all(s == (0, 1, 2) for n, s in calls[1:8])
    assert {n for n, s in calls if s == (0,)} == set(screen)
    assert [n for n, s in calls if s == (1, 2)] == ["images12k", "steps600-1run"]
    table = json.loads((tmp_path / "settings.json").read_text())
    # steps600-1run confirms at 0.85 > demo/2runs' 0.82, but within 0.05: the cheaper derived one
    # (at its confirmation runs' own 10 s, from another machine, steps600-1run would be cheaper)
    assert table["meta"]["choice"] == (None if confirm else "demo/2runs")
    confirmed = {r["setting"]: r for r in table["rows"] if r["phase"] == "confirm"}
    assert confirmed["images12k"]["screen_seconds"] == 140.0
    assert confirmed["steps600-1run"]["seconds"] == 10.0
    assert pf.cost(confirmed["steps600-1run"]) == pf.chart_seconds(confirmed["steps600-1run"]) == 100.0
    assert table["meta"]["reference_seed_agreement"] == pytest.approx(1.0)
    assert pf.choose([{"phase": "screen", "spearman": 0.99, "seconds": 1.0}], 10.0) is None


def test_a_cost_measured_side_by_side_decides_the_cap_and_the_choice(tmp_path):
    """A setting over the cap by the cost of its own runs (another session) but under it side by
    side with demo is confirmed and may be chosen; the chart keeps its measured cost."""
    rows = [{"setting": "demo", "phase": "baseline", "seconds": 100.0, "spearman": 0.5},
            {"setting": "steps900-1run", "phase": "confirm", "seconds": 160.0, "spearman": 0.8},
            {"setting": "images12k", "phase": "confirm", "seconds": 120.0, "spearman": 0.7}]
    path = tmp_path / "side.json"
    assert pf.choose(rows, 150.0)["setting"] == "images12k"
    pf.side_by_side(rows, path)  # no file: nothing changes
    assert all(r.get("side_by_side") is None for r in rows)
    path.write_text(json.dumps({"summary": {"demo": {"ratio": 1.0},
                                            "steps900-1run": {"ratio": 1.4}}}))
    pf.side_by_side(rows, path)
    assert rows[1]["side_by_side"] == 140.0 and rows[1]["seconds"] == 160.0
    assert rows[0].get("side_by_side") is None and rows[2].get("side_by_side") is None
    assert pf.choose(rows, 150.0)["setting"] == "steps900-1run"


def test_demo_ships_the_setting_the_chart_chose_and_the_chart_keeps_demo_as_measured():
    """The rank fidelity `demo` states is the chosen setting's: the preset must be that setting in
    every field the measurement depends on, and the chart's own `demo` stays the one it measured."""
    from evonorm.proxy.presets import unmeasured

    chosen = json.loads((Path(pf.__file__).parents[1] / "results" / "fidelity" / "settings.json")
                        .read_text())["meta"]["choice"]
    assert unmeasured("demo", pf.setting_config(chosen).to_dict()) == []
    assert unmeasured("demo", pf.setting_config("demo").to_dict()) == [
        "train", "train_runs", "final_train_runs", "stage_steps"]
