"""The built-in proxy task's settings: `ProxyConfig`, carried in the engine's config as its `task`
(`SearchConfig.task`, stored with the run), and `TrainSetting` (a trainer preset plus field
overrides). `proxy_config(cfg)` reads them out of a run's config and checks them against the
engine's parts they depend on (the hurdles' stages, the seed)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from evonorm.search.config import SearchConfig

PAPER_ARCHS = ("resnet50_cifar", "mobilenetv2_cifar", "efficientnet_b0_cifar")


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
    dataset: str | None = None  # None: the default, named when the run starts (`with_dataset`)
    data_root: str | None = None
    # a user's own data (`dataset` a file.npz, stored as its absolute path): the file's sha256,
    # taken when the run starts, so resume, rerank and report read that very file or fail
    data_sha256: str | None = None
    n_train: int | None = None
    holdout: float = 0.1
    # the seed of the training subset and the held-out split (None: the run's seed), so that
    # several search seeds can share one task (every candidate of a run shares its split). No
    # preset sets it: at `demo` a fixed split did not narrow the seed-to-seed spread
    # (docs/calibration.md)
    data_seed: int | None = None
    # evaluation: anchor architectures and the full training budget on each
    archs: tuple[str, ...] = PAPER_ARCHS
    train_preset: str = "small"
    train: dict = field(default_factory=dict)  # TrainConfig field overrides (width, steps, ...)
    arch_train: dict = field(default_factory=dict)  # per-architecture overrides on top of `train`
    # rejection
    prechecks: bool = True
    stability_steps: int = 100
    stability_threshold: float = 1e8
    stability_batch: int = 8
    stability_lr: float = 0.1  # relative step: |delta theta| = lr * |theta| per ascent step
    stability_archs: int = 1  # stress-test the first N anchor architectures
    quality_steps: int = 100
    quality_factor: float = 2.0  # reject below quality_factor x chance accuracy
    # training runs per candidate and architecture (seeds seed, seed + 100, ...): every stage's
    # score, the quality test's included, is their mean: at 2, half the variance from training
    # (not from the data split) at twice the training cost (needs the hurdles' `stages`, where
    # the quality test is the first stage)
    train_seeds: int = 1
    # training runs per architecture at the last stage (None: train_seeds): the runs beyond
    # train_seeds train only for a layer that clears every earlier stage, and its fitness is the
    # mean of all of them, so the noise falls where layers are ranked while the many layers the
    # quality test or a hurdle stops cost what they did
    final_train_seeds: int | None = None
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
        if self.train_seeds < 1:
            errors.append(f"train_seeds must be >= 1, got {self.train_seeds}")
        if self.final_train_seeds is not None and self.final_train_seeds < self.train_seeds:
            errors.append(f"final_train_seeds must be >= train_seeds ({self.train_seeds}), got "
                          f"{self.final_train_seeds}")
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
        return self.train_seeds if self.final_train_seeds is None else self.final_train_seeds

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["archs"] = list(self.archs)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ProxyConfig":
        unknown = sorted(set(d) - {f.name for f in fields(cls)})
        if unknown:
            raise ValueError(f"unknown search config field(s): {', '.join(unknown)}")
        return cls(**d)


def proxy_config(cfg: SearchConfig) -> ProxyConfig:
    """The proxy task's settings in a run's config, checked against the engine's stages.
    ValueError for a run on an objective of one's own (it has none) or a bad combination."""
    if cfg.task is None:
        raise ValueError(f"the run was searched with the objective {cfg.objective}, not the "
                         "built-in proxy task")
    p = ProxyConfig.from_dict(cfg.task)
    errors = []
    stages = cfg.hurdles.stages
    if stages and p.quality_steps:
        errors.append("with stages the first stage is the quality test: set quality_steps 0")
    if p.train_seeds > 1 and not stages:
        errors.append("train_seeds > 1 needs stages (the quality test is then the first "
                      "stage, scored over the same seeds)")
    if errors:
        raise ValueError("; ".join(errors))
    return p


def with_task(cfg: SearchConfig, task: ProxyConfig) -> SearchConfig:
    """`cfg` carrying the proxy task `task`: its anchor architectures are the score names, and
    its data folder is what a remote Ray worker receives (`Execution.data_dir`)."""
    return cfg.replace(task=task.to_dict(), scores=task.archs, data_dir=task.data_root)


def anchor_archs(cfg: SearchConfig) -> tuple[str, ...]:
    """The architectures a run trained its candidates on: none for an objective of one's own."""
    return () if cfg.task is None else proxy_config(cfg).archs


def split_seed(cfg: SearchConfig) -> int:
    """The seed of the run's data subset and held-out split (`data_seed`, else the run's seed)."""
    data_seed = proxy_config(cfg).data_seed
    return cfg.seed if data_seed is None else data_seed
