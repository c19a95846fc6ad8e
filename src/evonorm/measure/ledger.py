"""The ledger every measurement after a search keeps: (layer x training seed) jobs of one setting,
trained on the search's kind of executor (local pool or Ray), each finished job one typed line
appended to a JSON-lines file as it arrives. A job whose row is there is not trained again, so a
measurement that is stopped or killed continues where it stopped; a job whose worker died or hung
is recorded as lost and trained again next time.

The worker gets what it trains exactly (each architecture's TrainConfig and the data split), not
the run's config: the task's settings are read once, where a measurement starts.
The trainer, models and data are imported where layers train: they load torch.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict, dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from evonorm.proxy.config import ProxyTask
from evonorm.files import MAX_JSON_BYTES, DamagedFile, append_line, key_text, number_problem, read_jsonl, read_text
from evonorm.search.config import Execution
from evonorm.search.executors import DIED, OK, TIMEOUT, Executor, Outcome, make_executor, run_tasks
from evonorm.search.progress import duration_text
from evonorm.train_config import TrainConfig

# the rows' format: a file of another is refused, not misread (its fields mean other things)
LEDGER_VERSION = 1
# a worker that died or hung (after the retries): the row says so, and the next call trains the
# job again (rows "ok" and "failed", the layer's own outcome, are final)
LOST = "lost"
FINAL = ("ok", "failed")


@dataclass(frozen=True)
class Row:
    """One layer trained at one training seed in one setting, scored on one split."""

    layer: str  # "id N": candidate N of the run; else a registry or panel name
    kind: str  # what the layer is to the measurement: "found", "reference", "seed"
    seed: int  # the training seed
    setting: str  # the training setting (`TrainSetting.label`)
    split: str  # what it was trained and scored on
    scores: dict[str, float | None]  # accuracy per architecture, as far as it got
    fitness: float | None  # the mean of `scores`; None unless status is "ok"
    status: str  # "ok", "failed" (the layer's own outcome) or LOST
    reason: str | None = None  # why it failed or was lost
    candidate_id: int | None = None
    graph: Any = None  # the layer's graph JSON, for a candidate of the run
    search_fitness: float | None = None  # what the search measured of it
    seconds: float = 0.0
    created_at: float = 0.0
    version: int = LEDGER_VERSION

    @property
    def key(self) -> tuple[str, int, str, str]:
        return (self.layer, self.seed, self.setting, self.split)

    def problem(self) -> str | None:
        """What in the row cannot be true (None: nothing): a score or fitness outside [0, 1] or not
        finite, a negative seed or time, a search fitness or date that is not finite."""
        checks = [(f"scores: {a}", number_problem(v, 0.0, 1.0)) for a, v in self.scores.items()]
        checks += [("fitness", number_problem(self.fitness, 0.0, 1.0)), ("seed", number_problem(self.seed, 0)),
                   ("seconds", number_problem(self.seconds, 0.0)),
                   ("search_fitness", number_problem(self.search_fitness)),
                   ("created_at", number_problem(self.created_at))]
        return next((f"{key_text(name)}: {p}" for name, p in checks if p), None)


def read_ledger(path: str | Path, row_type: type = Row) -> list:
    """The rows of a ledger file as `row_type` (none when the file does not exist), in the order
    written, a job trained again counting by its latest row. `row_type` is `Row` or another
    measurement's row dataclass with the same three parts: a `version` field, a `key` saying which
    job it records and a `problem()`. Each row is checked (`read_jsonl`): a line cut short by a kill
    is skipped (its job trains again), one whose values cannot be true is dropped with one warning,
    any other damaged row is a DamagedFile naming it, as is a file of another format version."""
    try:
        text = read_text(path, MAX_JSON_BYTES)
    except DamagedFile:
        raise
    except ValueError:  # not UTF-8: read_jsonl names it
        text = None
    first = next((line for line in (text or "").split("\n") if line.strip()), None)
    try:
        version = json.loads(first).get("version") if first else LEDGER_VERSION
    except (ValueError, AttributeError, RecursionError):
        version = LEDGER_VERSION  # a torn or damaged first line: the row check names it
    if version != LEDGER_VERSION:
        written = "no format version" if version is None else f"format version {version}"
        raise DamagedFile(path, "line 1", f"{written}, and this evonorm reads version {LEDGER_VERSION}: "
                          "move the file aside to measure again")
    latest = {r.key: r for r in read_jsonl(path, row_type, row_type.problem)}
    return list(latest.values())


@dataclass(frozen=True)
class Job:
    """One layer to train at one training seed."""

    layer: str
    kind: str
    seed: int
    spec: Any  # what trains: graph JSON or a registry name
    candidate_id: int | None = None
    search_fitness: float | None = None

    def title(self, seeds: bool) -> str:
        """How a progress line names the job: its candidate or layer, with its kind and seed where
        the measurement trains several seeds."""
        name = self.layer if self.candidate_id is None else f"candidate {self.candidate_id}"
        return f"{name} ({self.kind}) seed {self.seed}" if seeds else name


@dataclass(frozen=True)
class DataSplit:
    """The images a measurement trains and scores on, as a worker loads them: the search's split
    (its training images, scored on its held-out ones), or with `unseen` the dataset's training
    split less the search's held-out images, scored on the official test split."""

    dataset: str
    root: str | None
    n_train: int | None
    holdout: float
    seed: int
    device: str
    sha256: str | None = None
    unseen: bool = False


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
    return replace(ds, name=f"{ds.name}-rerank", train_x=ds.train_x[keep], train_y=ds.train_y[keep])


