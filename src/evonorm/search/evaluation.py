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
    """A candidate's outcome: `valid` (scored on every name), `rejected` (the objective found the
    layer wanting: `reason` says why in the objective's words, `detail` what it measured; an
    exception in the layer is "error: ...") or `failed` (its worker died, hung or raised: says
    nothing about the layer, never reused)."""

    status: Status
    reason: str | None = None
    reason_step: int | None = None  # the training or ascent step where the check failed
    detail: dict | None = None  # what the check measured (a gradient norm, a score and its bar, ...)
    scores: dict[str, float] = field(default_factory=dict)  # the objective's score per name
    fitness: float | None = None  # mean of `scores`, for valid evaluations only
    timings: dict[str, float] = field(default_factory=dict)  # seconds per phase; "calls:PATH": layer calls per path
    # multi-fidelity: scores per name after each stage reached (the config's `stage_steps` are the step
    # counts where stages end); `scores` and `fitness` are the last stage's. A valid layer stopped by
    # a hurdle has fewer stages.
    stage_scores: list[dict[str, float]] = field(default_factory=list)

    @property
    def stage(self) -> int:
        """Stages reached (1 for a search without stages)."""
        return len(self.stage_scores) or 1

    def rank_key(self) -> tuple[int, float]:
        """How valid layers compare: the further stage first, then fitness (so layers compare at
        an equal stage, and one that cleared a hurdle outranks those it stopped)."""
        return (self.stage, self.fitness if self.fitness is not None else float("-inf"))

    @classmethod
    def valid(cls, scores: Mapping[str, float], timings: Mapping[str, float] | None = None,
              stage_scores: list[Mapping[str, float]] | None = None) -> "Evaluation":
        """Scored on every name; fitness their mean."""
        s = dict(scores)
        return cls("valid", scores=s, fitness=sum(s.values()) / len(s) if s else None,
                   timings=dict(timings or {}), stage_scores=[dict(st) for st in stage_scores or []])

    @classmethod
    def rejected(cls, rejection: Any, scores: Mapping[str, float] | None = None,
                 timings: Mapping[str, float] | None = None) -> "Evaluation":
        """From a `Reject` (reason, step, detail) and what was measured before it."""
        return cls("rejected", rejection.reason, rejection.step, rejection.detail,
                   dict(scores or {}), None, dict(timings or {}))

    @property
    def near_miss(self) -> bool:
        """Rejected by a bar after it scored at or above it on some name: the rejection states its
        bar as `detail["threshold"]` (a quality test on one architecture of several, say), and
        evolution may mutate the layer (`near_misses`)."""
        bar = (self.detail or {}).get("threshold")
        return (self.status == "rejected" and isinstance(bar, (int, float))
                and any(a >= bar for a in self.scores.values()))

    @property
    def stage_fitness(self) -> list[float]:
        """Mean score over the names after each stage reached."""
        return [sum(s.values()) / len(s) for s in self.stage_scores if s]

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
        kw["scores"] = dict(kw.get("scores") or {})
        kw["timings"] = dict(kw.get("timings") or {})
        kw["stage_scores"] = [dict(s) for s in kw.get("stage_scores") or []]
        return cls(**kw)


def finite(x: Any) -> bool:
    """True for a real, finite number (a fitness or score that can be plotted and ranked)."""
    return isinstance(x, (int, float)) and math.isfinite(x)
