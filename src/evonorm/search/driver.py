"""The steady-state asynchronous search loop, and resuming it from the store.

Up to N candidates are in flight; each result is committed and folded into the population the
moment it arrives, and a new proposal takes its slot. Proposals are committed (with the rng state
after them) before they are handed out, so after a crash or SIGKILL `resume` re-queues exactly the
in-flight ones and continues the random stream: nothing finished is lost or repeated.

The graph library is imported where a seed layer is resolved: it loads torch, which the driver
itself does not need.
"""

from __future__ import annotations

import random
import shlex
import sys
import time
from collections import Counter, deque
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, Callable, NoReturn

from evonorm.files import check_folder, printable
from evonorm.search.candidates import Candidate, reason_group, same_layer_keys, top_layers
from evonorm.search.config import SearchConfig
from evonorm.search.evaluation import Evaluation
from evonorm.search.evolution import AgingPopulation, Member, Proposal, propose
from evonorm.search.executors import DIED, ERROR, OK, TIMEOUT, Executor, make_executor
from evonorm.search import outcome
from evonorm.search.lock import LOCK_NAME
from evonorm.search.objective import (CandidateCost, Objective, layer_identity, run_trial,
                                      ship_path)
from evonorm.search.progress import SearchProgress, progress_bar
from evonorm.search.store import STORE_NAME, PendingProposal, Store
from evonorm.search.surrogate import (PRESCREEN_REASON, Born, Prescreen, check_prior,
                                      require_sklearn)


# the store's meta key of the children drawn and drawn again (`_Search.repeats`)
REPEATS_META = "repeats"


def rng_from_state(state: Any, seed: int) -> random.Random:
    """The search rng, continued from a stored `getstate()` (JSON lists) or fresh from the seed."""
    rng = random.Random(seed)
    if state is not None:
        version, internal, gauss = state
        rng.setstate((version, tuple(internal), gauss))
    return rng


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


@dataclass
class SearchResult:
    """How far a search got (`run_search`, `evonorm.search.search` / `resume` / `load`)."""

    run_dir: Path
    budget: int
    done: int
    complete: bool
    tally: Tally
    budget_seconds: float | None = None  # the worker-seconds budget, where the run has one

    def progress(self) -> str:
        """How far it got: "12/75 candidates", or its worker-seconds where that is the budget."""
        if self.budget_seconds is None:
            return f"{self.done}/{self.budget} candidates"
        return (f"{self.tally.spent:,.0f}/{self.budget_seconds:,.0f} worker-seconds, "
                f"{self.done} candidates")

    def top(self, k: int = 5) -> list[Candidate]:
        """The best `k` distinct valid layers, best first (as the report ranks them: one row per
        layer however often it was proposed or spelled), each its best `Candidate` (`.formula`,
        `.graph` as a dict of graph JSON, `.fitness`, `.scores` per objective). In a staged
        search a layer that reached a further stage ranks first: one a hurdle stopped early has a
        fitness from shorter training, which does not compare with a finished layer's."""

        with Store(self.run_dir, readonly=True) as store:
            return [row.best for row in top_layers(store.candidates(), k, same=same_layer_keys())]


def init_run(run_dir: str | Path, cfg: SearchConfig, objective: Objective | None = None, *,
             force: bool = False) -> Path:
    """Create a run folder, store its config and its facts (`record_run`): the one start of every
    search (Python's `search`, the built-in task's, the command's), so that each reports alike. A
    non-empty folder needs `force`: it is cleared of an earlier store, and of the files the
    objective keeps there (`run_files`: they name that store's candidates); others are left alone."""
    run = Path(run_dir)
    if run.exists() and not run.is_dir():
        raise FileExistsError(f"{run} exists and is not a folder")
    check_seed_layers(cfg)
    facts = run_facts(cfg, objective)  # what they need read before anything is written
    if run.is_dir() and any(p.name != LOCK_NAME for p in run.iterdir()):  # the lock is ours
        if not force:
            raise FileExistsError(f"run folder {run} is not empty (use --force to overwrite)")
        for name in (STORE_NAME, STORE_NAME + "-wal", STORE_NAME + "-shm",
                     *outcome.file_names(getattr(objective, "run_files", None))):
            (run / name).unlink(missing_ok=True)
    with Store(run) as store:  # the caller has resolved what the config names (e.g. its dataset)
        record_run(store, cfg, facts=facts)
        store.set_meta("status", "created")  # "running" only once run_search has its workers
        store.set_meta("created_at", time.time())
    return run


