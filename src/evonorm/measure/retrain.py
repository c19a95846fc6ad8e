"""Multi-seed re-training: the evidence behind a run's first sentence.

The top distinct found layers, the reference layers of the run's space and the run's seed layers
are trained again with several fresh training seeds, each with the run's own data split and
full-training setting (the evaluator's `train_config`, as the search and `references.py` do), on
the run's executor. Each finished (layer, seed) is one row of the ledger `RUN/retrain.jsonl`, so a
later report reads them without training again and an interrupted re-training resumes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

from evonorm.measure.ledger import Job, Measurement, Row, measure, read_ledger, run_measurement
from evonorm.measure.references import REFERENCES_BY_SPACE
from evonorm.proxy.config import ProxyTask
from evonorm.proxy.objective import RETRAIN_FILE
from evonorm.proxy.training import require_builtin
from evonorm.search.candidates import same_layer_keys, top_layers
from evonorm.search.config import SearchConfig
from evonorm.search.store import Store, run_folder

SEED_OFFSET = 1000  # training seeds cfg.seed + 1000 + i: fresh, not the search's own seed


def read_rows(run: str | Path) -> list[Row]:
    """The finished (layer, seed) rows of a run (none when it was never re-trained)."""
    return read_ledger(run_folder(Path(run)) / RETRAIN_FILE)


def pending(path: Path, label: str, seeds: Sequence[int]) -> list[int]:
    """The training seeds of layer `label` that have no row in the ledger `path` yet."""
    done = {r.seed for r in read_ledger(path) if r.layer == label}
    return [s for s in seeds if s not in done]


def retrain_plan(run: str | Path, top: int) -> tuple[Any, list[tuple[str, str, Any, int | None]]]:
    """The run's config and the layers to re-train: (label, kind, graph or name, candidate id)."""
    with Store(run, readonly=True) as store:
        cfg = store.search_config()
        cands = list(store.candidates())
    keys = same_layer_keys()
    rows = top_layers(cands, None, same=keys)
    seed_layer_keys = {(i, k(c)) for c in cands if c.origin == "seed" for i, k in enumerate(keys)}

    def is_seed_layer(c) -> bool:  # a found layer that is a seed layer (see keys) is that one
        return c.origin == "seed" or any((i, k(c)) in seed_layer_keys for i, k in enumerate(keys)
                                         if k(c) is not None)

    found = [r.best for r in rows if not is_seed_layer(r.best)][:top]
    seed_layers = [r.best for r in rows if is_seed_layer(r.best)]
    layers = [(f"id {c.id}", "found", c.graph, c.id) for c in found]
    layers += [(name, "reference", name, None)
               for name in REFERENCES_BY_SPACE.get(cfg.evolution.space, ())]
    layers += [(f"id {c.id}", "seed", c.graph, c.id) for c in seed_layers]
    return cfg, layers


def retrain(run: str | Path, *, top: int = 3, seeds: int = 3, log: Callable[[str], None] | None = None,
            user_archs: Sequence[str] = (), fn: Callable[[dict], dict] | None = None) -> list[Row]:
    """Train every planned layer with `seeds` training seeds on each architecture of the run,
    appending a row per finished (layer, seed); rows already in the ledger are not trained again.
    A run's MODULE:FUNCTION architectures are built only when named again in `user_archs`. `fn`
    stands in for the ledger's `train_job` (tests; importable by name)."""
    from evonorm.models import check_named_again

    if top < 0 or seeds < 1:
        raise ValueError(f"re-training needs top >= 0 and seeds >= 1, got {top} and {seeds}")
    cfg, layers = retrain_plan(run, top)
    require_builtin(cfg, "re-training")
    task = ProxyTask.of_run(cfg)
    check_named_again(run, task.archs, user_archs)
    m = run_measurement("retrain", task, cfg.execution, f"{task.settings.dataset} search split")
    return _train(run_folder(Path(run)) / RETRAIN_FILE, m, layers, [cfg.seed + SEED_OFFSET + i for i in range(seeds)],
                  log, fn)


def train_layers(cfg: SearchConfig, layers: Sequence[tuple[str, str, Any, int | None]], seeds: Sequence[int],
                 path: Path, log: Callable[[str], None] | None = None, *, rerank: bool = False,
                 fn: Callable[[dict], dict] | None = None) -> list[Row]:
    """Train each (label, kind, graph or name, candidate id) layer with each training seed on every
    architecture of `cfg`, with its data split and full-training setting, into the ledger `path`
    (pairs already there are not trained again). With `rerank`, the setting and data are the
    rerank's instead (the task's `rerank_training`, trained on the dataset's training split less the
    search's held-out images, scored on its test split)."""
    task = ProxyTask.of_run(cfg)
    split = f"{task.settings.dataset} {'test' if rerank else 'search'} split"
    m = run_measurement("retrain", task, cfg.execution, split, rerank=rerank)
    return _train(path, m, layers, seeds, log, fn)


def _train(path: Path, m: Measurement, layers: Sequence[tuple[str, str, Any, int | None]], seeds: Sequence[int],
           log: Callable[[str], None] | None, fn: Callable[[dict], dict] | None) -> list[Row]:
    """Each layer at each seed in `m`, into the ledger `path`; every row of the ledger."""
    jobs = [Job(label, kind, seed, spec, cid) for label, kind, spec, cid in layers for seed in seeds]
    measure(path, jobs, m, log=log, fn=fn)
    return read_ledger(path)
