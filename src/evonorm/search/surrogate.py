"""The prescreen: a surrogate that learns, as the search goes, which candidates are worth training.

From the candidates already evaluated (their features at birth and what the evaluation found) it
predicts, for a new candidate, the probability that it passes rejection (a classifier) and, for a
valid one, its fitness (a regressor): scikit-learn random forests, which need no scaling, take
the features' missing values as they are and fit a few hundred candidates in a fraction of a
second; on held-out candidates of a `demo` run they ranked better than gradient boosting at every
training size tried (results/prescreen/holdout.md). Cold start: no prediction until it has learned from at least `min_each` valid and
`min_each` rejected candidates; until then the search runs as it would without it.

The search (`--prescreen on`) draws `prescreen_pool` children for each slot instead of one,
computes their features and trains the one the surrogate ranks highest (expected fitness: P(valid)
times the predicted fitness); a child whose P(valid) is below `prescreen_threshold` is recorded as
rejected with reason "prescreen" and its prediction, untrained. The others of the pool are
dropped (they were neither trained nor judged hopeless). A share `prescreen_explore` of the slots
draws one child and trains it whatever the surrogate says, with its prediction stored: the
surrogate keeps learning from the search's own proposals and its false-negative rate (valid
layers it would have rejected) is measured on them.

Features: the engine's (`evonorm.search.features`, from the layer alone) for every objective,
plus the task's when the objective hands a feature function over as its `prescreen_features`
attribute (`fn(graph) -> dict[str, float]`; the built-in proxy task does). That function may
raise `Reject` for a child it finds hopeless as it measures it (a network whose loss is not finite
at initialisation, say): the child is rejected untrained with that reason, in every slot,
exploring or not, and like any rejection a later proposal of the layer is answered from the
store.

A prior: a short search finds too few valid layers to end the cold start (the `demo` main job
finds 2-3 in 75 candidates), so the surrogate may start from labelled candidates of earlier runs
under the same setting. The objective hands them over as its `prescreen_prior` attribute
(`fn() -> list of {"features", "valid", "fitness"} rows, or None` where it has none for
that setting); they count as learned from the start, beside what the search adds.

scikit-learn is imported where a surrogate is fitted (the `prescreen` extra): a search with the
prescreen off needs neither it nor this module's models.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Sequence

from evonorm.files import warn
from evonorm.search import outcome
from evonorm.search.candidates import Candidate
from evonorm.search.config import SearchConfig
from evonorm.search.reject import Reject

PRESCREEN_REASON = "prescreen"
FeatureFn = Callable[[Any], Mapping[str, Any]]


@dataclass(frozen=True)
class Prediction:
    """What the surrogate said of a candidate before it was trained."""

    p_valid: float  # probability that it passes rejection
    fitness: float | None  # predicted fitness if valid (None before the regressor is ready)
    learned_from: int = 0  # labelled candidates behind the prediction

    @property
    def score(self) -> float:
        """Expected fitness, an invalid layer counting 0; P(valid) alone without a regressor."""
        return self.p_valid * (self.fitness if self.fitness is not None else 1.0)

    def to_dict(self) -> dict:
        return {"p_valid": self.p_valid, "fitness": self.fitness, "learned_from": self.learned_from}


@dataclass(frozen=True)
class Born:
    """A candidate's features at birth, the prediction made from them (None at cold start) and
    what computing them cost (seconds, added to the candidate's cost)."""

    features: dict | None
    prediction: Prediction | None = None
    seconds: float = 0.0
    explore: bool = False  # trained whatever the surrogate said
    reject: Reject | None = None  # the task's features found the child hopeless
    layer_rung: bool = False  # rejected by the forest on the layer alone, before the task's features

    def record(self) -> dict | None:
        """The prediction as stored with the candidate (None: no prediction was made)."""
        if self.prediction is None:
            return None
        return {**self.prediction.to_dict(), "explore": self.explore, "seconds": self.seconds}


def require_sklearn() -> None:
    """ValueError, one line, when scikit-learn (the `prescreen` extra) is missing."""
    try:
        import sklearn  # noqa: F401
    except ImportError:
        raise ValueError("the prescreen needs scikit-learn: pip install -e '.[prescreen]' in the evonorm clone "
                         "(or search with --prescreen off)") from None


def learning_target(c: Candidate, near_misses: bool = False) -> tuple[bool, float | None] | None:
    """(worth training, fitness) of an evaluated candidate, or None when it teaches nothing: no
    features, or no label (`label`)."""
    return None if c.features is None else label(c, near_misses)


def label(c: Candidate, near_misses: bool = False) -> tuple[bool, float | None] | None:
    """(worth training, fitness) of an evaluated candidate, or None for a cache hit (a repeat),
    a failed one (says nothing about the layer) or one never trained (a prescreen rejection).
    Worth training: valid, or, in a search whose population takes near misses (`near_misses`,
    from random graphs, where valid layers are too rare to learn from), a near miss, the other
    kind of parent. The fitness is the first stage's in a staged search, which every valid
    layer reached, so that layers a hurdle stopped compare with those that went on (None for a
    near miss: the regressor learns from valid layers only)."""
    if c.cache_hit or c.status == "failed" or (c.reason or "").startswith(PRESCREEN_REASON):
        return None
    if c.status != "valid":
        return near_misses and c.evaluation.near_miss, None
    stages = c.evaluation.stage_fitness
    return True, stages[0] if stages else c.fitness


# scikit-learn's forests compute in float32 and refuse a value beyond its range; such a feature
# (a prior's 1e308, an objective's overflowing statistic) tells nothing a cap would not
FEATURE_LIMIT = 1e30


def feature_matrix(rows: Sequence[Mapping[str, Any]], names: Sequence[str]):
    """Feature dicts as a float array over `names`, NaN where a value is missing or not finite
    (the forests take NaN as missing), capped at +-FEATURE_LIMIT."""
    import numpy as np

    def num(v: Any) -> float:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return math.nan
        v = float(v) if abs(v) < 1e308 else (math.inf if v > 0 else -math.inf)
        return max(-FEATURE_LIMIT, min(FEATURE_LIMIT, v)) if math.isfinite(v) else math.nan

    return np.array([[num(r.get(n)) for n in names] for r in rows], dtype=np.float64)


# the share of new labels, over those of the last fit, that refits the surrogate
REFIT_GROWTH = 0.02


class Surrogate:
    """P(passes rejection) and fitness from features, refitted when new labels arrived."""

    def __init__(self, *, min_each: int = 3, seed: int = 0, trees: int = 200,
                 prior: Sequence[Mapping[str, Any]] = ()):
        self.min_each, self.seed, self.trees = min_each, seed, trees
        self.rows: list[tuple[dict, bool, float | None]] = []
        for r in prior:  # labelled candidates of earlier runs: learned from the start
            self.add(r["features"], r["valid"], r["fitness"])
        self.prior = len(self.rows)
        self._fitted = -1  # len(rows) at the last fit
        self._names: list[str] = []
        self._clf = self._reg = None

    def add(self, features: Mapping[str, Any], valid: bool, fitness: float | None) -> None:
        self.rows.append((dict(features), bool(valid), fitness))

    @property
    def counts(self) -> tuple[int, int]:
        """(valid, rejected) candidates learned from."""
        pos = sum(v for _, v, _ in self.rows)
        return pos, len(self.rows) - pos

    @property
    def ready(self) -> bool:
        pos, neg = self.counts
        return pos >= self.min_each and neg >= self.min_each

    def fit(self) -> None:
        """Fit both models on every label so far: again once the labels grew by `REFIT_GROWTH`
        of those of the last fit (at least one), as a refit on a prior of a thousand rows takes
        seconds of the driver's time and one more label barely moves it."""
        if not self.ready or (self._fitted >= 0 and len(self.rows) - self._fitted
                              < max(1.0, REFIT_GROWTH * self._fitted)):
            return
        from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor

        self._names = sorted({k for f, _, _ in self.rows for k in f})
        x = feature_matrix([f for f, _, _ in self.rows], self._names)
        y = [int(v) for _, v, _ in self.rows]
        self._clf = RandomForestClassifier(n_estimators=self.trees, min_samples_leaf=1,
                                           random_state=self.seed, n_jobs=1).fit(x, y)
        fit_rows = [(f, t) for f, v, t in self.rows if v and t is not None and math.isfinite(t)]
        self._reg = None
        if len(fit_rows) >= self.min_each:
            self._reg = RandomForestRegressor(n_estimators=self.trees, min_samples_leaf=2,
                                              random_state=self.seed, n_jobs=1).fit(
                feature_matrix([f for f, _ in fit_rows], self._names), [t for _, t in fit_rows])
        self._fitted = len(self.rows)

    def predict(self, features: Mapping[str, Any] | None) -> Prediction | None:
        """The prediction for one candidate's features; None at cold start or without features."""
        if features is None or not self.ready:
            return None
        self.fit()
        x = feature_matrix([features], self._names)
        classes = list(self._clf.classes_)
        p = float(self._clf.predict_proba(x)[0][classes.index(1)]) if 1 in classes else 0.0
        f = float(self._reg.predict(x)[0]) if self._reg is not None else None
        return Prediction(p, f, len(self.rows))


def _one_thread(fn: Callable[[Any], Any], arg: Any) -> Any:
    """fn(arg) at one torch thread, the count restored after (see `Prescreen.features`)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return fn(arg)
    finally:
        torch.set_num_threads(threads)


def engine_only(features: Mapping[str, Any]) -> dict:
    """A candidate's features less the task's ("task_..."): what the first rung learns from."""
    return {k: v for k, v in features.items() if not k.startswith("task_")}


def check_prior(rows: Sequence[Any], where: str) -> None:
    """ValueError, one line naming `where` and the row, unless every row is a labelled candidate:
    {"features": dict, "valid": bool, "fitness": number or None}."""
    for i, r in enumerate(rows):
        if not (isinstance(r, dict) and isinstance(r.get("features"), dict)
                and isinstance(r.get("valid"), bool)
                and (r.get("fitness") is None or isinstance(r.get("fitness"), (int, float)))):
            raise ValueError(f"{where}, row {i}: want an object with 'features' (an object), "
                             "'valid' (true/false) and 'fitness' (a number or null)")


def labelled_rows(candidates: Sequence[Candidate], screen: "Prescreen") -> list[dict]:
    """A prior's rows from evaluated candidates: {"features", "valid", "fitness"} of each one that
    teaches something (`label`), its features as stored at birth or, for a run searched without
    the prescreen, computed now as the prescreen computes them. A degenerate layer has none and is
    left out: the objective's own checks reject it before the surrogate would see it."""
    rows = []
    for c in candidates:
        target = label(c)
        if target is None or c.graph is None:
            continue
        try:
            feats = c.features if c.features is not None else screen.features(c.graph)
        except Reject:  # what the search would now reject at birth teaches the surrogate nothing
            continue
        if feats is not None:
            rows.append({"features": feats, "valid": target[0], "fitness": target[1]})
    return rows


@dataclass(frozen=True)
class Screened:
    """One child of a slot and what the prescreen decided: train it, or reject it untrained."""

    proposal: Any  # evolution.Proposal
    born: Born
    train: bool


@dataclass
class Prescreen:
    """The search's side of the surrogate: features at birth, learning, choosing among children."""

    cfg: SearchConfig
    task_features: FeatureFn | None = None
    prior: Sequence[Mapping[str, Any]] = ()  # labelled rows of earlier runs (see the module doc)
    surrogate: Surrogate = field(default=None)  # type: ignore[assignment]
    warned: bool = False  # that the task's features failed: said once a session

    def __post_init__(self):
        if self.surrogate is None:
            self.surrogate = Surrogate(min_each=self.cfg.evolution.prescreen_min, seed=self.cfg.seed,
                                       prior=self.prior)
        # the first rung: the same labels, the engine's features alone
        self.layer: Surrogate | None = None
        if self.cfg.evolution.prescreen_layer_threshold > 0:
            self.layer = Surrogate(min_each=self.cfg.evolution.prescreen_min, seed=self.cfg.seed,
                                   prior=[{**r, "features": engine_only(r["features"])}
                                          for r in self.prior])

    def born(self, graph_json: dict, *, explore: bool = False) -> Born:
        """Features of a new child and the current prediction."""
        start = time.perf_counter()
        engine = _one_thread(self.engine_features, graph_json)  # computed once for both rungs
        if self.layer is not None and not explore:
            first = self.layer.predict(engine)
            if first is not None and first.p_valid < self.cfg.evolution.prescreen_layer_threshold:
                return Born(engine, first, time.perf_counter() - start, explore, layer_rung=True)
        try:
            feats = _one_thread(lambda g: self._with_task(g, engine), graph_json)
        except Reject as rej:
            return Born(None, None, time.perf_counter() - start, explore, rej)
        seconds = time.perf_counter() - start
        return Born(feats, self.surrogate.predict(feats), seconds, explore)

    def features(self, graph_json: dict) -> dict | None:
        """A layer's features at birth, the engine's then the task's; None for a layer that breaks
        on the probe or is degenerate there (the objective's own checks judge it).

        Computed in the driver's process at one torch thread: the workers already hold the cores,
        and a team of OpenMP threads that spin while they wait loses the cores to any other
        multi-threaded torch process beside it (a layer whose features take 0.5 s took 55 s next
        to one), which the candidate's cost would then carry."""
        return _one_thread(lambda g: self._with_task(g, self.engine_features(g)), graph_json)

    def engine_features(self, graph_json: dict) -> dict | None:
        """The engine's features of the layer alone (`evonorm.search.features`), None for a layer
        degenerate on the probe or broken there."""
        from evonorm.search.features import layer_features

        try:
            return layer_features(graph_json)
        except Exception:  # noqa: BLE001 - a layer that breaks on the probe: the objective judges it
            return None

    def task_row(self, graph_json: dict) -> dict | None:
        """The task's features of a layer, through the gate every objective hook passes: where the
        hook fails the layer trains without a prediction (one warning a session) and the search goes
        on; its `Reject` rejects the child untrained."""
        from evonorm.graph import Graph

        try:
            return outcome.features(outcome.guarded(self.task_features, "prescreen_features",
                                                    Graph.from_json(graph_json), passes=(Reject,)))
        except outcome.HookFailed as err:
            if not self.warned:
                warn(f"{err}; a layer it fails on is trained without a prediction")
                self.warned = True
            return None

    def _with_task(self, graph_json: dict, engine: dict | None) -> dict | None:
        """The layer's engine features (`engine`) with the task's added (`features`)."""
        if self.task_features is None:
            return engine
        if engine is None:
            # degenerate on the probe, which the surrogate cannot rank: the task's features still
            # judge a layer that passes the checks of the layer alone (they may reject it)
            if self._passes_checks(graph_json):
                self.task_row(graph_json)
            return None
        task = self.task_row(graph_json)
        if task is None:
            return None
        return {**engine, **{f"task_{k}": v for k, v in task.items()}}

    def _passes_checks(self, graph_json: dict) -> bool:
        """The run's checks of the layer alone pass (or are off): what the objective runs first."""
        from evonorm.graph import Graph
        from evonorm.search.checks import layer_checks

        if not self.cfg.evolution.prechecks:
            return True
        try:
            return layer_checks(Graph.from_json(graph_json), seed=self.cfg.seed) is None
        except Exception:  # noqa: BLE001 - a layer that breaks: the objective judges it
            return False

    def learn(self, c: Candidate) -> None:
        """Add an evaluated candidate to what the surrogate learns from (if it teaches anything)."""
        target = learning_target(c, self.cfg.evolution.near_misses)
        if target is not None:
            self.surrogate.add(c.features, *target)
            if self.layer is not None:
                self.layer.add(engine_only(c.features), *target)

    def choose(self, draw: Callable[[], Any], rng: random.Random,
               known: Callable[[dict], bool] = lambda g: False,
               pool: int | None = None) -> list[Screened]:
        """The children of one slot and what to do with each.

        At cold start, and in the exploring share of slots, one child, trained. Otherwise
        `pool` children (default `prescreen_pool`; fewer where the budget has fewer left): those below the threshold rejected, the best of the rest
        trained, the others dropped; a child the store already knows (`known`: answered from its
        cache at no cost) and a degenerate one (no features: the task's own checks reject it
        cheaply) go on as they would without the prescreen. A pool of hopeless children trains
        nothing, and the slot draws again.
        """
        cfg = self.cfg
        if not self.surrogate.ready or rng.random() < cfg.evolution.prescreen_explore:
            p = draw()
            if known(p.graph):
                return [Screened(p, Born(None), True)]
            b = self.born(p.graph, explore=self.surrogate.ready)
            return [Screened(p, b, b.reject is None and not b.layer_rung)]
        out: list[Screened] = []
        scored: list[Screened] = []
        for _ in range(max(1, cfg.evolution.prescreen_pool if pool is None else pool)):
            p = draw()
            if known(p.graph):
                out.append(Screened(p, Born(None), True))
                continue
            b = self.born(p.graph)
            if b.reject is not None or b.layer_rung:
                out.append(Screened(p, b, False))
            elif b.prediction is None:  # a degenerate layer: the task's own checks reject it
                out.append(Screened(p, b, True))
            elif b.prediction.p_valid < cfg.evolution.prescreen_threshold:
                out.append(Screened(p, b, False))
            else:
                scored.append(Screened(p, b, True))
        if scored:  # the best is trained; what the dropped ones' features cost is charged to it
            best = max(scored, key=lambda s: s.born.prediction.score)
            spent = sum(s.born.seconds for s in scored)
            out.append(replace(best, born=replace(best.born, seconds=spent)))
        return out
