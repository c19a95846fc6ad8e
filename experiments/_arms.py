"""The arms of a comparison at equal compute, shared by the experiments that compare search
settings (evolution vs random search, the prescreen's arms, the stability ablation, searches from
primitives, the prescreen's prior): each arm is one search of the proxy task with one worker of one
thread, the arms of a seed run side by side so that they see the same machine load, and each run is
read back as the candidates it finished within a budget of worker-seconds.

The searches run through the package's search API (`init_run`, `run_search`), each driven from a
thread of this process: the candidates train in the package's local executor, whose workers end
with this process.
"""

from __future__ import annotations

import statistics
import threading
import time
from pathlib import Path

from experiments._common import log


def run_config(preset: str, algorithm: str, seed: int, budget_seconds: float, settings: dict | None = None):
    """One arm's search: the preset with `settings` (the same for every arm, by keyword of
    `get_preset`, a data seed already resolved), one worker of one thread."""
    from evonorm.proxy.api import start
    from evonorm.proxy.presets import get_preset

    return start(get_preset(preset, **(settings or {}), algorithm=algorithm, seed=seed,
                      budget=100_000, budget_seconds=budget_seconds, workers=1, threads=1,
                      executor="local"))[0]


def run_to_budget(run: Path, cfg) -> None:
    """One search to its worker-seconds budget: it continues the run in `run` when that was
    started with `cfg`, and starts it over otherwise."""
    from evonorm.proxy.objective import ProxyObjective
    from evonorm.search.config import SearchConfig
    from evonorm.search.driver import init_run, run_search
    from evonorm.search.lock import RunLock
    from evonorm.search.store import Store

    stored = None
    run.mkdir(parents=True, exist_ok=True)
    with RunLock(run):  # one search per folder, as `evonorm search` and `resume` hold it
        if (run / "store.sqlite").is_file():
            with Store(run, readonly=True) as st:
                stored = SearchConfig.from_dict(st.config())
        objective = ProxyObjective.for_run(cfg)
        if stored != cfg:
            init_run(run, cfg, objective, force=True)
        tally = run_search(run, objective=objective, progress=False).tally
    log(f"{run.name}: {tally.line()}")


def run_side_by_side(runs: dict[str, tuple[Path, object]], every: float = 60.0,
                     on_wait=None) -> None:
    """The searches `runs` (name -> (folder, config)) at once, each to its budget; `on_wait()`
    every `every` seconds while any runs (a line of progress). RuntimeError naming the runs that
    failed, after the others have finished: a comparison with an arm missing is no comparison."""
    errors: dict[str, BaseException] = {}

    def one(name: str, run: Path, cfg) -> None:
        try:
            run_to_budget(run, cfg)
        except BaseException as err:  # reported by the caller's thread, with the run's name
            errors[name] = err

    # daemon threads: an interrupted experiment ends, and its searches' workers with it
    threads = [threading.Thread(target=one, args=(name, run, cfg), name=f"search-{name}", daemon=True)
               for name, (run, cfg) in runs.items()]
    for t in threads:
        t.start()
    while alive := [t for t in threads if t.is_alive()]:
        alive[0].join(timeout=every)
        if alive[0].is_alive() and on_wait is not None:
            on_wait()
    if errors:
        raise RuntimeError("; ".join(f"the {name} run failed: {type(err).__name__}: {err}"
                                     for name, err in errors.items()))


def run_seed(runs_dir: Path, seed: int, configs: dict, budget_seconds: float, t0: float) -> None:
    """The arms of one search seed side by side, `configs[arm]` into runs_dir/<arm>_s<seed>; a
    progress line a minute, since a seed's runs take a quarter of an hour in silence otherwise."""
    try:
        run_side_by_side({arm: (runs_dir / f"{arm}_s{seed}", cfg) for arm, cfg in configs.items()},
                         on_wait=lambda: log(f"seed {seed}: " + "; ".join(progress_line(
                             runs_dir / f"{arm}_s{seed}", arm, budget_seconds) for arm in configs)))
    except RuntimeError as err:  # a seed with an arm missing: stop, do not go on past it
        raise RuntimeError(f"seed {seed}: {err}") from err
    log(f"seed {seed} done ({(time.time() - t0) / 60:.1f} min)")


