"""Proposing: the next layers a search tries, each committed before it is handed out.

The user's seed layers come first; then children of the population (`evolution.propose`), screened
by the prescreen where the run has one. Each proposal is stored with the rng state after it, so a
resumed run continues the same random stream and re-queues what was in flight.

The graph library is imported where a seed layer is resolved: it loads torch, which proposing
itself does not need.
"""

from __future__ import annotations

import random
import time
from typing import Any, Callable, Iterator

from evonorm.search.config import SearchConfig
from evonorm.search.evaluation import Evaluation
from evonorm.search.evolution import AgingPopulation, Proposal, propose
from evonorm.search.store import PendingProposal, Store
from evonorm.search.surrogate import PRESCREEN_REASON, Born, Prescreen, Screened

# the store's meta key of the children drawn and drawn again (`Proposer.repeats`)
REPEATS_META = "repeats"


def rng_from_state(state: Any, seed: int) -> random.Random:
    """The search rng, continued from a stored `getstate()` (JSON lists) or fresh from the seed."""
    rng = random.Random(seed)
    if state is not None:
        version, internal, gauss = state
        rng.setstate((version, tuple(internal), gauss))
    return rng


class Proposer:
    """The proposals of one session over a store, from the rng state its last proposal left."""

    def __init__(self, store: Store, cfg: SearchConfig, prescreen: Prescreen | None = None):
        self.store, self.cfg, self.prescreen = store, cfg, prescreen
        self.rng = rng_from_state(store.last_rng_state(), cfg.seed)
        self.born: dict[int, Born] = {}  # features at birth of the proposals not yet recorded
        # children drawn by the rng, and those of them drawn again as the run knew their function
        # (`fresh_tries`): stored, so that the share of repeats spans a resumed run
        self.repeats: dict[str, int] = {"children": 0, "redrawn": 0,
                                        **store.get_meta(REPEATS_META, {})}

    def propose(self, population: AgingPopulation, known: Callable[[dict], bool]
                ) -> Iterator[tuple[PendingProposal, Evaluation | None]]:
        """The committed proposals of one slot, in order, each with the prescreen's verdict where it
        rejected it untrained (else None: train it). `known(graph)`: the run answers that layer at
        no cost. None of them to train when the prescreen rejected every child: the slot draws again."""
        n = self.store.num_proposals()
        if n < len(self.cfg.evolution.seed_layers):  # the user's seed layers first; the rng is not touched
            yield self.seed_layer(n), None
            return
        draw = self.drawing(population, known)
        if self.prescreen is None:
            yield self.commit(draw(), None), None
            return
        pool = min(self.cfg.evolution.prescreen_pool, self.cfg.evolution.budget - n)
        for s in self.prescreen.choose(draw, self.rng, known, pool=pool):
            yield self.commit(s.proposal, s.born), None if s.train else self.verdict(s)

    def seed_layer(self, n: int) -> PendingProposal:
        from evonorm.graph.library import resolve_graph

        p = Proposal(resolve_graph(self.cfg.evolution.seed_layers[n]).to_json(), "seed")
        return self.commit(p, self.prescreen.born(p.graph) if self.prescreen is not None else None)

    def drawing(self, population: AgingPopulation,
                known: Callable[[dict], bool]) -> Callable[[], Proposal]:
        """One child of `population` a call, counted in `repeats`."""
        c = self.cfg.evolution

        def draw() -> Proposal:
            p = propose(self.rng, population, algorithm=c.algorithm,
                        allow_batch=c.allow_batch, initial_population=c.initial_population,
                        tournament_fraction=c.tournament_fraction,
                        tournament_min=c.tournament_min, criterion=c.criterion,
                        mutations=c.mutations, p_random=c.p_random, max_nodes=c.max_nodes,
                        known=known if c.fresh_tries else None, fresh_tries=c.fresh_tries)
            self.repeats["children"] += 1 + p.repeats
            self.repeats["redrawn"] += p.repeats
            return p

        return draw

    def verdict(self, s: Screened) -> Evaluation:
        """A child the prescreen rejected untrained: by the task's own cheap checks, or by its
        prediction (with the rung and threshold that rejected it)."""
        timings = {PRESCREEN_REASON: s.born.seconds}
        rej = s.born.reject
        if rej is not None:
            return Evaluation("rejected", rej.reason, reason_step=rej.step, detail=rej.detail,
                              timings=timings)
        c = self.cfg.evolution
        rung = ({"rung": "layer", "threshold": c.prescreen_layer_threshold} if s.born.layer_rung
                else {"threshold": c.prescreen_threshold})
        return Evaluation("rejected", PRESCREEN_REASON,
                          detail={**s.born.prediction.to_dict(), **rung}, timings=timings)

    def repeats_line(self) -> str:
        """How many children drawn computed a function the run knew (`fresh_tries`)."""
        r = self.repeats
        return (f"repeats: {r['redrawn']} of {r['children']} children drawn computed a function "
                f"the run knew and were drawn again ({r['redrawn'] / max(1, r['children']):.0%})")

    def commit(self, p: Proposal, born: Born | None) -> PendingProposal:
        """Store the proposal with the rng state after it (and the repeats so far)."""
        idx = self.store.add_proposal(p.graph, p.parent_id, p.origin, self.rng.getstate())
        if self.cfg.evolution.fresh_tries:
            self.store.set_meta(REPEATS_META, self.repeats)
        if born is not None:
            self.born[idx] = born
        return PendingProposal(idx, p.graph, p.parent_id, p.origin, time.time())
