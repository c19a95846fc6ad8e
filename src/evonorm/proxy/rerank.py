"""Reranking (paper Sec. 5.2): retrain the search's top layers in a larger setting and rank them by
mean accuracy over the architectures, on data that played no part in choosing them.

Data: the layers are trained on the dataset's training split minus the images the search scored
its candidates on (`search_dataset`'s held-out part), and scored on the dataset's official test
split, which the search never sees. The setting must be larger than the search's (more steps, more
training images, no narrower a model): a smaller one is refused unless the caller allows it.
Each layer is one task on the search's kind of executor (local pool or Ray) and workers; each
result is one JSON line appended to `RUN/rerank.jsonl` as it arrives (the task's record, not the
engine's store), so a rerank that is stopped or killed continues where it stopped, skipping the
layers already reranked in the same setting and split.

The trainer, models, data and graph modules are imported where layers are trained: they load
torch, which planning a rerank does not need.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict, dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Callable, Sequence

from evonorm.files import append_line, key_text, number_problem, read_jsonl
from evonorm.proxy.config import ProxyTask, anchor_archs, stored_task, with_task_settings
from evonorm.search.candidates import top_layers
from evonorm.search.config import SearchConfig
from evonorm.proxy.training import require_builtin, search_dataset
from evonorm.search.executors import DIED, OK, TIMEOUT, make_executor, run_tasks
from evonorm.search.store import Store, run_folder

RERANK_FILE = "rerank.jsonl"
# a worker that died or hung (after the config's retries): the row says so, and the next rerank
# trains the layer again (rows "ok" and "failed", the layer's own outcome, are final)
LOST = "lost"


@dataclass(frozen=True)
class RerankRow:
    """One layer's rerank: its scores per architecture in one training setting, on one split."""

    candidate_id: int
    setting: str  # the rerank's training setting (`TrainSetting.label`)
    split: str  # what it was scored on (`RerankPlan.split`)
    scores: dict[str, float]  # accuracy per architecture, as far as it got
    mean: float | None  # None unless status is "ok"
    status: str  # "ok", "failed" (the layer's own outcome) or LOST
    reason: str | None
    search_fitness: float | None
    seconds: float
    created_at: float

    def problem(self) -> str | None:
        """What in the row cannot be true (None: nothing): a score or mean outside [0, 1] or not finite,
        a search fitness or time that is not finite."""
        checks = [(f"scores: {a}", number_problem(v, 0.0, 1.0)) for a, v in self.scores.items()]
        checks += [("mean", number_problem(self.mean, 0.0, 1.0)), ("search_fitness", number_problem(self.search_fitness)),
                   ("seconds", number_problem(self.seconds, 0.0)), ("created_at", number_problem(self.created_at))]
        return next((f"{key_text(name)}: {p}" for name, p in checks if p), None)


def read_reranks(run: str | Path) -> list[RerankRow]:
    """A run's rerank rows (none when it was never reranked), best mean first, failed ones last; a
    layer reranked again in the same setting and split counts by its latest row. Each row is checked
    (`read_jsonl`): a damaged one is a DamagedFile naming it, one whose values cannot be true is dropped
    with a warning."""
    latest = {(r.candidate_id, r.setting, r.split): r
              for r in read_jsonl(run_folder(Path(run)) / RERANK_FILE, RerankRow, RerankRow.problem)}
    return sorted(latest.values(), key=lambda r: (r.mean is None, -(r.mean or 0.0), r.candidate_id))


def reranked_ids(run: str | Path, setting: str, split: str,
                 statuses: tuple[str, ...] = ("ok", "failed")) -> set[int]:
    """Layers with a rerank row of `statuses` in `setting` scored on `split`."""
    return {r.candidate_id for r in read_reranks(run)
            if r.setting == setting and r.split == split and r.status in statuses}


def add_rerank(run: str | Path, row: RerankRow) -> None:
    """Append one finished layer's row: one whole line, so a kill loses at most the layer training."""
    append_line(run_folder(Path(run)) / RERANK_FILE, json.dumps(asdict(row)))


@dataclass(frozen=True)
class Setting:
    """How one architecture is trained, on the search's side or the rerank's."""

    steps: int
    batch_size: int
    images: int  # training images
    width: float | None  # None: an external architecture (timm:NAME, MODULE:FUNCTION), as built

    def text(self) -> str:
        return (f"{self.steps} steps of {self.batch_size}, {self.images} training images"
                + (f", width {self.width:g}" if self.width is not None else ""))


