"""`evonorm report RUN [--compare RUN2 ...] [--out DIR]`: figures and an HTML page from run stores.

Reads the stores read-only and writes nothing but its own outputs (RUN/report.html, RUN/report/),
so it may run while a search is still writing to RUN. Training anything (the multi-seed
re-training, the reference layers) is `evonorm retrain`, which takes the run lock.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

from evonorm.cli import ArgumentParser, CommandError
from evonorm.commands._common import check_run, write_errors
from evonorm.report import write_report
from evonorm.search.store import Store


def build_parser() -> ArgumentParser:
    p = ArgumentParser(
        prog="evonorm report",
        description="Write RUN/report/*.png and RUN/report.html (search progress, accuracy "
                    "histogram, cross-architecture calibration, Pareto front, outcomes, top layers) "
                    "from the run's store (and RUN/retrain.jsonl, RUN/references.json where "
                    "`evonorm retrain` wrote them). Only reads: safe while a search is running.")
    p.add_argument("run", type=Path, help="run folder (holding store.sqlite) or the store file")
    p.add_argument("--compare", type=Path, nargs="+", default=[], metavar="RUN2",
                   help="more runs to overlay on the search-progress and outcome figures "
                   "(default: none)")
    p.add_argument("--out", type=Path, default=None, metavar="DIR",
                   help="write report.html and report/ here instead of into RUN")
    p.add_argument("--watch", type=float, nargs="?", const=30.0, default=None, metavar="SECONDS",
                   help="a live view: rewrite the page every SECONDS (default 30) while the search "
                        "runs, the page reloading itself in the browser; ends when the run is no "
                        "longer running, or on Ctrl-C, with a last page that does not reload")
    return p


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        import matplotlib  # noqa: F401  (optional extra; fail before any work)
    except ImportError:
        raise CommandError("reports need matplotlib: pip install -e '.[plots]' in the evonorm clone") from None

    if args.watch is not None and not (math.isfinite(args.watch) and args.watch >= 1):
        raise CommandError(f"--watch takes seconds >= 1, got {args.watch:g}")
    runs = [args.run, *args.compare]
    for r in runs:
        check_run(r)
    if args.watch is None:
        print(f"report: {_write(runs, args.out)[0]}")
        return 0
    try:
        while True:
            started = time.monotonic()
            page, status = _write(runs, args.out, args.watch)
            if status != "running":
                break
            print(f"report: {page} ({time.strftime('%H:%M:%S')}, the run is {status}; next in "
                  f"{args.watch:g} s)", flush=True)
            time.sleep(max(0.0, args.watch - (time.monotonic() - started)))
    except KeyboardInterrupt:
        pass
    page, status = _write(runs, args.out)  # the last page: it no longer reloads
    print(f"report: {page} (the run is {status or 'not started'}; no longer watching)")
    return 0


def _write(runs: list[Path], out: Path | None, refresh: float | None = None) -> tuple[Path, str]:
    """The report written, and the first run's status as its store records it."""
    with write_errors("the report"):
        try:
            page = write_report(runs, out, refresh)
        except (FileNotFoundError, ValueError) as err:
            raise CommandError(next((line for line in str(err).splitlines() if line.strip()),
                                    type(err).__name__)) from None
    with Store(runs[0], readonly=True) as store:
        return page, store.get_meta("status") or ""
