"""What evaluating one candidate found: the one value that the evaluator and the cache return, the
store saves whole, and the driver and the report read back (stdlib only, so it imports anywhere).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal, Mapping, get_args

Status = Literal["valid", "rejected", "failed"]
STATUSES: tuple[str, ...] = get_args(Status)  # a finished evaluation has one of these


@dataclass(frozen=True)
class Evaluation:
    """A candidate's outcome: `valid` (trained on every architecture), `rejected` (the layer failed
    a check: reason "precheck:...", "stability", "quality:ARCH", "nonfinite", "error: ...") or
    `failed` (its worker died, hung or raised: says nothing about the layer, never reused)."""

    status: Status
    reason: str | None = None
    reason_step: int | None = None  # the training or ascent step where the check failed
    detail: dict | None = None  # what the check measured (grad_norm, accuracy and threshold, ...)
    accuracies: dict[str, float] = field(default_factory=dict)  # held-out accuracy per arch
    fitness: float | None = None  # mean of `accuracies`, for valid evaluations only
    timings: dict[str, float] = field(default_factory=dict)  # seconds per phase; "calls:PATH": layer calls per path
    # multi-fidelity: accuracies per architecture after each stage reached; `accuracies` and
    # `fitness` are the last stage's. A valid layer stopped by a hurdle has fewer stages.
    stages: list[dict[str, float]] = field(default_factory=list)

    @property
    def stage(self) -> int:
        """Stages reached (1 for a search without stages)."""
        return len(self.stages) or 1

    def rank_key(self) -> tuple[int, float]:
        """How valid layers compare: the further stage first, then fitness (so layers compare at
        an equal stage, and one that cleared a hurdle outranks those it stopped)."""
        return (self.stage, self.fitness if self.fitness is not None else float("-inf"))

    @classmethod
    def valid(cls, accuracies: Mapping[str, float], timings: Mapping[str, float] | None = None,
              stages: list[Mapping[str, float]] | None = None) -> "Evaluation":
        accs = dict(accuracies)
        return cls("valid", accuracies=accs, fitness=sum(accs.values()) / len(accs) if accs else None,
                   timings=dict(timings or {}), stages=[dict(s) for s in stages or []])

    @classmethod
    def rejected(cls, rejection: Any, accuracies: Mapping[str, float] | None = None,
                 timings: Mapping[str, float] | None = None) -> "Evaluation":
        """From a `Reject` (reason, step, detail) and what was measured before it."""
        return cls("rejected", rejection.reason, rejection.step, rejection.detail,
                   dict(accuracies or {}), None, dict(timings or {}))

    @property
    def near_miss(self) -> bool:
        """Rejected by the quality test after it learned on an architecture (an accuracy at or
        above the bar on one, below it on another): evolution may mutate it (`near_misses`)."""
        bar = (self.detail or {}).get("threshold")
        return (self.status == "rejected" and (self.reason or "").startswith("quality:")
                and bar is not None and any(a >= bar for a in self.accuracies.values()))

    @property
    def stage_fitness(self) -> list[float]:
        """Mean accuracy over the architectures after each stage reached."""
        return [sum(s.values()) / len(s) for s in self.stages if s]

    @classmethod
    def failed(cls, reason: str) -> "Evaluation":
        return cls("failed", reason[:300])

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Evaluation":
        """The dict form (`to_dict`, or a hand-written record): unknown keys are ignored."""
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in known}
        kw["accuracies"] = dict(kw.get("accuracies") or {})
        kw["timings"] = dict(kw.get("timings") or {})
        kw["stages"] = [dict(s) for s in kw.get("stages") or []]
        return cls(**kw)


def finite(x: Any) -> bool:
    """True for a real, finite number (a fitness or accuracy that can be plotted and ranked)."""
    return isinstance(x, (int, float)) and math.isfinite(x)
