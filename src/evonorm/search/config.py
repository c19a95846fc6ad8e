"""Search settings: the `SearchConfig` dataclass, JSON round-tripped through the run's store so that
`resume`, `rerank` and the report read back exactly what the search ran with; training settings are a
`evonorm.train.TRAIN_PRESETS` name plus field overrides (`TrainSetting`). The named presets are in
`evonorm.search.presets`.

The data module is imported where a dataset is resolved: it loads torch, which reading a config
does not need.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from evonorm.search.evolution import ALGORITHMS, CRITERIA


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
        """How the setting is named in the store (reranks): the preset plus its overrides."""
        extra = ",".join(f"{k}={v}" for k, v in sorted(self.overrides.items()))
        return f"{self.preset}[{extra}]" if extra else self.preset


SPACES = ("b", "s")
EXECUTORS = ("local", "ray")
DEVICES = ("cpu", "cuda")
PAPER_ARCHS = ("resnet50_cifar", "mobilenetv2_cifar", "efficientnet_b0_cifar")


@dataclass(frozen=True)
class SearchConfig:
    """Everything a search run needs; JSON round-trips through `to_dict` / `from_dict`."""

    preset: str = "custom"  # the preset it came from, or "custom"
    # the objective scoring candidates, as "module:function" (None: the built-in proxy task). Only
    # recorded: resuming such a run takes the function again from its caller, never from here.
    objective: str | None = None
    # data: the search trains on (1 - holdout) of the training split and scores on the rest,
    # so it never sees the test set.
    dataset: str | None = None  # None -> `with_dataset()`: the default, when the run starts
    data_root: str | None = None
    # a user's own data (`dataset` a file.npz, stored as its absolute path): the file's sha256,
    # taken when the run starts, so resume, rerank and report read that very file or fail
    data_sha256: str | None = None
    n_train: int | None = None
    holdout: float = 0.1
    # the seed of the training subset and the held-out split (None: `seed`), so that several
    # search seeds can share one task (every candidate of a run shares its split). No preset sets
    # it: at `demo` a fixed split did not narrow the seed-to-seed spread (docs/calibration.md)
    data_seed: int | None = None
    # search space and algorithm
    space: str = "s"
    algorithm: str = "evolution"
    budget: int = 100  # candidates proposed in all (rejected and cache hits included)
    budget_seconds: float | None = None  # also stop proposing once candidates took this many
    # worker-seconds in all (equal-compute comparisons; None: no limit)
    max_nodes: int = 10
    seed_layers: tuple[str, ...] = ()  # named graphs or graph JSON, evaluated first (origin "seed")
    window: int = 2500
    initial_population: int = 20
    tournament_fraction: float = 0.05
    tournament_min: int = 2
    criterion: str = "pareto"
    mutations: int = 2
    p_random: float = 0.5
    # from scratch, where valid layers are rare: layers the quality test rejected after they
    # learned on some architecture join the population too, below every valid layer (stage 0),
    # so evolution has parents before its first valid layer (random search ignores it)
    near_misses: bool = False
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
    # multi-fidelity (progressive dynamic hurdles, So et al. 2019): the full training run is
    # scored at these steps (a cosine cycle ends at each, so every stage is scored annealed) and
    # a layer goes on only while its stage fitness clears that stage's hurdle, the mean stage
    # fitness of the last `window` layers that reached it (once `hurdle_min` have). The first
    # stage is the quality test (the bar applies to its accuracies); `quality_steps` must be 0.
    stages: tuple[int, ...] = ()
    hurdle_min: int = 4
    # training runs per candidate and architecture (seeds seed, seed + 100, ...): every stage's
    # score, the quality test's included, is their mean: at 2, half the variance from training
    # (not from the data split) at twice the training cost (needs `stages`, where the quality
    # test is the first stage)
    train_seeds: int = 1
    # training runs per architecture at the last stage (None: train_seeds): the runs beyond
    # train_seeds train only for a layer that clears every earlier stage, and its fitness is the mean
    # of all of them, so the noise falls where layers are ranked while the many layers the quality
    # test or a hurdle stops cost what they did
    final_train_seeds: int | None = None
    # the prescreen (evonorm.search.surrogate): a surrogate learned as the search goes ranks
    # `prescreen_pool` children per slot by their features at birth and trains the best; one
    # predicted to pass rejection with probability below `prescreen_threshold` is rejected
    # untrained; a share `prescreen_explore` of slots trains one child whatever it predicts (so it
    # keeps learning and its false negatives are measured); no prediction before it has learned
    # from `prescreen_min` valid and `prescreen_min` rejected candidates. Off: not yet measured to
    # pay for itself.
    prescreen: bool = False
    prescreen_pool: int = 4
    prescreen_threshold: float = 0.05
    prescreen_explore: float = 0.2
    prescreen_min: int = 3
    # execution
    workers: int = 0  # 0 -> one per core
    threads: int = 0  # torch threads per local worker (0: the cores divided among the workers)
    executor: str = "local"
    address: str | None = None
    timeout: float = 3600.0  # seconds per candidate before its worker is killed
    retries: int = 1  # re-runs of a candidate whose worker died or hung
    # where every training run (stability, quality, full training, rerank) goes: "cpu" or
    # "cuda[:N]" (`--device auto` is resolved when the run starts and stored that way). Local
    # workers share the GPU; a Ray task asks for `gpus_per_worker` of one (None: the cluster's
    # GPUs divided among the workers, at most one each).
    device: str = "cpu"
    gpus_per_worker: float | None = None
    seed: int = 0
    # reranking (Sec. 5.2): a larger training setting on the same architectures
    rerank_preset: str = "small"
    rerank_train: dict = field(default_factory=dict)
    rerank_top: int = 10

    def __post_init__(self):
        errors = []
        if self.space not in SPACES:
            errors.append(f"space must be one of {', '.join(SPACES)}, got {self.space!r}")
        if self.algorithm not in ALGORITHMS:
            errors.append(f"algorithm must be one of {', '.join(ALGORITHMS)}, got {self.algorithm!r}")
        if self.criterion not in CRITERIA:
            errors.append(f"criterion must be one of {', '.join(CRITERIA)}, got {self.criterion!r}")
        if self.executor not in EXECUTORS:
            errors.append(f"executor must be one of {', '.join(EXECUTORS)}, got {self.executor!r}")
        if self.budget < 1:
            errors.append(f"budget must be >= 1, got {self.budget}")
        if self.budget_seconds is not None and not (
                math.isfinite(self.budget_seconds) and self.budget_seconds > 0):
            errors.append(f"budget_seconds must be a finite number > 0, got {self.budget_seconds}")
        if self.workers < 0:
            errors.append(f"workers must be >= 0, got {self.workers}")
        if self.threads < 0:
            errors.append(f"threads must be >= 0, got {self.threads}")
        if self.window < 1:
            errors.append(f"window must be >= 1, got {self.window}")
        if not self.archs:
            errors.append("need at least one anchor architecture")
        if not 0.0 <= self.p_random <= 1.0:
            errors.append(f"p_random must be in [0, 1], got {self.p_random}")
        if not 0.0 < self.holdout < 1.0:
            errors.append(f"holdout must be in (0, 1), got {self.holdout}")
        if list(self.stages) != sorted(set(self.stages)) or any(s < 1 for s in self.stages):
            errors.append(f"stages must be increasing step counts >= 1, got {list(self.stages)}")
        if self.stages and self.quality_steps:
            errors.append("with stages the first stage is the quality test: set quality_steps 0")
        if self.train_seeds < 1:
            errors.append(f"train_seeds must be >= 1, got {self.train_seeds}")
        elif self.train_seeds > 1 and not self.stages:
            errors.append("train_seeds > 1 needs stages (the quality test is then the first "
                          "stage, scored over the same seeds)")
        if self.final_train_seeds is not None and self.final_train_seeds < self.train_seeds:
            errors.append(f"final_train_seeds must be >= train_seeds ({self.train_seeds}), got "
                          f"{self.final_train_seeds}")
        if self.hurdle_min < 1:
            errors.append(f"hurdle_min must be >= 1, got {self.hurdle_min}")
        if not (math.isfinite(self.timeout) and self.timeout > 0):  # nan would disable it
            errors.append(f"timeout must be a finite number of seconds > 0, got {self.timeout}")
        if self.device.split(":", 1)[0] not in DEVICES:
            errors.append(f"device must be cpu or cuda[:N], got {self.device!r}")
        if self.gpus_per_worker is not None and not 0.0 < self.gpus_per_worker <= 1.0:
            errors.append(f"gpus_per_worker must be in (0, 1], got {self.gpus_per_worker}")
        if not isinstance(self.prescreen, bool):
            errors.append(f"prescreen must be True or False (on or off), got {self.prescreen!r}")
        if self.prescreen_pool < 1:
            errors.append(f"prescreen_pool must be >= 1, got {self.prescreen_pool}")
        if not 0.0 <= self.prescreen_threshold < 1.0:
            errors.append(f"prescreen_threshold must be in [0, 1), got {self.prescreen_threshold}")
        if not 0.0 <= self.prescreen_explore <= 1.0:
            errors.append(f"prescreen_explore must be in [0, 1], got {self.prescreen_explore}")
        if self.prescreen_min < 1:
            errors.append(f"prescreen_min must be >= 1, got {self.prescreen_min}")
        if errors:
            raise ValueError("; ".join(errors))

    @property
    def allow_batch(self) -> bool:
        """B search allows every op; S search excludes the batch_* aggregations."""
        return self.space == "b"

    @property
    def num_workers(self) -> int:
        return self.workers or os.cpu_count() or 1

    @property
    def training(self) -> TrainSetting:
        """The search's full training of each candidate."""
        return TrainSetting(self.train_preset, self.train, presized=True)

    @property
    def rerank_training(self) -> TrainSetting:
        """The larger setting the top layers are retrained in (paper Sec. 5.2)."""
        return TrainSetting(self.rerank_preset, self.rerank_train, presized=False)

    @property
    def split_seed(self) -> int:
        """The seed of the run's data subset and held-out split (`data_seed`, else `seed`)."""
        return self.seed if self.data_seed is None else self.data_seed

    @property
    def final_runs(self) -> int:
        """Training runs per architecture behind a fully trained layer's fitness."""
        return self.train_seeds if self.final_train_seeds is None else self.final_train_seeds

    @property
    def num_stages(self) -> int:
        """Scored stages of a fully trained layer: the `stages` plus the end of training."""
        return len(self.stages) + 1

    def with_dataset(self) -> "SearchConfig":
        """The config with its dataset named (the default one when unset): resolved once, when a
        run starts, and stored with it. Never a silent fall-back to the synthetic set: without
        Fashion-MNIST installed, FileNotFoundError says how to install it. A file.npz is named by
        its absolute path, with its sha256 (`data_sha256`)."""
        from evonorm.data import default_dataset_name, file_sha256, is_npz, read_npz_bytes

        if self.dataset is None:
            return self.replace(dataset=default_dataset_name(self.data_root, fallback=False))
        if is_npz(self.dataset) and self.data_sha256 is None:
            path = os.path.abspath(self.dataset)
            return self.replace(dataset=path, data_sha256=file_sha256(read_npz_bytes(path)))
        return self

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["archs"] = list(self.archs)
        d["seed_layers"] = list(self.seed_layers)
        d["stages"] = list(self.stages)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "SearchConfig":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown search config field(s): {', '.join(unknown)}")
        d = dict(d)
        for name in ("archs", "seed_layers", "stages"):
            if name in d:
                d[name] = tuple(d[name])
        return cls(**d)

    def replace(self, **changes) -> "SearchConfig":
        return dataclasses.replace(self, **changes)
