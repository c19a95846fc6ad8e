"""Running a search: the start of a run folder (`init_run`), the session over it (`run_search`),
and the one line a stopped search prints (`stop_search`).

`run_search` builds a session from the store and hands it to the loop (`evonorm.search.loop`),
which records each outcome (`evonorm.search.history`) and tells the progress display
(`evonorm.search.progress`) as it goes. Safe to call again after any interruption: proposals are
committed (with the rng state after them) before they are handed out, so a resumed run re-queues
exactly the candidates that were in flight and continues the random stream.

The graph library is imported where a seed layer is resolved: it loads torch, which the driver
itself does not need.
"""

from __future__ import annotations

import shlex
import sys
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable, NoReturn

from evonorm.files import printable
from evonorm.search.candidates import Candidate, same_layer_keys, top_layers
from evonorm.search.config import SearchConfig
from evonorm.search.executors import Executor, make_executor
from evonorm.search import outcome
from evonorm.search.history import Tally
from evonorm.search.lock import LOCK_NAME
from evonorm.search.loop import SearchLoop
from evonorm.search.objective import CandidateCost, Objective, run_trial, ship_path
from evonorm.search.progress import SearchProgress, progress_bar
from evonorm.search.store import STORE_NAME, Store
from evonorm.search.surrogate import Prescreen, check_prior, require_sklearn


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
    cfg, shown = None, None
    try:
        cfg = store.search_config()
        check_objective(cfg, objective)
        expected = expected_cost(objective)
        own_executor = None if executor is not None else _executor(cfg, objective, ship)
        log = _say if progress else None
        search = SearchLoop(store, cfg, own_executor or executor, log=log,
                            prescreen=_prescreen(store, cfg, objective, log))
        bar = progress_bar(cfg, search.history.tally.done, search.history.spent) if (
            progress and sys.stderr.isatty()) else None
        shown = SearchProgress(search, bar=bar, log=log, every=progress_every, expected=expected)
        search.observers.append(shown)
        complete = _run(store, search, shown, own_executor)
        return SearchResult(run, cfg.evolution.budget, store.num_candidates(), complete,
                            search.history.tally, cfg.evolution.budget_seconds)
    except KeyboardInterrupt as err:  # also while the workers start or the prior loads
        if cfg is None or told_how_to_resume(err) or store.get_meta("status") == "complete":
            raise
        stop_search(stopped_line(run, cfg.objective, shown.status().count() if shown else None))
    finally:
        store.close()


def check_objective(cfg: SearchConfig, objective: Objective | None) -> None:
    """The run can score candidates: it has an objective, and scikit-learn where it prescreens."""
    if cfg.evolution.prescreen:
        require_sklearn()
    if objective is None:
        raise ValueError("run_search needs the objective to score candidates with (the built-in "
                         "proxy task's: evonorm.proxy.ProxyObjective)")


def _executor(cfg: SearchConfig, objective: Objective, ship: list[str] | None) -> Executor:
    """The executor the run's config names, its workers scoring with `objective`. `ship`: what a
    Ray worker needs to import it (default: its top-level package)."""
    if ship is None:
        ship = [p for p in [ship_path(objective)] if p]
    ex = cfg.execution
    return make_executor(ex.executor, partial(run_trial, objective), ex.num_workers,
                         timeout=ex.timeout, address=ex.address, device=ex.device,
                         gpus_per_worker=ex.gpus_per_worker, data_dir=ex.data_dir,
                         threads=ex.threads, ship=ship)


def _say(line: str) -> None:
    """A log line on stderr, quoted (`printable`): it holds text from the run (a reason, a
    phase), and a raw control sequence in it would act on the terminal."""
    print(printable(line), file=sys.stderr, flush=True)


def _prescreen(store: Store, cfg: SearchConfig, objective: Objective,
               log: Callable[[str], None] | None) -> Prescreen | None:
    """The run's prescreen, from the task's features and prior where the objective hands them
    over (the prior's size kept in the store); None where the run has none."""
    if not cfg.evolution.prescreen:
        return None
    prior = prescreen_prior(objective, cfg, log)
    store.set_meta("prescreen_prior", {"rows": len(prior), "valid": sum(r["valid"] for r in prior)})
    return Prescreen(cfg, getattr(objective, "prescreen_features", None), prior=prior)


def _run(store: Store, search: SearchLoop, shown: SearchProgress,
         own_executor: Executor | None) -> bool:
    """Run the loop with the store saying "running"; whether the budget is spent. However it ends,
    the session closes what it opened and the store says what it left behind (a killed driver
    leaves "running")."""
    store.set_meta("status", "running")
    term = _sigterm_as_interrupt()
    try:
        search.run(wait=min(0.5, shown.every))
        if search.cfg.evolution.fresh_tries:
            search.log(search.proposer.repeats_line())
    finally:
        _restore_sigterm(term)
        shown.close()
        if own_executor is not None:
            own_executor.close()
        search.forget_progress()
        evo = search.cfg.evolution
        complete = store.num_candidates() >= evo.budget or (
            search.out_of_time() and not search.in_flight and not search.pending)
        store.set_meta("status", "complete" if complete else "stopped")
    if complete:
        store.set_meta("finished_at", time.time())
    return complete
