"""`evonorm report RUN [--compare RUN2 ...] [--out DIR]`: figures and an HTML page from run stores.

Reads the stores read-only and writes nothing but its own outputs (RUN/report.html, RUN/report/),
so it may run while a search is still writing to RUN. Training anything (the multi-seed
re-training, the reference layers) is `evonorm retrain`, which takes the run lock.
"""

from __future__ import annotations

from pathlib import Path

from evonorm.cli import ArgumentParser, CommandError
from evonorm.commands._common import check_run, write_errors
from evonorm.report import write_report


def build_parser() -> ArgumentParser:
    p = ArgumentParser(
        prog="evonorm report",
        description="Write RUN/report/*.png and RUN/report.html (search progress, accuracy "
                    "histogram, cross-architecture calibration, Pareto front, outcomes, top layers) "
                    "from the run's store (and RUN/retrain.jsonl, RUN/references.json where "
                    "`evonorm retrain` wrote them). Only reads: safe while a search is running.")
    p.add_argument("run", type=Path, help="run folder (holding store.sqlite) or the store file")
    p.add_argument("--compare", type=Path, nargs="+", default=[], metavar="RUN2",
                   help="more runs to overlay on the search-progress and outcome figures")
    p.add_argument("--out", type=Path, default=None, metavar="DIR",
                   help="write report.html and report/ here instead of into RUN")
    return p


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        import matplotlib  # noqa: F401  (optional extra; fail before any work)
    except ImportError:
        raise CommandError("reports need matplotlib: pip install 'evonorm[plots]'") from None

    runs = [args.run, *args.compare]
    for r in runs:
        check_run(r)
    with write_errors("the report"):
        try:
            page = write_report(runs, args.out)
        except (FileNotFoundError, ValueError) as err:
            raise CommandError(str(err).splitlines()[0]) from None
    print(f"report: {page}")
    return 0
