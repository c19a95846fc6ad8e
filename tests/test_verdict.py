"""The first sentence of the report and of the end-of-search table, from hand-written re-training
rows beside small stores (no training)."""

import json
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from evonorm.report.text import summary_table
from evonorm.report.verdict import layer_stats, verdict
from evonorm.measure.ledger import Row
from evonorm.measure.retrain import RETRAIN_FILE, read_rows

from test_report_store import make_store


def rows(layer, kind, values):
    return [Row(layer, kind, 1000 + i, "full", "split", {"a": v}, v, "ok") for i, v in enumerate(values)]


BEATS = rows("id 7", "found", [0.80, 0.82, 0.81]) + rows("bn_relu", "reference", [0.70, 0.72, 0.69]) \
    + rows("id 1", "seed", [0.60, 0.61, 0.62])
NOISE = rows("id 7", "found", [0.80, 0.60, 0.70]) + rows("bn_relu", "reference", [0.72, 0.66, 0.70])


def test_verdict_says_which_layer_beats_which_by_the_test():
    text = verdict(BEATS)
    assert text.startswith("Found layer id 7 beats bn_relu 70.3 +- 1.5 by 10.7 points")
    assert "one-sided Welch t-test, p=" in text and "< 0.05" in text


def test_verdict_says_none_beats_beyond_noise():
    text = verdict(NOISE)
    assert text.startswith("No found layer beats bn_relu 69.3 +- 3.1 beyond noise (best: found layer id 7 70.0 +- 10.0")
    assert ">= 0.05" in text


def test_verdict_cannot_tell_without_seeds_and_failures_count_apart():
    assert verdict([]).startswith("Cannot tell yet") and "evonorm retrain RUN --seeds 3" in verdict([])
    assert verdict([]).endswith("one training seed per layer.")
    assert verdict([], train_seeds=2).endswith("the mean of 2 training runs per layer, from one "
                                               "evaluation.")
    failed = rows("id 7", "found", [0.8, 0.8]) + [Row("bn_relu", "reference", 1000, "full", "split", {}, None, "failed", reason="x")]
    assert verdict(failed).startswith("Cannot tell yet")
    stats = layer_stats(failed)
    assert [(s.layer, len(s.values), s.failed) for s in stats] == [("id 7", 2, 0), ("bn_relu", 0, 1)]


@pytest.mark.parametrize("data,start", [(BEATS, "Found layer id 7 beats"), (NOISE, "No found layer beats"),
                                        (None, "Cannot tell yet")])
def test_first_sentence_of_table_and_page(tmp_path, data, start):
    pytest.importorskip("matplotlib")
    from evonorm.cli import main as cli_main

    run = tmp_path / "run"
    make_store(run)
    if data is not None:
        lines = [json.dumps(asdict(r)) for r in data]
        (run / RETRAIN_FILE).write_text("\n".join(lines) + "\n{\"cut short")  # a crash mid-line is skipped
        assert len(read_rows(run)) == len(data)
    assert summary_table(run).startswith(start)
    assert cli_main(["report", str(run)]) == 0
    body = (run / "report.html").read_text().split("<body>", 1)[1]
    first = body.split('<p class="verdict">', 1)[1]
    assert first.split("</b> ", 1)[1].startswith(start)
    assert body.index('class="verdict"') < body.index("<h2>")
    # beside the verdict: how far the run's proxy orders layers as longer training does
    fidelity = summary_table(run).splitlines()[1]
    assert fidelity.startswith("rank fidelity of ") and "docs/calibration.md)" in fidelity
    assert body.index('class="verdict"') < body.index("rank fidelity of ") < body.index("<h2>")


KILLED_RETRAIN = """
import sys
from _ledger_fakes import kill_driver_on_third
from evonorm.measure.retrain import retrain
retrain(sys.argv[1], top=3, seeds=2, fn=kill_driver_on_third)
"""


