"""Named search presets of the built-in proxy task: the engine's settings of the same name
(`evonorm.search.settings`) with the task's (`ProxyConfig`), from seconds (tests) to the paper's.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Mapping

from evonorm.proxy.config import ProxyConfig, configured, measured, with_task
from evonorm.search.config import SearchConfig
from evonorm.search.settings import ENGINE_PRESETS

# Settings are measured on the 2-core reference machine (docs/search.md).
TASKS: dict[str, ProxyConfig] = {
    # Seconds: synthetic data, two archs at a sliver of width, a handful of steps. For tests.
    "tiny": ProxyConfig(
        dataset="synthetic", n_train=320, archs=("resnet50_cifar", "mobilenetv2_cifar"),
        train_preset="tiny", train={"steps": 4, "batch_size": 16, "width": 0.0625},
        stability_steps=3, stability_batch=4, quality_steps=2, quality_factor=0.0,
        rerank_preset="tiny", rerank_train={"steps": 6, "batch_size": 16, "width": 0.0625},
        rerank_top=3),
    # The main job (scripts/main.sh): minutes on 2 cores with Fashion-MNIST. Calibrated with
    # `evonorm calibrate --preset demo` (docs/calibration.md): 1000 held-out images (a 300-image
    # score has a 2.9-point standard error); 10 warm-up steps; MobileNetV2 at width 0.0625 at lr
    # 0.03 (0.02 leaves BN-ReLU at chance, 0.05 leaves GN-ReLU there). Training is staged
    # (multi-fidelity, the engine's `stage_steps`): 150 steps, each architecture scored annealed (a
    # cosine cycle ends there), the quality bar of 1.2x chance on those scores, then only layers
    # above the hurdle (the mean stage-1 fitness so far) train to 900 steps from the same weights.
    # One run of 900 steps, not two of 150, because the order it gives is the order of long
    # training: against 16 layers trained 2,000 steps on all 60,000 images (3 seeds, 2 archs),
    # it ranks at Spearman 0.90, where two runs of 150 steps ranked at 0.77 though their scores
    # spread less over seeds (a short run's order is partly the order of how fast a layer
    # starts, not where it ends); it costs 1.23x as much per candidate. Every search seed uses
    # split 0 of the data (data_seed=0), as one's own task has one split.
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

# The short training `demo` had before its rank fidelity was measured (150 steps in stages of 75;
# `demo-b` was calibrated and measured at it, and keeps it).
_SHORT_TRAIN = {**TASKS["demo"].train, "steps": 150}

# From primitives: `demo`'s proxy (900 steps, split 0 for every search seed), its quality test at
# the engine's first stage (75 steps), as the earlier 150-step `scratch` proxy was calibrated.
TASKS["scratch"] = TASKS["demo"]

# `demo` for the B space: EvoNorm-B0 stays at chance in 2 of 3 seeds on MobileNetV2 at `demo`'s
# lr 0.03, and the seed spread is larger than the gaps between the B references there; at lr 0.03
# on ResNet50 and 0.01 on MobileNetV2 it learns in every seed (docs/calibration.md). It starts
# from BN-ReLU written as a graph (GN-ReLU fails the quality test on ResNet50 at lr 0.03).
TASKS["demo-b"] = dataclasses.replace(
    TASKS["demo"], train={**_SHORT_TRAIN, "lr": 0.03},
    arch_train={"mobilenetv2_cifar": {"lr": 0.01}},
    train_runs=1, final_train_runs=None, data_seed=None,  # as calibrated: one run, split per seed
    rerank_train={**TASKS["demo"].rerank_train, "lr": 0.03})

PRESETS: dict[str, SearchConfig] = {name: with_task(engine, TASKS[name])
                                    for name, engine in ENGINE_PRESETS.items()}

# What `evonorm calibrate` measured for a preset's proxy, per search space (docs/calibration.md);
# a search prints it when it starts, and says where nothing was measured. (`demo` in the B space
# did not calibrate at its earlier, 150-step training, hence `demo-b`; at 900 steps it is not
# measured.)
CALIBRATION = {
    ("demo", "s"): "18 of 18 reference quality tests pass (3 seeds on one split, one 900-step "
                   "training run each), references 14 points above the best random layer trained "
                   "to the end, seed spread 4.1 points: 1.9x the smallest gap (BN-ReLU - "
                   "EvoNorm-S0, 2.1 points; ranked right in 3 of 3 seeds) and 0.32 of the "
                   "largest, so layers about 10 points apart rank right in one evaluation; closer "
                   "ones need re-training",
    ("demo-b", "b"): "24 of 24 reference quality tests pass (3 seeds), references 28 points above "
                     "random layers, EvoNorm-B0/B1/b_top2 15 points above BN-ReLU but within the "
                     "seed spread (3.4 points) of each other",
}


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


def calibration_note(preset: str, space: str, config: Mapping[str, Any] | None = None) -> str:
    """One line on how far a preset's proxy task can tell layers apart in a space (at a run's
    `config`, where given)."""
    found = CALIBRATION.get((preset, space))
    off = unmeasured(preset, config)
    if found and off:
        return _elsewhere("calibration", preset, space, off)
    if found:
        return f"calibration of {preset} ({space.upper()} space): {found} (docs/calibration.md)"
    return (f"calibration of {preset} ({space.upper()} space): not measured; its fitness may be "
            f"training-seed noise (`evonorm calibrate --preset {preset} --space {space}`)")


# How each preset's fitness ranks layers against the reference panel trained long (`evonorm
# calibrate --panel`, docs/calibration.md): the report prints it beside its verdict, since a
# found layer's lead means only as much as the proxy's order agrees with longer training.
FIDELITY: dict[tuple[str, str], str] = {
    ("demo", "s"): "Spearman 0.90 (95% interval 0.68-0.97) against the reference panel (16 "
                   "layers, 3 training seeds of 2,000 steps on all 60,000 images), at search "
                   "seeds other than the one it was chosen at; 4 pairs more than 3 points apart "
                   "ranked the wrong way (GroupNorm-Swish above s_top1, IN-ReLU above "
                   "PixelNorm-ReLU, GroupNorm alone and FRN above LayerNorm-ReLU): a found "
                   "layer's lead of a few points is a reason to re-train it, not a result",
}


def fidelity_note(preset: str, space: str, config: Mapping[str, Any] | None = None) -> str:
    """One line on how far a preset's order of layers agrees with longer training (at a run's
    `config`, where given)."""
    found = FIDELITY.get((preset, space))
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
