"""A training run's settings and the trainer's presets, as plain data: this module imports no torch,
so that `evonorm list` prints the presets without it (the trainer is `evonorm.train`)."""

from __future__ import annotations

import math
import typing
from dataclasses import dataclass, replace
from typing import Any

from evonorm.catalog import ARCHS
from evonorm.files import type_problem


@dataclass(frozen=True)
class TrainConfig:
    """One training run. `width=None` takes the architecture's multiplier times `width_scale`.

    `arch` is a built-in name, `timm:NAME` or `MODULE:FUNCTION` (checked for its form here; its code
    is imported only when a model is built); width and width_scale apply to the built-in ones only.
    """

    arch: str = "resnet50_cifar"
    width: float | None = None
    width_scale: float = 1.0
    # group count of layers with group statistics (None: the layer's own, 32). A model at a
    # fraction w of the paper's width keeps the paper's channels per group with 32 * w groups;
    # at 32 groups a 1/16-width model's groups hold one channel each, i.e. instance statistics
    groups: int | None = None
    steps: int = 2000
    batch_size: int = 128
    lr: float = 0.1
    weight_decay: float = 1e-4
    schedule: str = "constant"  # "constant" | "cosine"
    lr_warmup: int = 0  # steps of linear learning-rate warm-up (0: none, the paper's recipe)
    restarts: tuple[int, ...] = ()  # cosine: steps where a new cycle starts (warm restarts)
    eval_batch_size: int = 512
    crop: int | None = None  # None: 3/4 of the image side (24 for 32x32)
    n_train: int | None = None  # seeded subset of the training set
    n_test: int | None = None
    seed: int = 0
    channels_last: bool = False
    compile: bool = False
    device: str = "cpu"

    def __post_init__(self):
        if self.schedule not in ("constant", "cosine"):
            raise ValueError(f"schedule must be 'constant' or 'cosine', got {self.schedule!r}")
        if self.groups is not None and self.groups < 1:
            raise ValueError(f"groups must be >= 1, got {self.groups}")
        for name in ("steps", "batch_size", "eval_batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.lr_warmup < 0:
            raise ValueError(f"lr_warmup must be >= 0, got {self.lr_warmup}")
        object.__setattr__(self, "restarts", tuple(int(r) for r in self.restarts))
        if list(self.restarts) != sorted(set(self.restarts)) or any(
                not 0 < r < self.steps for r in self.restarts):
            raise ValueError(f"restarts must be increasing steps in (0, steps), got {self.restarts}")
        if self.restarts and self.schedule != "cosine":
            raise ValueError("restarts need schedule 'cosine'")
        if self.arch not in ARCHS:  # a built-in name needs no import (and no torch)
            from evonorm.models import check_arch_name

            check_arch_name(self.arch)
        if self.arch not in ARCHS and self.width is not None:
            raise ValueError(f"width does not apply to {self.arch}: its channels are its builder's "
                             f"(width and width_scale set the built-in architectures only)")
        for name in ("lr", "width", "width_scale"):  # nan/inf/<= 0 would train nothing silently
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a finite number > 0, got {value}")
        for name in ("n_train", "n_test"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")

    def resolved_width(self) -> float | None:
        """The channel multiplier of a built-in architecture; None for timm:NAME and
        MODULE:FUNCTION ones, whose channels are their builder's."""
        if self.arch not in ARCHS:
            return None
        return self.width if self.width is not None else ARCHS[self.arch][1] * self.width_scale

    def layer_kwargs(self) -> dict:
        """What `build_model` passes to every norm-act layer of this run."""
        return {} if self.groups is None else {"groups": self.groups}

    def replace(self, **changes) -> "TrainConfig":
        """A copy with `changes`; None values are ignored (handy for optional CLI flags)."""
        return replace(self, **{k: v for k, v in changes.items() if v is not None})


TRAIN_PRESETS: dict[str, TrainConfig] = {
    # the paper's proxy task (appendix C)
    "paper-b": TrainConfig(steps=2000, schedule="constant"),
    "paper-s": TrainConfig(steps=5000, schedule="cosine"),
    # a quick real run on a CPU: half width, 400 steps of 64, 10k images
    "small": TrainConfig(width_scale=0.5, steps=400, batch_size=64, schedule="cosine",
                         n_train=10000, n_test=2000),
    # seconds: for tests and smoke runs. Evaluation in batches of 64, whose activations stay in
    # cache where larger batches' expanded ones do not (the same accuracy; docs/performance.md)
    "tiny": TrainConfig(width_scale=0.25, steps=60, batch_size=32, schedule="cosine",
                        eval_batch_size=64, n_train=1024, n_test=256),
}


def check_overrides(overrides: Any, where: str) -> None:
    """ValueError, in one line naming `where` and the field, unless `overrides` is a mapping of
    TrainConfig fields to values of their declared types: a task's training overrides are stored
    as JSON, and a typo or a string for a number would otherwise surface in the first candidate's
    training, as if the layer had failed."""

    if not isinstance(overrides, dict):
        raise ValueError(f"{where}: training overrides are an object of TrainConfig fields, got "
                         f"{type(overrides).__name__}")
    hints = typing.get_type_hints(TrainConfig)
    for name, value in overrides.items():
        if name not in hints:
            raise ValueError(f"{where}: unknown training setting {name!r} (TrainConfig fields: "
                             f"{', '.join(hints)})")
        problem = type_problem(list(value) if isinstance(value, tuple) else value, hints[name])
        if problem is not None:
            raise ValueError(f"{where}.{name}: {problem}")


def get_train_preset(name: str, **overrides) -> TrainConfig:
    """A training preset by name, with `overrides` (None values ignored)."""
    if name not in TRAIN_PRESETS:
        raise ValueError(f"unknown training preset {name!r} (choose from {', '.join(TRAIN_PRESETS)})")
    return TRAIN_PRESETS[name].replace(**overrides)
