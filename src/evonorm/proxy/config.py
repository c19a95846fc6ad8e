"""The built-in proxy task's settings: `ProxyConfig`, carried in the engine's config as its `task`
(`SearchConfig.task`, stored with the run, never read by the engine), and `TrainSetting` (a
trainer preset plus field overrides). `ProxyTask` is the task as a run trains it: those settings
resolved once with the engine's facts they depend on (seed, device, the hurdles' stage steps),
each architecture's training merged into a `TrainConfig`; `ProxyTask.of_run(cfg)` builds it from a
run's config, where a run starts or is read back.

A setting that a preset's calibration depends on carries `metadata=MEASURED`, here and in the
engine's parts: `measured(config)` derives the one list of them."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from evonorm.catalog import ARCHS
from evonorm.search.config import MEASURED, PARTS, SearchConfig, with_settings
from evonorm.train_config import TRAIN_PRESETS, TrainConfig, check_overrides

PAPER_ARCHS = ("resnet50_cifar", "mobilenetv2_cifar", "efficientnet_b0_cifar")
PRESCREEN_FEATURES = ("full", "signal")


@dataclass(frozen=True)
class TrainSetting:
    """How candidates are trained on each architecture: a trainer preset and field overrides.

    `presized`: the data handed to the trainer is already the run's subset (the search's
    `n_train`, held-out split), so the trainer preset's own n_train/n_test do not cut it again;
    a rerank trains on the full training split with the preset's sizes.
    """

    preset: str
    overrides: Mapping[str, Any]
    presized: bool

    @property
    def label(self) -> str:
        """How the setting is named in the rerank rows: the preset plus its overrides."""
        extra = ",".join(f"{k}={v}" for k, v in sorted(self.overrides.items()))
        return f"{self.preset}[{extra}]" if extra else self.preset


@dataclass(frozen=True)
class ProxyConfig:
    """The proxy task: its data, anchor architectures, rejection tests and training."""

    # data: the search trains on (1 - holdout) of the training split and scores on the rest,
    # so it never sees the test set.
    # None: the default, named when the run starts (`with_dataset`)
    dataset: str | None = field(default=None, metadata=MEASURED)
    data_root: str | None = None
    # a user's own data (`dataset` a file.npz, stored as its absolute path): the file's sha256,
    # taken when the run starts, so resume, rerank and report read that very file or fail
    data_sha256: str | None = field(default=None, metadata=MEASURED)
    n_train: int | None = field(default=None, metadata=MEASURED)
    holdout: float = field(default=0.1, metadata=MEASURED)
    # the seed of the training subset and the held-out split (None: the run's seed), so that
    # several search seeds can share one task (every candidate of a run shares its split). No
    # preset sets it: at `demo` a fixed split did not narrow the seed-to-seed spread
    # (docs/calibration.md)
    data_seed: int | None = field(default=None, metadata=MEASURED)
    # evaluation: anchor architectures and the full training budget on each
    archs: tuple[str, ...] = field(default=PAPER_ARCHS, metadata=MEASURED)
    train_preset: str = field(default="small", metadata=MEASURED)
    # TrainConfig field overrides (width, steps, ...)
    train: dict = field(default_factory=dict, metadata=MEASURED)
    # per-architecture overrides on top of `train`
    arch_train: dict = field(default_factory=dict, metadata=MEASURED)
    # rejection: the stability and quality tests, and the staged training's quality bar (off: every
    # candidate trained fully, as the paper's random search without rejection; the engine's checks
    # of the layer alone are its own setting, `prechecks`)
    rejection: bool = field(default=True, metadata=MEASURED)
    stability_steps: int = field(default=100, metadata=MEASURED)
    stability_threshold: float = field(default=1e8, metadata=MEASURED)
    stability_batch: int = field(default=8, metadata=MEASURED)
    # relative step: |delta theta| = lr * |theta| per ascent step
    stability_lr: float = field(default=0.1, metadata=MEASURED)
    stability_archs: int = field(default=1, metadata=MEASURED)  # stress-test the first N archs
    quality_steps: int = field(default=100, metadata=MEASURED)
    # reject below quality_factor x chance accuracy
    quality_factor: float = field(default=2.0, metadata=MEASURED)
    # training runs per candidate and architecture (seeds seed, seed + 100, ...): every stage's
    # score, the quality test's included, is their mean: at 2, half the variance from training
    # (not from the data split) at twice the training cost (needs the hurdles' `stage_steps`, where
    # the quality test is the first stage)
    train_runs: int = field(default=1, metadata=MEASURED)
    # training runs per architecture at the last stage (None: train_runs): the runs beyond
    # train_runs train only for a layer that clears every earlier stage, and its fitness is the
    # mean of all of them, so the noise falls where layers are ranked while the many layers the
    # quality test or a hurdle stops cost what they did
    final_train_runs: int | None = field(default=None, metadata=MEASURED)
    # what the task hands the prescreen of a candidate at birth, beside the engine's features of
    # the layer alone: "full" (`task_features`: every architecture at initialisation and a few
    # optimiser steps, about 1.4 s a candidate on the 2-core machine) or "signal"
    # (`signal_features`: one forward and backward pass of the first architecture, about 0.2 s)
    prescreen_features: str = "full"
    # reranking (Sec. 5.2): a larger training setting on the same architectures
    rerank_preset: str = "small"
    rerank_train: dict = field(default_factory=dict)
    rerank_top: int = 10

    def __post_init__(self):
        object.__setattr__(self, "archs", tuple(self.archs))
        errors = []
        if not self.archs:
            errors.append("need at least one anchor architecture")
        if not 0.0 < self.holdout < 1.0:
            errors.append(f"holdout must be in (0, 1), got {self.holdout}")
        if self.train_runs < 1:
            errors.append(f"train_runs must be >= 1, got {self.train_runs}")
        if self.prescreen_features not in PRESCREEN_FEATURES:
            errors.append(f"prescreen_features must be one of {', '.join(PRESCREEN_FEATURES)}, "
                          f"got {self.prescreen_features!r}")
        if self.final_train_runs is not None and self.final_train_runs < self.train_runs:
            errors.append(f"final_train_runs must be >= train_runs ({self.train_runs}), got "
                          f"{self.final_train_runs}")
        if errors:
            raise ValueError("; ".join(errors))

    @property
    def training(self) -> TrainSetting:
        """The search's full training of each candidate."""
        return TrainSetting(self.train_preset, self.train, presized=True)

    @property
    def rerank_training(self) -> TrainSetting:
        """The larger setting the top layers are retrained in (paper Sec. 5.2)."""
        return TrainSetting(self.rerank_preset, self.rerank_train, presized=False)

    @property
    def final_runs(self) -> int:
        """Training runs per architecture behind a fully trained layer's fitness."""
        return self.train_runs if self.final_train_runs is None else self.final_train_runs

    def replace(self, **changes) -> "ProxyConfig":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["archs"] = list(self.archs)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ProxyConfig":
        unknown = sorted(set(d) - {f.name for f in fields(cls)})
        if unknown:
            raise ValueError(f"unknown search config field task.{unknown[0]}")
        return cls(**d)


