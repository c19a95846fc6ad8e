"""Experiment 2: evolution vs random search vs random search with rejection (SPEC finding 3,
paper Fig. 10), at an equal budget of candidates, several seeds each, through the search driver.

Algorithms (the driver's names): `evolution` (with rejection), `random` (random search with
rejection), `random-norej` (random search, every candidate fully trained). Each run is a normal
run folder under --runs (resumable: rerunning the script continues unfinished runs), so
`evonorm report runs/evolution_vs_random/evolution_s0 --compare ...` draws the same picture.

    python experiments/evolution_vs_random.py                   # ~40 min on 2 cores (3 seeds)
    python experiments/evolution_vs_random.py --seeds 1 &       # or one process per seed
    python experiments/evolution_vs_random.py --budget 200 --seeds 0 1 2 3 4 --preset small
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, log, out_dir, save_png, write_table  # noqa: E402

ALGOS = ["evolution", "random", "random-norej"]


def search_config(args, algorithm: str, seed: int):
    """The preset's settings with the flags given (None = keep the preset's)."""
    from evonorm.search.presets import get_preset

    preset = get_preset(args.preset)
    train = dict(preset.train)
    train.update({k: v for k, v in (("steps", args.steps), ("batch_size", args.batch_size),
                                    ("width", args.width)) if v is not None})
    return get_preset(args.preset, algorithm=algorithm, seed=seed, budget=args.budget,
                      space=args.space, dataset=args.dataset, n_train=args.n_train,
                      archs=tuple(args.archs) if args.archs else None, train=train,
                      quality_steps=args.quality_steps, stability_steps=args.stability_steps,
                      initial_population=args.initial_population, window=args.window,
                      tournament_fraction=args.tournament_fraction, workers=args.workers,
                      executor="local", quality_factor=args.quality_factor,
                      **({} if args.seed_layers else {"seed_layers": ()}))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--algorithms", nargs="+", default=ALGOS, choices=ALGOS)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--budget", type=int, default=24, help="candidates per run (equal for every algorithm)")
    p.add_argument("--preset", default="demo", help="search preset the settings below override")
    p.add_argument("--space", choices=["b", "s"], default=None, help="default: the preset's")
    p.add_argument("--no-seed-layers", dest="seed_layers", action="store_false",
                   help="start from random graphs only (default: the preset's seed layers, GN/LN/IN-ReLU "
                        "for demo, evaluated first by every algorithm alike)")
    p.add_argument("--dataset", default="synthetic",
                   help="default synthetic: at this budget (30 steps) Fashion-MNIST leaves even "
                        "GroupNorm-ReLU at chance, so fitness would not rank layers")
    # Evaluation settings: None keeps the preset's (demo: 2 archs, width 0.0625, batch 32,
    # quality test 50 steps at 1.2x chance, full training 100 steps, Fashion-MNIST 3000 images).
    p.add_argument("--n-train", type=int, default=None)
    p.add_argument("--archs", nargs="+", default=None)
    p.add_argument("--steps", type=int, default=30, help="full-training steps per architecture")
    p.add_argument("--quality-steps", type=int, default=15)
    p.add_argument("--stability-steps", type=int, default=None)
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--width", type=float, default=None)
    p.add_argument("--quality-factor", type=float, default=1.0,
                   help="reject below this x chance on any arch (paper: 2; demo: 1.2 for short runs)")
    p.add_argument("--initial-population", type=int, default=None)
    p.add_argument("--window", type=int, default=None)
    p.add_argument("--tournament-fraction", type=float, default=None)
    p.add_argument("--workers", type=int, default=1,
                   help="evaluations at a time; 1 keeps proposals in order, so evolution starts "
                        "from the first valid layers instead of the budget going to random "
                        "graphs rejected while a slow evaluation runs")
    p.add_argument("--threads", type=int, default=1, help="torch threads per worker")
    p.add_argument("--runs", default=str(ROOT / "runs" / "evolution_vs_random"),
                   help="folder for the run stores (not committed)")
    p.add_argument("--out", default=None, help="output folder (default results/evolution_vs_random)")
    p.add_argument("--summarize-only", action="store_true",
                   help="only write the table and figure from the runs stored so far (partial runs included)")
    args = p.parse_args(argv)

    from evonorm.report import load_run
    from evonorm.search.driver import init_run
    runs_dir = Path(args.runs)
    runs = {}
    t0 = time.time()
    for seed in args.seeds:
        for algo in args.algorithms:
            cfg = search_config(args, algo, seed)
            run = runs_dir / f"{algo}_s{seed}"
            if args.summarize_only:
                if (run / "store.sqlite").is_file():
                    runs[(algo, seed)] = load_run(run, name=f"{algo} s{seed}")
                continue
            if not _same_settings(run, cfg.to_dict()):  # else: resume the earlier run
                init_run(run, cfg, force=True)
            ts = time.time()
            res = _search(run, args)
            log(f"{algo} seed {seed}: {res.tally.line()} ({time.time() - ts:.0f}s, "
                f"total {(time.time() - t0) / 60:.1f} min)")
            runs[(algo, seed)] = load_run(run, name=f"{algo} s{seed}")
    summarize(runs, args, out_dir("evolution_vs_random", args.out))
    return 0


def _search(run: Path, args):
    """The driver with a pool of `--workers` processes of `--threads` torch threads each."""
    from evonorm.search.driver import run_search
    from evonorm.search.evaluator import evaluate
    from evonorm.search.executors import LocalExecutor

    ex = LocalExecutor(evaluate, args.workers, timeout=3600.0, threads=args.threads)
    try:
        return run_search(run, executor=ex, progress=False)
    finally:
        ex.close()


def _same_settings(run: Path, want: dict) -> bool:
    """True when `run` holds a search with these settings (the dataset is filled in at start)."""
    from evonorm.search.store import Store

    if not (run / "store.sqlite").is_file():
        return False
    with Store(run, readonly=True) as st:
        have = st.config()
    drop = ("dataset",) if want.get("dataset") is None else ()
    return {k: v for k, v in have.items() if k not in drop} == {k: v for k, v in want.items() if k not in drop}


def _curve_on_grid(run, budget: int) -> list[float]:
    """Top-10 mean after each of 1..budget candidates (nan before the first valid layer)."""
    from evonorm.report.figures import progress_curve

    xs, means, _ = progress_curve(run)
    out, j, cur = [], 0, math.nan
    for n in range(1, budget + 1):
        while j < len(xs) and xs[j] <= n:
            cur = means[j]
            j += 1
        out.append(cur if n <= len(run.finished) else math.nan)  # an unfinished run stops
    return out


def _valid_on_grid(run, budget: int) -> list[float]:
    """Valid layers found after each of 1..budget candidates (nan past an unfinished run's end)."""
    out, count = [], 0
    fin = run.finished
    for n in range(1, budget + 1):
        if n <= len(fin):
            count += fin[n - 1].status == "valid"
            out.append(float(count))
        else:
            out.append(math.nan)
    return out


def summarize(runs: dict, args, d: Path) -> None:
    from evonorm.report.figures import progress_curve, pyplot

    rows = []
    for (algo, seed), run in sorted(runs.items()):
        _, means, _ = progress_curve(run)
        best = max((c.fitness for c in run.valid), default=None)
        rows.append({"algorithm": algo, "seed": seed, "candidates": len(run.candidates),
                     "valid": len(run.valid), "best_fitness": best,
                     "top10_mean_final": means[-1] if means else None,
                     "compute_s": round(sum(c.seconds for c in run.candidates), 1)})
    agg = []
    for algo in args.algorithms:
        rs = [r for r in rows if r["algorithm"] == algo]
        agg.append({"algorithm": algo, "seeds": len(rs),
                    **{f"{f}_mean": _mean([r[f] or 0.0 for r in rs]) for f in
                       ("valid", "best_fitness", "top10_mean_final", "compute_s")},
                    "top10_mean_final_std": _std([r["top10_mean_final"] or 0.0 for r in rs])})
    meta = {"settings": vars(args), "note": "a run with no valid layer counts 0 in the means",
            "complete_runs": sum(r["candidates"] >= args.budget for r in rows),
            "search_config": next(iter(runs.values())).config if runs else {},
            "per_run": rows}
    write_table(d, "evolution_vs_random", agg, meta)
    write_table(d, "evolution_vs_random_runs", rows, {"settings": vars(args)})

    plt = pyplot()
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    xs = list(range(1, args.budget + 1))
    for i, algo in enumerate(args.algorithms):
        runs_a = [run for (a, _), run in sorted(runs.items()) if a == algo]
        for axis, grid in ((ax, _curve_on_grid), (ax2, _valid_on_grid)):
            curves = [grid(run, args.budget) for run in runs_a]
            cols = [[c[k] for c in curves if not math.isnan(c[k])] for k in range(len(xs))]
            axis.plot(xs, [_mean(v, nan=True) for v in cols], color=f"C{i}",
                      label=f"{algo} ({len(curves)} seeds)")
            axis.fill_between(xs, [min(v, default=math.nan) for v in cols],
                              [max(v, default=math.nan) for v in cols], color=f"C{i}", alpha=0.2,
                              linewidth=0)
    ax.set_ylabel("mean fitness of the top-10 valid layers")
    ax.set_title("Search progress (line: mean over seeds, band: min-max)", fontsize=10)
    ax2.set_ylabel("valid layers found")
    ax2.set_title("Valid layers found", fontsize=10)
    for axis in (ax, ax2):
        axis.set_xlabel("candidates evaluated")
        axis.legend(fontsize=8)
        axis.grid(alpha=0.3)
    save_png(fig, d / "evolution_vs_random.png")
    for r in agg:
        log(f"{r['algorithm']:13s} valid {r['valid_mean']:.1f}  best {r['best_fitness_mean']:.4f}  "
            f"top-10 mean {r['top10_mean_final_mean']:.4f} ± {r['top10_mean_final_std']:.4f}  "
            f"compute {r['compute_s_mean']:.0f}s")
    log(f"wrote {d}")


def _mean(v, nan=False):
    return sum(v) / len(v) if v else (math.nan if nan else 0.0)


def _std(v):
    if len(v) < 2:
        return 0.0
    m = _mean(v)
    return math.sqrt(sum((x - m) ** 2 for x in v) / (len(v) - 1))


if __name__ == "__main__":
    sys.exit(main())
