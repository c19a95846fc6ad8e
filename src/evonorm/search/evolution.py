"""Regularized (aging) evolution with multi-objective tournaments, and random search (paper Sec. 4.3).

Everything random goes through one stdlib `random.Random` so the driver can save its state with each
proposal and a resumed search continues the same stream. Scores are maximised.

Graph and fingerprint imports are made where a layer is proposed: they load torch, which the
engine's other modules do not need.
"""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

CRITERIA = ("pareto", "average")
ALGORITHMS = ("evolution", "random")


def dominates(a: Sequence[float], b: Sequence[float]) -> bool:
    """True when `a` is at least as good as `b` everywhere and strictly better somewhere."""
    return all(x >= y for x, y in zip(a, b)) and any(x > y for x, y in zip(a, b))


def pareto_front(scores: Sequence[Sequence[float]]) -> list[int]:
    """Indices of the non-dominated score vectors (equal vectors are all kept), in input order."""
    return [i for i, s in enumerate(scores)
            if not any(dominates(t, s) for j, t in enumerate(scores) if j != i)]


def tournament_size(population_size: int, fraction: float, minimum: int = 2) -> int:
    """A random `fraction` of the population (paper: 5%), at least `minimum`, at most everyone."""
    if population_size < 1:
        raise ValueError("tournament on an empty population")
    return max(1, min(population_size, max(minimum, math.ceil(fraction * population_size))))


def select_winner(scores: Sequence[Sequence[float]], rng: random.Random,
                  criterion: str = "pareto") -> int:
    """The tournament winner's index: a uniform member of the Pareto front, or the best mean.

    Ties under "average" go to a uniform choice among the tied, so neither rule favours input order.
    """
    if not scores:
        raise ValueError("empty tournament")
    if criterion == "pareto":
        return rng.choice(pareto_front(scores))
    if criterion == "average":
        means = [sum(s) / len(s) for s in scores]
        best = max(means)
        return rng.choice([i for i, m in enumerate(means) if m == best])
    raise ValueError(f"unknown selection criterion {criterion!r} (choose from {', '.join(CRITERIA)})")


@dataclass(frozen=True)
class Member:
    """One candidate in the population: its store id, graph JSON, per-architecture scores and
    the training stage they were measured at (multi-fidelity; 1 without stages; 0 for a near
    miss of the quality test, `SearchConfig.near_misses`)."""

    id: int
    graph: dict
    scores: tuple[float, ...]
    stage: int = 1


def niche(graph: dict) -> str:
    """Which statistics a layer divides by: the aggregation ops under the denominator of any of
    its live divisions ("group_rms" for -x / group_rms(x)), joined; "none" for a layer that
    divides by none (tanh(x + max(x, v0)), say). The population's niches (`AgingPopulation`)."""
    from evonorm.graph import Graph
    from evonorm.graph.primitives import NUM_INPUTS, PRIMITIVES

    g = Graph.from_json(graph)
    found: set[str] = set()
    for nid in g.live_nodes():
        if nid < NUM_INPUTS or g.node(nid)[0] != "div":
            continue
        stack, seen = [g.node(nid)[2]], set()
        while stack:
            n = stack.pop()
            if n < NUM_INPUTS or n in seen:
                continue
            seen.add(n)
            op, *args = g.node(n)
            if PRIMITIVES[op].aggregation:
                found.add(op)
            stack.extend(args)
    return "+".join(sorted(found)) or "none"


def _rank(m: Member) -> tuple[int, float]:
    """A member's standing in its niche: the stage it reached, then its mean score."""
    return m.stage, sum(m.scores) / max(1, len(m.scores))


