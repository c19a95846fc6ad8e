"""Checks the commands share: argument bounds that say why, the run lock, stores and output folders.

Each turns a bad input into a one-line CommandError (exit 2) before anything is written.
"""

from __future__ import annotations

import os
import sqlite3
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from evonorm.cli import CommandError

LOCAL_WORKERS_PER_CORE = 4
MAX_RAY_WORKERS = 256


def check_workers(cfg) -> None:
    """Bound the worker count: past it a search only thrashes (or waits on slots it never fills)."""
    if cfg.executor == "local":
        cores = os.cpu_count() or 1
        limit = LOCAL_WORKERS_PER_CORE * cores
        if cfg.workers > limit:
            raise CommandError(
                f"--workers {cfg.workers} is more than {limit} ({LOCAL_WORKERS_PER_CORE} per core on "
                f"{cores} cores): each local worker is a process training models, so more only "
                "thrashes memory and CPU; use --executor ray for a cluster")
    elif cfg.workers > MAX_RAY_WORKERS:
        raise CommandError(
            f"--workers {cfg.workers} is more than {MAX_RAY_WORKERS}: that many candidates in flight "
            "are proposed before their results can steer the evolution")


def check_n_train(n_train: int | None, available: int, dataset: str) -> None:
    """An explicit --n-train must be >= 1 and no more than the dataset's training images."""
    if n_train is not None and not 1 <= n_train <= available:
        raise CommandError(f"--n-train must be in 1..{available} (the training images of "
                           f"{dataset}), got {n_train}")


@contextmanager
def run_lock(run: Path) -> Iterator[None]:
    """Hold the run folder's lock (search, resume, rerank): a second driver exits 2 naming the
    holder; a lock left by a killed process is taken over."""
    from evonorm.search.lock import RunLock, RunLocked

    lock = RunLock(run)
    try:
        lock.acquire()
    except RunLocked as err:
        raise CommandError(str(err)) from None
    except OSError as err:
        raise CommandError(f"cannot write in run folder {run}: {err.strerror or err}") from None
    try:
        yield
    finally:
        lock.release()


def check_store(run: Path) -> None:
    """The run's store must exist and be an intact store of a known schema (read-only check)."""
    from evonorm.search.store import StoreError, check_store as check, resolve_path

    path = resolve_path(run)
    if not path.is_file():
        raise CommandError(f"no search store in {run} (start one with `evonorm search --out`)")
    try:
        check(path)
    except StoreError as err:
        raise CommandError(str(err)) from None


@contextmanager
def write_errors(what: str) -> Iterator[None]:
    """Report an unwritable folder or store (read-only, full disk, not a folder) in one line."""
    try:
        yield
    except OSError as err:
        name = f" {err.filename}" if err.filename else ""
        raise CommandError(f"cannot write {what}{name}: {err.strerror or err}") from None
    except sqlite3.OperationalError as err:
        raise CommandError(f"cannot write {what}: {err}") from None
