"""The reference panel: 16 layers trained long on all of Fashion-MNIST, the ground truth a proxy's
ranking is measured against (`evonorm calibrate --panel`).

A search's fitness is only as good as its ranking of layers agrees with what proper training says.
This trains each panel layer on both anchor architectures, on all 60,000 training images, scored on
the official 10,000 test images, and records the test-accuracy curve so that one can check that the
runs have settled (the accuracy moves by less than a point over the last fifth of training).

Protocol (fixed before the runs):
- layers: `evonorm.measure.panel.PANEL` (the registry's native layer where the name is the
  registry's, else the graph);
- setting: `evonorm.measure.panel.REFERENCE`, per architecture: width 0.0625 (the `demo` proxy's; the
  paper's 0.25 and 0.5 cost 2-4x more per step, which 2 cores cannot give 96 runs), batch 64 of 24x24 crops and flips,
  2,000 steps (2.1 epochs), cosine schedule after 100 warm-up steps, the `demo` proxy's learning
  rates (0.1 ResNet50, 0.03 MobileNetV2), training seeds 0, 1, 2;
- scored on the whole test split at 60%, 80% and 100% of training (and at 20% and 40% for BN-ReLU
  and EvoNorm-S0); a run whose loss or logits are not finite scores chance (0.1);
- order: seed 0 of every layer first, so a partial panel is a whole panel of fewer seeds.
(Checkpoints at every tenth of training, added after the first runs, change no number: a run
continued from a checkpoint ends where an uninterrupted one does.)

The runs, the folder's files and the resuming are `evonorm.measure.panel`'s (what `evonorm calibrate
--build-panel DIR` runs); this script adds the project's folder, chosen layers and seeds, and
`--table` (rewrites `<out>/panel.md` alone).

    nohup nice -n 15 python -m experiments.fidelity_panel --workers 2 > runs/panel.log 2>&1 &

Where a GPU is lent, the same panel (or a wider one, the paper's proxy widths) is a second reference
in a folder of its own: `--device cuda --width 0.25 --out results/fidelity-gpu`. A folder holds one
setting: resuming it with another is refused in one line.

Other layers at the reference setting (a search's winner, to see whether its lead holds), in a
folder of their own beside the panel's, with the layer as `evonorm train --layer` reads it:

    python -m experiments.fidelity_panel --layer winner=@top.json --out results/fidelity/main_job
    python -m experiments.fidelity_panel --run runs/main --top 3 --out results/fidelity/main_job

(`--run RUN --top N`: the run's N best distinct found layers, as `evonorm retrain` picks them,
named `found_<id>`.) A lead seen at the setting's seeds is checked at seeds no one picked it at,
beside the references trained at the same seeds, in a folder of their own:

    python -m experiments.fidelity_panel --seeds 3 4 5 --layer winner=@top.json \\
        --layer gn_relu=gn_relu --layer evonorm_s0=evonorm_s0 --out results/fidelity/winner_345
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from experiments._common import RESULTS, command_line, HelpFormatter, log, refuse

from evonorm.measure.panel import (PANEL, REFERENCE, build_panel, found_layers, named_layers,
                                 panel_table, progress_line, read_rows)

# --dry-run: a few steps on a few images, a check of a script, not a measurement
DRY_RUN = {"steps": 10, "n_train": 640, "n_test": 200, "lr_warmup": 2}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=HelpFormatter)
    p.add_argument("--out", type=Path, default=RESULTS / "fidelity",
                   help="the panel folder: its runs.jsonl, panel.json and panel.md")
    p.add_argument("--workers", type=int, default=2, help="runs trained at a time (one thread each)")
    p.add_argument("--only", nargs="*", help="train these panel layers only")
    p.add_argument("--seeds", nargs="*", type=int,
                   help="train these of the setting's seeds only (e.g. 0: a whole panel of one "
                        "seed); with --layer or --run, other seeds too (fresh seeds for a lead "
                        "found at the setting's)")
    p.add_argument("--dry-run", action="store_true",
                   help="a few steps on 640 images (a check of the script, not a panel)")
    p.add_argument("--device", default=REFERENCE.device, help="cpu, or cuda for a second reference")
    p.add_argument("--width", type=float, default=REFERENCE.width, help="channel multiplier")
    p.add_argument("--layer", action="append", default=[], metavar="NAME=LAYER",
                   help="train this layer instead of the panel (repeatable; with an --out of its "
                        "own): a registry name, a named graph, graph JSON or @file.json")
    p.add_argument("--run", type=Path, help="train this run's best found layers instead of the "
                   "panel (with --top and an --out of their own)")
    p.add_argument("--top", type=int, default=3, help="how many of --run's found layers")
    p.add_argument("--table", action="store_true",
                   help="write <out>/panel.md from the finished runs and stop (it is also "
                        "rewritten after every run)")
    args = p.parse_args()
    if args.table:
        (args.out / "panel.md").write_text(panel_table(read_rows(args.out / "runs.jsonl")))
        return
    try:
        panel = (named_layers(args.layer)
                 + (found_layers(args.run, args.top) if args.run else [])) or PANEL
    except ValueError as err:
        refuse("fidelity_panel", str(err))
    if panel is not PANEL and args.out.resolve() == (RESULTS / "fidelity").resolve():
        refuse("fidelity_panel", "--layer and --run train other layers than the panel's: give "
               "them a folder of their own (--out)")
    if any(s < 0 for s in args.seeds or []):
        refuse("fidelity_panel", f"seeds must be >= 0, got {args.seeds}")
    other_seeds = sorted(set(args.seeds or []) - set(REFERENCE.seeds))
    if other_seeds and panel is PANEL:
        refuse("fidelity_panel", f"seeds {other_seeds} are not the panel's {list(REFERENCE.seeds)}: "
               "train other seeds of chosen layers (--layer, --run) in a folder of their own")
    # a folder of other seeds records them: resuming it with the setting's seeds is another setting
    setting = replace(REFERENCE, device=args.device, width=args.width,
                      seeds=tuple(sorted(set(args.seeds))) if other_seeds else REFERENCE.seeds,
                      **(DRY_RUN if args.dry_run else {}))
    log(f"panel: {args.workers} workers into {args.out}")
    try:
        failed = build_panel(args.out, setting, workers=args.workers, layers=panel,
                             only=args.only, seeds=args.seeds,
                             command=command_line(),
                             on_done=lambda prog: log(progress_line(prog)))
    except ValueError as err:
        refuse("fidelity_panel", str(err))
    if failed:
        log(f"{failed} run(s) failed (above): run the same command again to retry them")
        sys.exit(1)
    log("panel complete")


if __name__ == "__main__":
    main()
