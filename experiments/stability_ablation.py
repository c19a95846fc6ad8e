"""Does the stability test help the search? The paper's appendix Fig. 11 at this project's
protocol: evolution with and without the stability test, at equal worker-seconds.

Protocol (fixed before the runs):
- preset `demo` (`--preset`) as it ships, S space, Fashion-MNIST; two arms that share everything
  but the stability test: `with` (the preset as it ships) and `without`
  (`stability_steps=0`: no candidate is stress-tested, so a layer that would fail the test is
  judged by its quality test and training alone);
- budget: `--budget-seconds` worker-seconds per run (default 900), one worker of one thread per
  run, the two arms of a seed side by side (they see the same machine load); search seeds
  `--seeds` (default 0-9);
- per run, from the candidates finished within the budget: the paper's metric (the mean fitness
  of the 10 best layers trained to the end, a missing one at chance) against worker-seconds
  spent (the figure) and at the end; the best fitness; valid layers per worker-hour; the
  rejections by reason and the worker-seconds they cost;
- test: two-sided exact paired permutation (sign-flip) test over the seeds on the final top-10
  mean (the paper saw the test speed evolution up; its reviewers feared it rejects layers that
  evolution could have built on: either direction is a finding). Every run is reported.

    python -m experiments.stability_ablation --seeds 0 1 2 3 4 5 6 7 8 9 --budget-seconds 900

`results/stability_ablation/`: summary.json (per-seed values of each arm, the p-value), runs.md,
stability_ablation.png (the top-10 mean against worker-seconds, mean over the seeds).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import Counter
from pathlib import Path

from experiments._common import ROOT, command_line, HelpFormatter, log, out_dir, save_png
from experiments._arms import (read_run, run_config, run_metric, run_seed,
                                 top_mean, within_budget)

from evonorm.search.candidates import reason_group
from evonorm.stats import paired_sign_flip_greater

ARMS = {"with": {}, "without": {"stability_steps": 0}}
CURVE_POINTS = 30


def curve(candidates, stages: int, chance: float, budget_seconds: float) -> list[float]:
    """The top-10 mean after each of CURVE_POINTS equal steps of the budget's worker-seconds."""
    return [top_mean(within_budget(candidates, budget_seconds * (i + 1) / CURVE_POINTS), stages,
                     chance) for i in range(CURVE_POINTS)]


def two_sided(a: list[float], b: list[float]) -> float:
    """Two-sided exact paired permutation p-value: twice the smaller one-sided one."""
    return min(1.0, 2 * min(paired_sign_flip_greater(a, b), paired_sign_flip_greater(b, a)))


def fate_label(c) -> str:
    """"valid", "rejected quality", ...; "not reached" when the run never proposed it in budget."""
    if c is None:
        return "not reached"
    return c.status if c.status == "valid" else f"{c.status} {reason_group(c.reason)}"


def stability_accounts(with_run, without_run) -> dict:
    """What the stability test changed in one seed: how the candidates it rejected fared where it
    was off (same search seed, so the same proposals), and its worker-seconds: the test on every
    candidate against the training it spared the ones it rejected."""
    other = {c.key: c for c in without_run}
    rejected = [c for c in with_run if reason_group(c.reason) == "stability"]
    fate = Counter(fate_label(other.get(c.key)) for c in rejected)
    fresh = [c for c in rejected if c.key in other and not c.cache_hit and not other[c.key].cache_hit]
    return {"rejected": len(rejected), "fate_without": dict(sorted(fate.items())),
            "test_worker_seconds": round(sum(c.evaluation.timings.get("stability", 0.0)
                                             for c in with_run if not c.cache_hit), 1),
            "their_worker_seconds_with": round(sum(c.seconds for c in fresh), 1),
            "their_worker_seconds_without": round(sum(other[c.key].seconds for c in fresh), 1)}


