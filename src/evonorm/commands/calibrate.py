"""`evonorm calibrate`: does a search preset's proxy task rank reference layers above random ones?"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from evonorm.cli import ArgumentParser, CommandError
from evonorm.commands._common import ARCHS_HELP, DATA_HELP, check_device, dataset_arg
from evonorm.commands.search import check_setup
from evonorm.files import check_writable, write_atomic
from evonorm.measure.calibrate import (calibration_jobs, calibration_setup, format_summary, load_runs,
                                     check_panel_layers, panel_cost, prepare_out, progress_line, proxy_scores, run_jobs,
                                     summarize)
from evonorm.measure.fidelity import format_fidelity, load_panel, rank_fidelity, write_proxy
from evonorm.measure.panel import REFERENCE
from evonorm.proxy.presets import get_preset, list_presets
from evonorm.proxy.rejection import quality_threshold
from evonorm.proxy.training import search_dataset
from evonorm.search.config import SPACES


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="evonorm calibrate", description=(
        "Run the reference layers (S: BN-ReLU, GN-ReLU, EvoNorm-S0; B: EvoNorm-B0 and top appendix "
        "B layers) with several training seeds, and random graphs of the space, through a preset's "
        "rejection and full training on every anchor architecture; print quality pass/fail per "
        "seed, fitness mean +- std, the random layers' fitness and the margins. Each finished run "
        "is saved in OUT/runs.jsonl; run the same command again to resume. With --panel, the "
        "panel's layers are trained as the search trains a candidate, and the table adds how "
        "their fitness ranks against the panel's long training (Spearman, Kendall, bootstrap "
        "95% intervals, the cost per candidate). With --build-panel DIR, train the reference "
        "panel itself into DIR instead (DIR/panel.json is what --panel reads; resumable)."))
    p.add_argument("--preset", default=None, choices=list_presets(), help="the search preset whose proxy task is "
                   "measured (default demo; `evonorm list search-presets`)")
    p.add_argument("--space", choices=SPACES, default=None, help="search space of the random graphs: b every "
                   "op, s no batch statistics (default: the preset's)")
    p.add_argument("--seeds", type=int, default=3, metavar="N",
                   help="training seeds per reference layer, >= 1: the "
                   "spread across them is the noise a layer must beat (default 3)")
    p.add_argument("--random", type=int, default=None, metavar="N",
                   help="random graphs trained beside the references, "
                   ">= 0: the margin between the worst reference and the best random one says "
                   "whether the task tells them apart (default 20)")
    p.add_argument("--dataset", default=None, help="cifar10, cifar100, fashion_mnist, synthetic "
                   "(default: the preset's, else fashion_mnist, which must be installed; as in "
                   "`evonorm search`)")
    p.add_argument("--data", default=None, metavar="FILE.npz", help=DATA_HELP)
    p.add_argument("--data-root", default=None, help="folder holding the dataset files "
                   "(default: $EVONORM_DATA, else ~/.cache/evonorm/data)")
    p.add_argument("--archs", default=None, help=ARCHS_HELP)
    p.add_argument("--workers", type=int, default=None, help="parallel training runs, 0 for one per core "
                   "(default: the preset's; with --build-panel, 1)")
    p.add_argument("--panel", type=Path, default=None, metavar="PANEL.json",
                   help="a reference panel (DIR/panel.json, written by --build-panel DIR): measure "
                   "the preset's rank fidelity against it and store it there under proxies.PRESET")
    p.add_argument("--build-panel", type=Path, default=None, metavar="DIR",
                   help="train the reference panel into DIR (its layers on both anchor "
                   "architectures, training seeds 0..N-1 of --seeds, on --dataset or --data) and stop")
    p.add_argument("--steps", type=int, default=None,
                   help=f"with --build-panel: training steps per run (default {REFERENCE.steps})")
    p.add_argument("--width", type=float, default=None,
                   help=f"with --build-panel: channel multiplier (default {REFERENCE.width})")
    p.add_argument("--device", default=None,
                   help="with --build-panel: where the panel trains, cpu or "
                   "cuda (default cpu)")
    p.add_argument("--out", type=Path, default=None,
                   help="folder for runs.jsonl and the table (default runs/calibrate-PRESET-SPACE)")
    return p


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.seeds < 1:
        raise CommandError(f"--seeds must be >= 1, got {args.seeds}")
    if args.workers is not None and args.workers < 0:
        raise CommandError(f"--workers must be >= 0, got {args.workers}")
    if args.build_panel is not None:
        return build_panel_main(args, argv)
    args.preset = args.preset or "demo"
    args.random = 20 if args.random is None else args.random
    if args.random < 0:
        raise CommandError(f"--random must be >= 0, got {args.random}")
    for flag, value in (("--steps", args.steps), ("--width", args.width), ("--device", args.device)):
        if value is not None:
            raise CommandError(f"{flag} applies to --build-panel only")

    try:
        cfg = get_preset(args.preset, space=args.space,
                         dataset=dataset_arg(args.dataset, args.data),
                         data_root=args.data_root, workers=args.workers,
                         archs=tuple(a.strip() for a in args.archs.split(",") if a.strip())
                         if args.archs else None)
    except (ValueError, TypeError) as err:
        raise CommandError(str(err)) from None
    layers = _panel_layers(args.panel)
    panel = None if layers is None else {layer.name: layer.graph for layer in layers}
    cfg, objective = check_setup(cfg)  # archs, trainer presets and data, in one line on failure
    out = args.out or Path("runs") / f"calibrate-{cfg.preset}-{cfg.evolution.space}"
    setup = calibration_setup(cfg, args.seeds, args.random, panel)
    try:
        earlier = prepare_out(out, setup)
    except (ValueError, OSError) as err:
        raise CommandError(str(err)) from None
    jobs = calibration_jobs(cfg, args.seeds, args.random, panel)
    task = objective.task.settings
    print(f"calibrate: preset {cfg.preset}, space {cfg.evolution.space}, dataset {task.dataset}, archs "
          f"{', '.join(task.archs)}, {args.seeds} seed(s) x {len(jobs) - args.random} reference "
          f"run(s) + {args.random} random, {cfg.execution.num_workers} worker(s) -> {out}"
          + (f" (resuming: {len(earlier)} done)" if earlier else ""), file=sys.stderr, flush=True)
    start = time.perf_counter()
    run_jobs(jobs, cfg, out, workers=cfg.execution.num_workers, timeout=3 * cfg.execution.timeout,
             on_done=lambda r, i, n: print(progress_line(r, i, n), file=sys.stderr, flush=True))
    keys = {j.key for j in jobs}
    records = [r for r in load_runs(out) if r.key in keys]
    ds = search_dataset(objective.task)  # cached
    threshold = quality_threshold(ds.num_classes, task.quality_factor)
    table = format_summary(summarize(records, list(task.archs)), threshold, task.train_runs,
                           task.final_runs)
    if layers is not None:
        table += "\n\n" + rank_fidelity_section(records, layers, cfg.preset, out, args.panel, argv,
                                                  ds.num_classes)
    write_atomic(out / "table.md", (table + "\n").encode())
    print(table)
    print(f"calibration done in {time.perf_counter() - start:.0f}s; table in {out / 'table.md'}",
          file=sys.stderr)
    return 0


def _panel_layers(path: Path | None) -> list | None:
    """The layers of `--panel PATH` (None without one), checked, and the file checked writable:
    the rank fidelity is written into it after the training, so find out now."""
    if path is None:
        return None
    try:
        _, layers = load_panel(path)
        check_panel_layers(layers)
    except ValueError as err:
        raise CommandError(str(err)) from None
    try:
        check_writable(path)
    except OSError as err:
        raise CommandError(f"--panel {path} cannot be written ({err.strerror or err}): "
                           "the rank fidelity goes into it after the training") from None
    return layers


def build_panel_main(args: argparse.Namespace, argv: list[str]) -> int:
    """`--build-panel DIR`: the reference panel at the reference setting (or the one the flags
    change), trained into DIR; exit 1 when some run failed (a rerun retries it)."""
    import os
    import shlex
    from dataclasses import replace

    from evonorm.data import load_dataset
    from evonorm.measure.panel import build_panel, progress_line, with_dataset

    if args.panel is not None:
        raise CommandError("--panel and --build-panel: build the panel first, then calibrate "
                           "against DIR/panel.json")
    # the panel is one setting (the reference layers on both anchor architectures), not a preset's
    for flag, value in (("--preset", args.preset), ("--space", args.space),
                        ("--random", args.random), ("--archs", args.archs), ("--out", args.out)):
        if value is not None:
            raise CommandError(f"{flag} does not apply to --build-panel (the panel trains the "
                               "reference layers on both anchor architectures into DIR)")
    if args.steps is not None and args.steps < 10:
        raise CommandError(f"--steps must be >= 10 (scored at fifths of training), got {args.steps}")
    if args.width is not None and args.width <= 0:
        raise CommandError(f"--width must be > 0, got {args.width}")
    setting = with_dataset(REFERENCE, dataset_arg(args.dataset, args.data))
    setting = replace(setting, seeds=tuple(range(args.seeds)),
                      steps=args.steps or setting.steps, width=args.width or setting.width,
                      lr_warmup=setting.lr_warmup if args.steps is None
                      else min(setting.lr_warmup, args.steps // 10),
                      device=check_device(args.device) or setting.device)
    workers = 1 if args.workers is None else args.workers or os.cpu_count() or 1
    try:
        load_dataset(setting.dataset, args.data_root)  # the data is there and reads: checked once
        failed = build_panel(args.build_panel, setting, workers=workers,
                             data_root=args.data_root,
                             command=shlex.join(["evonorm", "calibrate", *argv]),
                             on_done=lambda p: print(progress_line(p), file=sys.stderr, flush=True))
    except (ValueError, OSError) as err:
        raise CommandError(str(err).splitlines()[0]) from None
    print(f"panel in {args.build_panel / 'panel.json'}"
          + (f"; {failed} run(s) failed: run the same command again to retry them" if failed else ""))
    return 1 if failed else 0


def rank_fidelity_section(records, layers, preset: str, out: Path, panel: Path, argv: list[str],
                          num_classes: int) -> str:
    """The preset's rank fidelity against the panel: a table section, stored in the panel file
    (proxies.PRESET) and in OUT/fidelity.json."""
    import json
    import shlex

    fid = rank_fidelity(proxy_scores(records, 1.0 / num_classes),
                        {layer.name: layer.accuracy for layer in layers})
    cost = panel_cost(records)
    entry = {"command": shlex.join(["evonorm", "calibrate", *argv]),
             "worker_seconds_per_candidate": None if cost is None else round(cost, 1),
             "runs": [{"layer": r.name, "seed": r.seed, "fitness": r.fitness, "status": r.status}
                      for r in records if r.kind == "panel"],
             **{k: v for k, v in fid.to_dict().items() if k not in ("proxy", "reference")}}
    write_atomic(out / "fidelity.json", (json.dumps(entry, indent=1) + "\n").encode())
    write_proxy(panel, preset, entry)
    return format_fidelity(fid, preset, cost)
