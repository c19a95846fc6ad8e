"""The search config in parts: the engine's (evolution, hurdles, execution) and the task's, stored
and read in one nested form; a setting named by a plain keyword only where a call comes in."""

import dataclasses
import re

import pytest

from evonorm.proxy.config import ProxyConfig, configured, measured, stored_task
from evonorm.proxy.presets import get_preset
from evonorm.search.config import KEYWORDS, PARTS, Evolution, Hurdles, SearchConfig, with_settings


def test_a_stored_config_reads_back_nested_and_nothing_else():
    demo = get_preset("demo")
    assert SearchConfig.from_dict(demo.to_dict()) == demo  # nested round trip
    assert set(demo.to_dict()) == {"preset", "objective", "seed", "scores", "evolution", "hurdles",
                                   "execution", "task"}
    with pytest.raises(ValueError, match=r"^unknown search config field 'budget' \(a setting of "
                                         r"evolution, stored under it\)$"):
        SearchConfig.from_dict({"preset": "demo", "budget": 75})  # the flat spelling
    with pytest.raises(ValueError, match="^unknown search config field hurdles.stages$"):
        SearchConfig.from_dict({"hurdles": {"stages": [75]}})
    with pytest.raises(ValueError, match="^unknown search config field task.budget$"):
        ProxyConfig.from_dict({"budget": 3})


def test_each_keyword_names_one_field_and_is_read_through_its_part():
    cfg = get_preset("tiny", budget=9, stage_steps=(2,), quality_steps=0, workers=1, archs=("a1",))
    assert (cfg.evolution.budget, cfg.hurdles.stage_steps, cfg.execution.workers) == (9, (2,), 1)
    assert stored_task(cfg).archs == ("a1",) and cfg.scores == ("a1",)
    assert not hasattr(cfg, "budget") and not hasattr(cfg, "archs")  # one spelling: the part's
    task_fields = {f.name for f in dataclasses.fields(ProxyConfig)}
    assert not task_fields & set(KEYWORDS)  # no keyword is both the engine's and the task's
    for name, part in KEYWORDS.items():
        owner = SearchConfig if not part else PARTS[part]
        assert name in {f.name for f in dataclasses.fields(owner)}, name
    with pytest.raises(ValueError, match=r"^unknown setting 'n_train' \(an objective of one's "):
        with_settings(SearchConfig(), None, {"n_train": 3})  # no task: the name is nobody's
    with pytest.raises(ValueError, match="^unknown setting 'not_a_setting'$"):
        get_preset("tiny", not_a_setting=1)
    with pytest.raises(ValueError, match="^SearchConfig has no field 'budget'$"):
        SearchConfig().replace(budget=3)
    with pytest.raises(ValueError, match="quality_steps 0"):  # the task's check across parts
        get_preset("tiny", stage_steps=(2,))
    with pytest.raises(ValueError, match="budget must be >= 1"):
        SearchConfig(evolution=Evolution(budget=0))
    # an explicit None is a value (the preset's n_train unset); get_preset's None: not given
    assert stored_task(configured(get_preset("tiny"), n_train=None)).n_train is None
    assert stored_task(get_preset("tiny", n_train=None)).n_train == 320


def test_presets_hold_their_settings():
    demo = get_preset("demo")
    # one run of 900 steps, staged at 150, ranks layers as long training does
    assert demo.evolution.seed_layers and demo.hurdles == Hurdles(stage_steps=(150,), hurdle_min=4)
    assert demo.execution.timeout == 1800.0 and demo.evolution.budget == 75
    task = stored_task(demo)
    assert task.train["steps"] == 900 and task.train_runs == 1 and task.final_runs == 1
    assert (task.n_train, task.holdout, task.data_seed) == (4000, 0.25, 0)
    # `demo-b` keeps the training it was calibrated at; `scratch` trains as `demo` does, its
    # quality test at 75 steps as `demo-b`'s
    for name in ("scratch", "demo-b"):
        assert get_preset(name).hurdles.stage_steps == (75,), name
    assert stored_task(get_preset("demo-b")).train["steps"] == 150
    assert get_preset("scratch").task == get_preset("demo").task
    assert not get_preset("scratch").evolution.seed_layers and get_preset("scratch").evolution.prescreen
    # `scratch2` is `scratch` with the ladder: the same proxy, the network rung's features, and
    # evolution that neither repeats a known function nor loses a niche's best layer
    s1, s2 = get_preset("scratch"), get_preset("scratch2")
    assert {**s2.task, "prescreen_features": "full"} == s1.task
    assert stored_task(s2).prescreen_features == "signal" and s2.hurdles == s1.hurdles
    assert s2.evolution.fresh_tries > 0 and s2.evolution.niches and s2.evolution.prescreen
    e1 = s1.evolution
    assert s2.evolution.replace(fresh_tries=0, niches=False, prescreen_threshold=e1.prescreen_threshold,
                                prescreen_explore=e1.prescreen_explore,
                                prescreen_layer_threshold=0.0) == e1


