"""`evonorm report RUN [--compare RUN2 ...] [--out DIR]`: figures and an HTML page from run stores.

Reads the stores read-only, so it may run while a search is still writing to RUN.
"""

from __future__ import annotations

from pathlib import Path

from evonorm.cli import ArgumentParser, CommandError
from evonorm.commands._common import RUN_ARCH_HELP


def build_parser() -> ArgumentParser:
    p = ArgumentParser(
        prog="evonorm report",
        description="Write RUN/report/*.png and RUN/report.html (search progress, accuracy "
                    "histogram, cross-architecture calibration, Pareto front, outcomes, top layers) "
                    "from the run's store. Safe while the search is still running.")
    p.add_argument("run", type=Path, help="run folder (holding store.sqlite) or the store file")
    p.add_argument("--compare", type=Path, nargs="+", default=[], metavar="RUN2",
                   help="more runs to overlay on the search-progress and outcome figures")
    p.add_argument("--out", type=Path, default=None, metavar="DIR",
                   help="write report.html and report/ here instead of into RUN")
    p.add_argument("--references", nargs="*", default=None, metavar="LAYER",
                   help="first train reference layers (default: bn_relu evonorm_b0 evonorm_s0) with "
                        "the run's own settings on each architecture, once, into RUN/references.json; "
                        "costs about as much as evaluating 3 candidates")
    p.add_argument("--seeds", type=int, default=0, metavar="N",
                   help="first re-train the top found layers, the space's reference layers and the "
                        "run's seed layers with N fresh training seeds each (N >= 2 for the test; "
                        "resumable, kept in RUN/retrain.jsonl); the page's first sentence then says "
                        "whether a found layer beats them beyond noise")
    p.add_argument("--arch", action="append", default=None, metavar="MODULE:FUNCTION",
                   help="with --references or --seeds: " + RUN_ARCH_HELP)
    p.add_argument("--retrain-top", type=int, default=3, metavar="K",
                   help="how many distinct found layers --seeds re-trains (default 3)")
    return p


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        import matplotlib  # noqa: F401  (optional extra; fail before any work)
    except ImportError:
        raise CommandError("reports need matplotlib: pip install 'evonorm[plots]'") from None
    from evonorm.report import write_report

    from evonorm.commands._common import check_store, write_errors

    if args.seeds < 0 or args.retrain_top < 0:
        raise CommandError(f"--seeds and --retrain-top must be >= 0, got {args.seeds} and {args.retrain_top}")
    runs = [args.run, *args.compare]
    for r in runs:
        try:
            exists = r.exists()
        except OSError:  # e.g. a name too long for the file system
            exists = False
        if not exists:
            raise CommandError(f"no such run folder or store: {r}")
        check_store(r)  # intact, a schema we know
    if args.references is not None or args.seeds:  # these train models of the run's archs
        from evonorm.commands._common import check_run_archs
        from evonorm.search.store import Store

        try:
            with write_errors(f"run {args.run}"), Store(args.run, readonly=True) as store:
                archs = store.search_config().archs
        except (ValueError, TypeError) as err:
            raise CommandError(str(err).splitlines()[0]) from None
        user_archs = check_run_archs(args.run, archs, args.arch)
    elif args.arch:
        raise CommandError("--arch applies with --references or --seeds (a plain report builds "
                           "no model)")
    if args.references is not None:
        from evonorm.models import resolve_norm_act
        from evonorm.search.references import DEFAULT_REFERENCES, train_references

        for name in args.references:  # all known before the first one is trained and saved
            try:
                resolve_norm_act(name)
            except (ValueError, TypeError) as err:
                raise CommandError(str(err).splitlines()[0]) from None
        with write_errors(f"references into {args.run}"):
            try:
                train_references(args.run, args.references or DEFAULT_REFERENCES,
                                 log=lambda s: print(s, flush=True), user_archs=user_archs)
            except (FileNotFoundError, ValueError) as err:
                raise CommandError(str(err).splitlines()[0]) from None
    if args.seeds:
        from evonorm.search.retrain import retrain

        with write_errors(f"re-training into {args.run}"):
            try:
                retrain(args.run, top=args.retrain_top, seeds=args.seeds,
                        log=lambda s: print(s, flush=True), user_archs=user_archs)
            except (FileNotFoundError, ValueError) as err:
                raise CommandError(str(err).splitlines()[0]) from None
    with write_errors("the report"):
        try:
            page = write_report(runs, args.out)
        except (FileNotFoundError, ValueError) as err:
            raise CommandError(str(err).splitlines()[0]) from None
    print(f"report: {page}")
    return 0
