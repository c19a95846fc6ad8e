"""The built-in proxy task on the engine: handed in as an objective, never looked up by it."""

import pickle
import re

import pytest

from evonorm import proxy
from evonorm.proxy.objective import ProxyObjective
from evonorm.search import Trial, load, resume, search
from evonorm.proxy.presets import get_preset
from evonorm.search.store import Store
from evonorm.proxy.config import stored_task


def test_engine_without_an_objective_names_where_the_builtin_task_is(tmp_path):
    with pytest.raises(ValueError, match=r"evonorm\.proxy\.search"):
        search(None, out=tmp_path / "run", preset="tiny")
    assert not (tmp_path / "run").exists()


def test_trial_carries_no_run_config():
    assert not hasattr(Trial(graph=None), "config")


def test_proxy_objective_travels_to_workers_by_value():
    obj = ProxyObjective.for_run(get_preset("tiny"))
    assert pickle.loads(pickle.dumps(obj)) == obj


def test_proxy_search_then_resume_and_load(tmp_path):
    run = tmp_path / "run"
    res = proxy.search(out=run, preset="tiny", budget=2, workers=1, progress=False,
                       seed_layers=("evonorm_s0",))
    assert res.complete and res.done == 2
    with Store(run, readonly=True) as store:
        cfg = store.search_config()
        first = store.candidates()[0]
    assert cfg.objective is None and stored_task(cfg).dataset == "synthetic"
    assert first.origin == "seed" and set(first.scores) <= set(stored_task(cfg).archs)
    with pytest.raises(ValueError, match=r"evonorm\.proxy\.resume"):
        resume(run)  # the engine does not know the built-in task
    again = proxy.resume(run, progress=False)  # budget spent: opens and finishes
    assert again.complete and again.done == 2
    assert load(run).done == 2


def test_a_proxy_setting_for_an_own_objective_is_refused_in_one_line(tmp_path):
    import _objectives

    with pytest.raises(ValueError, match="^unknown setting 'quality_steps' .an objective of one's own "
                                         "holds its settings.$"):
        search(_objectives.two, out=tmp_path / "run", preset="tiny", quality_steps=0)
    assert not (tmp_path / "run").exists()


def _facts(run):
    """A run's stored config and meta facts, less what differs between any two runs (when)."""
    with Store(run, readonly=True) as store:
        meta = {k: store.get_meta(k) for k in ("config", "preset", "dataset", "device", "objective",
                                               "status")}
    return meta


def _report_text(run):
    from evonorm.report.data import load_run
    from evonorm.report.text import summary_table

    data = load_run(run)
    # the worker-seconds the runs took are the machine's, not the start's: the same text else
    table = re.sub(r"\d+ worker-seconds", "N worker-seconds", summary_table(run, top=5))
    return data.setup, table.replace(str(run), "RUN")


@pytest.mark.parametrize("objective", [None, "_objectives:two"])
def test_a_run_started_from_python_stores_and_reports_as_one_from_the_command_line(tmp_path,
                                                                                   objective):
    """One start for every caller: the same facts stored and the same report, whether the search
    was started by `evonorm search` or from Python (the built-in task's or the engine's)."""
    import _objectives
    from evonorm.cli import main

    argv = ["search", "--preset", "tiny", "--budget", "2", "--workers", "1",
            "--out", str(tmp_path / "cli")]  # not --quiet: the start lines are printed too
    if objective is None:
        proxy.search(out=tmp_path / "py", preset="tiny", budget=2, workers=1, progress=False)
    else:
        search(_objectives.two, out=tmp_path / "py", preset="tiny", budget=2, workers=1,
               progress=False)
        argv += ["--objective", objective]
    assert main(argv) == 0
    py, cli = _facts(tmp_path / "py"), _facts(tmp_path / "cli")
    assert py.keys() == cli.keys() and py == cli and py["device"]["type"] == "cpu"
    assert (py["dataset"] is None) == (objective is not None)
    assert _report_text(tmp_path / "py") == _report_text(tmp_path / "cli")


def test_resume_from_python_records_a_raised_budget_as_the_command_does(tmp_path):
    run = tmp_path / "run"
    proxy.search(out=run, preset="tiny", budget=1, workers=1, progress=False)
    with pytest.raises(ValueError, match="cannot shrink the run's budget of 1"):
        proxy.resume(run, budget=0, progress=False)
    res = proxy.resume(run, budget=2, progress=False)
    assert res.complete and res.done == 2 and _facts(run)["config"]["evolution"]["budget"] == 2


def test_the_tasks_rejection_is_its_own_setting_not_an_algorithm(tmp_path):
    """Random search without rejection is the engine's random search on a task whose rejection
    is off: every candidate is trained fully, however bad (one whose training gives no finite
    number still has no fitness)."""
    from evonorm.search.evolution import ALGORITHMS

    assert ALGORITHMS == ("evolution", "random")
    with pytest.raises(ValueError, match="algorithm must be one of evolution, random"):
        get_preset("tiny", algorithm="random-norej")
    run = tmp_path / "run"
    proxy.search(out=run, preset="tiny", budget=3, workers=1, progress=False, algorithm="random",
                 rejection=False, prechecks=False)
    with Store(run, readonly=True) as store:
        cands, cfg = store.candidates(), store.search_config()
    assert stored_task(cfg).rejection is False
    assert {c.reason for c in cands if c.status != "valid"} <= {"nonfinite"}, [
        (c.status, c.reason) for c in cands]
    assert len(cands) == 3 and any(c.status == "valid" for c in cands)


@pytest.mark.parametrize("settings, says", [
    ({"train": {"stepz": 5}}, "^train: unknown training setting 'stepz' .TrainConfig fields: arch, "),
    ({"train": {"steps": "10"}}, "^train.steps: a string"),
    ({"rerank_train": {"lr": [0.1]}}, "^rerank_train.lr: "),
    ({"arch_train": {"resnet50_cifar": {"channels_last": 1}}}, "^arch_train.resnet50_cifar.channels_last: "),
])
def test_training_overrides_are_typed_and_checked_before_the_run_folder_is_written(
        tmp_path, settings, says):
    with pytest.raises(ValueError, match=says):
        proxy.search(out=tmp_path / "run", preset="tiny", budget=1, workers=1, progress=False,
                     **settings)
    assert not (tmp_path / "run").exists()


def test_an_own_objectives_facts_are_stored_with_the_run_it_starts_and_resumes(tmp_path):
    import _objectives

    run = tmp_path / "run"
    search(_objectives.WithFacts(), out=run, preset="tiny", budget=1, workers=1, progress=False)
    resume(run, _objectives.WithFacts(), budget=2, progress=False)
    with Store(run, readonly=True) as store:
        assert store.get_meta("data") == {"name": "mine", "rows": 10}
        assert store.get_meta("objective") == "_objectives:WithFacts"
        assert store.num_candidates() == 2
