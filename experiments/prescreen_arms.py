"""Does the prescreen pay for itself? Valid layers per worker-hour: evolution with and without the
prescreen, and random search, at equal worker-seconds.

Protocol (fixed before the runs):
- preset `demo` (`--preset`), S space, Fashion-MNIST; three arms that share the preset, the data
  split and the training seeds, and differ only in how candidates are proposed: `evolution`,
  `prescreen` (evolution with `prescreen=True` at the engine's defaults: 4 children per slot, a
  threshold of 0.05, 20% of slots trained whatever the surrogate says, no prediction before 3
  valid and 3 rejected candidates, these counted with the preset's shipped prior) and `random`;
- the prior: built by experiments/prescreen_prior.py from searches at seeds 100-105 (none of
  the arms' seeds), once, before these runs; its worker-seconds are a one-time cost of the
  package, not of each search, and are stated beside the result, not added to the budget
  (changed before any run: without a prior the surrogate would not predict before the 3rd valid
  layer, which a 900-second `demo` search reaches late or never);
- budget: `--budget-seconds` worker-seconds per run (default 900, the candidates' evaluation times
  plus, for `prescreen`, its features' time); one worker of one thread per run; the three arms of
  a seed run side by side, so they see the same machine load; search seeds `--seeds` (default 0-9);
- per run: valid layers (status valid) among the candidates finished within the budget, per
  worker-hour, and the distinct valid layers of its own (by function key; seed layers and cache
  hits excluded);
- test: one-sided exact paired permutation (sign-flip) tests over the seeds, prescreen >
  evolution and prescreen > random, on valid layers per worker-hour; the target is >= 5x plain
  evolution's mean. Every run is reported;
- beside it, the ceiling: what a perfect prescreen could reach, every worker-second spent on
  valid layers at the mean worker-seconds of plain evolution's valid layers (3600 / that mean),
  per seed and as a multiple of plain evolution's rate. Added before any run, once the main
  job's run showed where its worker-seconds go (2026-11-27 main job, 75 candidates: quality
  rejections 77% of them at about 150 s each, its 2 valid layers 23% at 440-570 s each; pre-checks,
  stability rejections and cache hits 0.5%): a valid layer trains to the end, so the rate of valid
  layers is bounded by their own cost, whatever the surrogate knows.
- run again from the start (changed after the first attempt's seeds 0-3, before any run of the
  second): the first attempt (runs/prescreen_attempt1, results/prescreen/attempt1/) computed the
  features in the driver's process at torch's default two threads, and beside another two-thread
  torch process (the random arm's driver) OpenMP's spinning threads made a layer's features take
  13-79 s instead of about 0.5 s: 299-490 of the prescreen arm's 900 worker-seconds (the engine now
  computes them at one thread). The three arms run again side by side at seeds 0-9, the protocol
  otherwise unchanged; the first attempt's runs are reported beside, and each run's features'
  worker-seconds are part of the summary.
This measures what the prescreen is for: training the candidates worth training. The same runs
are Fig. 10 with the prescreen (the search fitness of the layers, the paper's top-10 metric, the
fresh-seed retraining): experiments/evolution_vs_random.py reads the prescreened arm as its
evolution arm against this random arm,

    python -m experiments.evolution_vs_random --preset demo --test paired --budget-seconds 900 \
        --seeds 0 1 2 3 4 5 6 7 8 9 --runs runs/prescreen --evolution-arm prescreen \
        --summarize-only --fresh-seeds 4

(the earlier runs' files are in folders of their own under results/evolution_vs_random/, runs 5
and 6's in sixth_run_seeds0-9/). `results/prescreen/summary.json`:
`{"arms": {ARM: {"seeds": [...], "valid_per_worker_hour": [...], "distinct_valid_own": [...]}},
"budget_worker_seconds": ..., "command": "...", "p_value": {...}}`.

    python -m experiments.prescreen_arms --seeds 0 1 2 3 4 5 6 7 8 9 --budget-seconds 900
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from experiments._common import ROOT, command_line, HelpFormatter, out_dir, write_table
from experiments._arms import arm_numbers, read_run, run_config, run_seed

from evonorm.stats import paired_sign_flip_greater

ARMS = {"evolution": ("evolution", {}), "prescreen": ("evolution", {"prescreen": True}),
        "random": ("random", {})}


def summarize(runs_dir: Path, seeds: list[int], budget_seconds: float, command: str) -> dict:
    arms: dict[str, dict] = {}
    for arm in ARMS:
        rows = {"seeds": [], "valid_per_worker_hour": [], "distinct_valid_own": [],
                "ceiling_valid_per_worker_hour": [], "feature_worker_seconds": []}
        for seed in seeds:
            read = read_run(runs_dir / f"{arm}_s{seed}", budget_seconds)
            if read is None or read[1] != "complete":
                continue
            rate, own, ceiling = arm_numbers(read[3], budget_seconds)
            rows["seeds"].append(seed)
            rows["valid_per_worker_hour"].append(round(rate, 3))
            rows["distinct_valid_own"].append(own)
            rows["ceiling_valid_per_worker_hour"].append(
                None if ceiling is None else round(ceiling, 3))
            rows["feature_worker_seconds"].append(  # the prescreen's own cost, within the budget
                round(sum((c.prediction or {}).get("seconds", 0.0) for c in read[3]), 1))
        arms[arm] = rows
    p = {}
    for rival in ("evolution", "random"):
        both = [s for s in arms["prescreen"]["seeds"] if s in arms[rival]["seeds"]]
        if both:
            a = [arms["prescreen"]["valid_per_worker_hour"][arms["prescreen"]["seeds"].index(s)]
                 for s in both]
            b = [arms[rival]["valid_per_worker_hour"][arms[rival]["seeds"].index(s)] for s in both]
            p[f"prescreen>{rival}"] = paired_sign_flip_greater(a, b)
    means = {arm: statistics.fmean(r["valid_per_worker_hour"]) for arm, r in arms.items()
             if r["valid_per_worker_hour"]}
    ceilings = [c for c in arms["evolution"]["ceiling_valid_per_worker_hour"] if c is not None]
    ceiling = statistics.fmean(ceilings) if ceilings else None
    return {"arms": arms, "budget_worker_seconds": budget_seconds, "command": command,
            "ceiling_valid_per_worker_hour": ceiling,
            "ceiling_over_evolution": (ceiling / means["evolution"]
                                       if ceiling and means.get("evolution") else None),
            "p_value": p, "test": "one-sided exact paired permutation (sign-flip) over the seeds",
            "mean_valid_per_worker_hour": means}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=HelpFormatter)
    p.add_argument("--preset", default="demo", help="search preset of every arm")
    p.add_argument("--seeds", type=int, nargs="+", default=list(range(10)),
                   help="search seeds, the arms of each side by side")
    p.add_argument("--budget-seconds", type=float, default=900.0, help="worker-seconds per run")
    p.add_argument("--runs", type=Path, default=ROOT / "runs" / "prescreen",
                   help="folder of the run folders, <arm>_s<seed>")
    p.add_argument("--summarize-only", action="store_true",
                   help="tables from the runs so far, no searching")
    p.add_argument("--out", default=None, help="output folder (default results/prescreen)")
    args = p.parse_args()
    command = command_line()
    if not args.summarize_only:
        t0 = time.time()
        for seed in args.seeds:  # the three arms of a seed side by side
            run_seed(args.runs, seed, {arm: run_config(args.preset, algorithm, seed,
                                                       args.budget_seconds, extra)
                                       for arm, (algorithm, extra) in ARMS.items()},
                     args.budget_seconds, t0)
    summary = summarize(args.runs, args.seeds, args.budget_seconds, command)
    d = out_dir("prescreen", args.out)
    (d / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    columns = [k for k in summary["arms"]["evolution"] if k != "seeds"]
    write_table(d, "runs", [{"arm": arm, "seed": seed, **{k: r[k][i] for k in columns}}
                            for arm, r in summary["arms"].items()
                            for i, seed in enumerate(r["seeds"])],
                {"budget_worker_seconds": args.budget_seconds}, columns=["arm", "seed", *columns])
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
