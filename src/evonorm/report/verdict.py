"""The first sentence of a run's report and of its end-of-search table: does a found layer beat
the best reference or seed layer beyond noise?

It reads the multi-seed re-training (`evonorm.measure.retrain`): the best found layer (highest mean
fitness over its seeds) against the best reference or seed layer, by a one-sided Welch t-test over
the training seeds at alpha 0.05.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from evonorm.stats import mean_std
from evonorm.measure.ledger import Row
from evonorm.report.data import RunData
from evonorm.search.candidates import same_layer_keys, top_layers
from evonorm.search.evaluation import finite

ALPHA = 0.05


def welch_verdict(found: Sequence[float], other: Sequence[float]) -> tuple[str, float, float]:
    """("beats" | "below" | "cannot be told apart from", p(found > other), p(other > found)):
    one-sided Welch t-tests each way at ALPHA, since layers' seed spreads differ. Two groups with
    no spread and one mean give p nan (scipy's convention), which is no evidence either way."""
    from scipy.stats import ttest_ind  # seconds to load, which a report without a verdict skips

    if len(found) < 2 or len(other) < 2:
        raise ValueError(f"Welch's test needs >= 2 values per group, got {len(found)} and {len(other)}")
    up, down = (float(ttest_ind(x, y, equal_var=False, alternative="greater").pvalue)
                for x, y in ((found, other), (other, found)))
    word = "beats" if up < ALPHA else "below" if down < ALPHA else "cannot be told apart from"
    return word, up, down


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


def layer_stats(rows: Iterable[Row]) -> list[LayerStats]:
    """Per layer, its seeds' fitnesses; best mean first, layers with no finite value last."""
    by: dict[tuple[str, str], list[Row]] = {}
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


def verdict(rows: Iterable[Row], run: str = "RUN", train_seeds: int = 1,
            objective: str | None = None, best: Any = None) -> str:
    """One plain sentence: a found layer beats the best reference/seed (by how much, test, p), or
    none does beyond noise, or it cannot be told yet (and how to tell). A search on the user's own
    `objective` is judged in the user's task, not here: the sentence names its best layer (`best`,
    a Candidate) with its formula and scores, and where to read the rest."""
    if objective:
        where = f"evonorm.search.load({run!r}).top(k)"
        if best is None:
            return (f"No valid layer yet in this search with the objective {objective}; {where} "
                    f"lists them as they arrive.")
        scores = ", ".join(f"{k} {v:.4g}" for k, v in (best.scores or {}).items())
        return (f"Best layer so far: {best.formula or best.graph} (candidate {best.id}, fitness "
                f"{best.fitness:.4g}: {scores}) by the objective {objective}; the re-training "
                f"and reference layers are the built-in proxy task's, so compare the top layers in "
                f"your own task ({where}).")
    stats = [s for s in layer_stats(rows) if len(s.values) >= 2]
    found = [s for s in stats if s.kind == "found"]
    base = [s for s in stats if s.kind != "found"]
    if not found or not base:
        missing = "found layer" if not found else "reference or seed layer"
        return (f"Cannot tell yet whether a found layer beats the references: no {missing} has been "
                f"re-trained with >= 2 training seeds (run `evonorm retrain {run} --seeds 3`); the "
                f"search fitness is {search_fitness_text(train_seeds)}.")
    best, ref = found[0], base[0]
    word, p, _ = welch_verdict(best.values, ref.values)
    seeds = f"{len(best.values)} vs {len(ref.values)} seeds"
    if word == "beats":
        return (f"Found layer {best.layer} beats {ref.text()} by {100 * (best.mean - ref.mean):.1f} "
                f"points ({best.text()}, mean +- std fitness in % over {seeds}; one-sided Welch "
                f"t-test, p={p:.3g} < {ALPHA}).")
    return (f"No found layer beats {ref.text()} beyond noise (best: {best.text()}, "
            f"mean +- std fitness in % over {seeds}; one-sided Welch t-test, p={p:.3g} >= {ALPHA}).")


def run_verdict(run: RunData) -> str:
    """A run's first sentence: `verdict`, or while it has no valid layer, `nothing_valid` (there
    is nothing to re-train yet, so no command to re-train it)."""
    rows = top_layers(run.candidates, 1, same=same_layer_keys())
    found = any(r.kind == "found" for r in run.retrain)
    if not rows and not found:
        return nothing_valid(run)
    return verdict(run.retrain, run.path or run.name, run.train_seeds, run.config.get("objective"),
                   best=rows[0].best if rows else None)


def nothing_valid(run: RunData) -> str:
    """How far a run with no valid layer has got: candidates evaluated, the share of its budget
    spent, and when a first valid layer is to be expected at its rate so far. With none valid in
    n, Laplace's rule of succession puts the chance of the next at 1/(n+2): a first one in about
    n+2 more candidates, about as much again as it has spent."""
    done = run.finished
    n = len(done)
    seconds = sum(float(c.seconds) for c in done if finite(c.seconds) and c.seconds > 0)
    evo = run.part("evolution")
    limit, budget = evo.get("budget_seconds"), evo.get("budget")
    if finite(limit) and limit > 0:
        spent = f"{seconds:,.0f} of {limit:,.0f} worker-seconds spent ({100 * seconds / limit:.0f}%)"
        left = max(0.0, limit - seconds)
    else:
        spent = f"{n} of {budget} candidates, {seconds:,.0f} worker-seconds"
        per = seconds / n if n else 0.0
        left = max(0, int(budget or 0) - n) * per
    who = f" with the objective {run.config['objective']}" if run.config.get("objective") else ""
    head = f"No valid layer yet in this search{who}: {spent}"
    if n == 0:
        return head + "; nothing evaluated yet."
    more = (n + 2) * seconds / n
    expect = (f"; with none valid in {n}, a first valid layer is expected in about {n + 2} more "
              f"candidates (~{more:,.0f} worker-seconds at this run's cost per candidate; Laplace's "
              "rule of succession)")
    if more > left:
        expect += ", more than what is left of the budget"
    return head + expect + "."
