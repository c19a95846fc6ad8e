"""What the commands share: argument bounds that say why, the run lock, store and output-folder checks,
the executor check, and the closing summary of `search` / `resume`.

Each check turns a bad input into a one-line CommandError (exit 2) before anything is written.

The data and models modules are imported in the checks that use them: they load torch, which
`--help` does not need.
"""

from __future__ import annotations

import os
import sqlite3
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from evonorm.cli import CommandError
from evonorm.files import DamagedFile, UnsafePath, check_folder
from evonorm.report.text import summary_table
from evonorm.search import store
from evonorm.search.lock import RunLock, RunLocked

LOCAL_WORKERS_PER_CORE = 4
MAX_RAY_WORKERS = 256


def check_workers(cfg) -> None:
    """Bound the worker count: past it a search only thrashes (or waits on slots it never fills)."""
    ex = cfg.execution
    if ex.executor == "local":
        cores = os.cpu_count() or 1
        limit = LOCAL_WORKERS_PER_CORE * cores
        if ex.workers > limit:
            raise CommandError(
                f"--workers {ex.workers} is more than {limit} ({LOCAL_WORKERS_PER_CORE} per core on "
                f"{cores} cores): each local worker is a process training models, so more only "
                "thrashes memory and CPU; use --executor ray for a cluster")
    elif ex.workers > MAX_RAY_WORKERS:
        raise CommandError(
            f"--workers {ex.workers} is more than {MAX_RAY_WORKERS}: that many candidates in flight "
            "are proposed before their results can steer the evolution")


def check_device(device: str | None) -> str | None:
    """The --device to use (None when not given): a device torch knows, CUDA only where there is
    one, `auto` resolved to cuda where CUDA is available, else cpu. Resolved once, before any work
    starts, so a run stores the device it really used."""
    if device is None:
        return None
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError):
        raise CommandError(f"unknown --device {device!r} (cpu, cuda or auto)") from None
    if dev.type not in ("cpu", "cuda"):
        raise CommandError(f"--device {device!r} is not supported (cpu, cuda or auto)")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise CommandError(f"--device {device}: no CUDA device is available here")
    return device


