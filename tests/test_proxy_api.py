"""The built-in proxy task on the engine: handed in as an objective, never looked up by it."""

import pickle

import pytest

from evonorm import proxy
from evonorm.proxy.objective import ProxyObjective
from evonorm.search import Trial, load, resume, search
from evonorm.proxy.presets import get_preset
from evonorm.search.store import Store
from evonorm.proxy.config import proxy_config


def test_engine_without_an_objective_names_where_the_builtin_task_is(tmp_path):
    with pytest.raises(ValueError, match=r"evonorm\.proxy\.search"):
        search(None, out=tmp_path / "run", preset="tiny")
    assert not (tmp_path / "run").exists()


def test_trial_carries_no_run_config():
    assert not hasattr(Trial(graph=None), "config")


def test_proxy_objective_travels_to_workers_by_value():
    obj = ProxyObjective(get_preset("tiny"))
    assert pickle.loads(pickle.dumps(obj)) == obj


def test_proxy_search_then_resume_and_load(tmp_path):
    run = tmp_path / "run"
    res = proxy.search(out=run, preset="tiny", budget=2, workers=1, progress=False,
                       seed_layers=("evonorm_s0",))
    assert res.complete and res.done == 2
    with Store(run, readonly=True) as store:
        cfg = store.search_config()
        first = store.candidates()[0]
    assert cfg.objective is None and proxy_config(cfg).dataset == "synthetic"
    assert first.origin == "seed" and set(first.scores) <= set(proxy_config(cfg).archs)
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