def test_the_measured_settings_are_what_a_calibration_depends_on():
    by_part = measured(get_preset("demo").to_dict())
    assert measured(by_part) == by_part  # what it returns reads back the same
    names = {name for part in by_part.values() for name in part}
    # the task's data, architectures, rejection tests and training; the engine's stage steps,
    # and what the calibration's reference and random layers are drawn from
    assert names == {"dataset", "data_sha256", "n_train", "holdout", "data_seed", "archs",
                     "train_preset", "train", "arch_train", "prechecks", "rejection", "stability_steps",
                     "stability_threshold", "stability_batch", "stability_lr", "stability_archs",
                     "quality_steps", "quality_factor", "train_runs", "final_train_runs",
                     "stage_steps", "space", "max_nodes"}
    # how the search proposes, how long and where it runs, how it reranks: not measured
    for name in ("budget", "window", "workers", "timeout", "prescreen", "seed_layers",
                 "rerank_train", "rerank_top", "data_root", "device", "algorithm"):
        assert name not in names, name
    assert measured({"preset": "x", "task": None}) == {}  # an objective of one's own: no task


@pytest.mark.parametrize("setting, says", [
    ({"window": 2.5}, "evolution.window: a number (2.5), not an integer"),
    ({"prescreen": "yes"}, "evolution.prescreen: a string"),
    ({"seed_layers": [1]}, "evolution.seed_layers: item 0"),
    ({"timeout": "60"}, "execution.timeout: a string"),
])
def test_settings_given_from_python_are_type_checked_as_the_reader_checks_them(setting, says):
    from evonorm.search.settings import engine_preset

    with pytest.raises(ValueError, match=re.escape(says)):
        engine_preset("tiny", **setting)


def test_a_bad_or_unknown_preset_entry_is_a_one_line_error():
    from evonorm.preset_table import parse_table, preset_names
    from evonorm.proxy.presets import task_preset
    from evonorm.search.settings import engine_part

    assert preset_names()[:2] == ["tiny", "demo"]  # the table's order, as `evonorm list` prints it
    for read, says in [
        (lambda: get_preset("nope"), r"^unknown search preset 'nope' \(choose from tiny, demo, "),
        (lambda: task_preset("nope"), r"^unknown search preset 'nope' \(choose from tiny, "),
        (lambda: parse_table("[demo\nx = 1"), r"^presets.toml: "),
        (lambda: parse_table("[x.engin]\na = 1"), r"^search preset 'x' in presets.toml: unknown "
                                                  r"part engin \(an entry holds engine and task\)$"),
        (lambda: parse_table("x = 1"), r"^search preset 'x' in presets.toml: not a table "),
        (lambda: engine_part("x", {"evolution": {"budgett": 3}}),
         r"^search preset 'x': unknown search config field evolution.budgett$"),
        (lambda: engine_part("x", {"task": {}}), r"^search preset 'x': unknown part 'task' \(the "
                                                 r"engine's are evolution, hurdles, execution\)$"),
        (lambda: engine_part("x", {"evolution": {"window": "16"}}),
         r"^search preset 'x': evolution.window: a string"),
    ]:
        with pytest.raises(ValueError, match=says) as err:
            read()
        assert "\n" not in str(err.value)


def test_the_table_writes_none_in_a_training_override_as_none():
    from evonorm.proxy.presets import task_preset

    # the rerank of `demo` tests on the whole test split: TOML has no null
    assert task_preset("demo").rerank_train["n_test"] is None
