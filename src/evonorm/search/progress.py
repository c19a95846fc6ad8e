"""What a search shows while it runs: its start line's budget, a bar on a terminal or status lines
in a log, one ETA, and where each running candidate is. An observer of the loop
(`evonorm.search.loop`), told of each recorded candidate and beating between waits (as Optuna's
callbacks and progress bar); it only reads the loop: its history's counts and worker-seconds spent,
and the candidates in flight.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any, Callable

from evonorm.files import printable
from evonorm.search.candidates import Candidate
from evonorm.search.config import SearchConfig
from evonorm.search.history import History, Tally
from evonorm.search.objective import CandidateCost, TrialProgress


def eta_seconds(durations: list[float], ages: list[float], unstarted: int, cost: float | None,
                workers: int) -> float | None:
    """Seconds until a search is done: each running candidate's expected remaining time, and the
    candidates not started yet at `cost` worker-seconds each, shared among `workers`.

    A candidate running for `age` seconds is expected to need the mean excess over `age` of the
    finished candidates that ran longer than it (a long training at the end of a search is not
    "almost done" because the average candidate is quick); one that has run longer than all of
    them is taken to need as long again. Before any has finished, `cost` (an expected cost) stands
    for them. None before anything is known.
    """
    finished = durations if durations or cost is None else [cost]

    def remaining(age: float) -> float:
        longer = [d for d in finished if d > age]
        return sum(longer) / len(longer) - age if longer else age

    running = [remaining(a) for a in ages]
    if cost is None and (unstarted or not running):
        return None
    queued = unstarted * (cost or 0.0)
    return max(max(running, default=0.0), (sum(running) + queued) / max(1, workers))


def duration_text(seconds: float) -> str:
    """"45s" under two minutes, "12 min" under two hours, else "4.2 h"."""
    if seconds < 120:
        return f"{seconds:.0f}s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


PRIOR_CANDIDATES = 10  # candidates the cost per candidate averages over (`SearchProgress.finished`)


@dataclass(frozen=True)
class Status:
    """The parts of the search's status line (`SearchProgress.status`): the bar shows some of them
    in its postfix, the log all of them (`line`)."""

    done: int
    budget: int
    valid: int
    best: str
    training: int
    elapsed: float
    eta: str  # "95s"; "~12 min (demo's measured cost)" before the run's own timings; "?"
    running: tuple[str, ...] = ()  # each running candidate: "#12 stage 2/3 (step 300)"
    spent: float = 0.0  # worker-seconds of the finished candidates
    budget_seconds: float | None = None  # the run's worker-seconds budget, where it has one

    def count(self) -> str:
        """How far the budget is spent: candidates, or worker-seconds where that is the budget
        (a candidate count there is only a cap)."""
        if self.budget_seconds is None:
            return f"{self.done}/{self.budget} done"
        share = 100 * min(1.0, self.spent / self.budget_seconds)
        return (f"{self.spent:.0f}/{self.budget_seconds:.0f} worker-s spent ({share:.0f}%), "
                f"{self.done} done")

    def tail(self) -> str:
        """What a bar adds to its own count and best: the candidates training, the clock, the ETA
        and where each running candidate is."""
        running = f" | running: {', '.join(self.running)}" if self.running else ""
        return f"{self.training} training | {self.elapsed:.0f}s elapsed, ETA {self.eta}{running}"

    def line(self) -> str:
        return (f"search: {self.count()} | valid {self.valid} | best {self.best} | "
                f"{self.tail()}")


def budget_text(cfg: SearchConfig) -> str:
    """A run's budget as its start line says it: candidates, or worker-seconds where it has
    that budget (its candidate count then a cap)."""
    evo = cfg.evolution
    if evo.budget_seconds is None:
        return f"budget {evo.budget:,} candidates"
    return f"budget {evo.budget_seconds:,.0f} worker-seconds (at most {evo.budget:,} candidates)"


def progress_bar(cfg: SearchConfig, done: int, spent: float):
    """The search's bar on a terminal: of the worker-seconds budget where the run has one, else
    of its candidates. Without tqdm's rate and remaining time: the search's own ETA (in the
    postfix) is the one estimate shown."""
    from tqdm import tqdm

    limit = cfg.evolution.budget_seconds
    if limit is None:
        return tqdm(total=cfg.evolution.budget, initial=done, unit="cand", desc="search",
                    file=sys.stderr, dynamic_ncols=True,
                    bar_format="{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} [{elapsed}]"
                               "{postfix}")
    return tqdm(total=limit, initial=min(spent, limit), unit="worker-s", desc="search",
                file=sys.stderr, dynamic_ncols=True,
                bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.0f}/{total:.0f} {unit} "
                           "[{elapsed}]{postfix}")


class SearchProgress:
    """The progress display of one driver session over `loop` (`SearchLoop`: its config, history
    and candidates in flight), drawn on `bar` where there is a
    terminal, else as lines to `log` every `every` seconds. `expected`: the objective's cost per
    candidate, until the run has timings of its own."""

    def __init__(self, loop: Any, *, bar: Any = None, log: Callable[[str], None] | None = None,
                 every: float = 10.0, expected: CandidateCost | None = None):
        self.loop, self.bar, self.log = loop, bar, log or (lambda s: None)
        self.every, self.expected = every, expected
        self.started = self.last_line = time.perf_counter()
        self.spent_before = self.history.spent  # worker-seconds of the earlier sessions
        self.cost = self.starting_cost()  # worker-seconds a candidate, as `finished` updates it

    def starting_cost(self) -> float | None:
        """The cost per candidate a session starts from: the objective's expected cost counted as
        `PRIOR_CANDIDATES` candidates beside the run's own so far (a resumed run knows its pace);
        None with neither."""
        n, spent = self.tally.done, self.history.spent
        if self.expected is None:
            return spent / n if n else None
        return (PRIOR_CANDIDATES * self.expected.seconds + spent) / (PRIOR_CANDIDATES + n)

    @property
    def cfg(self) -> SearchConfig:
        return self.loop.cfg

    @property
    def history(self) -> History:
        return self.loop.history

    @property
    def tally(self) -> Tally:
        return self.history.tally

    def finished(self, cand: Candidate, seconds: float) -> None:
        """A candidate was recorded: the cost per candidate moves toward its worker-seconds (a
        moving average over about `PRIOR_CANDIDATES`: a search's first candidates are not its
        typical ones, as the seed layers train to the end and later children are more often
        rejected in seconds or answered from the cache, and a machine's load changes), and the
        bar moves (by its worker-seconds where that is the budget), or a line says its outcome."""
        self.cost = seconds if self.cost is None else \
            self.cost + (seconds - self.cost) / PRIOR_CANDIDATES
        if self.bar is not None:
            # quoted (`printable`): the bar holds text from the run, which could act on the terminal
            self.bar.set_description_str(printable(f"search best {self.tally.best_text()}"), refresh=False)
            self.bar.set_postfix_str(printable(self.tally.short()), refresh=False)
            # a worker-seconds bar stops at its budget (a last candidate may end beyond it)
            self.bar.update(1 if self.cfg.evolution.budget_seconds is None
                            else min(seconds, max(0.0, self.bar.total - self.bar.n)))
        else:
            self.log(f"[{self.count()}] #{cand.id} {cand.status}"
                     f"{' (' + cand.reason + ')' if cand.reason else ''}"
                     f"{' cache' if cand.cache_hit else ''} | {self.tally.line()}")
            self.last_line = time.perf_counter()

    def close(self) -> None:
        """The bar's last frame stays on the terminal; the lines below it are the search's."""
        if self.bar is not None:
            self.bar.close()

    def status(self) -> Status:
        """done / valid / best / ETA (`eta`), and where each running candidate is, as its worker
        last said (`TrialProgress`)."""
        now = time.perf_counter()
        ages = [now - t for t in self.loop.submitted.values()]
        return Status(self.tally.done, self.cfg.evolution.budget, self.tally.valid,
                      self.tally.best_text(), len(self.loop.in_flight), now - self.started,
                      self.eta(now - self.started, ages), self.running(), self.history.spent,
                      self.cfg.evolution.budget_seconds)

    def eta(self, elapsed: float, ages: list[float]) -> str:
        """The one ETA: the sooner of the candidate budget's (the candidates still running and
        those not yet started at `cost_per_candidate`, `eta_seconds`) and the worker-seconds
        budget's (`seconds_eta`). Before the run has finished a candidate, at the objective's
        expected cost, said as such."""
        left = max(0, self.cfg.evolution.budget - self.tally.done)
        cost = self.cost_per_candidate()
        by_count = eta_seconds(self.loop.durations, ages, max(0, left - len(ages)), cost,
                               self.cfg.execution.num_workers)
        by_seconds = self.seconds_eta(elapsed, ages)
        if by_seconds is not None and (by_count is None or by_seconds <= by_count):
            return duration_text(by_seconds)
        if by_count is None:
            return "?"
        guessed = self.tally.done == 0 and self.expected is not None
        return f"~{duration_text(by_count)} ({self.expected.source})" if guessed else \
            duration_text(by_count)

    def cost_per_candidate(self) -> float | None:
        """Worker-seconds a candidate is expected to cost (`cost`)."""
        return self.cost

    def seconds_eta(self, elapsed: float, ages: list[float]) -> float | None:
        """Seconds until the worker-seconds budget is spent (None without one): what is left of
        it, less what the running candidates have used, at the rate this session spends it
        (all workers busy until it has run a few seconds)."""
        limit = self.cfg.evolution.budget_seconds
        if limit is None:
            return None
        used = self.history.spent - self.spent_before + sum(ages)
        workers = self.cfg.execution.num_workers
        rate = used / elapsed if elapsed >= 5.0 and used > 0 else workers
        return max(0.0, limit - self.history.spent - sum(ages)) / min(rate, workers)

    def count(self) -> str:
        """A finished candidate's place in the budget: "12/75", or "12, 340/3600 worker-s"."""
        limit = self.cfg.evolution.budget_seconds
        if limit is None:
            return f"{self.tally.done}/{self.cfg.evolution.budget}"
        return f"{self.tally.done}, {self.history.spent:.0f}/{limit:.0f} worker-s"

    def status_line(self) -> str:
        return self.status().line()

    def running(self) -> tuple[str, ...]:
        """Each running candidate by its proposal's number (from 1, as the candidates' ids), with
        its stage and the step in flight, or its phase, where its worker says (local runs: "starting" until
        it says anything; elsewhere the number alone)."""
        out = []
        for idx in sorted(self.loop.in_flight):
            where = ""
            if self.loop.local():
                said = TrialProgress.read(self.loop.progress_file(idx))
                where = said.describe(self.stage_count()) if said else "starting"
            out.append(f"#{idx + 1} {where}".rstrip())
        return tuple(out)

    def stage_count(self) -> int | None:
        """Stages of a layer trained to the end: the run's config's for the built-in task; for an
        own objective as many as its layers have reported so far (None before one has)."""
        if self.tally.num_stages is not None or self.tally.best_at:
            return self.tally.stages()
        return None

    def heartbeat(self, force: bool = False) -> None:
        """Without a bar, a plain status line every `every` seconds (and at once with `force`), so
        a long wait is not silent; with one, its clock, the candidates training and where they
        are, and the ETA move every second (tqdm redraws only on an update, and the first
        candidate may take minutes)."""
        now = time.perf_counter()
        if self.bar is None and (force or now - self.last_line >= self.every):
            self.log(self.status_line())
            self.last_line = now
        elif self.bar is not None and (force or now - self.last_line >= 1.0):
            self.bar.set_postfix_str(printable(f"{self.tally.short()} | {self.status().tail()}"),
                                     refresh=False)
            self.bar.refresh()
            self.last_line = now