def test_retrain_writes_a_line_per_layer_and_seed_and_resumes(tmp_path, monkeypatch, capsys):
    from _ledger_fakes import calls, fake_train
    from _processes import env_with_path

    from evonorm.measure.retrain import retrain

    run = tmp_path / "run"
    make_store(run)  # one function (all spellings of one graph), origin random; space s
    monkeypatch.setenv("EVONORM_TEST_CALLS", str(tmp_path / "calls"))
    monkeypatch.setenv("EVONORM_TEST_LEDGER", str(run / RETRAIN_FILE))
    proc = subprocess.run([sys.executable, "-c", KILLED_RETRAIN, str(run)], capture_output=True, text=True,
                          timeout=300, env=env_with_path(Path(__file__).parent))
    assert proc.returncode == -9, proc.stderr  # killed mid-way, while the third (layer, seed) trained
    assert len(read_rows(run)) == 2  # the (layer, seed) pairs finished before the kill
    started = len(calls(tmp_path / "calls"))  # those and the one or two killed while training
    rows = retrain(run, top=3, seeds=2, fn=fake_train)
    assert sorted({(r.kind, r.layer) for r in rows}) == [
        ("found", "id 12"), ("reference", "bn_relu"), ("reference", "evonorm_s0"), ("reference", "gn_relu")]
    assert len(rows) == 8 and {r.seed for r in rows} == {1000, 1001}
    assert len(calls(tmp_path / "calls")) == started + 6  # nothing trained twice but the killed pairs
    assert "retrain [8/8]" in capsys.readouterr().err
    n = len(calls(tmp_path / "calls"))
    assert len(retrain(run, top=3, seeds=2, fn=fake_train)) == 8 and len(calls(tmp_path / "calls")) == n

def test_a_found_spelling_of_a_seed_layer_counts_as_that_seed(tmp_path):
    from evonorm.measure.retrain import retrain_plan
    from evonorm.search.store import Store
    from test_report_store import add

    run = tmp_path / "run"
    make_store(run)  # valid layers of one function, origin random
    with Store(run) as s:
        add(s, 99, "valid", {"resnet50_cifar": 0.1, "mobilenetv2_cifar": 0.1}, key="seedkey", origin="seed")
    _, layers = retrain_plan(run, top=3)
    assert [kind for _, kind, _, _ in layers] == ["reference"] * 3 + ["seed"]


def test_the_page_says_what_one_search_fitness_is():
    from evonorm.report.data import RunData
    from evonorm.report.html import retrain_table

    assert "one training seed per layer" in retrain_table(RunData("old"))  # stored before train_runs
    two = RunData("demo", config={"task": {"train_runs": 2}})
    assert two.train_seeds == 2 and "the mean of 2 training runs per layer" in retrain_table(two)


def _nothing_valid_run(n, seconds, **evolution):
    from evonorm.report.data import RunData

    cands = [{"id": i + 1, "status": "rejected", "reason": "stability", "seconds": seconds}
             for i in range(n)]
    return RunData("r", candidates=cands, config={"evolution": evolution}, path="runs/r")


def test_a_run_with_no_valid_layer_says_its_budget_spent_and_when_a_first_is_expected():
    from evonorm.report.verdict import run_verdict

    text = run_verdict(_nothing_valid_run(205, 6.0, budget=100_000, budget_seconds=3600.0))
    # nothing to re-train: no command to re-train it; how much of the budget, and the expectation
    assert "retrain" not in text and text.startswith("No valid layer yet in this search: "), text
    assert "1,230 of 3,600 worker-seconds spent (34%)" in text, text
    assert "expected in about 207 more candidates (~1,242 worker-seconds" in text, text
    assert "more than what is left" not in text
    late = run_verdict(_nothing_valid_run(400, 6.0, budget=100_000, budget_seconds=3600.0))
    assert late.endswith("more than what is left of the budget."), late
    by_count = run_verdict(_nothing_valid_run(10, 2.0, budget=75))
    assert "10 of 75 candidates, 20 worker-seconds" in by_count and "retrain" not in by_count
    assert run_verdict(_nothing_valid_run(0, 0.0, budget=75)).endswith("nothing evaluated yet.")
