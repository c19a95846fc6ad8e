"""The built-in proxy task's search from Python: `search(out=...)` starts one, `resume(out)` continues
it. Both resolve what the task needs (its dataset, checked up front) and hand the engine
(`evonorm.search`) a `ProxyObjective`; reading a run needs nothing of the task (`evonorm.search.load`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evonorm.proxy.config import ProxyTask, with_task
from evonorm.proxy.objective import ProxyObjective
from evonorm.proxy.training import search_dataset, with_dataset
from evonorm.search.config import SearchConfig
from evonorm.search.api import check_flags, resume_run, with_budget
from evonorm.search.driver import SearchResult, init_run, run_search
from evonorm.search.executors import Executor
from evonorm.search.lock import RunLock
from evonorm.proxy.presets import get_preset
from evonorm.search.store import Store


def search(*, out: str | Path, preset: str = "demo", space: str = "s", budget: int | None = None,
           workers: int | None = None, executor: str = "local", seed: int = 0,
           force: bool = False, progress: bool = True, **settings: Any) -> SearchResult:
    """Search layers on the proxy task into the run folder `out`, with a preset's settings, some
    changed by plain keyword (the engine's and the task's: `budget`, `stage_steps`, `archs`, ...;
    `evonorm.proxy.presets.get_preset`). ValueError / FileNotFoundError on bad input (a
    missing dataset among them), before any worker starts."""
    check_flags(force=force, progress=progress)
    cfg = get_preset(preset, space=space, budget=budget, workers=workers, executor=executor,
                     seed=seed, **settings)
    cfg, objective = start(cfg)
    Path(out).mkdir(parents=True, exist_ok=True)
    with RunLock(out):
        init_run(out, cfg, objective, force=force)
        return run_search(out, objective=objective, progress=progress)


def resume(out: str | Path, *, budget: int | None = None, progress: bool = True,
           executor: Executor | None = None) -> SearchResult:
    """Continue the proxy-task search in `out` until its budget is spent (raised to `budget`, as
    `evonorm resume --budget`; ValueError for a smaller one, or for a run searched on an objective
    of one's own: resume it with `evonorm.search.resume(out, objective)`). `executor`: one to run
    the candidates on instead of the run's own (tests)."""
    with Store(out, readonly=True) as store:
        cfg, done = store.search_config(), store.num_candidates()
    check_proxy_run(cfg, out)
    cfg = with_budget(cfg, budget)
    objective = ProxyObjective.for_run(cfg)
    if done < cfg.evolution.budget:  # candidates will train: the data must still be there
        search_dataset(objective.task)
    with RunLock(out):
        return resume_run(out, objective, cfg, progress=progress, executor=executor)


def start(cfg: SearchConfig) -> tuple[SearchConfig, ProxyObjective]:
    """A new run's config and objective: its task resolved once (checked against the engine's
    stages, every architecture's training merged), its dataset named (`with_dataset`) and loaded
    (a missing or changed dataset fails here, in one line), and the config carrying the task as
    resolved, to be stored. ValueError / FileNotFoundError on bad input."""
    task = with_dataset(ProxyTask.of_run(cfg))
    search_dataset(task)
    cfg = with_task(cfg, task.settings)
    return cfg, ProxyObjective.for_run(cfg, task)


def check_proxy_run(cfg, run: str | Path) -> None:
    """ValueError unless the run in `run` was searched on the proxy task."""
    if cfg.objective:
        raise ValueError(f"the run in {run} was searched with the objective {cfg.objective}: "
                         f"pass it again (--objective {cfg.objective})")
