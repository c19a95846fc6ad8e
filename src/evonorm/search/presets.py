"""Search settings: one `SearchConfig` dataclass and named presets, from seconds (tests) to the paper's.

The config is stored as JSON in the run's store, so `resume` and `rerank` read back exactly what the
search ran with; training settings are a `evonorm.train.PRESETS` name plus field overrides.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field, fields

from evonorm.search.evolution import ALGORITHMS, CRITERIA

SPACES = ("b", "s")
EXECUTORS = ("local", "ray")
PAPER_ARCHS = ("resnet50_cifar", "mobilenetv2_cifar", "efficientnet_b0_cifar")


@dataclass(frozen=True)
class SearchConfig:
    """Everything a search run needs; JSON round-trips through `to_dict` / `from_dict`."""

    preset: str = "small"
    # data: the search trains on (1 - holdout) of the training split and scores on the rest,
    # so it never sees the test set.
    dataset: str | None = None  # None -> evonorm.data.default_dataset_name() when the run starts
    data_root: str | None = None
    n_train: int | None = None
    holdout: float = 0.1
    # search space and algorithm
    space: str = "s"
    algorithm: str = "evolution"
    budget: int = 100  # candidates proposed in all (rejected and cache hits included)
    max_nodes: int = 10
    seed_layers: tuple[str, ...] = ()  # named graphs or graph JSON, evaluated first (origin "seed")
    window: int = 2500
    initial_population: int = 20
    tournament_fraction: float = 0.05
    tournament_min: int = 2
    criterion: str = "pareto"
    mutations: int = 2
    p_random: float = 0.5
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
    # execution
    workers: int = 0  # 0 -> one per core
    executor: str = "local"
    address: str | None = None
    timeout: float = 3600.0  # seconds per candidate before its worker is killed
    retries: int = 1  # re-runs of a candidate whose worker died or hung
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
        if self.workers < 0:
            errors.append(f"workers must be >= 0, got {self.workers}")
        if self.window < 1:
            errors.append(f"window must be >= 1, got {self.window}")
        if not self.archs:
            errors.append("need at least one anchor architecture")
        if not 0.0 <= self.p_random <= 1.0:
            errors.append(f"p_random must be in [0, 1], got {self.p_random}")
        if not 0.0 < self.holdout < 1.0:
            errors.append(f"holdout must be in (0, 1), got {self.holdout}")
        if self.timeout <= 0:
            errors.append(f"timeout must be > 0, got {self.timeout}")
        if errors:
            raise ValueError("; ".join(errors))

    @property
    def allow_batch(self) -> bool:
        """B search allows every op; S search excludes the batch_* aggregations."""
        return self.space == "b"

    @property
    def num_workers(self) -> int:
        return self.workers or os.cpu_count() or 1

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["archs"] = list(self.archs)
        d["seed_layers"] = list(self.seed_layers)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "SearchConfig":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown search config field(s): {', '.join(unknown)}")
        d = dict(d)
        for name in ("archs", "seed_layers"):
            if name in d:
                d[name] = tuple(d[name])
        return cls(**d)

    def replace(self, **changes) -> "SearchConfig":
        return dataclasses.replace(self, **changes)


def _norm_relu(kind: str) -> dict:
    """max((x - mean(x)) / std(x), 0) over an axis set: GroupNorm/LayerNorm/InstanceNorm-ReLU."""
    return {"nodes": [[f"{kind}_mean", 0], ["neg", 4], ["add", 0, 5], [f"{kind}_std", 0],
                      ["div", 6, 7], ["max", 8, 1]]}


# Settings are measured on the 2-core reference machine (README, "Search").
PRESETS: dict[str, SearchConfig] = {
    # Seconds: synthetic data, two archs at a sliver of width, a handful of steps. For tests.
    "tiny": SearchConfig(
        preset="tiny", dataset="synthetic", n_train=320, space="s", budget=6,
        window=10, initial_population=2, archs=("resnet50_cifar", "mobilenetv2_cifar"),
        train_preset="tiny", train={"steps": 4, "batch_size": 16, "width": 0.0625},
        stability_steps=3, stability_batch=4, quality_steps=2, quality_factor=0.0,
        timeout=300.0, rerank_preset="tiny", rerank_train={"steps": 6, "batch_size": 16,
                                                          "width": 0.0625}, rerank_top=3),
    # The README's main job: about 10 minutes on 2 cores with Fashion-MNIST. Calibrated with
    # `evonorm calibrate --preset demo` (README, "Calibration"): 1000 held-out images, not 300
    # (a 300-image score has a 2.9-point standard error); 5 warm-up steps; MobileNetV2 at width
    # 0.0625 learns at lr 0.05 (at 0.02 BN-ReLU stays at chance for 50 steps, at 0.1 it is
    # unstable); 150 steps of full training. The search starts from three textbook S-space layers
    # (GroupNorm/LayerNorm/InstanceNorm-ReLU) and mutates once (not twice) with fewer random
    # restarts, so that a budget of a few dozen finds valid layers at all: two mutations of a
    # six-node layer, or a fresh random graph, almost never pass rejection at this scale.
    "demo": SearchConfig(
        preset="demo", n_train=4000, holdout=0.25, space="s", budget=100, window=16,
        initial_population=1, tournament_fraction=0.25, mutations=1, p_random=0.3,
        archs=("resnet50_cifar", "mobilenetv2_cifar"),
        seed_layers=tuple(json.dumps(_norm_relu(k)) for k in ("group", "layer", "instance")),
        train_preset="tiny", train={"steps": 150, "batch_size": 32, "width": 0.0625, "lr": 0.1,
                                    "lr_warmup": 10},
        arch_train={"mobilenetv2_cifar": {"lr": 0.03}},
        stability_steps=10, stability_batch=8, quality_steps=50, quality_factor=1.2,
        timeout=1800.0, rerank_preset="tiny",  # a loaded machine took > 600 s per seed layer
        rerank_train={"steps": 300, "batch_size": 64, "width": 0.0625, "n_train": 10000,
                      "n_test": 2000, "lr_warmup": 10}, rerank_top=3),
    # A real but small search: three archs, the trainer's `small` preset, paper-style rejection.
    "small": SearchConfig(
        preset="small", n_train=10000, budget=200, window=100, initial_population=20,
        tournament_fraction=0.1, train_preset="small", rerank_preset="paper-s"),
    # The paper's settings (Sec. 5.1): CIFAR-10, 3 archs, 2000 steps constant lr / 5000 cosine.
    "paper-b": SearchConfig(
        preset="paper-b", dataset="cifar10", space="b", budget=20000, window=2500,
        initial_population=100, train_preset="paper-b", rerank_preset="paper-b",
        rerank_train={"steps": 10000}),
    "paper-s": SearchConfig(
        preset="paper-s", dataset="cifar10", space="s", budget=20000, window=2500,
        initial_population=100, train_preset="paper-s", rerank_preset="paper-s",
        rerank_train={"steps": 20000}),
}


def list_presets() -> list[str]:
    return list(PRESETS)


def get_preset(name: str, **overrides) -> SearchConfig:
    """A preset by name with field overrides (None values are ignored); ValueError on bad input."""
    if name not in PRESETS:
        raise ValueError(f"unknown search preset {name!r} (choose from {', '.join(PRESETS)})")
    changes = {k: v for k, v in overrides.items() if v is not None}
    return PRESETS[name].replace(**changes)
