"""The prescreen's predictions against what training measured, for a run searched with it.

Every candidate with a prediction was predicted before it was trained: the table bins them by
the predicted probability of passing rejection and gives the measured share that passed; the
exploring share (trained whatever the surrogate said) gives its false-negative rate, the valid
layers it would have rejected; for valid layers, Spearman's correlation of predicted and
measured fitness (the first stage's, which the surrogate learns).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from evonorm.stats import spearman
from evonorm.search.candidates import Candidate
from evonorm.search.surrogate import PRESCREEN_REASON, learning_target

BINS = (0.0, 0.05, 0.2, 0.5, 1.0)


@dataclass(frozen=True)
class PrescreenSummary:
    """Predicted against measured over one run's candidates."""

    bins: list[tuple[str, int, int]]  # (P(valid) range, trained, passed rejection)
    rejected: int  # by the prescreen, untrained
    explored: int  # trained whatever the surrogate said, with a prediction
    explored_below: int  # of those, predicted below the threshold
    false_negatives: int  # of those, valid after all
    fitness_spearman: float | None  # valid layers: predicted vs measured first-stage fitness
    fitness_n: int


def summarize(candidates: Sequence[Candidate], threshold: float) -> PrescreenSummary | None:
    """The summary, or None when no candidate carries a prediction."""
    predicted = [c for c in candidates if c.prediction]
    if not predicted:
        return None
    trained = [(c, learning_target(c)) for c in predicted]
    trained = [(c, t) for c, t in trained if t is not None]
    bins = []
    for lo, hi in zip(BINS, BINS[1:]):
        inside = [t for c, t in trained
                  if lo <= c.prediction["p_valid"] < hi or (hi == 1.0 and c.prediction["p_valid"] == 1.0)]
        bins.append((f"{lo:.2f}-{hi:.2f}", len(inside), sum(v for v, _ in inside)))
    explored = [(c, t) for c, t in trained if c.prediction.get("explore")]
    below = [(c, t) for c, t in explored if c.prediction["p_valid"] < threshold]
    pairs = [(c.prediction["fitness"], t[1]) for c, t in trained
             if t[0] and c.prediction.get("fitness") is not None and t[1] is not None]
    return PrescreenSummary(
        bins=bins, rejected=sum((c.reason or "") == PRESCREEN_REASON for c in predicted),
        explored=len(explored), explored_below=len(below),
        false_negatives=sum(t[0] for _, t in below),
        fitness_spearman=spearman(*zip(*pairs)) if len(pairs) >= 3 else None,
        fitness_n=len(pairs))


def summary_lines(s: PrescreenSummary, prior: dict | None = None) -> list[str]:
    """The summary as plain sentences (the HTML page puts the bins in a table); `prior`: the
    labelled candidates of earlier runs the surrogate started from, as the run stored them."""
    fn = (f"{s.false_negatives} of {s.explored_below} explored candidates predicted below the "
          f"threshold passed rejection (false negatives)" if s.explored_below else
          "no explored candidate was predicted below the threshold yet")
    rho = ("n/a (fewer than 3 valid layers with a predicted fitness)" if s.fitness_spearman is None
           else f"{s.fitness_spearman:.2f} over {s.fitness_n} valid layers")
    return [f"{s.rejected} candidates rejected by the prescreen, untrained; {s.explored} trained "
            f"whatever it predicted (exploring share): {fn}.",
            f"Predicted against measured fitness (first stage), Spearman: {rho}.",
            (f"The surrogate started from a prior of {prior.get('rows')} labelled candidates of "
             f"earlier runs ({prior.get('valid')} valid)." if prior and prior.get("rows") else
             "The surrogate learned from this run alone (no prior).")]
