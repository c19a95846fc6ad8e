"""Shared bits of the experiment scripts: output folder, tables as CSV/Markdown/JSON, figures.

Each experiment writes `results/<name>/<name>.{csv,md,json,png}`; the JSON also records the
command line and settings, so every number in docs/ can be traced to the run that made it.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator, NoReturn, Sequence

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"


def out_dir(name: str, override: str | None = None) -> Path:
    d = Path(override) if override else RESULTS / name
    d.mkdir(parents=True, exist_ok=True)
    return d


def fmt(v: Any) -> str:
    if isinstance(v, float):
        if not math.isfinite(v):
            return str(v)
        return f"{v:.3g}" if (abs(v) < 1e-3 and v != 0) or abs(v) >= 1e4 else f"{v:.4f}"
    return "" if v is None else str(v)


def write_table(d: Path, name: str, rows: Sequence[dict], meta: dict, *, columns: Sequence[str] | None = None) -> None:
    """rows -> name.csv (all digits), name.md (rounded) and name.json (rows + meta)."""
    cols = list(columns or (rows[0].keys() if rows else []))
    with open(d / f"{name}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(fmt(r.get(c)) for c in cols) + " |" for r in rows]
    (d / f"{name}.md").write_text("\n".join(lines) + "\n")
    meta = {"command": command_line(),
            "finished": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
            "python": platform.python_version(), "cpus": os.cpu_count(), **meta}
    path = d / f"{name}.json"
    table = json.loads(json.dumps({"meta": meta, "rows": rows}, default=str))
    try:
        old = json.loads(path.read_text())
        if _unstamped(old) == _unstamped(table):  # summarized again, nothing new: keep when it was
            table["meta"]["finished"] = old["meta"]["finished"]
    except (OSError, ValueError, TypeError, KeyError):
        pass
    path.write_text(json.dumps(table, indent=1) + "\n")


def command_line(argv: Sequence[str] | None = None) -> str:
    """The command that runs this script with `argv` (default: this process's), as a reader would
    type it again from the checkout: `python -m experiments.NAME ...`."""
    name = Path(sys.argv[0]).stem
    return " ".join(["python", "-m", f"experiments.{name}",
                     *(sys.argv[1:] if argv is None else argv)])


def _unstamped(table: dict) -> dict:
    return {**table, "meta": {k: v for k, v in table["meta"].items() if k != "finished"}}


SEARCH_FLAGS = ("train_runs", "final_train_runs", "data_seed", "threads", "prescreen")


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """The experiments' help: the description (a protocol) as written, and each flag's default
    after its help wherever the help does not state one."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if ("default" in text or not action.option_strings or action.required
                or action.default is None or action.default is False
                or action.default is argparse.SUPPRESS):
            return text
        default = action.default
        if isinstance(default, Path):  # as a reader types it from the checkout
            default = default.relative_to(ROOT) if default.is_relative_to(ROOT) else default
        elif isinstance(default, (list, tuple)):
            default = " ".join(map(str, default))
        return f"{text} (default: {str(default).replace('%', '%%')})"


def data_seed_arg(text: str) -> int | str:
    """--data-seed: a seed, or `seed` for the split of each search's own seed."""
    if text == "seed":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer or 'seed', got {text!r}") from None


def add_search_flags(p: argparse.ArgumentParser) -> None:
    """The search settings the experiments vary, as typed flags (keywords of
    `evonorm.proxy.presets.get_preset`; not given: the preset's)."""
    g = p.add_argument_group("search settings (default: the preset's)")
    g.add_argument("--train-runs", type=int, metavar="N", help="training runs per architecture")
    g.add_argument("--final-train-runs", type=int, metavar="N",
                   help="training runs per architecture at the last stage")
    g.add_argument("--data-seed", type=data_seed_arg, metavar="N|seed",
                   help="the seed of the data split; `seed`: each search on its own seed's split, "
                        "as `demo` did before it fixed every search's split at 0")
    g.add_argument("--threads", type=int, metavar="N", help="torch threads per worker")
    g.add_argument("--prescreen", action="store_true", default=None,
                   help="rank children with the surrogate before training them")


def search_settings(args: argparse.Namespace, seed: int | None = None) -> dict[str, Any]:
    """The search settings given as flags, by keyword; for the search at `seed`, a data seed
    `seed` becomes that seed."""
    given = {k: getattr(args, k, None) for k in SEARCH_FLAGS if getattr(args, k, None) is not None}
    if seed is not None and given.get("data_seed") == "seed":
        given["data_seed"] = seed
    return given


def call(job: dict) -> Any:
    """A task of `map_jobs` in a worker: `job["fn"](*job["args"])`."""
    return job["fn"](*job["args"])


def map_jobs(fn: Callable[..., Any], jobs: Sequence[tuple], workers: int, *,
             threads: int = 1) -> Iterator[Any]:
    """`fn(*job)` for each job, results as they finish: in this process for one worker, else in
    the package's local executor (spawned workers of `threads` torch threads; one that dies is
    replaced, and its job reported); RuntimeError naming the first job that did not finish."""
    if workers <= 1:
        for job in jobs:
            yield fn(*job)
        return
    if not jobs:
        return
    from evonorm.search.executors import OK, make_executor, run_tasks

    payloads = {i: {"fn": fn, "args": tuple(job)} for i, job in enumerate(jobs)}
    with make_executor("local", call, min(workers, len(jobs)), timeout=math.inf,
                       threads=threads) as pool:
        for arrived in run_tasks(pool, payloads):
            for o in arrived:
                if o.kind != OK:
                    raise RuntimeError(f"{fn.__name__} job {o.task_id} {o.kind}: {o.error}")
                yield o.result


def save_png(fig: Any, path: Path) -> None:
    from evonorm.report.figures import png_bytes

    path.write_bytes(png_bytes(fig))


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def refuse(script: str, problem: str) -> NoReturn:
    """Bad input: one line on stderr naming the problem, then exit 2 (no traceback)."""
    print(f"{script}: {problem}", file=sys.stderr)
    sys.exit(2)