@dataclass(frozen=True)
class RerankPlan:
    """A rerank's config (the search's, with the rerank setting, device and workers asked for),
    both settings per architecture and the data it trains and scores on."""

    cfg: SearchConfig
    task: ProxyTask  # the run's task as the rerank trains it
    search: dict[str, Setting]
    rerank: dict[str, Setting]
    available: int  # training images the rerank may use: all but the search's held-out ones
    test_images: tuple[int, ...]  # images scored per architecture
    test_split: int  # images in the dataset's test split
    timeout: float  # seconds per layer (all architectures) before its worker is killed

    @property
    def label(self) -> str:
        """The setting's name in the store (`TrainSetting.label`)."""
        return self.task.settings.rerank_training.label

    @property
    def split(self) -> str:
        """What the layers are scored on, as stored with each row."""
        n = "/".join(str(k) for k in sorted(set(self.test_images)))
        scored = "" if n == str(self.test_split) else f"{n} of "
        return f"{self.task.settings.dataset} test split ({scored}{self.test_split} images)"

    def smaller(self) -> list[str]:
        """Where the rerank setting is not larger than the search's, one phrase per shortfall.
        Equal training images pass only where the search already trained on every image the
        rerank may use (the paper presets: no image is left to add)."""
        out = []
        for arch in self.task.archs:
            s, r = self.search[arch], self.rerank[arch]
            if r.steps <= s.steps:
                out.append(f"{arch} trains {r.steps} steps, not more than the search's {s.steps}")
            if r.images < s.images or (r.images == s.images < self.available):
                out.append(f"{arch} trains on {r.images} images, not more than the search's "
                           f"{s.images}")
            if r.width is not None and s.width is not None and r.width < s.width:
                out.append(f"{arch} has width {r.width:g}, narrower than the search's {s.width:g}")
        return out

    def describe(self) -> list[str]:
        """The two settings and the data, for the rerank's first lines."""
        lines = []
        for arch in self.task.archs:
            lines += [f"  {arch}: search {self.search[arch].text()}",
                      f"  {arch}: rerank {self.rerank[arch].text()}"]
        searched = self.task.settings.training.label
        return [f"rerank setting {self.label} vs the search's {searched}:", *lines,
                f"  trained on the {self.task.settings.dataset} training images the search did "
                f"not score "
                f"on ({self.available} available); scored on the {self.split}, never seen by "
                f"the search"]


def outside_holdout(ds, n_train: int | None, holdout: float, seed: int):
    """`ds` with its training split less the images a search with these settings scores on, and
    its test split whole. The search's held-out images are the test part of
    `holdout_split(subset(ds, n_train, seed=seed), holdout, seed)`, which is what
    `search_dataset` computes (`load_dataset` takes its subset the same way)."""
    import torch

    from evonorm.data import holdout_indices, subset_indices

    chosen = subset_indices(len(ds.train_y), n_train, torch.Generator().manual_seed(seed))
    _, held = holdout_indices(len(chosen), holdout, seed)
    keep = torch.ones(len(ds.train_y), dtype=torch.bool)
    keep[chosen[held]] = False
    keep = keep.to(ds.train_x.device)
    return replace(ds, name=f"{ds.name}-rerank", train_x=ds.train_x[keep],
                   train_y=ds.train_y[keep])


def rerank_dataset(task: ProxyTask):
    """The rerank's data (`outside_holdout` of the run's whole dataset) on the task's device;
    cached per process and device, so a worker loads it once for all the layers it trains."""
    given = task.settings
    if given.dataset is None:
        raise ValueError("the search config names no dataset")
    return _load_rerank_split(given.dataset, given.data_root, given.n_train, given.holdout,
                              task.split_seed, task.device, given.data_sha256)


@lru_cache(maxsize=2)
def _load_rerank_split(name: str, root: str | None, n_train: int | None, holdout: float,
                       seed: int, device: str, sha256: str | None = None):
    from evonorm.data import load_dataset, to_device

    full = load_dataset(name, root, seed=seed, sha256=sha256)
    return to_device(outside_holdout(full, n_train, holdout, seed), device)


def _images(n_train: int | None, have: int) -> int:
    """Training images a run uses: the trainer's seeded subset of `n_train`, or all it has."""
    return have if n_train is None else min(n_train, have)


