"""Reranking (paper Sec. 5.2): retrain the search's top layers in a larger setting and rank them by
mean accuracy over the architectures, on data that played no part in choosing them.

Data: the layers are trained on the dataset's training split minus the images the search scored
its candidates on (`search_dataset`'s held-out part), and scored on the dataset's official test
split, which the search never sees. The setting must be larger than the search's (more steps, more
training images, no narrower a model): a smaller one is refused unless the caller allows it.
Each layer is one job of the ledger (`evonorm.measure.ledger`) on the search's kind of executor
and workers: its row is appended to `RUN/rerank.jsonl` as it arrives (the task's record, not the
engine's store), so a rerank that is stopped or killed continues where it stopped, skipping the
layers already reranked in the same setting and split.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Sequence

from evonorm.measure.ledger import Job, Row, data_split, load_split, measure, read_ledger, run_measurement
from evonorm.proxy.config import ProxyTask, anchor_archs, stored_task, with_task_settings
from evonorm.proxy.objective import RERANK_FILE
from evonorm.proxy.training import require_builtin
from evonorm.search.candidates import top_layers
from evonorm.search.config import SearchConfig
from evonorm.search.store import Store, run_folder


def read_reranks(run: str | Path) -> list[Row]:
    """A run's rerank rows (none when it was never reranked), best fitness first, failed ones last; a
    layer reranked again in the same setting and split counts by its latest row (`read_ledger`)."""
    rows = read_ledger(run_folder(Path(run)) / RERANK_FILE)
    return sorted(rows, key=lambda r: (r.fitness is None, -(r.fitness or 0.0), r.candidate_id or 0))


def reranked_ids(run: str | Path, setting: str, split: str,
                 statuses: tuple[str, ...] = ("ok", "failed")) -> set[int]:
    """Layers with a rerank row of `statuses` in `setting` scored on `split`."""
    return {r.candidate_id for r in read_reranks(run)
            if r.setting == setting and r.split == split and r.status in statuses}


def rerank_dataset(task: ProxyTask):
    """The rerank's data of a run's task (`outside_holdout` of its whole dataset) on its device."""
    return load_split(data_split(task, unseen=True))


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
    task: ProxyTask  # the task of `cfg`, as the rerank trains it
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
    task = ProxyTask.of_run(cfg)
    # the driver only counts images; workers train
    sizes = replace(data_split(task), device="cpu")
    searched, data = load_split(sizes), load_split(replace(sizes, unseen=True))
    search, rerank, test, work = {}, {}, [], 1.0
    for arch in task.archs:
        s, r = task.training[arch], task.rerank_training[arch]
        search[arch] = Setting(s.steps, s.batch_size, _images(s.n_train, len(searched.train_y)),
                               s.resolved_width())
        rerank[arch] = Setting(r.steps, r.batch_size, _images(r.n_train, len(data.train_y)),
                               r.resolved_width())
        test.append(_images(r.n_test, len(data.test_y)))
        work = max(work, (r.steps * r.batch_size) / (s.steps * s.batch_size))
    # a layer's rerank trains longer than a search candidate: its timeout grows with the work
    plan = RerankPlan(cfg, task, search, rerank, len(data.train_y), tuple(test), len(data.test_y),
                      timeout if timeout is not None else cfg.execution.timeout * work)
    problems = plan.smaller()
    if problems and not allow_smaller:
        raise ValueError(f"the rerank setting is not larger than the search's: "
                         f"{'; '.join(problems)} (--allow-smaller to rerank anyway)")
    return plan


def rerank(run_dir: str | Path, *, top: int | None = None, preset: str | None = None,
           overrides: dict | None = None, device: str | None = None, workers: int | None = None,
           timeout: float | None = None, allow_smaller: bool = False,
           fn: Callable[[dict], dict] | None = None, log: Callable[[str], None] | None = None,
           every: float = 60.0, data: str | None = None,
           user_archs: Sequence[str] = ()) -> list[Row]:
    """Rerank a run's top layers (see `prepare` for the setting); returns its rows in this
    setting and split, best first. `fn` stands in for the ledger's `train_job` (tests; picklable
    by name). A run's MODULE:FUNCTION architectures are built only when named again in
    `user_archs`. Logs the settings, then a line per finished layer and a status line every
    `every` seconds."""
    from evonorm.models import check_named_again

    log = log or (lambda s: print(s, file=sys.stderr, flush=True))
    with Store(run_dir, readonly=True) as store:  # the search's part: read, then left alone
        stored, candidates = store.search_config(), store.candidates()
    check_named_again(run_dir, anchor_archs(stored), user_archs)
    plan = prepare(stored, preset=preset, overrides=overrides, device=device, workers=workers,
                   timeout=timeout, allow_smaller=allow_smaller, data=data)
    chosen = [row.best for row in top_layers(candidates, top or plan.task.settings.rerank_top)]
    if not chosen:
        log("rerank: no valid candidate to rerank")
        return []
    for line in plan.describe():
        log(line)
    log(f"rerank: top {len(chosen)} layer(s)")
    jobs = [Job(f"id {c.id}", "found", plan.cfg.seed, c.graph, c.id, c.fitness) for c in chosen]
    m = run_measurement("rerank", plan.task, plan.cfg.execution, plan.split, rerank=True,
                        timeout=plan.timeout)
    rows = measure(run_folder(Path(run_dir)) / RERANK_FILE, jobs, m, log=log, fn=fn, every=every)
    return sorted(rows, key=lambda r: (r.fitness is None, -(r.fitness or 0.0), r.candidate_id or 0))