def within_budget(candidates, budget_seconds: float) -> list:
    """The candidates that finished within the first `budget_seconds` worker-seconds."""
    out, spent = [], 0.0
    for c in sorted(candidates, key=lambda c: c.id):
        if spent >= budget_seconds:
            break
        spent += c.seconds
        out.append(c)
    return out


def first_full_at(candidates, stages: int) -> float | None:
    """Worker-seconds spent when the first layer trained through every stage finished (how
    long a search from scratch takes to find a layer that learns on every architecture)."""
    spent = 0.0
    for c in sorted(candidates, key=lambda c: c.id):
        spent += c.seconds
        if c.status == "valid" and c.stage >= stages:
            return round(spent, 1)
    return None


def best_full(candidates, stages: int):
    """The candidate with the best fitness among the layers trained to the end (all stages); None if none."""
    full = [c for c in candidates if c.status == "valid" and c.stage >= stages and c.fitness is not None]
    return max(full, key=lambda c: c.fitness, default=None)


def run_metric(candidates, stages: int, chance: float) -> float:
    """Best fitness of a layer trained to the end (all stages); chance if none."""
    best = best_full(candidates, stages)
    return chance if best is None else best.fitness


def top_mean(candidates, stages: int, chance: float, k: int = 10) -> float:
    """The paper's Fig. 10 metric at the end of a run: the mean fitness of the `k` best layers
    trained to the end, a missing one counting as chance (so finding fewer layers costs)."""
    full = sorted((c.fitness for c in candidates if c.status == "valid" and c.stage >= stages
                   and c.fitness is not None), reverse=True)[:k]
    return (sum(full) + chance * (k - len(full))) / k


def arm_numbers(candidates, budget_seconds: float) -> tuple[float, int, float | None]:
    """(valid layers per worker-hour, distinct valid layers of the run's own, the ceiling) within
    the budget; a cache hit (a layer proposed again, answered from the store) is not a layer
    found. The ceiling: valid layers per worker-hour if every worker-second went to valid layers
    of this run's mean cost (None without a valid layer)."""
    valid = [c for c in candidates if c.status == "valid" and not c.cache_hit]
    own = {c.key for c in valid if c.origin != "seed"}
    mean = statistics.fmean(c.seconds for c in valid) if valid else None
    return len(valid) / (budget_seconds / 3600.0), len(own), (3600.0 / mean if mean else None)


def read_run(run: Path, budget_seconds: float):
    """(config, status, chance accuracy, candidates finished within the budget) of one run; None before
    its store exists."""
    from evonorm.search.config import SearchConfig
    from evonorm.proxy.config import ProxyTask
    from evonorm.proxy.training import search_dataset
    from evonorm.search.store import Store

    if not (run / "store.sqlite").is_file():
        return None
    with Store(run, readonly=True) as st:
        cfg = SearchConfig.from_dict(st.config())
        cands = st.candidates()
        status = st.get_meta("status")
    return cfg, status, 1.0 / search_dataset(ProxyTask.of_run(cfg)).num_classes, within_budget(cands, budget_seconds)


def progress_line(run: Path, arm: str, budget_seconds: float) -> str:
    """Where one run stands: candidates, worker-seconds spent, best valid fitness so far."""
    from evonorm.search.store import Store

    if not (run / "store.sqlite").is_file():
        return f"{arm} starting"
    with Store(run, readonly=True) as st:
        cands = st.candidates()
    best = max((c.fitness for c in cands if c.status == "valid" and c.fitness is not None), default=None)
    return (f"{arm} {len(cands)} candidates, {sum(c.seconds for c in cands):.0f}/{budget_seconds:g} worker-s, "
            f"best {fmt_opt(best)}")


def fmt_opt(v: float | None) -> str:
    return "-" if v is None else f"{v:.4f}"