@lru_cache(maxsize=2)
def load_split(split: DataSplit):
    """The split's data on its device; cached per process, so a worker loads it once for all the
    jobs it trains."""
    from evonorm.data import holdout_split, load_dataset, to_device

    if split.unseen:
        full = load_dataset(split.dataset, split.root, seed=split.seed, sha256=split.sha256)
        return to_device(outside_holdout(full, split.n_train, split.holdout, split.seed), split.device)
    ds = load_dataset(split.dataset, split.root, n_train=split.n_train, seed=split.seed, sha256=split.sha256)
    return to_device(holdout_split(ds, frac=split.holdout, seed=split.seed), split.device)


def train_job(payload: dict) -> dict:
    """Train one layer at every architecture's TrainConfig (runs in a worker; importable by name).
    payload: {"spec": graph JSON or name, "train": [TrainConfig fields], "data": DataSplit fields,
    and "data_dir" on a remote Ray worker}. Returns {"status", "reason", "scores"}: "failed" with the
    reason at the first architecture where the loss goes non-finite or the layer raises."""
    from evonorm.train import train

    split = DataSplit(**payload["data"])
    if payload.get("data_dir"):  # the data folder as a remote Ray worker received it
        split = replace(split, root=payload["data_dir"])
    data = load_split(split)  # outside the try: missing data is the run's problem
    scores: dict[str, float | None] = {}
    for fields in payload["train"]:
        tcfg = TrainConfig(**fields)
        try:
            res = train(payload["spec"], data, tcfg)
        except Exception as err:  # the layer's failure: recorded, the other layers go on
            return {"status": "failed", "reason": f"error: {type(err).__name__}: {err}"[:300], "scores": scores}
        if res.status != "ok" or res.accuracy is None:
            return {"status": "failed", "reason": f"nonfinite:{tcfg.arch}@{res.failed_step}", "scores": scores}
        scores[tcfg.arch] = float(res.accuracy)
    return {"status": "ok", "reason": None, "scores": scores}


@dataclass(frozen=True)
class Measurement:
    """What every job of one ledger trains in and where it runs: the setting's TrainConfig per
    architecture (each job's seed set on it), the data, and the search's execution settings."""

    name: str  # what the progress lines start with: "retrain", "rerank"
    setting: str  # the setting's label, stored with each row
    split: str  # what the rows are scored on, stored with each row
    train: tuple[TrainConfig, ...]
    data: DataSplit
    execution: Execution
    timeout: float  # seconds per job (all architectures) before its worker is killed

    def payload(self, job: Job) -> dict:
        return {"spec": job.spec, "data": asdict(self.data),
                "train": [asdict(replace(t, seed=job.seed)) for t in self.train]}


def run_measurement(name: str, task: ProxyTask, execution: Execution, split: str, *,
                    rerank: bool = False, timeout: float | None = None) -> Measurement:
    """A measurement of a run's task (resolved where the measurement starts) in its search's
    training setting, or with `rerank` in its rerank setting on the rerank's data (the training
    split less the search's held-out images, scored on the test split), on the run's executor;
    `timeout` per job (default: the run's per candidate)."""
    trained = task.rerank_training if rerank else task.training
    setting = task.settings.rerank_training if rerank else task.settings.training
    return Measurement(name, setting.label, split, tuple(trained[arch] for arch in task.archs),
                       data_split(task, unseen=rerank), execution,
                       execution.timeout if timeout is None else timeout)


def data_split(task: ProxyTask, unseen: bool = False) -> DataSplit:
    """The run's data split, on the task's device."""
    given = task.settings
    if given.dataset is None:
        raise ValueError("the search config names no dataset")
    return DataSplit(given.dataset, given.data_root, given.n_train, given.holdout, task.split_seed,
                     task.device, given.data_sha256, unseen)


def unfinished(rows: Sequence[Row], m: Measurement, jobs: Sequence[Job]) -> list[Job]:
    """The jobs with no final row in `m`'s setting and split."""
    done = {r.key for r in rows if r.status in FINAL}
    return [j for j in jobs if (j.layer, j.seed, m.setting, m.split) not in done]


