"""The engine's named settings, from seconds (tests) to the paper's: evolution, hurdles and
execution per preset name. A preset's task settings are the task's (`evonorm.proxy.presets` adds the
built-in proxy task's to these, under the same names); an objective of one's own takes these alone.
Settings are sized for the 2-core reference machine (docs/search.md, docs/calibration.md).
"""

from __future__ import annotations

import json

from evonorm.search.config import Evolution, Execution, Hurdles, SearchConfig, with_settings


def norm_relu(kind: str) -> dict:
    """max((x - mean(x)) / std(x), 0) over an axis set (batch, group, layer, instance), as graph
    JSON: the textbook layers written as graphs, as a search meets them. Here, not beside the named
    graphs, because importing `evonorm.graph` loads torch, which the settings do not need."""
    return {"nodes": [[f"{kind}_mean", 0], ["neg", 4], ["add", 0, 5], [f"{kind}_std", 0],
                      ["div", 6, 7], ["max", 8, 1]]}


# `demo` (the main job) starts from three textbook S-space layers and mutates once (not twice)
# with fewer random restarts, so that a budget of a few dozen finds valid layers at all: two
# mutations of a six-node layer, or a fresh random graph, rarely pass the built-in task's
# rejection. It scores in two stages (150 steps, then the end) with hurdles after the first.
_DEMO = SearchConfig(
    preset="demo",
    evolution=Evolution(space="s", budget=75, window=16, initial_population=1,
                        tournament_fraction=0.25, mutations=1, p_random=0.3,
                        seed_layers=tuple(json.dumps(norm_relu(k))
                                          for k in ("group", "layer", "instance"))),
    hurdles=Hurdles(stage_steps=(150,), hurdle_min=4),
    execution=Execution(timeout=1800.0))  # room for a loaded machine, not only an idle one

ENGINE_PRESETS: dict[str, SearchConfig] = {
    # Seconds, for tests.
    "tiny": SearchConfig(preset="tiny", evolution=Evolution(space="s", budget=6, window=10,
                                                            initial_population=2),
                         execution=Execution(timeout=300.0)),
    "demo": _DEMO,
    # From primitives: random graphs only, no seed layer, built to find valid layers fast and
    # then climb. Cheap rejection first (the layer-alone pre-checks in milliseconds, stability on
    # one batch, the quality test at the first stage, 75 steps); the prescreen, which here learns
    # to tell the layers worth training (valid ones and near misses, the population's members)
    # from the rest, because from random graphs most worker-seconds go to quality tests that
    # fail; near misses as parents until valid layers exist; a layer above the stage-1 hurdle
    # goes on to the 900 steps of `demo`'s proxy, the training that orders layers as longer
    # training does. A budget of one worker-hour.
    "scratch": _DEMO.replace(
        preset="scratch", evolution=_DEMO.evolution.replace(
            budget=100_000, budget_seconds=3600.0, window=32, seed_layers=(), near_misses=True,
            prescreen=True),
        hurdles=Hurdles(stage_steps=(75,), hurdle_min=3)),
    # From primitives, second version: `scratch` with the rejection ladder in front of the
    # quality tests. The prescreen starts from the prior the task ships (the first from-scratch
    # experiment's candidates) and learns from the run's own labels: a forest on the layer alone
    # rejects a child below P = 0.03 of passing the ResNet-50 quality test (milliseconds); the
    # task's network rung rejects a hopeless network at initialisation (0.3 s); a forest on both
    # rejects below P = 0.06; then the stability test. Judged offline on that experiment's 2,946
    # candidates, leave one seed out (results/from_scratch_2): it kept 97.7% of the layers that
    # pass that test and rejected 93.9% of the rest, at 0.81 worker-s a candidate. 5% of slots
    # train one child whatever the surrogate says; a child whose function the run already scored
    # is drawn again (up to 10 times); the best member of each niche (the statistic a layer
    # divides by) stays a contestant.
    "scratch2": _DEMO.replace(
        preset="scratch2", evolution=_DEMO.evolution.replace(
            budget=100_000, budget_seconds=3600.0, window=32, seed_layers=(), near_misses=True,
            prescreen=True, prescreen_threshold=0.06, prescreen_layer_threshold=0.03,
            prescreen_explore=0.05, fresh_tries=10, niches=True),
        hurdles=Hurdles(stage_steps=(75,), hurdle_min=3)),
    # The paper's settings (Sec. 5.1).
    "paper-b": SearchConfig(preset="paper-b", evolution=Evolution(
        space="b", budget=20000, window=2500, initial_population=100)),
    "paper-s": SearchConfig(preset="paper-s", evolution=Evolution(
        space="s", budget=20000, window=2500, initial_population=100)),
    # `demo` for the B space, from BN-ReLU written as a graph; its task trains 150 steps, staged
    # at 75.
    "demo-b": _DEMO.replace(
        preset="demo-b", evolution=_DEMO.evolution.replace(
            space="b", seed_layers=(json.dumps(norm_relu("batch")),)),
        hurdles=_DEMO.hurdles.replace(stage_steps=(75,))),
}


def engine_preset(name: str, **settings) -> SearchConfig:
    """A preset's engine settings with some changed, by plain keyword (`with_settings`; None
    values are ignored). ValueError on an unknown name or keyword, or a bad value."""
    if name not in ENGINE_PRESETS:
        raise ValueError(f"unknown search preset {name!r} (choose from {', '.join(ENGINE_PRESETS)})")
    given = {k: v for k, v in settings.items() if v is not None}
    return with_settings(ENGINE_PRESETS[name], None, given)[0]
