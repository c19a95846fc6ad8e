"""The first sentence of a run's report and of its end-of-search table: does a found layer beat
the best reference or seed layer beyond noise?

It reads the multi-seed re-training (`evonorm.proxy.retrain`): the best found layer (highest mean
fitness over its seeds) against the best reference or seed layer, by a one-sided Welch t-test over
the training seeds at alpha 0.05.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from evonorm.stats import mean_std, welch_greater
from evonorm.proxy.retrain import RetrainRow

ALPHA = 0.05


@dataclass(frozen=True)
class LayerStats:
    """One re-trained layer over its seeds; `values` are the finite fitnesses, `failed` the rest."""

    layer: str
    kind: str
    values: tuple[float, ...]
    failed: int
    graph: object = None

    @property
    def mean(self) -> float:
        return mean_std(self.values)[0]

    @property
    def std(self) -> float:
        return mean_std(self.values)[1]

    def text(self) -> str:
        name = self.layer if self.kind == "reference" else f"{self.kind} layer {self.layer}"
        return f"{name} {100 * self.mean:.1f} +- {100 * self.std:.1f}"


def layer_stats(rows: Iterable[RetrainRow]) -> list[LayerStats]:
    """Per layer, its seeds' fitnesses; best mean first, layers with no finite value last."""
    by: dict[tuple[str, str], list[RetrainRow]] = {}
    for r in rows:
        by.setdefault((r.layer, r.kind), []).append(r)
    out = [LayerStats(layer, kind, tuple(r.fitness for r in rs if r.fitness is not None),
                      sum(r.fitness is None for r in rs), rs[0].graph)
           for (layer, kind), rs in by.items()]
    return sorted(out, key=lambda s: (not s.values, -(s.mean if s.values else 0.0)))


def search_fitness_text(train_seeds: int = 1) -> str:
    """What one search evaluation of a layer is (the proxy task's `train_runs` runs per arch)."""
    if train_seeds > 1:
        return f"the mean of {train_seeds} training runs per layer, from one evaluation"
    return "one training seed per layer"


def verdict(rows: Iterable[RetrainRow], run: str = "RUN", train_seeds: int = 1,
            objective: str | None = None) -> str:
    """One plain sentence: a found layer beats the best reference/seed (by how much, test, p), or
    none does beyond noise, or it cannot be told yet (and how to tell). A search on the user's own
    `objective` is re-trained in the user's task, not here: the sentence says so."""
    if objective:
        return (f"Searched with the objective {objective}: re-training and reference layers run "
                f"the built-in proxy task, so compare the top layers in your own task "
                f"(evonorm.search.load({run!r}).top(k)).")
    stats = [s for s in layer_stats(rows) if len(s.values) >= 2]
    found = [s for s in stats if s.kind == "found"]
    base = [s for s in stats if s.kind != "found"]
    if not found or not base:
        missing = "found layer" if not found else "reference or seed layer"
        return (f"Cannot tell yet whether a found layer beats the references: no {missing} has been "
                f"re-trained with >= 2 training seeds (run `evonorm retrain {run} --seeds 3`); the "
                f"search fitness is {search_fitness_text(train_seeds)}.")
    best, ref = found[0], base[0]
    test = welch_greater(best.values, ref.values)
    seeds = f"{len(best.values)} vs {len(ref.values)} seeds"
    if test.p < ALPHA:
        return (f"Found layer {best.layer} beats {ref.text()} by {100 * test.diff:.1f} points "
                f"({best.text()}, mean +- std fitness in % over {seeds}; one-sided Welch t-test, "
                f"p={test.p:.3g} < {ALPHA}).")
    return (f"No found layer beats {ref.text()} beyond noise (best: {best.text()}, "
            f"mean +- std fitness in % over {seeds}; one-sided Welch t-test, p={test.p:.3g} >= {ALPHA}).")