def prepare(cfg: SearchConfig, *, preset: str | None = None, overrides: dict | None = None,
            device: str | None = None, workers: int | None = None, timeout: float | None = None,
            allow_smaller: bool = False, data: str | None = None) -> RerankPlan:
    """The rerank of a search run (its stored `cfg`) in the setting asked for: the search's
    rerank setting, or `preset` with `overrides`; on `device` with `workers` (default: the
    search's); `data`: the run's .npz file at a new place (the same file: its sha256 is checked).
    ValueError, before anything is trained or written, if the setting cannot train or is not
    larger than the search's (unless `allow_smaller`), or if the run was searched on an objective
    of one's own: the rerank retrains on the built-in proxy task's architectures and data, which
    such a run never used."""
    require_builtin(cfg, "a rerank")
    task = stored_task(cfg)
    if data is not None:
        if task.data_sha256 is None:
            raise ValueError(f"--data gives a moved data file, and this run trained on "
                             f"{task.dataset}, not a file of its own")
        cfg = with_task_settings(cfg, dataset=os.path.abspath(data))
    if preset is not None:
        cfg = with_task_settings(cfg, rerank_preset=preset, rerank_train=dict(overrides or {}))
    elif overrides:
        cfg = with_task_settings(cfg, rerank_train={**task.rerank_train, **overrides})
    changes = {k: v for k, v in dict(device=device, workers=workers).items() if v is not None}
    cfg = cfg.replace(execution=cfg.execution.replace(**changes))
    resolved = ProxyTask.of_run(cfg)
    # the driver only counts images; workers train
    sizes = replace(resolved, device="cpu")
    searched, data = search_dataset(sizes), rerank_dataset(sizes)
    search, rerank, test, work = {}, {}, [], 1.0
    for arch in resolved.archs:
        s, r = resolved.training[arch], resolved.rerank_training[arch]
        search[arch] = Setting(s.steps, s.batch_size, _images(s.n_train, len(searched.train_y)),
                               s.resolved_width())
        rerank[arch] = Setting(r.steps, r.batch_size, _images(r.n_train, len(data.train_y)),
                               r.resolved_width())
        test.append(_images(r.n_test, len(data.test_y)))
        work = max(work, (r.steps * r.batch_size) / (s.steps * s.batch_size))
    # a layer's rerank trains longer than a search candidate: its timeout grows with the work
    plan = RerankPlan(cfg, resolved, search, rerank, len(data.train_y), tuple(test), len(data.test_y),
                      timeout if timeout is not None else cfg.execution.timeout * work)
    problems = plan.smaller()
    if problems and not allow_smaller:
        raise ValueError(f"the rerank setting is not larger than the search's: "
                         f"{'; '.join(problems)} (--allow-smaller to rerank anyway)")
    return plan


def train_layer(payload: dict) -> dict:
    """Retrain one layer on every architecture in the rerank setting (runs in a worker; must be
    importable by name). payload: {"graph": graph JSON, "config": the plan's config dict, and
    "data_dir" on a remote Ray worker}.
    Returns {"status", "reason", "scores"}: "failed" with the reason at the first
    architecture where the loss goes non-finite or the layer raises."""
    from evonorm.graph import Graph
    from evonorm.train import train

    cfg = SearchConfig.from_dict(payload["config"])
    if payload.get("data_dir"):  # the data folder as a remote Ray worker received it
        cfg = with_task_settings(cfg, data_root=payload["data_dir"])
    task = ProxyTask.of_run(cfg)
    data = rerank_dataset(task)  # outside the try: missing data is the run's problem
    accs: dict[str, float] = {}
    for arch in task.archs:
        try:
            res = train(Graph.from_json(payload["graph"]), data,
                        task.rerank_training[arch])
        except Exception as err:  # the layer's failure: recorded, the other layers go on
            return {"status": "failed", "reason": f"error: {type(err).__name__}: {err}"[:300],
                    "scores": accs}
        if res.status != "ok" or res.accuracy is None:
            return {"status": "failed", "reason": f"nonfinite:{arch}@{res.failed_step}",
                    "scores": accs}
        accs[arch] = float(res.accuracy)
    return {"status": "ok", "reason": None, "scores": accs}


