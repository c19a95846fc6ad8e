"""`evonorm resume`: continue a stopped or killed search from its run folder's store."""

from __future__ import annotations

import sys
from pathlib import Path

from evonorm.cli import ArgumentParser, CommandError
from evonorm.commands._common import check_executor, report_result


def build_parser() -> ArgumentParser:
    from evonorm.search.config import EXECUTORS

    p = ArgumentParser(prog="evonorm resume", description=(
        "Continue a search from RUN/store.sqlite: finished candidates are kept, the ones in flight "
        "when it stopped are evaluated again, and the random stream continues where it was."))
    p.add_argument("run", type=Path, help="run folder of `evonorm search --out`")
    p.add_argument("--budget", type=int, default=None, help="raise the candidate budget")
    p.add_argument("--workers", type=int, default=None, help="parallel evaluations (0: per core)")
    p.add_argument("--executor", choices=EXECUTORS, default=None, help="local or ray")
    p.add_argument("--address", default=None, help="Ray cluster address")
    p.add_argument("--top", type=int, default=10, help="layers in the final table (default 10)")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    return p


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    from evonorm.search.store import Store, resolve_path

    if not resolve_path(args.run).is_file():
        raise CommandError(f"no search store in {args.run} (start one with `evonorm search --out`)")
    with Store(args.run) as store:
        try:
            cfg = store.search_config()
            changes = {k: v for k, v in dict(workers=args.workers, executor=args.executor,
                                             address=args.address, budget=args.budget).items()
                       if v is not None}
            if "budget" in changes and changes["budget"] < cfg.budget:
                raise ValueError(f"--budget cannot shrink the run's budget of {cfg.budget}")
            cfg = cfg.replace(**changes)
        except (FileNotFoundError, ValueError) as err:
            raise CommandError(str(err)) from None
        check_executor(cfg)
        done = store.num_candidates()
        if done >= cfg.budget:
            print(f"search in {args.run} is already complete ({done}/{cfg.budget} candidates); "
                  "nothing to do")
            from evonorm.report.text import summary_table
            print(summary_table(args.run, top=args.top))
            return 0
        store.set_config(cfg.to_dict())
        store.set_meta("status", "running")
        pending = len(store.pending_proposals())
    if not args.quiet:
        print(f"resume: {done}/{cfg.budget} candidates done, {pending} re-queued "
              f"(in flight when it stopped), {cfg.num_workers} {cfg.executor} worker(s)",
              file=sys.stderr)
    from evonorm.search.driver import run_search

    result = run_search(args.run, progress=not args.quiet)
    report_result(result, args.run, args.top)
    return 0
