"""The search config in parts: the engine's (evolution, hurdles, execution) and the task's, read
from the flat form that run folders before the parts stored, and written back nested."""

import pytest

from evonorm.proxy.config import ProxyConfig, proxy_config
from evonorm.proxy.presets import PRESETS, get_preset
from evonorm.search.config import Evolution, Hurdles, SearchConfig, flat_config

# `demo` as a run folder of the flat era stored it (abridged to what differs from the defaults)
FLAT_DEMO = {
    "preset": "demo", "objective": None, "dataset": "fashion_mnist", "n_train": 4000,
    "holdout": 0.25, "data_seed": 0, "space": "s", "budget": 75, "window": 16,
    "initial_population": 1, "tournament_fraction": 0.25, "mutations": 1, "p_random": 0.3,
    "archs": ["resnet50_cifar", "mobilenetv2_cifar"], "train_preset": "tiny",
    "train": {"steps": 150}, "stages": [75], "quality_steps": 0, "train_seeds": 2,
    "final_train_seeds": 4, "workers": 2, "device": "cpu", "seed": 0,
}


def test_a_flat_config_reads_into_its_parts():
    cfg = SearchConfig.from_dict(FLAT_DEMO)
    assert cfg.evolution.budget == 75 and cfg.evolution.window == 16
    assert cfg.hurdles == Hurdles(stages=(75,), hurdle_min=4)
    assert cfg.execution.workers == 2 and cfg.seed == 0
    assert cfg.scores == ("resnet50_cifar", "mobilenetv2_cifar")  # the anchors scored the layers
    task = proxy_config(cfg)
    assert task.dataset == "fashion_mnist" and task.train_seeds == 2 and task.train == {"steps": 150}
    assert SearchConfig.from_dict(cfg.to_dict()) == cfg  # nested round trip
    assert set(cfg.to_dict()) == {"preset", "objective", "seed", "scores", "evolution", "hurdles",
                                  "execution", "task"}


def test_an_own_objective_flat_config_keeps_no_task():
    cfg = SearchConfig.from_dict({"preset": "tiny", "objective": "mine:f", "archs": ["acc", "speed"],
                                  "dataset": None, "budget": 6, "n_train": None})
    assert cfg.task is None and cfg.scores == ("acc", "speed") and cfg.budget == 6
    with pytest.raises(ValueError, match="built-in proxy task"):
        proxy_config(cfg)


def test_flat_names_write_and_read_each_part():
    cfg = get_preset("tiny", budget=9, stages=(2,), quality_steps=0, workers=1, archs=("a1",))
    assert (cfg.evolution.budget, cfg.hurdles.stages, cfg.execution.workers) == (9, (2,), 1)
    assert cfg.budget == 9 and cfg.archs == ("a1",) and cfg.scores == ("a1",)
    with pytest.raises(ValueError, match="unknown search config field"):
        SearchConfig().replace(n_train=3)  # no task: the name is nobody's
    with pytest.raises(ValueError, match="unknown search config field"):
        get_preset("tiny", not_a_setting=1)
    with pytest.raises(ValueError, match="quality_steps 0"):  # the task's check across parts
        get_preset("tiny", stages=(2,))
    with pytest.raises(ValueError, match="budget must be >= 1"):
        SearchConfig(evolution=Evolution(budget=0))


def test_presets_hold_the_same_settings_as_before_the_parts():
    demo = PRESETS["demo"]
    # its training changed since on purpose (one run of 900 steps, staged at 150, ranks layers
    # as long training does); the rest is as the flat era stored it
    assert demo.seed_layers and demo.stages == (150,) and demo.timeout == 1800.0
    task = ProxyConfig.from_dict(demo.task)
    assert task.train["steps"] == 900 and task.train_seeds == 1 and task.final_runs == 1
    flat = flat_config(demo.to_dict())
    retrained = ("stages", "train_seeds", "final_train_seeds")
    for key, value in FLAT_DEMO.items():
        if key not in ("dataset", "workers", "train") + retrained:  # named at the start; the
            assert flat[key] == value, key                           # machine; abridged
    # `demo-b` keeps the training it was calibrated at; `scratch` trains as `demo` does, its
    # quality test at 75 steps as `demo-b`'s
    for name in ("scratch", "demo-b"):
        assert PRESETS[name].stages == (75,), name
    assert ProxyConfig.from_dict(PRESETS["demo-b"].task).train["steps"] == 150
    assert PRESETS["scratch"].task == PRESETS["demo"].task
    assert not PRESETS["scratch"].seed_layers and PRESETS["scratch"].prescreen