def summarize(runs_dir: Path, seeds: list[int], budget_seconds: float, command: str,
              d: Path) -> dict:
    rows, curves, kept = [], {arm: [] for arm in ARMS}, {}
    for arm in ARMS:
        for seed in seeds:
            read = read_run(runs_dir / f"{arm}_s{seed}", budget_seconds)
            if read is None or read[1] != "complete":
                continue
            cfg, _, chance, within = read
            rejected = [c for c in within if c.status != "valid"]
            kinds = Counter(reason_group(c.reason) for c in rejected)
            cost = Counter()
            for c in rejected:
                cost[reason_group(c.reason)] += c.seconds
            rows.append({
                "arm": arm, "seed": seed, "candidates": len(within),
                "valid": sum(c.status == "valid" for c in within),
                "valid_per_worker_hour": round(sum(c.status == "valid" and not c.cache_hit
                                                   for c in within) / (budget_seconds / 3600), 3),
                "top10_mean": round(top_mean(within, cfg.hurdles.num_stages, chance), 4),
                "best_fitness": round(run_metric(within, cfg.hurdles.num_stages, chance), 4),
                "rejected": dict(sorted(kinds.items())),
                "rejected_worker_seconds": {k: round(v, 1) for k, v in sorted(cost.items())}})
            curves[arm].append(curve(within, cfg.hurdles.num_stages, chance, budget_seconds))
            kept[arm, seed] = within
    by = {(r["arm"], r["seed"]): r for r in rows}
    both = [s for s in seeds if all((arm, s) in by for arm in ARMS)]
    values = {arm: [by[arm, s]["top10_mean"] for s in both] for arm in ARMS}
    summary = {
        "metric": "the paper's top-10 mean: mean fitness of the 10 best layers trained to the end "
                  "within the budget, a missing one at chance",
        "budget_worker_seconds": budget_seconds, "command": command, "arms": ARMS,
        "seeds": both, "top10_mean": values,
        "best_fitness": {arm: [by[arm, s]["best_fitness"] for s in both] for arm in ARMS},
        "valid_per_worker_hour": {arm: [by[arm, s]["valid_per_worker_hour"] for s in both]
                                  for arm in ARMS},
        "test": "two-sided exact paired permutation (sign-flip) over the seeds, top-10 mean",
        "p_value": two_sided(values["with"], values["without"]) if both else None,
        "mean_curve": {arm: [round(statistics.fmean(col), 4) for col in zip(*cs)]
                       for arm, cs in curves.items() if cs},
        "stability_test": {s: stability_accounts(kept["with", s], kept["without", s]) for s in both},
    }
    (d / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    lines = ["| arm | seed | candidates | valid | valid per worker-hour | top-10 mean | "
             "best fitness | rejected (worker-s) |", "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['arm']} | {r['seed']} | {r['candidates']} | {r['valid']} | "
              f"{r['valid_per_worker_hour']} | {r['top10_mean']:.4f} | {r['best_fitness']:.4f} | "
              + ", ".join(f"{k} {n} ({r['rejected_worker_seconds'][k]:g})"
                          for k, n in r["rejected"].items()) + " |" for r in rows]
    lines.append(f"\n{summary['test']}: p = {summary['p_value']}\n")
    lines += ["| seed | rejected by the test | the same candidates without it | the test's "
              "worker-s (all candidates) | their worker-s with / without it |", "|---|---|---|---|---|"]
    lines += [f"| {s} | {a['rejected']} | " + ", ".join(f"{k} {n}" for k, n in a["fate_without"].items())
              + f" | {a['test_worker_seconds']:g} | {a['their_worker_seconds_with']:g} / "
              f"{a['their_worker_seconds_without']:g} |" for s, a in summary["stability_test"].items()]
    (d / "runs.md").write_text("\n".join(lines) + "\n")
    if summary["mean_curve"]:
        _plot(summary["mean_curve"], budget_seconds, len(both), d)
    return summary


def _plot(mean_curve: dict[str, list[float]], budget_seconds: float, n: int, d: Path) -> None:
    from evonorm.report.figures import pyplot

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.6))
    for i, (arm, ys) in enumerate(mean_curve.items()):
        xs = [budget_seconds * (j + 1) / len(ys) for j in range(len(ys))]
        ax.plot(xs, ys, color=f"C{i}", label=f"{arm} the stability test")
    ax.set_xlabel("worker-seconds")
    ax.set_ylabel("top-10 mean fitness")
    ax.set_title(f"Evolution with and without the stability test (mean of {n} seeds)", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    save_png(fig, d / "stability_ablation.png")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=HelpFormatter)
    p.add_argument("--preset", default="demo", help="search preset of both arms")
    p.add_argument("--seeds", type=int, nargs="+", default=list(range(10)),
                   help="search seeds, the arms of each side by side")
    p.add_argument("--budget-seconds", type=float, default=900.0, help="worker-seconds per run")
    p.add_argument("--runs", type=Path, default=ROOT / "runs" / "stability_ablation",
                   help="folder of the run folders, <arm>_s<seed>")
    p.add_argument("--summarize-only", action="store_true",
                   help="tables from the runs so far, no searching")
    p.add_argument("--out", default=None, help="output folder (default results/stability_ablation)")
    args = p.parse_args(argv)
    command = command_line(argv)
    d = out_dir("stability_ablation", args.out)
    if not args.summarize_only:
        t0 = time.time()
        for seed in args.seeds:
            run_seed(args.runs, seed, {arm: run_config(args.preset, "evolution", seed,
                                                       args.budget_seconds, extra)
                                       for arm, extra in ARMS.items()}, args.budget_seconds, t0)
            summarize(args.runs, args.seeds, args.budget_seconds, command, d)
    s = summarize(args.runs, args.seeds, args.budget_seconds, command, d)
    log(f"top-10 mean with {s['top10_mean']['with']} without {s['top10_mean']['without']}, "
        f"p {s['p_value']}; wrote {d}")


if __name__ == "__main__":
    main()
