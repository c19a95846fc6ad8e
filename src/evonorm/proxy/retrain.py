"""Multi-seed re-training: the evidence behind a run's first sentence.

The top distinct found layers, the reference layers of the run's space and the run's seed layers
are trained again with several fresh training seeds, each with the run's own data split and
full-training setting (the evaluator's `train_config` and the trainer's `train`, as the search and
`references.py` do). Each finished (layer, seed) is one JSON line appended to `RUN/retrain.jsonl`,
so a later report reads them without training again and an interrupted re-training resumes.

The trainer and models are imported where layers train: they load torch.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable, Sequence

from evonorm.files import append_line, key_text, number_problem, read_jsonl
from evonorm.proxy.config import ProxyTask, stored_task
from evonorm.search.candidates import same_layer_keys, top_layers
from evonorm.proxy.training import require_builtin, search_dataset
from evonorm.proxy.references import REFERENCES_BY_SPACE
from evonorm.search.store import Store, run_folder

RETRAIN_FILE = "retrain.jsonl"
SEED_OFFSET = 1000  # training seeds cfg.seed + 1000 + i: fresh, not the search's own seed


@dataclass(frozen=True)
class RetrainRow:
    """One layer trained with one seed: `kind` is "found", "reference" or "seed"; `layer` is a
    registry name (references) or "id N" (a candidate of the run); `fitness` is None on failure."""

    layer: str
    kind: str
    seed: int
    accuracies: dict[str, float | None]
    fitness: float | None
    candidate_id: int | None = None
    graph: Any = None
    seconds: float = 0.0
    reason: str | None = None  # why it failed

    def problem(self) -> str | None:
        """What in the row cannot be true (None: nothing): an accuracy or fitness outside [0, 1] or not
        finite, a negative seed or time."""
        checks = [(f"accuracies: {a}", number_problem(v, 0.0, 1.0)) for a, v in self.accuracies.items()]
        checks += [("fitness", number_problem(self.fitness, 0.0, 1.0)), ("seed", number_problem(self.seed, 0)),
                   ("seconds", number_problem(self.seconds, 0.0))]
        return next((f"{key_text(name)}: {p}" for name, p in checks if p), None)


def read_rows(run: str | Path) -> list[RetrainRow]:
    """The finished (layer, seed) rows of a run (none when it was never re-trained)."""
    return load_rows(run_folder(Path(run)) / RETRAIN_FILE)


def load_rows(path: Path) -> list[RetrainRow]:
    """The rows of one re-training file (none when it does not exist), each checked: a line cut short by a
    crash is skipped (its run trains again), as is one whose values cannot be true (with a warning), any
    other damaged row is a DamagedFile naming it, so that a row that cannot be used is never counted as
    done."""
    return read_jsonl(path, RetrainRow, RetrainRow.problem)


def pending(path: Path, label: str, seeds: Sequence[int]) -> list[int]:
    """The training seeds of layer `label` that have no row in the re-training file `path` yet."""
    done = {r.seed for r in load_rows(path) if r.layer == label}
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


def retrain(run: str | Path, *, top: int = 3, seeds: int = 3,
            log: Callable[[str], None] | None = None,
            user_archs: Sequence[str] = ()) -> list[RetrainRow]:
    """Train every planned layer with `seeds` training seeds on each architecture of the run,
    appending a line per finished (layer, seed); rows already in the file are not trained again.
    A run's MODULE:FUNCTION architectures are built only when named again in `user_archs`."""
    from evonorm.models import check_named_again

    if top < 0 or seeds < 1:
        raise ValueError(f"re-training needs top >= 0 and seeds >= 1, got {top} and {seeds}")
    cfg, layers = retrain_plan(run, top)
    require_builtin(cfg, "re-training")
    task = stored_task(cfg)
    check_named_again(run, task.archs, user_archs)
    path = run_folder(Path(run)) / RETRAIN_FILE
    return train_layers(cfg, layers, [cfg.seed + SEED_OFFSET + i for i in range(seeds)], path, log)


def train_layers(cfg, layers: Sequence[tuple[str, str, Any, int | None]], seeds: Sequence[int], path: Path,
                 log: Callable[[str], None] | None = None, *, rerank: bool = False) -> list[RetrainRow]:
    """Train each (label, kind, graph or name, candidate id) layer with each training seed on every
    architecture of `cfg`, with its data split and full-training setting, appending a line per finished
    (layer, seed) to `path`; pairs already there are not trained again, so an interrupted run resumes.
    With `rerank`, the setting and data are the rerank's instead (the task's `rerank_training`, trained on
    the dataset's training split less the search's held-out images, scored on its test split).
    Logs one line per finished pair with the count done, so it shows progress anywhere."""
    task = ProxyTask.of_run(cfg)
    from evonorm.proxy.rerank import rerank_dataset
    from evonorm.train import train

    log = log or (lambda s: print(s, file=sys.stderr, flush=True))
    todo = [(lay, seed) for lay in layers for seed in pending(path, lay[0], seeds)]
    if not todo:
        return load_rows(path)
    data = rerank_dataset(task) if rerank else search_dataset(task)
    setting = task.rerank_training if rerank else task.training
    start_all = time.perf_counter()
    for n, ((label, kind, spec, cid), seed) in enumerate(todo, 1):
        start = time.perf_counter()
        accs: dict[str, float | None] = {}
        reason = None
        for arch in task.archs:
            try:
                res = train(spec, data, replace(setting[arch], seed=seed))
            except Exception as err:  # recorded; the other layers and seeds still train
                accs[arch], reason = None, reason or f"error: {type(err).__name__}: {err}"[:300]
                continue
            ok = res.status == "ok" and res.accuracy is not None
            accs[arch] = float(res.accuracy) if ok else None
            reason = reason or (None if ok else f"nonfinite:{arch}@{res.failed_step}")
        fitness = None if reason else sum(accs.values()) / len(accs)  # type: ignore[arg-type]
        row = RetrainRow(label, kind, seed, accs, fitness, cid, spec if cid is not None else None,
                         round(time.perf_counter() - start, 2), reason)
        append_line(path, json.dumps(asdict(row)))  # one whole line per (layer, seed): a crash loses at most this one
        elapsed = time.perf_counter() - start_all
        eta = elapsed / n * (len(todo) - n)
        log(f"retrain [{n}/{len(todo)}] {kind} {label} seed {seed}: "
            + (f"fitness {fitness:.4f}" if fitness is not None else f"failed ({reason})")
            + f" ({row.seconds:.1f}s, ETA {eta:.0f}s)")
    return load_rows(path)
