"""Recording an outcome: what a run knows from its finished candidates, and how one more joins it.

A finished candidate is written to the store and folded, in the same step, into everything the
search reads back from it: the counts (`Tally`), the worker-seconds spent, the population parents
are drawn from, the hurdles each stage sets, and the prescreen's training data. A resumed run
rebuilds all of them from the store alone, so a session keeps nothing the store does not hold.
(Optuna's `_tell` plays this part beside its `_optimize` loop.)
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field

from evonorm.search.candidates import Candidate, reason_group
from evonorm.search.config import SearchConfig
from evonorm.search.evaluation import Evaluation
from evonorm.search.evolution import AgingPopulation, Member
from evonorm.search.store import PendingProposal, Store
from evonorm.search.surrogate import Born, Prescreen


@dataclass
class Tally:
    """Running counts for the progress line and the end-of-run summary."""

    done: int = 0
    valid: int = 0
    failed: int = 0
    cache_hits: int = 0
    rejected: Counter = field(default_factory=Counter)
    # scored stages of a fully trained layer; None: as many as the objective reports (one's own
    # objective says its stages as it goes: the most a valid layer reached so far)
    num_stages: int | None = 1
    best_at: dict[int, float] = field(default_factory=dict)  # the best fitness at each stage reached
    at_stage: Counter = field(default_factory=Counter)  # valid layers by the stage they reached
    spent: float = 0.0  # worker-seconds of the candidates

    @classmethod
    def of(cls, cfg: SearchConfig) -> "Tally":
        """A run's tally: the built-in task's stages are its config's, an own objective's what it
        reports."""
        return cls(num_stages=None if cfg.objective else cfg.hurdles.num_stages)

    def add(self, c: Candidate) -> None:
        self.done += 1
        self.cache_hits += c.cache_hit
        self.spent += float(c.seconds or 0.0)
        if c.status == "valid":
            self.valid += 1
            self.at_stage[c.stage] += 1
            if c.fitness is not None and c.fitness > self.best_at.get(c.stage, float("-inf")):
                self.best_at[c.stage] = c.fitness
        elif c.status == "rejected":
            self.rejected[reason_group(c.reason)] += 1
        else:
            self.failed += 1

    def stages(self) -> int:
        """Scored stages of a fully trained layer (an own objective's: the most reached so far)."""
        return self.num_stages or max(self.best_at, default=1)

    @property
    def best(self) -> float | None:
        """The best fitness of the layers trained to the end (with hurdles, a stopped layer's
        fitness is from shorter training)."""
        return self.best_at.get(self.stages())

    @property
    def stopped(self) -> int:
        """Valid layers a hurdle stopped before the end."""
        return self.valid - self.at_stage[self.stages()]

    def line(self) -> str:
        rej = " ".join(f"{k}:{v}" for k, v in sorted(self.rejected.items())) or "0"
        hurdled = f" ({self.stopped} stopped by a hurdle)" if self.stages() > 1 else ""
        return (f"valid {self.valid}{hurdled} | rejected {rej} | failed {self.failed} | "
                f"cache hits {self.cache_hits} | best {self.best_text()}")

    def best_text(self) -> str:
        return "-" if self.best is None else f"{self.best:.4f}"

    def short(self) -> str:
        """The bar's postfix: best first, so that an 80-column bar still shows it."""
        return (f"best {self.best_text()} valid {self.valid} rej {sum(self.rejected.values())} "
                f"fail {self.failed}")


class History:
    """A run's finished candidates as the search uses them: their `tally`, the worker-seconds
    `spent` (for a worker-seconds budget), the `population` parents are drawn from and the
    `hurdles` of a staged search; the prescreen, where there is one, learns from each. Built from
    the store, so that a resumed run continues where it stopped."""

    def __init__(self, store: Store, cfg: SearchConfig, prescreen: Prescreen | None = None):
        self.store, self.cfg, self.prescreen = store, cfg, prescreen
        self.tally = Tally.of(cfg)
        self.spent = 0.0
        # each hurdle: the stage fitness of the last `window` layers that reached that stage
        self.reached: list[deque[float]] = [deque(maxlen=cfg.evolution.window)
                                            for _ in cfg.hurdles.stage_steps]
        members: list[Member] = []
        for c in store.candidates():
            self.tally.add(c)
            self.spent += c.seconds
            if self.joins(c.evaluation):
                members.append(self.member(c))
            if prescreen is not None:
                prescreen.learn(c)
        window = cfg.evolution.window
        self.population = AgingPopulation(window, members[-window:], niches=cfg.evolution.niches)
        self.population.remember(members[:-window])

    def record(self, prop: PendingProposal, key: str, fp: str | None, evaluation: Evaluation, *,
               cache_hit: bool = False, worker: str | None = None, seconds: float = 0.0,
               born: Born | None = None) -> Candidate:
        """Store one outcome (under the run's score names) and fold it into the population, the
        hurdles, the prescreen and the counts; the candidate as stored. `born`: its features at
        birth, whose cost is part of its own unless the cache answered it."""
        evaluation = self.named(evaluation)
        new_member = self.joins(evaluation)
        if born is not None and not cache_hit:
            seconds += born.seconds
        cand = self.store.add_candidate(
            prop, evaluation, key=key, fingerprint=fp, cache_hit=cache_hit, seconds=seconds,
            worker=worker, join_population=self.cfg.evolution.window if new_member else None,
            features=born.features if born else None, prediction=born.record() if born else None)
        if new_member:
            self.population.add(self.member(cand))
        if self.prescreen is not None:
            self.prescreen.learn(cand)
        self.tally.add(cand)
        self.spent += seconds
        return cand

    def joins(self, e: Evaluation) -> bool:
        """Valid layers join the population; with `near_misses`, the quality test's near misses."""
        return e.status == "valid" or (self.cfg.evolution.near_misses and e.near_miss)

    def member(self, c: Candidate) -> Member:
        """A candidate as a population member: a valid one at its stage, whose stage fitnesses
        feed the hurdles (a cache hit's too: every proposal of a layer counts, as in the
        population); a near miss at stage 0, so any valid contestant beats it."""
        scores = tuple(float(c.scores.get(a, 0.0)) for a in self.cfg.scores)
        if c.status != "valid":
            return Member(c.id, c.graph, scores, 0)
        for k, f in enumerate(c.evaluation.stage_fitness[:len(self.reached)]):
            self.reached[k].append(f)
        return Member(c.id, c.graph, scores, c.stage)

    def hurdles(self) -> list[float | None]:
        """Progressive dynamic hurdles: the mean fitness at each stage of the layers that reached
        it (None until `hurdle_min` have: early layers all go on)."""
        least = self.cfg.hurdles.hurdle_min
        return [sum(r) / len(r) if len(r) >= least else None for r in self.reached]

    def named(self, e: Evaluation) -> Evaluation:
        """A valid result scored under the run's score names (`cfg.scores`). The first valid
        result names them (stored in the config); a later result under other names is the
        objective's error."""
        names = set(e.scores)
        if e.status != "valid" or names == set(self.cfg.scores):
            return e
        if self.tally.valid == 0:
            self.cfg = self.cfg.replace(scores=tuple(e.scores))
            self.store.set_config(self.cfg.to_dict())
            return e
        return Evaluation("rejected", reason=(
            f"error: the objective returned {', '.join(sorted(names))}, not the run's "
            f"{', '.join(self.cfg.scores)}")[:300], timings=e.timings)
