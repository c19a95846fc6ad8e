"""`evonorm rerank`: retrain a search's top layers in a larger setting and rank them (Sec. 5.2).

The trainer and models are imported where they are used: they load torch, which `--help` does not need.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

from evonorm.cli import ArgumentParser, CommandError
from evonorm.commands._common import (RUN_ARCH_HELP, check_device, check_executor, check_run_archs,
                                      check_run_values, check_workers, dataset_arg, require_store,
                                      run_lock, write_errors)
from evonorm.report.text import rerank_table
from evonorm.proxy.config import anchor_archs
from evonorm.measure.rerank import prepare, rerank
from evonorm.search.store import Store


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="evonorm rerank", description=(
        "Retrain the top layers of a search in a larger setting (the search preset's rerank "
        "setting, or --train-preset) on the training images the search did not score on, score them "
        "on the dataset's test split (never seen by the search) and rank them by mean accuracy "
        "over the anchor architectures. Layers train in parallel on the search's executor; each "
        "result goes into RUN/rerank.jsonl as it arrives, and a stopped rerank continues where "
        "it stopped."))
    p.add_argument("run", type=Path, help="run folder of `evonorm search --out`")
    p.add_argument("--top", type=int, default=None, help="layers to rerank (default: the preset's, 10 "
                   "for the paper presets)")
    p.add_argument("--train-preset", default=None, help="training preset for the rerank (tiny, small, "
                   "paper-b, paper-s; default: the search preset's rerank setting)")
    p.add_argument("--steps", type=int, default=None, help="training steps of each rerank run "
                   "(default: the training preset's)")
    p.add_argument("--width", type=float, default=None, help="channel multiplier of the architectures "
                   "(default: the training preset's)")
    p.add_argument("--n-train", type=int, default=None, help="training images, a seeded subset "
                   "(default: the training preset's)")
    p.add_argument("--allow-smaller", action="store_true", help="rerank even in a setting that "
                   "is not larger than the search's (more steps, more training images): refused by "
                   "default, since such a rerank only repeats the search's noise")
    p.add_argument("--device", default=None, help="cpu, cuda or auto (default: the search's)")
    p.add_argument("--workers", type=int, default=None, help="layers trained at once (default: "
                   "the search's; 0: one per core)")
    p.add_argument("--timeout", type=float, default=None, help="seconds per layer before its "
                   "worker is killed (default: the search's, scaled by the rerank's extra steps)")
    p.add_argument("--data", default=None, metavar="FILE.npz", help="the run's own data file, "
                   "moved since the search (it must be the same file: its sha256 is checked)")
    p.add_argument("--arch", action="append", default=None, metavar="MODULE:FUNCTION",
                   help=RUN_ARCH_HELP)
    p.add_argument("--quiet", action="store_true", help="no progress output (default: a line per layer "
                   "trained)")
    return p


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.top is not None and args.top < 1:
        raise CommandError("--top must be >= 1")
    if args.timeout is not None and not (math.isfinite(args.timeout) and args.timeout > 0):
        raise CommandError(f"--timeout must be a finite number of seconds > 0, got {args.timeout}")
    from evonorm.models import is_builtin
    from evonorm.train import TRAIN_PRESETS

    require_store(args.run)
    check_run_values(args.run)
    device = check_device(args.device)
    preset = args.train_preset
    if preset is not None and preset not in TRAIN_PRESETS:
        raise CommandError(f"unknown training preset {preset!r} "
                           f"(choose from {', '.join(TRAIN_PRESETS)})")
    overrides = {k: v for k, v in dict(steps=args.steps, width=args.width,
                                       n_train=args.n_train).items() if v is not None}
    kw = dict(preset=preset, overrides=overrides, device=device, workers=args.workers,
              timeout=args.timeout, allow_smaller=args.allow_smaller,
              data=dataset_arg(None, args.data))
    try:  # the setting must be valid (and larger) before anything is trained or written
        with write_errors(f"run {args.run}"), Store(args.run, readonly=True) as store:
            cfg = store.search_config()
            user_archs = check_run_archs(args.run, anchor_archs(cfg), args.arch)
            external = [a for a in anchor_archs(cfg) if not is_builtin(a)]
            if args.width is not None and external:
                raise ValueError("--width applies to the built-in architectures only, and this run "
                                 f"has {', '.join(external)}")
            plan = prepare(cfg, **kw)
    except (ValueError, TypeError, FileNotFoundError) as err:
        raise CommandError(str(err).splitlines()[0]) from None
    check_executor(plan.cfg)
    check_workers(plan.cfg)
    log = (lambda s: None) if args.quiet else (lambda s: print(s, file=sys.stderr, flush=True))
    with run_lock(args.run), write_errors(f"run {args.run}"):
        try:
            rows = rerank(args.run, top=args.top, log=log, user_archs=user_archs, **kw)
        except (ValueError, FileNotFoundError) as err:
            raise CommandError(str(err).splitlines()[0]) from None
    with Store(args.run, readonly=True) as store:
        graphs = {c.id: c.graph for c in store.candidates()}
    if rows:
        print(f"rerank {plan.label}, scored on the {plan.split}, never seen by the search "
              f"(trained on the images it did not score on):")
    print(rerank_table(rows, graphs))
    return 0
