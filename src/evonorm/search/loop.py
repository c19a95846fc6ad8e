"""The steady-state asynchronous search loop (as Optuna's `_optimize`).

Up to N candidates are in flight; each result is recorded (`History.record`) the moment it arrives,
the observers hear of it, and a new proposal (`Proposer`) takes its slot. A layer is evaluated once:
a proposal the store already answers is a cache hit, and one identical to a layer in flight waits
for it. A worker that died or timed out is retried up to `retries` times.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Protocol

from evonorm.files import check_folder
from evonorm.search.candidates import Candidate
from evonorm.search.config import SearchConfig
from evonorm.search.evaluation import Evaluation
from evonorm.search.executors import DIED, ERROR, OK, TIMEOUT, Executor, Outcome
from evonorm.search.history import History
from evonorm.search.objective import layer_identity
from evonorm.search.proposer import Proposer
from evonorm.search.store import PendingProposal, Store
from evonorm.search.surrogate import Prescreen


class Observer(Protocol):
    """What the loop tells as it goes (`SearchProgress`): each recorded candidate, and a beat
    between waits for results."""

    def finished(self, cand: Candidate, seconds: float) -> None: ...

    def heartbeat(self, force: bool = False) -> None: ...


@dataclass
class InFlight:
    """A proposal handed to the executor: the layer's identity (for the cache and for identical
    proposals waiting on it) and how often it was retried."""

    proposal: PendingProposal
    key: str
    fingerprint: str | None
    attempts: int = 0

    def same_layer(self, key: str, fingerprint: str | None) -> bool:
        return self.key == key or (fingerprint is not None and self.fingerprint == fingerprint)


def as_evaluation(result: Any) -> Evaluation:
    """What an evaluator returned: an Evaluation, or its dict form (`Evaluation.to_dict`)."""
    return result if isinstance(result, Evaluation) else Evaluation.from_dict(result)


class SearchLoop:
    """One driver session over a store: its `history` (what finished), its `proposer`, and the
    candidates `pending`, `in_flight` and `waiting` behind an identical one in flight."""

    def __init__(self, store: Store, cfg: SearchConfig, executor: Executor,
                 log: Callable[[str], None] | None = None, prescreen: Prescreen | None = None):
        self.store, self.cfg, self.executor = store, cfg, executor
        self.log = log or (lambda s: None)
        self.history = History(store, cfg, prescreen)
        self.proposer = Proposer(store, cfg, prescreen)
        self.observers: list[Observer] = []
        self.durations: list[float] = []  # this session's trained candidates' worker-seconds
        self.submitted: dict[int, float] = {}  # when each in-flight candidate went to a worker
        self.pending: deque[PendingProposal] = deque(store.pending_proposals())
        self.in_flight: dict[int, InFlight] = {}  # by proposal idx
        self.waiting: dict[str, list[PendingProposal]] = {}  # behind an in-flight key

    def run(self, wait: float = 0.5) -> None:
        """Until the budget is spent and nothing is in flight; results are awaited `wait`
        seconds at a time, the observers' beat between."""
        self._beat(force=True)  # the ETA from the start, before the workers have started
        first = True
        while True:
            self._fill()
            if not self.in_flight and not self.pending:
                if self.waiting:  # cannot happen: waiters are released with their original
                    raise RuntimeError("search stalled with layers waiting on nothing")
                return
            if first:  # and what runs, not only after `every` seconds
                self._beat(force=True)
                first = False
            self._collect(wait)
            self._beat()

    def _fill(self) -> None:
        """Free slots take the pending proposals first, then new ones while the budget lasts."""
        while self.executor.free_slots() > 0:
            if self.pending:
                self._dispatch(self.pending.popleft())
            elif (self.store.num_proposals() < self.cfg.evolution.budget
                  and not self.out_of_time()):
                self._propose()
            else:
                return

    def _propose(self) -> None:
        """One slot's proposals: queued, or recorded at once where the prescreen rejected them."""
        for prop, verdict in self.proposer.propose(self.history.population, self._known):
            if verdict is None:
                self.pending.append(prop)
            else:
                self._tell(prop, *layer_identity(prop.graph), verdict)

    def _dispatch(self, prop: PendingProposal, attempts: int = 0) -> None:
        """Cache lookup, then wait behind an identical in-flight layer, or submit."""
        start = time.perf_counter()
        try:
            key, fp = layer_identity(prop.graph)
        except ValueError as err:
            self._tell(prop, "invalid", None, Evaluation("rejected", reason=f"error: {err}"[:300]))
            return
        hit = self.store.find_cached(key, fp)
        if hit is not None:  # the earlier evaluation, less its timings: this one cost nothing
            self._tell(prop, key, fp, replace(hit.evaluation, timings={}), cache_hit=True,
                       seconds=time.perf_counter() - start)
            return
        for job in self.in_flight.values():
            if job.same_layer(key, fp):
                self.waiting.setdefault(job.key, []).append(prop)
                return
        self._submit(InFlight(prop, key, fp, attempts))

    def _submit(self, job: InFlight) -> None:
        payload = {"graph": job.proposal.graph, "seed": self.cfg.seed,
                   "device": self.cfg.execution.device,
                   "staged": bool(self.cfg.hurdles.stage_steps),
                   "prechecks": self.cfg.evolution.prechecks}
        if self.cfg.hurdles.stage_steps:  # a retried or resumed candidate continues from its last stage
            payload["hurdles"] = self.history.hurdles()
            if self.local():
                payload["checkpoint"] = str(self._checkpoint(job.proposal.idx))
        if self.local():  # where the worker says how far it is: the run folder, which it sees
            progress = self.progress_file(job.proposal.idx)
            check_folder(progress.parent, create=True)
            progress.unlink(missing_ok=True)  # an earlier attempt's
            payload["progress"] = str(progress)
        self.executor.submit(job.proposal.idx, payload)
        self.in_flight[job.proposal.idx] = job
        self.submitted[job.proposal.idx] = time.perf_counter()

    def _collect(self, timeout: float) -> None:
        """The results that arrive within `timeout` seconds: recorded, or retried."""
        for out in self.executor.wait(timeout):
            job = self.in_flight.pop(out.task_id)
            self.submitted.pop(out.task_id, None)
            self.durations.append(out.seconds)
            if out.kind in (DIED, TIMEOUT) and job.attempts < self.cfg.execution.retries:
                self.log(f"candidate {job.proposal.idx}: {out.error}; retrying")
                self._submit(replace(job, attempts=job.attempts + 1))
                continue
            self._tell(job.proposal, job.key, job.fingerprint, self._evaluation(out),
                       worker=out.worker, seconds=out.seconds)
            self._checkpoint(job.proposal.idx).unlink(missing_ok=True)  # decided: not resumed
            self.progress_file(job.proposal.idx).unlink(missing_ok=True)
            for waiter in self.waiting.pop(job.key, []):
                self.pending.appendleft(waiter)  # now answered from the cache (or re-run if failed)

    @staticmethod
    def _evaluation(out: Outcome) -> Evaluation:
        """A worker's outcome as the candidate's evaluation: its result, or a failure."""
        if out.kind == OK:
            return as_evaluation(out.result)
        return Evaluation.failed((out.error if out.kind != ERROR else f"error: {out.error}") or "")

    def _tell(self, prop: PendingProposal, key: str, fp: str | None, evaluation: Evaluation, *,
              cache_hit: bool = False, worker: str | None = None, seconds: float = 0.0) -> None:
        """Record one outcome, then tell the observers (as Optuna's `_tell`, then its callbacks)."""
        cand = self.history.record(prop, key, fp, evaluation, cache_hit=cache_hit, worker=worker,
                                   seconds=seconds, born=self.proposer.born.pop(prop.idx, None))
        for observer in self.observers:
            observer.finished(cand, cand.seconds)

    def _beat(self, force: bool = False) -> None:
        for observer in self.observers:
            observer.heartbeat(force=force)

    def _known(self, graph: dict) -> bool:
        """The layer is answered at no cost: from the store, or by an identical one in flight."""
        try:
            key, fp = layer_identity(graph)
        except ValueError:
            return False
        return (self.store.find_cached(key, fp) is not None
                or any(job.same_layer(key, fp) for job in self.in_flight.values()))

    def out_of_time(self) -> bool:
        """The worker-seconds budget is spent (never, without one)."""
        limit = self.cfg.evolution.budget_seconds
        return limit is not None and self.history.spent >= limit

    def _checkpoint(self, idx: int) -> Path:
        """Where the objective may keep a candidate's state across a killed worker (`Trial`)."""
        return self.store.path.parent / "stages" / f"{idx}.pt"

    def progress_file(self, idx: int) -> Path:
        """Where a running candidate's worker says how far it is (`TrialProgress`)."""
        return self.store.path.parent / "stages" / f"{idx}.progress.json"

    def local(self) -> bool:
        """Workers on this machine, which see the run folder (not so a Ray cluster's)."""
        return self.cfg.execution.executor == "local"

    def forget_progress(self) -> None:
        """Remove the progress files of the candidates in flight (a stopped session's; their
        checkpoints stay, so that a resumed search continues them)."""
        for idx in self.in_flight:
            self.progress_file(idx).unlink(missing_ok=True)
