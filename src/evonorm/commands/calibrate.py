"""`evonorm calibrate`: does a search preset's proxy task rank reference layers above random ones?"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from evonorm.cli import ArgumentParser, CommandError
from evonorm.commands._common import ARCHS_HELP, DATA_HELP, dataset_arg
from evonorm.commands.search import check_setup
from evonorm.proxy.calibrate import calibration_setup, format_summary, load_runs, calibration_jobs, prepare_out, progress_line, run_jobs, summarize
from evonorm.search.config import SPACES
from evonorm.proxy.training import search_dataset
from evonorm.proxy.config import proxy_config
from evonorm.proxy.presets import PRESETS, get_preset
from evonorm.proxy.rejection import quality_threshold


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="evonorm calibrate", description=(
        "Run the reference layers (S: BN-ReLU, GN-ReLU, EvoNorm-S0; B: EvoNorm-B0 and top appendix "
        "B layers) with several training seeds, and random graphs of the space, through a preset's "
        "rejection and full training on every anchor architecture; print quality pass/fail per "
        "seed, fitness mean +- std, the random layers' fitness and the margins. Each finished run "
        "is saved in OUT/runs.jsonl; run the same command again to resume."))
    p.add_argument("--preset", default="demo", choices=list(PRESETS), help="search preset")
    p.add_argument("--space", choices=SPACES, default=None, help="default: the preset's")
    p.add_argument("--seeds", type=int, default=3, help="training seeds per reference (>= 1)")
    p.add_argument("--random", type=int, default=20, metavar="N", help="random graphs (>= 0)")
    p.add_argument("--dataset", default=None, help="default: the preset's, else fashion_mnist "
                   "(must be installed; as in `evonorm search`)")
    p.add_argument("--data", default=None, metavar="FILE.npz", help=DATA_HELP)
    p.add_argument("--data-root", default=None, help="folder holding the dataset files")
    p.add_argument("--archs", "--arch", default=None, help=ARCHS_HELP)
    p.add_argument("--workers", type=int, default=None, help="parallel runs (0: one per core)")
    p.add_argument("--out", type=Path, default=None,
                   help="folder for runs.jsonl and the table (default runs/calibrate-PRESET-SPACE)")
    return p


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.seeds < 1:
        raise CommandError(f"--seeds must be >= 1, got {args.seeds}")
    if args.random < 0:
        raise CommandError(f"--random must be >= 0, got {args.random}")
    if args.workers is not None and args.workers < 0:
        raise CommandError(f"--workers must be >= 0, got {args.workers}")

    try:
        cfg = get_preset(args.preset, space=args.space,
                         dataset=dataset_arg(args.dataset, args.data),
                         data_root=args.data_root, workers=args.workers,
                         archs=tuple(a.strip() for a in args.archs.split(",") if a.strip())
                         if args.archs else None)
    except (ValueError, TypeError) as err:
        raise CommandError(str(err)) from None
    cfg = check_setup(cfg)  # archs, trainer presets and data, in one line on failure
    out = args.out or Path("runs") / f"calibrate-{cfg.preset}-{cfg.space}"
    setup = calibration_setup(cfg, args.seeds, args.random)
    try:
        earlier = prepare_out(out, setup)
    except (ValueError, OSError) as err:
        raise CommandError(str(err)) from None
    jobs = calibration_jobs(cfg, args.seeds, args.random)
    task = proxy_config(cfg)
    print(f"calibrate: preset {cfg.preset}, space {cfg.space}, dataset {task.dataset}, archs "
          f"{', '.join(task.archs)}, {args.seeds} seed(s) x {len(jobs) - args.random} reference "
          f"run(s) + {args.random} random, {cfg.num_workers} worker(s) -> {out}"
          + (f" (resuming: {len(earlier)} done)" if earlier else ""), file=sys.stderr, flush=True)
    start = time.perf_counter()
    run_jobs(jobs, cfg, out, workers=cfg.num_workers, timeout=3 * cfg.timeout,
             on_done=lambda r, i, n: print(progress_line(r, i, n), file=sys.stderr, flush=True))
    keys = {j.key for j in jobs}
    records = [r for r in load_runs(out) if r.key in keys]
    ds = search_dataset(cfg)  # cached
    threshold = quality_threshold(ds.num_classes, task.quality_factor)
    table = format_summary(summarize(records, list(task.archs)), threshold, task.train_seeds,
                           task.final_runs)
    (out / "table.md").write_text(table + "\n")
    print(table)
    print(f"calibration done in {time.perf_counter() - start:.0f}s; table in {out / 'table.md'}",
          file=sys.stderr)
    return 0
