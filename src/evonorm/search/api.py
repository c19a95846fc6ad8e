"""The search from Python, on an objective the caller hands in: `search(objective, out=...)`,
`resume(out, objective)`, `load(out)`. The built-in proxy task has its own entry points
(`evonorm.proxy.search` / `resume`), which hand its objective to this engine.

A run records its objective's name ("module:function") and never imports it from there: resuming
a run searched on an objective of one's own takes that function again, and checks its name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evonorm.search.config import SearchConfig
from evonorm.search.driver import SearchResult, init_run, record_run, run_search
from evonorm.search.executors import Executor
from evonorm.search.history import Tally
from evonorm.search.lock import RunLock
from evonorm.search.objective import (SCORE_NAME, Objective, check_local_workers_can_start, check_objective,
                                      check_picklable, objective_name)
from evonorm.search.settings import engine_preset
from evonorm.search.store import Store


BUILTIN_ELSEWHERE = ("the built-in proxy task is searched with evonorm.proxy.search(out=...) and "
                     "resumed with evonorm.proxy.resume(out)")


def search(objective: Objective, *, out: str | Path, preset: str = "demo",
           space: str = "s", budget: int | None = None, workers: int | None = None,
           executor: str = "local", seed: int = 0, force: bool = False, progress: bool = True,
           ship: list[str] | None = None, **settings: Any) -> SearchResult:
    """Search layers for `objective(norm_act, trial)` into the run folder `out`, with a preset's
    engine settings (`evonorm.search.settings`), some changed by plain keyword (each one field
    of a part: `budget`, `stage_steps`, `window`, ...; `evonorm.search.config.KEYWORDS`).
    `ship`: what Ray workers need to import the objective
    (default: its top-level package or module file). ValueError / TypeError on bad input,
    before any worker starts."""
    check_flags(force=force, progress=progress)
    if objective is None:
        raise ValueError(f"search() needs an objective: {BUILTIN_ELSEWHERE}")
    cfg = engine_preset(preset, space=space, budget=budget, workers=workers, executor=executor,
                        seed=seed, **settings)
    check_picklable(check_objective(objective))
    if cfg.execution.executor == "local":
        check_local_workers_can_start(objective)
    cfg = own_objective_config(cfg, objective)
    Path(out).mkdir(parents=True, exist_ok=True)
    with RunLock(out):
        init_run(out, cfg, objective, force=force)
        return run_search(out, objective=objective, progress=progress, ship=ship)


def own_objective_config(cfg: SearchConfig, objective: Objective) -> SearchConfig:
    """The search settings of a run on `objective`: its name recorded, the scores named after a
    float's ("objective") until a first valid dict result names them, and no task settings (the
    objective holds its own)."""
    return cfg.replace(objective=objective_name(objective), scores=(SCORE_NAME,), task=None)


def resume(out: str | Path, objective: Objective | None = None, *, budget: int | None = None,
           progress: bool = True, ship: list[str] | None = None) -> SearchResult:
    """Continue the search in `out` until its budget is spent (raised to `budget`, as `evonorm
    resume --budget`), with the objective it was searched on (ValueError without it, with
    another, or with a budget below the run's)."""
    check_flags(progress=progress)
    with Store(out, readonly=True) as store:
        cfg = store.search_config()
    if objective is None and not cfg.objective:
        raise ValueError(f"the run in {out} was searched on the built-in proxy task: "
                         f"{BUILTIN_ELSEWHERE}")
    check_resume_objective(cfg.objective, objective, "the objective")
    if cfg.execution.executor == "local":
        check_local_workers_can_start(objective)
    cfg = with_budget(cfg, budget)
    with RunLock(out):
        return resume_run(out, objective, cfg, progress=progress, ship=ship)


def with_budget(cfg: SearchConfig, budget: int | None) -> SearchConfig:
    """A resumed run's config with its budget raised to `budget` (None: as stored); ValueError
    for a smaller one, since candidates already stored cannot be taken back."""
    if budget is None:
        return cfg
    if isinstance(budget, bool) or not isinstance(budget, int):
        raise ValueError(f"budget={budget!r:.40} is not an integer")
    if budget < cfg.evolution.budget:
        raise ValueError(f"budget={budget} cannot shrink the run's budget of "
                         f"{cfg.evolution.budget}")
    return cfg.replace(evolution=cfg.evolution.replace(budget=budget))


def check_flags(**flags: Any) -> None:
    """ValueError naming the first keyword that is not True or False: `force="no"` would otherwise be
    true, and start over on a run it was meant to keep."""
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise ValueError(f"{name}={value!r:.40} is not True or False")


def resume_run(out: str | Path, objective: Objective, cfg: SearchConfig | None = None, *,
               progress: bool = True, ship: list[str] | None = None,
               executor: Executor | None = None) -> SearchResult:
    """Continue the run in `out` (its lock held, its objective checked) under `cfg` (the stored
    config with the caller's changes: budget, workers, device; default as stored), its facts
    recorded again (`record_run`): the one resume of every caller (Python's, the built-in
    task's, the command's)."""
    with Store(out) as store:
        record_run(store, cfg or store.search_config(), objective)
    return run_search(out, objective=objective, progress=progress, ship=ship, executor=executor)


def check_resume_objective(stored: str | None, objective: Objective | None, flag: str) -> None:
    """ValueError (one line naming `flag`) unless `objective` is the one the run was searched on."""
    if objective is None:
        if stored:
            raise ValueError(f"the run was searched with the objective {stored}: pass {flag} "
                             f"{stored} to resume it")
        return
    check_objective(objective)
    name = objective_name(objective)
    if not stored:
        raise ValueError(f"{flag} {name}: the run was searched on the built-in proxy task; "
                         f"resume it without {flag}")
    if name != stored:
        raise ValueError(f"{flag} {name} is not the run's objective {stored}")


def load(out: str | Path) -> SearchResult:
    """A run folder's search as it stands (read only): `.top(k)`, counts, completeness."""
    run = Path(out)
    with Store(run, readonly=True) as store:
        cfg = store.search_config()
        tally = Tally.of(cfg)
        for c in store.candidates():
            tally.add(c)
        complete = store.get_meta("status") == "complete"
    return SearchResult(run, cfg.evolution.budget, tally.done, complete, tally,
                        cfg.evolution.budget_seconds)
