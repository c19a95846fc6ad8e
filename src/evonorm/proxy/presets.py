"""Named search presets of the built-in proxy task: the engine's settings of the same name
(`evonorm.search.settings`) with the task's (`ProxyConfig`), from seconds (tests) to the paper's.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Mapping

from evonorm.proxy.config import ProxyConfig, configured, measured, with_task
from evonorm.search.config import SearchConfig
from evonorm.search.objective import CandidateCost
from evonorm.search.settings import ENGINE_PRESETS

# Sized for the 2-core reference machine (docs/search.md).
TASKS: dict[str, ProxyConfig] = {
    # Seconds: synthetic data, two archs at a sliver of width, a handful of steps. For tests.
    "tiny": ProxyConfig(
        dataset="synthetic", n_train=320, archs=("resnet50_cifar", "mobilenetv2_cifar"),
        train_preset="tiny", train={"steps": 4, "batch_size": 16, "width": 0.0625},
        stability_steps=3, stability_batch=4, quality_steps=2, quality_factor=0.0,
        rerank_preset="tiny", rerank_train={"steps": 6, "batch_size": 16, "width": 0.0625},
        rerank_top=3),
    # The main job (scripts/main.sh): minutes on 2 cores with Fashion-MNIST, set by `evonorm
    # calibrate --preset demo` (docs/calibration.md; what it measured is in measured.json): enough
    # held-out images that a score's standard error stays below the gaps between references, and
    # MobileNetV2 at the lr at which both textbook references learn. Training is staged
    # (multi-fidelity, the engine's `stage_steps`): 150 steps, each architecture scored annealed (a
    # cosine cycle ends there), the quality bar on those scores, then only layers above the
    # hurdle (the mean stage-1 fitness so far) train to 900 steps from the same weights. One run
    # of 900 steps, not two short ones, because its order of layers is that of long training (a
    # short run's order is partly how fast a layer starts, not where it ends). Every search seed
    # uses split 0 of the data (data_seed=0), as one's own task has one split.
    "demo": ProxyConfig(
        n_train=4000, holdout=0.25, archs=("resnet50_cifar", "mobilenetv2_cifar"),
        train_preset="tiny", train={"steps": 900, "batch_size": 32, "width": 0.0625, "lr": 0.1,
                                    "lr_warmup": 10},
        arch_train={"mobilenetv2_cifar": {"lr": 0.03}},
        stability_steps=10, stability_batch=8, quality_steps=0, quality_factor=1.2,
        train_runs=1, final_train_runs=1, data_seed=0, rerank_preset="tiny",
        rerank_train={"steps": 300, "batch_size": 64, "width": 0.0625, "n_train": 10000,
                      "n_test": None, "lr_warmup": 10}, rerank_top=3),  # the whole test split
    # The paper's settings (Sec. 5.1): CIFAR-10, 3 archs, 2000 steps constant lr / 5000 cosine.
    "paper-b": ProxyConfig(dataset="cifar10", train_preset="paper-b", rerank_preset="paper-b",
                           rerank_train={"steps": 10000}),
    "paper-s": ProxyConfig(dataset="cifar10", train_preset="paper-s", rerank_preset="paper-s",
                           rerank_train={"steps": 20000}),
}

# 150 steps (staged at 75): the training `demo-b` was calibrated at, which it keeps.
_SHORT_TRAIN = {**TASKS["demo"].train, "steps": 150}

# From primitives: `demo`'s proxy, with its quality test at the engine's first stage (75 steps).
TASKS["scratch"] = TASKS["demo"]
# ... and the ladder's network rung: the prescreen's features of the network at initialisation are
# one forward and backward pass of ResNet-50, and a hopeless network is rejected there.
TASKS["scratch2"] = dataclasses.replace(TASKS["demo"], prescreen_features="signal")

# `demo` for the B space, at lower learning rates: at `demo`'s, EvoNorm-B0 often stays at chance
# on MobileNetV2 and the seed spread hides the gaps between the B references (docs/calibration.md).
# It starts from BN-ReLU written as a graph: GN-ReLU fails the quality test on ResNet50 here.
TASKS["demo-b"] = dataclasses.replace(
    TASKS["demo"], train={**_SHORT_TRAIN, "lr": 0.03},
    arch_train={"mobilenetv2_cifar": {"lr": 0.01}},
    train_runs=1, final_train_runs=None, data_seed=None,  # as calibrated: one run, split per seed
    rerank_train={**TASKS["demo"].rerank_train, "lr": 0.03})

PRESETS: dict[str, SearchConfig] = {name: with_task(engine, TASKS[name])
                                    for name, engine in ENGINE_PRESETS.items()}



def unmeasured(preset: str, config: Mapping[str, Any] | None) -> list[str]:
    """The settings a calibration depends on (`evonorm.proxy.config.measured`) in which a run's
    config (as stored) differs from `preset` as it ships: such a run (a `--set` override, or a run
    of an earlier version of the preset) is not what was measured, and its notes say so rather
    than lend it the preset's numbers. [] at the preset's settings, for an unknown preset, or
    without a config; a setting the stored config lacks (a run older than the setting) is not
    compared."""
    if preset not in PRESETS or not config:
        return []
    ours = measured(PRESETS[preset].to_dict())
    task = ours["task"]
    task["dataset"] = task.get("dataset") or "fashion_mnist"  # the default, as a run names it

    def same(a: Any, b: Any) -> bool:  # tuples and lists alike, as JSON stores them
        return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)

    return [k for part, got in measured(config).items() for k, v in got.items()
            if not same(v, ours.get(part, {}).get(k))]


def _elsewhere(kind: str, preset: str, space: str, off: list[str]) -> str:
    names = ", ".join(off[:-1]) + " and " + off[-1] if len(off) > 1 else off[0]
    return (f"{kind} of {preset} ({space.upper()} space): not measured at this run's settings "
            f"(its {names} {'differ' if len(off) > 1 else 'differs'} from {preset}'s as measured), "
            f"so {preset}'s numbers do not apply (docs/calibration.md)")


def measurement(kind: str, preset: str, space: str) -> str | None:
    """The summary of what was measured of `preset`'s proxy in `space` (`kind`: "calibration" or
    "fidelity"), formatted from its numbers; None where nothing was. A results file the package
    ships (measured.json), not the source: a measurement is data, kept with the command that
    made it, and a new one changes no code."""
    entries = json.loads((Path(__file__).parent / "measured.json").read_text())[kind]
    found = [e for e in entries if (e["preset"], e["space"]) == (preset, space)]
    return found[0]["summary"].format(**found[0]["numbers"]) if found else None


def measured_cost(config: SearchConfig) -> CandidateCost | None:
    """What a candidate of the run's preset was measured to cost, in worker-seconds (measured.json's
    "cost", with the command that measured it), for the search's ETA before the run has timings of
    its own; None for a preset not measured, or a run not at its settings as measured
    (`unmeasured`)."""
    entries = json.loads((Path(__file__).parent / "measured.json").read_text())["cost"]
    preset, space = config.preset, config.evolution.space
    found = [e for e in entries if (e["preset"], e["space"]) == (preset, space)]
    if not found or unmeasured(preset, config.to_dict()):
        return None
    return CandidateCost(float(found[0]["numbers"]["seconds_per_candidate"]),
                         f"{preset}'s measured cost")


def calibration_note(preset: str, space: str, config: Mapping[str, Any] | None = None) -> str:
    """One line on how far a preset's proxy task can tell layers apart in a space (at a run's
    `config`, where given)."""
    found = measurement("calibration", preset, space)
    off = unmeasured(preset, config)
    if found and off:
        return _elsewhere("calibration", preset, space, off)
    if found:
        return f"calibration of {preset} ({space.upper()} space): {found} (docs/calibration.md)"
    return (f"calibration of {preset} ({space.upper()} space): not measured; its fitness may be "
            f"training-seed noise (`evonorm calibrate --preset {preset} --space {space}`)")


def fidelity_note(preset: str, space: str, config: Mapping[str, Any] | None = None) -> str:
    """One line on how far a preset's order of layers agrees with longer training (at a run's
    `config`, where given)."""
    found = measurement("fidelity", preset, space)
    off = unmeasured(preset, config)
    if found and off:
        return _elsewhere("rank fidelity", preset, space, off)
    if found:
        return f"rank fidelity of {preset} ({space.upper()} space): {found} (docs/calibration.md)"
    how = (f"`evonorm calibrate --preset {preset} --panel PANEL.json`" if preset in PRESETS
           else "`evonorm calibrate --panel PANEL.json` measures a preset's")
    return (f"rank fidelity of {preset if preset in PRESETS else 'this proxy'} ({space.upper()} "
            f"space): not measured; its order of layers may differ from that of longer training "
            f"({how}, docs/calibration.md)")


def list_presets() -> list[str]:
    return list(PRESETS)


def get_preset(name: str, **settings) -> SearchConfig:
    """A preset by name with some settings changed by plain keyword, the engine's and the task's
    (`evonorm.search.config.with_settings`; None values are ignored); ValueError on bad input."""
    if name not in PRESETS:
        raise ValueError(f"unknown search preset {name!r} (choose from {', '.join(PRESETS)})")
    return configured(PRESETS[name], **{k: v for k, v in settings.items() if v is not None})
