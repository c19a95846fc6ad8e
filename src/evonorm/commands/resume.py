"""`evonorm resume`: continue a stopped or killed search from its run folder's store."""

from __future__ import annotations

import sys
from pathlib import Path

from evonorm.cli import ArgumentParser, CommandError
from evonorm.commands._common import (RUN_ARCH_HELP, check_device, check_executor, check_run_archs,
                                      check_run_values, check_workers, dataset_arg, report_result,
                                      require_store, run_lock, write_errors)
from evonorm.commands.search import load_objective_arg
from evonorm.report.text import summary_table
from evonorm.search.api import check_resume_objective, resume_run
from evonorm.search.config import EXECUTORS, with_settings
from evonorm.search.driver import stop_search, stopped_line, told_how_to_resume
from evonorm.proxy.config import ProxyTask, anchor_archs, stored_task, with_task_settings
from evonorm.proxy.objective import ProxyObjective
from evonorm.proxy.training import search_dataset
from evonorm.search.store import Store


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="evonorm resume", description=(
        "Continue a search from RUN/store.sqlite: finished candidates are kept, the ones in flight "
        "when it stopped are evaluated again, and the random stream continues where it was. With "
        "one worker the resumed search proposes exactly what an uninterrupted one would; with "
        "more, results join the population in arrival order (timing), so it may propose "
        "differently. Exits 2 if another search/resume/rerank holds RUN."))
    p.add_argument("run", type=Path, help="run folder of `evonorm search --out`")
    p.add_argument("--budget", type=int, default=None, help="raise the candidate budget to this many "
                   "(default: the run's; it cannot shrink)")
    p.add_argument("--workers", type=int, default=None, help="parallel evaluations, 0 for one per core "
                   "(default: the run's)")
    p.add_argument("--threads", type=int, default=None, help="torch threads per local worker "
                   "(default: the run's; 0: 1, see `evonorm search --help`)")
    p.add_argument("--executor", choices=EXECUTORS, default=None, help="where candidates train: local processes or "
                   "a Ray cluster (default: the run's)")
    p.add_argument("--address", default=None, help="Ray cluster address, with --executor ray "
                   "(default: the run's)")
    p.add_argument("--device", default=None, help="cpu, cuda or auto (default: the device the "
                   "run was started with, as stored)")
    p.add_argument("--data", default=None, metavar="FILE.npz", help="the run's own data file, "
                   "moved since it started (it must be the same file: its sha256 is checked)")
    p.add_argument("--arch", action="append", default=None, metavar="MODULE:FUNCTION",
                   help=RUN_ARCH_HELP)
    p.add_argument("--objective", default=None, metavar="MODULE:FUNCTION",
                   help="the objective the run was searched with (required when it used one: "
                   "the name stored in the run is never imported)")
    p.add_argument("--ship", action="append", default=None, metavar="PATH",
                   help="with --executor ray: a package folder or module file "
                   "the workers need to import the objective (default: its top-level package or "
                   "module file; repeatable)")
    p.add_argument("--show", type=int, default=10, metavar="N",
                   help="layers listed in the final table (default 10)")
    p.add_argument("--quiet", action="store_true", help="no progress output (default: a bar on a terminal, "
                   "else a line per candidate)")
    return p


def _plan(args):
    """(config with the command's changes, candidates done, proposals re-queued), read-only;
    CommandError on anything wrong with the run or the arguments."""

    require_store(args.run)
    check_run_values(args.run)
    device = check_device(args.device)
    try:
        with write_errors(f"run {args.run}"), Store(args.run, readonly=True) as store:
            cfg, done = store.search_config(), store.num_candidates()
            pending = len(store.pending_proposals())
            store.last_rng_state()  # where the search continues its random stream: checked too
        if args.budget is not None and args.budget < cfg.evolution.budget:
            raise ValueError(f"--budget cannot shrink the run's budget of {cfg.evolution.budget}")
        given = dict(budget=args.budget, workers=args.workers, threads=args.threads,
                     executor=args.executor,
                     address=args.address, device=device)
        cfg, _ = with_settings(cfg, None, {k: v for k, v in given.items() if v is not None})
        if args.data is not None:  # the same file (its sha256 is checked when it is read)
            task = stored_task(cfg)
            if task.data_sha256 is None:
                raise ValueError(f"--data gives a moved data file, and this run trained on "
                                 f"{task.dataset}, not a file of its own")
            cfg = with_task_settings(cfg, dataset=dataset_arg(None, args.data))
    except (ValueError, TypeError, FileNotFoundError) as err:
        raise CommandError(str(err).splitlines()[0]) from None
    check_run_archs(args.run, anchor_archs(cfg), args.arch)
    check_executor(cfg)
    check_workers(cfg)
    return cfg, done, pending


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)

    if args.show < 0:
        raise CommandError("--show must be >= 0")
    try:
        return _resume(args)
    except KeyboardInterrupt as err:  # before the search went on, too: the same command continues it
        if told_how_to_resume(err):
            raise
        stop_search(stopped_line(args.run, args.objective))


def _resume(args) -> int:
    cfg, done, _ = _plan(args)  # every check before the lock file or the store is touched

    objective = load_objective_arg(args.objective, args.ship)
    try:
        check_resume_objective(cfg.objective, objective, "--objective")
    except (ValueError, TypeError) as err:
        raise CommandError(str(err)) from None
    if done >= cfg.evolution.budget:
        print(f"search in {args.run} is already complete ({done}/{cfg.evolution.budget} candidates); "
              "nothing to do")
        print(summary_table(args.run, top=args.show))
        return 0
    try:  # the built-in objective's data must still be there
        if objective is None:
            search_dataset(ProxyTask.of_run(cfg))
    except (ValueError, FileNotFoundError) as err:
        raise CommandError(str(err).splitlines()[0]) from None
    with run_lock(args.run):
        cfg, done, pending = _plan(args)  # again: another driver may have run in between
        scorer = objective or ProxyObjective.for_run(cfg)
        if not args.quiet:
            print(f"resume: {done}/{cfg.evolution.budget} candidates done, {pending} re-queued "
                  f"(in flight when it stopped), {cfg.execution.num_workers} "
                  f"{cfg.execution.executor} worker(s) on {cfg.execution.device}", file=sys.stderr)

        with write_errors(f"run {args.run}"):  # a disk that fills during the search: one line
            result = resume_run(args.run, scorer, cfg, progress=not args.quiet, ship=args.ship)
        report_result(result, args.run, args.show)
    return 0