def check_seed_layers(cfg: SearchConfig) -> None:
    """ValueError (one line) unless every seed layer is a named graph or graph JSON of the run's space and
    genome size: checked before a run is written, since the search would otherwise stop at it, and every
    resume with it."""
    from evonorm.graph.library import resolve_graph

    for spec in cfg.evolution.seed_layers:
        try:
            graph = resolve_graph(spec)
        except ValueError as err:
            raise ValueError(f"seed layer {(str(err).splitlines() or [''])[0]}") from None
        if graph.uses_batch_stats and not cfg.evolution.allow_batch:
            raise ValueError(f"seed layer {spec!r:.60} uses batch statistics: not in the S space")


def run_facts(cfg: SearchConfig, objective: Objective | None = None) -> dict[str, Any]:
    """What a run trains on, for its start line and report (meta keys): its preset, objective and
    device, and what the objective adds of its own (`objective.run_facts()`, e.g. the built-in
    task's dataset and sizes), which the engine cannot know."""
    ex = cfg.execution
    facts: dict[str, Any] = {"preset": cfg.preset,
                             "device": {"type": ex.device, "workers": ex.num_workers,
                                        "executor": ex.executor}}
    if cfg.objective:
        facts["objective"] = cfg.objective
    own = outcome.call_hook(objective, "run_facts")
    if own is not None:
        facts.update(outcome.facts(own))
    return facts


def record_run(store: Store, cfg: SearchConfig, objective: Objective | None = None, *,
               facts: dict[str, Any] | None = None) -> dict[str, Any]:
    """Store a run's config and facts (`run_facts`, unless given): at its start, and again on
    resume, where the workers, device or data file may have changed."""
    facts = run_facts(cfg, objective) if facts is None else facts
    store.set_config(cfg.to_dict())
    for key, value in facts.items():
        store.set_meta(key, value)
    return facts


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


def expected_cost(objective) -> CandidateCost | None:
    """The objective's expected cost per candidate (its `expected_cost()`: it knows its own
    settings), or None where it has none. ValueError, one line, for a value that is not one."""
    got = outcome.call_hook(objective, "expected_cost")
    if got is None:
        return None
    seconds = getattr(got, "seconds", None)
    if (not isinstance(got, CandidateCost) or isinstance(seconds, bool) or not isinstance(seconds, (int, float))
            or not 0 < seconds < float("inf") or not isinstance(got.source, str)):
        raise outcome.HookFailed(f"the objective's expected_cost returned {type(got).__name__} "
                                 f"{str(got)[:60]!r}, not a CandidateCost of positive finite seconds")
    return got


def prescreen_prior(objective, cfg: SearchConfig,
                    log: Callable[[str], None] | None) -> list[dict]:
    """The labelled candidates the objective hands over for this setting (its `prescreen_prior`
    attribute), or none: with `prescreen_prior` off, or where it has none. Said on the log, since
    it decides when the surrogate first predicts."""
    rows = outcome.call_hook(objective, "prescreen_prior") if cfg.evolution.prescreen_prior else None
    if rows is not None and not isinstance(rows, (list, tuple)):
        raise outcome.HookFailed(f"the objective's prescreen_prior returned {type(rows).__name__}, not a "
                                 "list of rows")
    rows = list(rows or [])
    check_prior(rows, "the objective's prescreen prior")
    if log is not None:
        valid = sum(bool(r["valid"]) for r in rows)
        log(f"prescreen: starts from a prior of {len(rows)} labelled candidates ({valid} valid)"
            if rows else "prescreen: no prior for this setting; it learns from this run alone")
    return rows


