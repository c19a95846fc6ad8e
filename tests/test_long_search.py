"""The experiment scripts that search the built-in task start its search as it expects (the long
search's verdict words are the report's Welch verdict: test_welch.py)."""

import pytest

from _scripts import load_script

class _Started(Exception):
    """Raised by the stand-in search once it has checked how it was called."""


def _checked_search(calls: list):
    """A stand-in for evonorm.proxy.search that binds its arguments as the real one would and
    builds the config they ask for, then stops: the scripts start the built-in task's search
    with settings its preset accepts (a call the real search would refuse fails here)."""
    import inspect

    import evonorm.proxy
    from evonorm.proxy.presets import get_preset

    real = inspect.signature(evonorm.proxy.search)

    def search(*args, **kwargs):
        bound = real.bind(*args, **kwargs).arguments
        settings = {k: v for k, v in bound.items() if k not in ("out", "force", "progress",
                                                                 "settings")}
        calls.append(get_preset(settings.pop("preset", "demo"), **settings,
                                **bound.get("settings", {})))
        raise _Started

    return search


def test_the_long_search_starts_the_built_in_tasks_search(tmp_path, monkeypatch):
    import evonorm.proxy
    long_search = load_script("long_search")

    calls = []
    monkeypatch.setattr(evonorm.proxy, "search", _checked_search(calls))
    with pytest.raises(_Started):
        long_search.main(["--run", str(tmp_path / "run"), "--budget-seconds", "60",
                          "--prescreen", "--out", str(tmp_path / "out")])
    assert calls[0].evolution.prescreen is True and calls[0].evolution.budget_seconds == 60


def test_the_seed_layer_noise_searches_start_the_built_in_tasks_search(tmp_path, monkeypatch):
    import evonorm.proxy
    seed_layer_noise = load_script("seed_layer_noise")

    calls = []
    monkeypatch.setattr(evonorm.proxy, "search", _checked_search(calls))
    with pytest.raises(_Started):
        seed_layer_noise.one_search(tmp_path / "run", "demo", 3, 1, {})
    assert calls[0].seed == 3 and len(calls[0].evolution.seed_layers) == len(seed_layer_noise.LAYERS)


def test_the_seed_layer_noise_flags_reach_each_search_with_its_own_data_seed(tmp_path, monkeypatch):
    import evonorm.proxy
    from evonorm.proxy.config import stored_task

    seed_layer_noise = load_script("seed_layer_noise")
    calls = []
    monkeypatch.setattr(evonorm.proxy, "search", _checked_search(calls))
    with pytest.raises(_Started):
        seed_layer_noise.main(["--seeds", "3", "--data-seed", "seed", "--final-train-runs", "2",
                               "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "out")])
    assert calls[0].seed == 3 and stored_task(calls[0]).data_seed == 3
    assert stored_task(calls[0]).final_train_runs == 2
