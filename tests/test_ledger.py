"""The ledger every measurement after a search keeps: jobs on the executor, a row each as it arrives,
resumed without training a finished job again, a lost worker's job trained again."""

import json

from _ledger_fakes import calls, die_once

from evonorm.measure.ledger import DataSplit, Job, Measurement, Row, measure, read_ledger, record_rows
from evonorm.search.config import Execution
from evonorm.search.executors import OK, make_executor
from evonorm.train_config import TrainConfig


def _measurement() -> Measurement:
    train = (TrainConfig(arch="resnet50_cifar", steps=2), TrainConfig(arch="mobilenetv2_cifar", steps=2))
    return Measurement("t", "full", "held out", train, DataSplit("synthetic", None, None, 0.1, 0, "cpu"),
                       Execution(workers=1, retries=0), timeout=60.0)


def test_a_lost_job_is_recorded_and_trained_again_a_finished_one_never(tmp_path, monkeypatch):
    monkeypatch.setenv("EVONORM_TEST_CALLS", str(tmp_path / "calls"))
    monkeypatch.setenv("EVONORM_TEST_DIE", str(tmp_path / "die"))
    (tmp_path / "die").write_text("")
    path, m, lines = tmp_path / "ledger.jsonl", _measurement(), []
    jobs = [Job("lives", "reference", 1000, "lives"), Job("dies", "reference", 1000, "dies")]
    rows = measure(path, jobs, m, log=lines.append, fn=die_once)
    assert [(r.layer, r.status) for r in rows] == [("lives", "ok"), ("dies", "lost")]
    assert rows[0].scores == {"resnet50_cifar": 0.56, "mobilenetv2_cifar": 0.56} and rows[0].fitness == 0.56
    assert [t["seed"] for t in calls(tmp_path / "calls")[0]["train"]] == [1000, 1000]  # the job's seed
    assert [line.split(":")[0] for line in lines if line.startswith("t [")] == ["t [1/2] lives", "t [2/2] dies"]
    lines.clear()
    rows = measure(path, jobs, m, log=lines.append, fn=die_once)
    assert [(r.layer, r.status) for r in rows] == [("lives", "ok"), ("dies", "ok")]  # the latest row counts
    assert [c["spec"] for c in calls(tmp_path / "calls")] == ["lives", "dies"]  # the finished one not again
    assert "t: 1 of 2 done before, 1 to train on 1 local worker(s), device cpu" in lines
    assert len(path.read_text().splitlines()) == 3 and all(json.loads(x)["version"] == 1
                                                           for x in path.read_text().splitlines())
    assert measure(path, jobs, m, fn=die_once) == read_ledger(path) and len(calls(tmp_path / "calls")) == 2


def test_record_rows_appends_each_rows_line_as_it_arrives_and_none_for_no_row(tmp_path, monkeypatch):
    """The loop calibrate and the panel share: a job whose `row_of` is None (a panel run that
    failed) leaves no line, so it trains again; the others are in the file before the loop ends."""
    monkeypatch.setenv("EVONORM_TEST_CALLS", str(tmp_path / "calls"))
    monkeypatch.setenv("EVONORM_TEST_DIE", str(tmp_path / "die"))
    (tmp_path / "die").write_text("")
    path, m = tmp_path / "ledger.jsonl", _measurement()
    jobs = [Job("lives", "reference", 1000, "lives"), Job("dies", "reference", 1000, "dies")]

    def row_of(o):
        return Row(jobs[o.task_id].layer, "reference", 1000, "full", "held out", o.result["scores"], 0.56,
                   "ok") if o.kind == OK else None

    with make_executor("local", die_once, 1, timeout=60.0) as pool:
        pairs = [pair for arrived in record_rows(path, pool, {i: m.payload(j) for i, j in enumerate(jobs)}, row_of)
                 for pair in arrived]
    assert [(o.task_id, row is None) for o, row in pairs] == [(0, False), (1, True)]
    assert [r.layer for r in read_ledger(path)] == ["lives"] and len(path.read_text().splitlines()) == 1