def _line(done: int, total: int, cid: int, status: str, reason: str | None,
          accs: dict[str, float], seconds: float) -> str:
    """The progress line of one finished layer (printed with or without a terminal)."""
    if status == "ok":
        mean = sum(accs.values()) / len(accs)
        what = f"mean {mean:.4f} (" + ", ".join(f"{a} {v:.4f}" for a, v in accs.items()) + ")"
    else:
        what = f"{status}: {reason}"
    return f"rerank [{done}/{total}] candidate {cid}: {what} in {seconds:.0f}s"


def rerank(run_dir: str | Path, *, top: int | None = None, preset: str | None = None,
           overrides: dict | None = None, device: str | None = None, workers: int | None = None,
           timeout: float | None = None, allow_smaller: bool = False,
           fn: Callable[[dict], dict] | None = None, log: Callable[[str], None] | None = None,
           every: float = 60.0, data: str | None = None,
           user_archs: Sequence[str] = ()) -> list[RerankRow]:
    """Rerank a run's top layers (see `prepare` for the setting); returns its rows in this
    setting and split, best first. `fn` stands in for `train_layer` (tests; picklable by name).
    A run's MODULE:FUNCTION architectures are built only when named again in `user_archs`.
    Logs the settings, then a line per finished layer and a status line every `every` seconds."""
    log = log or (lambda s: print(s, file=sys.stderr, flush=True))
    from evonorm.models import check_named_again

    with Store(run_dir, readonly=True) as store:  # the search's part: read, then left alone
        stored, candidates = store.search_config(), store.candidates()
    check_named_again(run_dir, anchor_archs(stored), user_archs)
    plan = prepare(stored, preset=preset, overrides=overrides, device=device, workers=workers,
                   timeout=timeout, allow_smaller=allow_smaller, data=data)
    cfg = plan.cfg
    task = plan.task.settings
    chosen = [row.best for row in top_layers(candidates, top or task.rerank_top)]
    if not chosen:
        log("rerank: no valid candidate to rerank")
        return []
    done = reranked_ids(run_dir, plan.label, plan.split)
    todo = [c for c in chosen if c.id not in done]
    n_workers = min(cfg.execution.num_workers, len(todo)) or 1
    for line in plan.describe():
        log(line)
    log(f"rerank: top {len(chosen)} layer(s), {len(chosen) - len(todo)} reranked before, "
        f"{len(todo)} to train on {n_workers} {cfg.execution.executor} worker(s), device {cfg.execution.device}")
    finished, total = len(chosen) - len(todo), len(chosen)
    if todo:
        config = cfg.to_dict()
        by_id = {c.id: c for c in todo}
        start = last = time.perf_counter()
        with make_executor(cfg.execution.executor, fn or train_layer, n_workers, timeout=plan.timeout,
                           address=cfg.execution.address,
                           device=cfg.execution.device,
                           gpus_per_worker=cfg.execution.gpus_per_worker,
                           data_dir=task.data_root, threads=cfg.execution.threads) as pool:
            waits = run_tasks(pool, {c.id: {"graph": c.graph, "config": config} for c in todo},
                              poll=min(5.0, every), retries=cfg.execution.retries,
                              on_retry=lambda o: log(f"rerank: candidate {o.task_id}: "
                                                     f"{o.error}; retrying"))
            for arrived in waits:
                for o in arrived:
                    c = by_id[o.task_id]
                    if o.kind == OK:
                        status, reason, accs = (o.result["status"], o.result["reason"],
                                                o.result["scores"])
                    else:  # the layer raised outside training, or its worker was lost
                        status = "failed" if o.kind not in (DIED, TIMEOUT) else LOST
                        reason, accs = o.error, {}
                    mean = sum(accs.values()) / len(accs) if status == "ok" else None
                    add_rerank(run_dir, RerankRow(c.id, plan.label, plan.split, accs, mean,
                                                  status, reason, c.fitness, o.seconds,
                                                  time.time()))
                    finished += 1
                    log(_line(finished, total, c.id, status, reason, accs, o.seconds))
                    last = time.perf_counter()
                if time.perf_counter() - last >= every:
                    last = time.perf_counter()
                    log(f"rerank: {finished}/{total} done, {min(n_workers, total - finished)} "
                        f"training, {last - start:.0f}s elapsed")
    return [r for r in read_reranks(run_dir) if r.setting == plan.label and r.split == plan.split]