def check_writable(path: Path) -> None:
    """`path` can be created: its nearest existing ancestor is a folder we may write in, and the
    path itself is not a folder. Checked before long work, so it does not end in a traceback."""
    try:
        if path.is_dir():
            raise CommandError(f"{path} is a folder, expected a file name")
        parent = path.parent
        while not parent.exists():
            parent = parent.parent
    except OSError as err:
        raise CommandError(f"cannot write {path}: {err.strerror or err}") from None
    if not parent.is_dir():
        raise CommandError(f"cannot write {path}: {parent} is not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise CommandError(f"cannot write {path}: {parent} is read-only")


@contextmanager
def run_lock(run: Path) -> Iterator[None]:
    """Hold the run folder's lock (search, resume, rerank): a second driver exits 2 naming the
    holder; a lock left by a killed process is taken over."""

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


def check_run(run: Path) -> None:
    """`run` names an existing run folder or store file holding an intact store (read-only)."""
    try:
        exists = run.exists()
    except OSError:  # e.g. a name too long for the file system
        exists = False
    if not exists:
        raise CommandError(f"no such run folder or store: {run}")
    require_store(run)


def require_store(run: Path) -> None:
    """The run's store must exist and be an intact store of this evonorm's schema (read-only check)."""
    try:
        path = store.resolve_path(run)
        if not path.is_file():
            raise CommandError(f"no search store in {run} (no {path.name}; start one with "
                               "`evonorm search --out`)")
        store.check_store(path)
    except OSError as err:  # e.g. a name too long for the file system
        raise CommandError(f"cannot read {run}: {err.strerror or err}") from None
    except store.StoreError as err:
        raise CommandError(str(err)) from None


def check_run_values(run: Path) -> None:
    """Every value a command that continues the run will read, checked before it writes anything (one
    line, exit 2, naming the file and the field): the store's fields, the graphs that the search parses
    again (its valid layers, the parents of new ones, and the proposals still to evaluate), the
    rerank and re-training rows and the references."""
    from evonorm.graph import Graph
    from evonorm.proxy.config import ProxyConfig
    from evonorm.measure.references import REFERENCES_FILE, read_references
    from evonorm.measure.rerank import read_reranks
    from evonorm.measure.retrain import read_rows

    folder = store.run_folder(run)
    with store.Store(run, readonly=True) as s:
        try:
            for sub in ("stages", "report"):  # folders the commands write in: never through a link
                if (folder / sub).exists() or (folder / sub).is_symlink():
                    check_folder(folder / sub)
            read_rows(run), read_reranks(run)
            read_references(folder / REFERENCES_FILE)
            s.check_values(task=ProxyConfig)
            graphs = [(f"candidate {c.id}", c.graph) for c in s.candidates() if c.status == "valid"]
            graphs += [(f"proposal {p.idx}", p.graph) for p in s.pending_proposals()]
            for where, graph in graphs:
                try:
                    Graph.from_json(graph)
                except (ValueError, TypeError, KeyError) as err:
                    raise DamagedFile(s.path, f"{where}: graph", (str(err).splitlines() or [""])[0]) from None
        except (DamagedFile, UnsafePath) as err:
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



def check_executor(cfg) -> None:
    """Refuse, in one line, an executor that cannot start (Ray not installed, stray --address)."""
    if cfg.execution.executor == "ray":
        try:
            import ray  # noqa: F401
        except ImportError:
            raise CommandError("--executor ray needs ray: pip install -e '.[ray]' in the evonorm clone") from None
    elif cfg.execution.address:
        raise CommandError("--address applies to --executor ray only")


def report_result(result, run: Path, top: int) -> None:
    """The search's closing lines: how far it got, its counts, and its top layers."""
    t = result.tally
    print(f"search {'complete' if result.complete else 'stopped'}: {result.progress()} in {run} | "
          f"{t.line()}")
    print(summary_table(run, top=top))


DATA_HELP = ("your own images: a .npz file with x (N x H x W, N x H x W x C or N x C x H x W; uint8 "
             "or float) and y (integer labels 0..K-1), optionally x_test / y_test (else a "
             "held-out fifth is the test set); the run stores its absolute path and checksum")


def dataset_arg(dataset: str | None, data: str | None) -> str | None:
    """The dataset a command was given: `--dataset NAME` or `--data FILE.npz` (as its absolute
    path), not both; the file itself is read and checked with the rest of the setup."""
    if data is None:
        return dataset
    if dataset is not None:
        raise CommandError("--data and --dataset name the data twice: give one of them")
    from evonorm.data import is_npz

    if not is_npz(data):
        raise CommandError(f"--data takes a .npz file (numpy.savez(path, x=images, y=labels)), "
                           f"got {data!r}")
    try:
        return os.path.abspath(data)
    except (OSError, ValueError) as err:
        raise CommandError(f"--data {data!r}: {err}") from None


ARCH_HELP = ("architecture: a built-in name (evonorm list archs; default resnet50_cifar), timm:NAME "
             "(a timm model, the layer at every BatchNorm-activation pair), or MODULE:FUNCTION (your "
             "builder fn(norm_act, num_classes, in_chans) -> nn.Module, where norm_act(num_features) "
             "builds the layer; MODULE is imported from the working directory or the installed "
             "packages); width applies to the built-in ones only")


ARCHS_HELP = ("comma-separated architectures, each a built-in name (evonorm list archs), timm:NAME "
              "or MODULE:FUNCTION (your builder fn(norm_act, num_classes, in_chans)); default: the "
              "preset's")


def check_archs(archs) -> None:
    """Each architecture a command was given is a built-in name, or an external one whose code
    imports and fits (`evonorm.models.check_arch`): one line, exit 2, before any work."""
    from evonorm.models import check_arch, check_arch_name, is_builtin

    for arch in archs:
        try:
            check_arch_name(arch)
            if not is_builtin(arch):
                check_arch(arch)
        except ValueError as err:
            raise CommandError(str(err).splitlines()[0]) from None


def probe_archs(task, ds) -> None:
    """Build each external architecture of the run's task once and run it on a training batch of
    `ds`, as a candidate will be trained (ValueError in one line: `evonorm.models.probe_arch`)."""
    from evonorm.models import is_builtin, probe_arch

    for arch, tcfg in task.training.items():
        if not is_builtin(arch):
            probe_arch(arch, num_classes=ds.num_classes, in_chans=ds.channels, batch=probe_batch(ds, tcfg),
                       **tcfg.layer_kwargs())


def probe_batch(ds, tcfg):
    """Two training images of `ds` cropped and normalized as the trainer feeds them (`tcfg`'s crop)."""
    from evonorm.data import train_batches

    x, _ = next(train_batches(ds, 2, 1, seed=tcfg.seed, crop=tcfg.crop))
    return x


def check_run_archs(run, archs, given) -> list[str]:
    """The run's MODULE:FUNCTION architectures named again with --arch (comma-separated or
    repeated), each given one checked (`evonorm.models.check_named_again`); returns them."""
    from evonorm.models import check_named_again

    given = [a.strip() for g in (given or []) for a in g.split(",") if a.strip()]
    try:
        check_named_again(run, archs, given)
    except ValueError as err:
        raise CommandError(str(err)) from None
    check_archs(given)
    return given

RUN_ARCH_HELP = ("the run's MODULE:FUNCTION architecture(s), named again (comma-separated or "
                 "repeated): code named in a run folder is never imported otherwise")