class AgingPopulation:
    """The sliding window of the most recent `window` valid candidates (Real et al., 2019).

    With `niches`, the best member ever of each niche (`niche`: which statistic the layer divides
    by) stays a contestant after it ages out of the window: from random graphs, unnormalized
    layers that start faster otherwise crowd out the normalizing ones found early, which the
    first from-scratch experiment's evolution lost in every run."""

    def __init__(self, window: int, members: Iterable[Member] = (), *, niches: bool = False):
        if window < 1:
            raise ValueError(f"population window must be >= 1, got {window}")
        self.window = window
        self.niches = niches
        self.elites: dict[str, Member] = {}  # the best member of each niche so far
        self._members: deque[Member] = deque(maxlen=window)
        for m in members:
            self.add(m)

    def add(self, member: Member) -> Member | None:
        """Append a member; returns the oldest one when it falls out of the window."""
        oldest = self._members[0] if len(self._members) == self.window else None
        self._members.append(member)
        self.remember([member])
        return oldest

    def remember(self, members: Iterable[Member]) -> None:
        """Offer members to their niches' elites (a resumed run's members older than the window)."""
        if not self.niches:
            return
        for m in members:
            key = niche(m.graph)
            if key not in self.elites or _rank(m) > _rank(self.elites[key]):
                self.elites[key] = m

    def __len__(self) -> int:
        return len(self._members)

    def __iter__(self):
        return iter(self._members)

    def ids(self) -> list[int]:
        return [m.id for m in self._members]

    def contestants(self) -> list[Member]:
        """The window, and each niche's best member that has aged out of it."""
        members = list(self._members)
        inside = {m.id for m in members}
        return members + [e for e in self.elites.values() if e.id not in inside]

    def tournament(self, rng: random.Random, fraction: float, criterion: str = "pareto",
                   minimum: int = 2) -> Member:
        """Sample a random subset of the contestants (`contestants`) and return its winner. Scores
        compare only at an equal training stage: the contestants that reached the furthest stage
        in the sample compete (with hurdles, those were above the mean of the ones a hurdle
        stopped)."""
        members = self.contestants()
        contestants = rng.sample(members, tournament_size(len(members), fraction, minimum))
        top = max(m.stage for m in contestants)
        contestants = [m for m in contestants if m.stage == top]
        return contestants[select_winner([m.scores for m in contestants], rng, criterion)]


@dataclass(frozen=True)
class Proposal:
    """A graph to evaluate and how it came about."""

    graph: dict
    origin: str  # "random" | "mutation" | "seed"
    parent_id: int | None = None
    repeats: int = 0  # children drawn before it that computed a function the run knew


def propose(rng: random.Random, population: AgingPopulation, *, algorithm: str = "evolution",
            allow_batch: bool = True, initial_population: int = 0, tournament_fraction: float = 0.05,
            tournament_min: int = 2, criterion: str = "pareto", mutations: int = 2,
            p_random: float = 0.5, max_nodes: int = 10, graph_kwargs: dict[str, Any] | None = None,
            redraws: int = 50, known: Callable[[dict], bool] | None = None,
            fresh_tries: int = 0) -> Proposal:
    """The next candidate (paper Sec. 5.1).

    Random search, and evolution until the population holds `initial_population` members, draw
    fresh random graphs. Otherwise, with probability `p_random` a fresh random graph, else the
    tournament winner mutated `mutations` times. The coin is drawn first so a random replacement
    does not spend a tournament. A child that computes its parent's function (the same
    fingerprint: a mutation of an unused node, say) is drawn again, up to `redraws` times: it
    would only repeat the parent's result, and as a cache hit join the population as its clone.

    With `known` (graph JSON -> whether the run already scored its function) and `fresh_tries`,
    a child the run knows is drawn again, up to `fresh_tries` times: the same parent mutated
    anew, or another random graph; the last draw takes the slot whatever it is. The proposal
    counts the known children it replaced (`repeats`).
    """
    from evonorm.graph import Graph, mutate, random_graph
    from evonorm.graph.fingerprint import fingerprint_or_none

    kw = dict(graph_kwargs or {})
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algorithm!r} (choose from {', '.join(ALGORITHMS)})")
    tries = fresh_tries + 1 if known is not None else 1

    def fresh(draw: Callable[[], dict]) -> tuple[dict, int]:
        for repeats in range(tries):
            g = draw()
            if repeats == tries - 1 or known is None or not known(g):
                return g, repeats
        raise AssertionError("unreachable")

    if (algorithm != "evolution" or len(population) == 0 or len(population) < initial_population
            or rng.random() < p_random):
        g, repeats = fresh(lambda: random_graph(rng, allow_batch=allow_batch, max_nodes=max_nodes,
                                                **kw).to_json())
        return Proposal(graph=g, origin="random", repeats=repeats)
    winner = population.tournament(rng, tournament_fraction, criterion, tournament_min)
    parent = Graph.from_json(winner.graph)
    same = fingerprint_or_none(parent)

    def child() -> dict:
        for _ in range(redraws + 1):
            g = parent
            for _ in range(mutations):
                g = mutate(g, rng, allow_batch=allow_batch, **kw)
            if same is None or fingerprint_or_none(g) != same:
                break
        return g.to_json()

    g, repeats = fresh(child)
    return Proposal(graph=g, origin="mutation", parent_id=winner.id, repeats=repeats)