def check_stages(task: ProxyConfig, stage_steps: tuple[int, ...]) -> None:
    """ValueError unless the task's settings fit the engine's stages (the hurdles' stage steps)."""
    errors = []
    if stage_steps and task.quality_steps:
        errors.append("with stage steps the first stage is the quality test: set quality_steps 0")
    if task.train_runs > 1 and not stage_steps:
        errors.append("train_runs > 1 needs stage steps (the quality test is then the first "
                      "stage, scored over the same seeds)")
    if errors:
        raise ValueError("; ".join(errors))


def merged_training(task: ProxyConfig, setting: TrainSetting, arch: str, *, seed: int,
                    device: str, stage_steps: tuple[int, ...] = ()) -> TrainConfig:
    """The TrainConfig of `arch` in a training setting: the trainer preset with the setting's
    overrides, the task's per-architecture overrides, the seed and device. With `stage_steps`
    (the search's staged full training) its cosine restarts at each stage, as the staged
    evaluation trains it, so a reference or re-training run is the candidates' full run.
    ValueError, in one line, for an unknown preset or override or a value a TrainConfig refuses."""
    if setting.preset not in TRAIN_PRESETS:
        raise ValueError(f"unknown training preset {setting.preset!r} "
                         f"(choose from {', '.join(TRAIN_PRESETS)})")
    check_overrides(dict(setting.overrides), "train" if setting.presized else "rerank_train")
    per_arch = task.arch_train.get(arch, {})
    check_overrides(per_arch, f"arch_train.{arch}")
    over: dict[str, Any] = {**setting.overrides, **per_arch}
    if setting.presized:  # the data is already the run's subset: the preset must not cut it again
        over.setdefault("n_train", None)
        over.setdefault("n_test", None)
    if arch not in ARCHS and "width" not in per_arch:
        over.pop("width", None)  # a preset's width is for the built-in architectures
    over.update(arch=arch, seed=seed, device=device)
    if stage_steps:
        full = over.get("steps", TRAIN_PRESETS[setting.preset].steps)
        if stage_steps[-1] >= full:
            raise ValueError(f"stage steps {list(stage_steps)} must end before the full "
                             f"training's {full} steps")
        over["restarts"] = tuple(stage_steps)
    try:
        return dataclasses.replace(TRAIN_PRESETS[setting.preset], **over)
    except TypeError as err:  # e.g. a value a TrainConfig check cannot compare
        raise ValueError(f"training on {arch}: {err}") from None


