"""Keep a long experiment's run folders in git across machines.

`runs/` is not in git, and a session may end on one machine and the next start on a fresh one:
a queue of experiments that spans sessions would then train again what an earlier session had
finished. Before a session ends, `save` packs the queue's run folders into results/kept/; the
queue's first step, `restore`, unpacks those whose folder is missing.

    python -m experiments.keep_runs save runs/prescreen_prior runs/prescreen   # then commit
    python -m experiments.keep_runs restore

`save` writes results/kept/<folder's path, `/` as `+`>.tar.gz for each folder: every SQLite
store copied through SQLite's backup (a consistent snapshot, also of a search still running: resuming it is resuming a
killed search, which repeats only its unfinished candidates), every other file as it is, but run
locks and training checkpoints (`*.pt`, `ckpt/`). `restore` unpacks an archive only where its
folder is absent (a folder present is this machine's own, newer work), through tarfile's `data`
filter (no links out of the folder, no special files).
"""

from __future__ import annotations

import argparse
import sqlite3
import tarfile
import tempfile
from pathlib import Path

from experiments._common import RESULTS, ROOT, HelpFormatter, log, refuse

KEPT = RESULTS / "kept"
SKIP_NAMES = {"lock"}
SKIP_SUFFIXES = {".pt", ".tmp", ".sqlite-wal", ".sqlite-shm", ".lock"}


def _kept(path: Path, folder: Path) -> bool:
    """Whether a file of `folder` goes into its archive (a `ckpt/` above the folder does not count)."""
    return (path.name not in SKIP_NAMES and path.suffix not in SKIP_SUFFIXES
            and "ckpt" not in path.relative_to(folder).parts)


def save(folder: Path, root: Path = ROOT, kept: Path = KEPT) -> Path:
    """Pack `folder` (under `root`) into an archive of kept/; written whole or not at all."""
    folder = folder.resolve()
    if not folder.is_dir():
        raise ValueError(f"{folder} is not a folder")
    try:
        rel = folder.relative_to(root.resolve()).as_posix()
    except ValueError:
        raise ValueError(f"{folder} is not inside {root}") from None
    kept.mkdir(parents=True, exist_ok=True)
    out = kept / f"{rel.replace('/', '+')}.tar.gz"
    tmp = out.with_suffix(".tmp")
    try:
        with tarfile.open(tmp, "w:gz") as tar, tempfile.TemporaryDirectory() as scratch:
            tar.add(folder, arcname=rel, recursive=False)  # first: the folder the archive restores
            for path in sorted(p for p in folder.rglob("*") if p.is_file() and _kept(p, folder)):
                name = path.relative_to(folder).as_posix()
                if path.suffix == ".sqlite":
                    copy = Path(scratch) / "copy.sqlite"
                    copy.unlink(missing_ok=True)
                    src = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
                    dst = sqlite3.connect(copy)
                    with dst:
                        src.backup(dst)
                    src.close()
                    dst.close()
                    path = copy
                tar.add(path, arcname=f"{rel}/{name}")
    except BaseException:
        tmp.unlink(missing_ok=True)  # no half-written archive beside the last whole one
        raise
    tmp.replace(out)
    return out


def restore(root: Path = ROOT, kept: Path = KEPT) -> list[Path]:
    """Unpack each archive of kept/ whose folder is absent under `root`; the folders unpacked."""
    done = []
    for archive in sorted(kept.glob("*.tar.gz")):
        with tarfile.open(archive) as tar:
            members = tar.getmembers()
            rel = members[0].name if members and members[0].isdir() else None
            if rel is None or Path(rel).is_absolute() or any(".." in Path(m.name).parts or not (
                    m.name == rel or m.name.startswith(rel + "/")) for m in members):
                raise ValueError(f"{archive} is not an archive of one run folder")
            folder = root / rel
            if folder.exists():
                continue
            folder.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=folder.parent) as scratch:  # whole or nothing
                tar.extractall(scratch, members=members, filter="data")
                (Path(scratch) / rel).rename(folder)
            done.append(folder)
    return done


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=HelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("save", help="pack run folders into results/kept/")
    s.add_argument("folders", nargs="+", type=Path,
                   help="run folders to pack, each into results/kept/runs+NAME.tar.gz")
    sub.add_parser("restore", help="unpack the kept run folders this machine lacks")
    args = p.parse_args(argv)
    try:
        if args.command == "save":
            for folder in args.folders:
                out = save(folder)
                log(f"kept {folder} in {out.relative_to(ROOT)} ({out.stat().st_size / 1e6:.1f} MB)")
        else:
            for folder in restore():
                log(f"restored {folder.relative_to(ROOT)}")
    except (ValueError, tarfile.TarError, sqlite3.Error) as err:
        refuse("keep_runs", str(err))


if __name__ == "__main__":
    main()