class _Search:
    """State of one driver session over a store."""

    def __init__(self, store: Store, cfg: SearchConfig, executor: Executor,
                 log: Callable[[str], None] | None = None, prescreen: Prescreen | None = None):
        self.store, self.cfg, self.executor = store, cfg, executor
        self.prescreen = prescreen
        self.born: dict[int, Born] = {}  # features at birth of the proposals not yet recorded
        self.log = log or (lambda s: None)
        self.progress: SearchProgress | None = None  # what it shows as it goes (`SearchProgress`)
        self.rng = rng_from_state(store.last_rng_state(), cfg.seed)
        self.tally = Tally.of(cfg)
        self.spent = 0.0  # worker-seconds of the finished candidates (for `budget_seconds`)
        self.durations: list[float] = []  # this session's trained candidates' worker-seconds
        self.submitted: dict[int, float] = {}  # when each in-flight candidate went to a worker
        # each hurdle: the stage fitness of the last `window` layers that reached that stage
        self.reached: list[deque[float]] = [deque(maxlen=cfg.evolution.window)
                                            for _ in cfg.hurdles.stage_steps]
        valid: list[Member] = []
        for c in store.candidates():
            self.tally.add(c)
            self.spent += c.seconds
            if self._joins(c.evaluation):
                valid.append(self._member(c))
            if prescreen is not None:
                prescreen.learn(c)
        self.population = AgingPopulation(cfg.evolution.window, valid[-cfg.evolution.window:],
                                          niches=cfg.evolution.niches)
        self.population.remember(valid[:-cfg.evolution.window])
        # children drawn by the rng, and those of them drawn again as the run knew their function
        # (`fresh_tries`): stored, so that the share of repeats spans a resumed run
        self.repeats: dict[str, int] = {"children": 0, "redrawn": 0,
                                        **store.get_meta(REPEATS_META, {})}
        self.pending: deque[PendingProposal] = deque(store.pending_proposals())
        self.in_flight: dict[int, InFlight] = {}  # by proposal idx
        self.waiting: dict[str, list[PendingProposal]] = {}  # behind an in-flight key

    def _joins(self, e: Evaluation) -> bool:
        """Valid layers join the population; with `near_misses`, the quality test's near misses."""
        return e.status == "valid" or (self.cfg.evolution.near_misses and e.near_miss)

    def _member(self, c: Candidate) -> Member:
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
        return [sum(r) / len(r) if len(r) >= self.cfg.hurdles.hurdle_min else None for r in self.reached]

    def _new_proposal(self) -> PendingProposal | None:
        """The next proposal to evaluate, committed; None when the prescreen rejected every child
        of the slot (recorded as such)."""
        c = self.cfg.evolution
        n = self.store.num_proposals()
        if n < len(c.seed_layers):  # the user's seed layers first; the rng is not touched
            from evonorm.graph.library import resolve_graph

            p = Proposal(resolve_graph(c.seed_layers[n]).to_json(), "seed")
            born = self.prescreen.born(p.graph) if self.prescreen is not None else None
            return self._commit(p, born)

        def draw() -> Proposal:
            p = propose(self.rng, self.population, algorithm=c.algorithm,
                        allow_batch=c.allow_batch, initial_population=c.initial_population,
                        tournament_fraction=c.tournament_fraction,
                        tournament_min=c.tournament_min, criterion=c.criterion,
                        mutations=c.mutations, p_random=c.p_random, max_nodes=c.max_nodes,
                        known=self._known if c.fresh_tries else None, fresh_tries=c.fresh_tries)
            self.repeats["children"] += 1 + p.repeats
            self.repeats["redrawn"] += p.repeats
            return p

        if self.prescreen is None:
            return self._commit(draw(), None)
        first = None
        for s in self.prescreen.choose(draw, self.rng, self._known,
                                       pool=min(c.prescreen_pool, c.budget - n)):
            prop = self._commit(s.proposal, s.born)
            if not s.train:
                key, fp = layer_identity(prop.graph)
                rej = s.born.reject
                self._record(prop, key, fp, Evaluation(
                    "rejected", rej.reason, reason_step=rej.step, detail=rej.detail,
                    timings={PRESCREEN_REASON: s.born.seconds}) if rej is not None else Evaluation(
                    "rejected", PRESCREEN_REASON, detail={
                        **s.born.prediction.to_dict(), **self._rung(s.born)},
                    timings={PRESCREEN_REASON: s.born.seconds}))
            elif first is None:
                first = prop
            else:
                self.pending.append(prop)
        return first

    def _rung(self, born: Born) -> dict:
        """Which of the prescreen's rungs rejected a child, and at what threshold."""
        c = self.cfg.evolution
        if born.layer_rung:
            return {"rung": "layer", "threshold": c.prescreen_layer_threshold}
        return {"threshold": c.prescreen_threshold}

    def _commit(self, p: Proposal, born: Born | None) -> PendingProposal:
        idx = self.store.add_proposal(p.graph, p.parent_id, p.origin, self.rng.getstate())
        if self.cfg.evolution.fresh_tries:
            self.store.set_meta(REPEATS_META, self.repeats)
        if born is not None:
            self.born[idx] = born
        return PendingProposal(idx, p.graph, p.parent_id, p.origin, time.time())

    def _known(self, graph: dict) -> bool:
        """The layer is answered at no cost: from the store, or by an identical one in flight."""
        try:
            key, fp = layer_identity(graph)
        except ValueError:
            return False
        return (self.store.find_cached(key, fp) is not None
                or any(job.same_layer(key, fp) for job in self.in_flight.values()))

    def _record(self, prop: PendingProposal, key: str, fp: str | None, evaluation: Evaluation,
                *, cache_hit: bool = False, worker: str | None = None, seconds: float = 0.0) -> None:
        evaluation = self._named(evaluation)
        new_member = self._joins(evaluation)
        born = self.born.pop(prop.idx, None)
        if born is not None and not cache_hit:  # what its features cost is part of its cost
            seconds += born.seconds
        cand = self.store.add_candidate(
            prop, evaluation, key=key, fingerprint=fp, cache_hit=cache_hit, seconds=seconds,
            worker=worker, join_population=self.cfg.evolution.window if new_member else None,
            features=born.features if born else None, prediction=born.record() if born else None)
        if new_member:
            self.population.add(self._member(cand))
        if self.prescreen is not None:
            self.prescreen.learn(cand)
        self.tally.add(cand)
        self.spent += seconds
        if self.progress is not None:
            self.progress.finished(cand, seconds)

    def _named(self, e: Evaluation) -> Evaluation:
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

    def _dispatch(self, prop: PendingProposal, attempts: int = 0) -> None:
        """Cache lookup, then wait behind an identical in-flight layer, or submit."""
        start = time.perf_counter()
        try:
            key, fp = layer_identity(prop.graph)
        except ValueError as err:
            self._record(prop, "invalid", None,
                         Evaluation("rejected", reason=f"error: {err}"[:300]))
            return
        hit = self.store.find_cached(key, fp)
        if hit is not None:  # the earlier evaluation, less its timings: this one cost nothing
            self._record(prop, key, fp, replace(hit.evaluation, timings={}), cache_hit=True,
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
            payload["hurdles"] = self.hurdles()
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

    def out_of_time(self) -> bool:
        """The worker-seconds budget is spent (never, without one)."""
        limit = self.cfg.evolution.budget_seconds
        return limit is not None and self.spent >= limit

    def _fill(self) -> None:
        while self.executor.free_slots() > 0:
            if self.pending:
                prop = self.pending.popleft()
            elif self.store.num_proposals() < self.cfg.evolution.budget and not self.out_of_time():
                prop = self._new_proposal()
                if prop is None:  # the prescreen rejected the slot's every child: draw again
                    continue
            else:
                return
            self._dispatch(prop)

    def _collect(self, timeout: float) -> None:
        for out in self.executor.wait(timeout):
            job = self.in_flight.pop(out.task_id)
            self.submitted.pop(out.task_id, None)
            self.durations.append(out.seconds)
            if out.kind == OK:
                self._record(job.proposal, job.key, job.fingerprint, as_evaluation(out.result),
                             worker=out.worker, seconds=out.seconds)
            elif out.kind in (DIED, TIMEOUT) and job.attempts < self.cfg.execution.retries:
                self.log(f"candidate {job.proposal.idx}: {out.error}; retrying")
                self._submit(replace(job, attempts=job.attempts + 1))
                continue
            else:
                reason = out.error if out.kind != ERROR else f"error: {out.error}"
                self._record(job.proposal, job.key, job.fingerprint,
                             Evaluation.failed(reason or ""), worker=out.worker,
                             seconds=out.seconds)
            self._checkpoint(job.proposal.idx).unlink(missing_ok=True)  # decided: not resumed
            self.progress_file(job.proposal.idx).unlink(missing_ok=True)
            for waiter in self.waiting.pop(job.key, []):
                self.pending.appendleft(waiter)  # now answered from the cache (or re-run if failed)

    def run(self) -> None:
        show = self.progress.heartbeat if self.progress is not None else lambda force=False: None
        wait = min(0.5, self.progress.every) if self.progress is not None else 0.5
        show(force=True)  # the ETA from the start, before the workers have started
        first = True
        while True:
            self._fill()
            if not self.in_flight and not self.pending:
                if self.waiting:  # cannot happen: waiters are released with their original
                    raise RuntimeError("search stalled with layers waiting on nothing")
                return
            if first:  # and what runs, not only after `every` seconds
                show(force=True)
                first = False
            self._collect(wait)
            show()


def as_evaluation(result: Any) -> Evaluation:
    """What an evaluator returned: an Evaluation, or its dict form (`Evaluation.to_dict`)."""
    return result if isinstance(result, Evaluation) else Evaluation.from_dict(result)


def _sigterm_as_interrupt() -> Any:
    """SIGTERM (`kill`, a scheduler stopping the job) stops the search as Ctrl-C does: the store
    says "stopped" and the run lock is released, rather than the process vanishing with the run
    marked "running". Returns the handler it replaced (None off the main thread: no handler)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    return signal.signal(signal.SIGTERM, interrupt)


def _restore_sigterm(previous: Any) -> None:
    import signal

    if previous is not None:
        signal.signal(signal.SIGTERM, previous)


def stop_search(line: str) -> NoReturn:
    """Print `line` (where a search stopped, how to go on) and raise a KeyboardInterrupt marked as told
    (`told_how_to_resume`): a command then prints nothing more, and a script stopped by Ctrl-C ends as
    Python ends one (a subclass would not: Python exits with status 130 for KeyboardInterrupt itself)."""
    print(line, file=sys.stderr, flush=True)
    err = KeyboardInterrupt()
    err.told_how_to_resume = True  # type: ignore[attr-defined]
    raise err from None


def told_how_to_resume(err: BaseException) -> bool:
    """Whether `err` comes from `stop_search`, its line printed."""
    return getattr(err, "told_how_to_resume", False) is True


def resume_command(run: Path, objective: str | None) -> str:
    """The exact command that continues the run in `run`: the built-in task's needs only the folder;
    one's own objective needs `--objective` again (a run never imports a name it stored), and one
    defined in a script's `__main__` is importable from that script only."""
    folder = shlex.quote(str(run))
    if not objective:
        return f"`evonorm resume {folder}`"
    if objective.startswith("__main__:"):
        return f"`resume({str(run)!r}, {objective.split(':', 1)[1]})` in the script that defines it"
    return f"`evonorm resume {folder} --objective {shlex.quote(objective)}`"


def stopped_line(run: Path, objective: str | None, where: str | None = None) -> str:
    """The one line a stopped search prints: where it stopped (how far its budget is spent) and the
    command that continues it."""
    at = f" ({where})" if where else ""
    return (f"search stopped{at}: {resume_command(run, objective)} continues it, repeating what each "
            "unfinished candidate did since its last checkpoint")


def run_search(run_dir: str | Path, *, objective: Objective, executor: Executor | None = None, progress: bool = True,
               progress_every: float = 10.0, ship: list[str] | None = None) -> SearchResult:
    """Run (or continue) the search stored in `run_dir` until its budget is spent.

    `objective(norm_act, trial)` scores each candidate (`evonorm.search.objective`): the caller
    hands it in (the engine never looks one up, nor imports a name stored in the run). It must be
    picklable (a top-level function, or an object of a top-level class); `executor` defaults to the config's. `ship`: folders or files a Ray worker needs to
    import the objective (default: its top-level package). Safe to call again after any
    interruption. Progress: a bar on a terminal, else a line per candidate and a status line every
    `progress_every` seconds in between.
    """
    run = Path(run_dir)
    store = Store(run)
    cfg, search = None, None
    try:
        cfg = store.search_config()
        if cfg.evolution.prescreen:
            require_sklearn()
        if objective is None:
            raise ValueError("run_search needs the objective to score candidates with (the built-in "
                             "proxy task's: evonorm.proxy.ProxyObjective)")
        expected = expected_cost(objective)
        if ship is None:
            ship = [p for p in [ship_path(objective)] if p]
        fn = partial(run_trial, objective)
        own_executor = executor is None
        if executor is None:
            ex = cfg.execution
            executor = make_executor(ex.executor, fn, ex.num_workers, timeout=ex.timeout,
                                     address=ex.address, device=ex.device,
                                     gpus_per_worker=ex.gpus_per_worker, data_dir=ex.data_dir,
                                     threads=ex.threads, ship=ship)
        # quoted (`printable`): a line holds text from the run (a reason, a phase), and a raw control
        # sequence in it would act on the terminal
        log = (lambda s: print(printable(s), file=sys.stderr, flush=True)) if progress else None
        screen = None
        if cfg.evolution.prescreen:  # the task's features and prior, where the objective hands them over
            prior = prescreen_prior(objective, cfg, log)
            store.set_meta("prescreen_prior", {"rows": len(prior),
                                               "valid": sum(r["valid"] for r in prior)})
            screen = Prescreen(cfg, getattr(objective, "prescreen_features", None), prior=prior)
        search = _Search(store, cfg, executor, log=log, prescreen=screen)
        bar = progress_bar(cfg, search.tally.done, search.spent) if (
            progress and sys.stderr.isatty()) else None
        search.progress = SearchProgress(search, bar=bar, log=log, every=progress_every,
                                         expected=expected)
        store.set_meta("status", "running")
        term = _sigterm_as_interrupt()
        try:
            search.run()
            if cfg.evolution.fresh_tries and log is not None:
                r = search.repeats
                log(f"repeats: {r['redrawn']} of {r['children']} children drawn computed a function "
                    f"the run knew and were drawn again ({r['redrawn'] / max(1, r['children']):.0%})")
        finally:
            _restore_sigterm(term)
            search.progress.close()
            if own_executor:
                executor.close()
            search.forget_progress()
            done = store.num_candidates()
            complete = done >= cfg.evolution.budget or (search.out_of_time() and not search.in_flight
                                               and not search.pending)
            # a killed driver leaves "running"; any other exit says what it left behind
            store.set_meta("status", "complete" if complete else "stopped")
        if complete:
            store.set_meta("finished_at", time.time())
        return SearchResult(run, cfg.evolution.budget, done, complete, search.tally,
                            cfg.evolution.budget_seconds)
    except KeyboardInterrupt as err:  # also while the workers start or the prior loads
        if cfg is None or told_how_to_resume(err) or store.get_meta("status") == "complete":
            raise
        where = search.progress.status().count() if search and search.progress else None
        stop_search(stopped_line(run, cfg.objective, where))
    finally:
        store.close()