@dataclass(frozen=True)
class ProxyTask:
    """The built-in task as a run trains it: its settings (`ProxyConfig`, as stored) with the
    engine's facts it depends on (the run's seed and device, the hurdles' stage steps), resolved
    once: checked against the stages, and each anchor architecture's training merged into a
    `TrainConfig` (the search's in `training`, the rerank's in `rerank_training`), so nothing
    downstream merges or parses settings again. A trial at another seed or device is
    `dataclasses.replace(task, seed=..., device=...)`, which resolves anew."""

    settings: ProxyConfig
    seed: int = 0
    device: str = "cpu"
    stage_steps: tuple[int, ...] = ()
    training: dict[str, TrainConfig] = field(init=False, repr=False, compare=False)
    rerank_training: dict[str, TrainConfig] = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "stage_steps", tuple(self.stage_steps))
        check_stages(self.settings, self.stage_steps)
        at = {"seed": self.seed, "device": self.device}
        object.__setattr__(self, "training", {
            arch: merged_training(self.settings, self.settings.training, arch, **at,
                                  stage_steps=self.stage_steps) for arch in self.archs})
        object.__setattr__(self, "rerank_training", {
            arch: merged_training(self.settings, self.settings.rerank_training, arch, **at)
            for arch in self.archs})

    @classmethod
    def of_run(cls, cfg: SearchConfig) -> "ProxyTask":
        """The task a run's config describes (its stored `task` and the engine's facts), resolved.
        ValueError for a run on an objective of one's own (it has none) or a bad combination."""
        return cls(stored_task(cfg), seed=cfg.seed, device=cfg.execution.device,
                   stage_steps=cfg.hurdles.stage_steps)

    @property
    def archs(self) -> tuple[str, ...]:
        return self.settings.archs

    @property
    def split_seed(self) -> int:
        """The seed of the run's data subset and held-out split (`data_seed`, else the run's)."""
        data_seed = self.settings.data_seed
        return self.seed if data_seed is None else data_seed

    def run_seed(self, i: int) -> int:
        """The training seed of a candidate's i-th run on each architecture (`train_runs`)."""
        return self.seed + 100 * i

    def quality_training(self, arch: str, schedule: str = "constant") -> TrainConfig:
        """The quality test's run on `arch`: the search's training cut to `quality_steps`, at a
        constant lr by default (it stands in for the first steps of the full run, where a cosine
        schedule is still at its peak)."""
        return dataclasses.replace(self.training[arch], steps=self.settings.quality_steps,
                                   schedule=schedule)

    def replace_settings(self, **changes) -> "ProxyTask":
        """The task with some of its settings (`ProxyConfig` fields) changed, resolved anew."""
        return dataclasses.replace(self, settings=self.settings.replace(**changes))


def with_task(cfg: SearchConfig, task: ProxyConfig) -> SearchConfig:
    """`cfg` carrying the proxy task `task`: its anchor architectures are the score names, and
    its data folder is what a remote Ray worker receives (`Execution.data_dir`)."""
    return cfg.replace(task=task.to_dict(), scores=task.archs,
                       execution=cfg.execution.replace(data_dir=task.data_root))


def configured(cfg: SearchConfig, **settings) -> SearchConfig:
    """A proxy-task run's config with settings changed by plain keyword, the engine's and the
    task's (`evonorm.search.config.with_settings`), checked across the parts (`check_stages`)."""
    cfg, task = with_settings(cfg, stored_task(cfg), settings)
    check_stages(task, cfg.hurdles.stage_steps)
    return with_task(cfg, task)


def stored_task(cfg: SearchConfig) -> ProxyConfig:
    """The task's settings as a run's config carries them (ValueError for a run on an objective
    of one's own, which has none)."""
    if cfg.task is None:
        raise ValueError(f"the run was searched with the objective {cfg.objective}, not the "
                         "built-in proxy task")
    return ProxyConfig.from_dict(cfg.task)


def with_task_settings(cfg: SearchConfig, **changes) -> SearchConfig:
    """`cfg` with some of its proxy task's settings changed (`ProxyConfig` fields)."""
    return with_task(cfg, stored_task(cfg).replace(**changes))


def measured(config: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The settings a calibration depends on (`metadata=MEASURED`: the task's data, architectures,
    rejection tests and training, the engine's space, random-layer size and stage steps), by
    part, from a config as stored (or as this returns it); a setting it lacks is left out. What
    the search proposes and how long and where it runs are not among them, nor the seed (a
    calibration spans seeds)."""
    out: dict[str, dict[str, Any]] = {}
    for part, cls in (("task", ProxyConfig), *PARTS.items()):
        stored = config.get(part) if isinstance(config, Mapping) else None
        if not isinstance(stored, Mapping):
            continue
        got = {f.name: stored[f.name] for f in fields(cls)
               if f.metadata.get("measured") and f.name in stored}
        if got:
            out[part] = got
    return out


def anchor_archs(cfg: SearchConfig) -> tuple[str, ...]:
    """The architectures a run trained its candidates on: none for an objective of one's own."""
    return () if cfg.task is None else stored_task(cfg).archs