def add_row(path: Path, row: Any) -> None:
    """Append one row (a dataclass): one whole line, so a kill loses at most the job training."""
    append_line(path, json.dumps(asdict(row)))


def record_rows(path: Path, pool: Executor, payloads: Mapping[int, dict], row_of: Callable[[Outcome], Any],
                *, retries: int = 0, poll: float = 5.0,
                on_retry: Callable[[Outcome], None] | None = None) -> Iterator[list[tuple[Outcome, Any]]]:
    """Run `payloads` on `pool` (`run_tasks`) and append `row_of(outcome)` to the ledger `path` as
    each job's final outcome arrives, before the next is awaited; yields each wait's (outcome, row)
    pairs, [] for a wait that brought nothing (so a caller can show progress between rows). A row
    of None is not written: that job has no row and trains again on the next call."""
    for arrived in run_tasks(pool, payloads, poll=poll, retries=retries, on_retry=on_retry):
        pairs = [(o, row_of(o)) for o in arrived]
        for _, row in pairs:
            if row is not None:
                add_row(path, row)
        yield pairs


def measure(path: Path, jobs: Sequence[Job], m: Measurement, *, log: Callable[[str], None] | None = None,
            fn: Callable[[dict], dict] | None = None, every: float = 60.0) -> list[Row]:
    """Train the jobs that have no final row in `path` yet, appending a row per finished job, and
    return the file's rows of this setting and split. `fn` stands in for `train_job` (tests;
    importable by name). Logs a line per finished job, with the count and the time to go, and a
    status line every `every` seconds without one, so it shows progress in a log as on a terminal."""
    log = log or (lambda s: print(s, file=sys.stderr, flush=True))
    todo = unfinished(read_ledger(path), m, jobs)
    ex = m.execution
    if todo:
        workers = min(ex.num_workers, len(todo)) or 1
        log(f"{m.name}: {len(jobs) - len(todo)} of {len(jobs)} done before, {len(todo)} to train on "
            f"{workers} {ex.executor} worker(s), device {ex.device}")
        with make_executor(ex.executor, fn or train_job, workers, timeout=m.timeout, address=ex.address,
                           device=ex.device, gpus_per_worker=ex.gpus_per_worker, data_dir=m.data.root,
                           threads=ex.threads) as pool:
            _record(path, todo, len(jobs), m, pool, workers, log, every)
    return [r for r in read_ledger(path) if r.setting == m.setting and r.split == m.split]


def _record(path: Path, todo: list[Job], total: int, m: Measurement, pool, workers: int,
            log: Callable[[str], None], every: float) -> None:
    """Append each job's row as its outcome arrives, with a progress line counting all `total`."""
    seeds = len({j.seed for j in todo}) > 1
    payloads = {i: m.payload(job) for i, job in enumerate(todo)}
    waits = record_rows(path, pool, payloads, lambda o: _row(todo[o.task_id], m, o), poll=min(5.0, every),
                        retries=m.execution.retries,
                        on_retry=lambda o: log(f"{m.name}: {todo[o.task_id].title(seeds)}: {o.error}; retrying"))
    start = last = time.perf_counter()
    done, before = 0, total - len(todo)
    for arrived in waits:
        for o, row in arrived:
            job, done = todo[o.task_id], done + 1
            last = time.perf_counter()
            eta = (last - start) / done * (len(todo) - done)
            log(f"{m.name} [{before + done}/{total}] {job.title(seeds)}: {_outcome(row)} in "
                f"{duration_text(o.seconds)}, ETA {duration_text(eta)}")
        if time.perf_counter() - last >= every:
            last = time.perf_counter()
            log(f"{m.name}: {before + done}/{total} done, {min(workers, len(todo) - done)} training, "
                f"{duration_text(last - start)} elapsed")


def _row(job: Job, m: Measurement, o: Outcome) -> Row:
    """The row of a job's final outcome."""
    if o.kind == OK:
        status, reason, scores = o.result["status"], o.result["reason"], o.result["scores"]
    else:  # the layer raised outside training, or its worker was lost
        status, reason, scores = ("failed" if o.kind not in (DIED, TIMEOUT) else LOST), o.error, {}
    fitness = sum(scores.values()) / len(scores) if status == "ok" and scores else None
    return Row(job.layer, job.kind, job.seed, m.setting, m.split, scores, fitness, status, reason,
               job.candidate_id, job.spec if job.candidate_id is not None else None,
               job.search_fitness, round(o.seconds, 2), time.time())


def _outcome(row: Row) -> str:
    if row.status != "ok":
        return f"{row.status}: {row.reason}"
    return f"fitness {row.fitness:.4f} (" + ", ".join(f"{a} {v:.4f}" for a, v in row.scores.items()) + ")"
