"""The stability-test ablation's protocol pieces: the arms differ in the test alone, the curve, the
two-sided test over the seeds."""

import json
from types import SimpleNamespace

import pytest

from _scripts import load_script

from evonorm.search.candidates import Candidate

sa = load_script("stability_ablation")


def _cand(i, seconds, status="valid", fitness=0.5, reason=None, test_seconds=0.0):
    return Candidate.from_dict({"id": i, "seconds": seconds, "status": status, "fitness": fitness,
                                "reason": reason, "key": f"k{i}",
                                "timings": {"stability": test_seconds},
                                "stage_scores": [{"a": fitness}] * 2 if status == "valid" else []})


def test_summary_curves_rejections_and_the_two_sided_test(tmp_path, monkeypatch):
    def fake_read(run, budget):
        arm, seed = run.name.split("_s")
        if arm == "with":
            cands = [_cand(1, 100, "rejected", None, "stability: gradient norm 1e9 > 1e8", 3.0),
                     _cand(2, 300, fitness=0.6 + 0.01 * int(seed), test_seconds=2.0)]
        else:
            cands = [_cand(1, 400, "rejected", None, "quality: 0.1 < 0.3"),
                     _cand(2, 500, fitness=0.4)]  # finishes past half of the budget
        return SimpleNamespace(hurdles=SimpleNamespace(num_stages=2)), "complete", 0.1, cands

    monkeypatch.setattr(sa, "read_run", fake_read)
    s = sa.summarize(tmp_path, [0, 1, 2], 900.0, "cmd", tmp_path)
    assert s["seeds"] == [0, 1, 2]
    assert s["top10_mean"]["with"] == [pytest.approx((0.6 + 0.01 * i + 0.9) / 10) for i in range(3)]
    assert s["top10_mean"]["without"] == [pytest.approx((0.4 + 0.9) / 10)] * 3
    assert s["p_value"] == 0.25  # three seeds all one way: 2 * 1/8
    # the curve: a candidate counts from the worker-seconds its run had spent when it started
    # (as the budget cuts a run): "with"'s layer from 100 on, "without"'s from 400 on
    w, wo = s["mean_curve"]["with"], s["mean_curve"]["without"]
    assert len(w) == sa.CURVE_POINTS and w[0] == pytest.approx(0.1) and w[-1] > 0.14
    assert wo[12] == pytest.approx(0.1) and wo[13] > 0.1 and wo[-1] == pytest.approx(0.13)
    runs = (tmp_path / "runs.md").read_text()
    assert "stability 1 (100)" in runs and "quality 1 (400)" in runs
    # what the test changed: the candidate it rejected failed the quality test without it, and
    # the test's 5 worker-s on both candidates spared that one 300
    assert s["stability_test"][0] == {
        "rejected": 1, "fate_without": {"rejected quality": 1}, "test_worker_seconds": 5.0,
        "their_worker_seconds_with": 100.0, "their_worker_seconds_without": 400.0}
    assert "| 0 | 1 | rejected quality 1 | 5 | 100 / 400 |" in runs
    assert json.loads((tmp_path / "summary.json").read_text())["arms"]["without"] == {
        "stability_steps": 0}
    assert (tmp_path / "stability_ablation.png").stat().st_size > 1000


def test_a_layer_the_test_rejected_that_would_have_been_valid_is_counted():
    with_run = [_cand(1, 2, "rejected", None, "stability: gradient norm 1e9 > 1e8", 1.0),
                _cand(2, 3, "rejected", None, "stability: gradient norm 1e9 > 1e8", 1.0)]
    a = sa.stability_accounts(with_run, [_cand(1, 50)])
    assert a["fate_without"] == {"valid": 1, "not reached": 1}
    assert (a["their_worker_seconds_with"], a["their_worker_seconds_without"]) == (2.0, 50.0)


def test_a_seed_missing_an_arm_is_left_out_of_the_test(tmp_path, monkeypatch):
    def fake_read(run, budget):
        if run.name == "without_s1":
            return None
        return SimpleNamespace(hurdles=SimpleNamespace(num_stages=2)), "complete", 0.1, [_cand(1, 10)]

    monkeypatch.setattr(sa, "read_run", fake_read)
    s = sa.summarize(tmp_path, [0, 1], 900.0, "cmd", tmp_path)
    assert s["seeds"] == [0] and s["p_value"] == 1.0


@pytest.mark.fashion_mnist
def test_the_arms_differ_in_the_stability_test_alone():
    with_, without = (sa.run_config("demo", "evolution", 3, 900.0, extra).to_dict()
                      for extra in sa.ARMS.values())
    assert {k for k in with_ if with_[k] != without[k]} == {"task"}
    assert {k for k in with_["task"] if with_["task"][k] != without["task"][k]} == {"stability_steps"}
    assert with_["task"]["stability_steps"] > 0 and without["task"]["stability_steps"] == 0
