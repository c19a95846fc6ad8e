"""Experiment 2: evolution vs random search at equal compute (the paper's Fig. 10).

Protocol, fixed before the runs (docs/findings.md, "Evolution vs random search"):
- Preset `scratch` (`--preset`): S space from random graphs only (no seed layers), Fashion-MNIST, staged
  training with progressive dynamic hurdles, the preset's rejection. Both arms run the same
  driver, evaluator, rejection and hurdles; only the proposals differ (`evolution`: tournament
  winners mutated, where near misses of the quality test count as parents below every valid
  layer, the preset's `near_misses`, and a child with its parent's function is drawn again;
  `random`: fresh random graphs).
- Budget: `--budget-seconds` worker-seconds per run (the sum of the candidates' evaluation
  times); each run has one worker with one torch thread, and the two arms of a seed run at the
  same time, so both see the same machine load.
- Metric per run: the best fitness (mean held-out accuracy over the architectures) of a layer
  trained to the end, among the candidates finished within the budget; chance (1 / classes)
  when there is none.
- Test: one-sided exact Mann-Whitney U, evolution > random, over `--seeds` seeds per arm; with
  `--test paired`, an exact paired permutation test of the per-seed differences instead. It is
  the right one for a preset with seed layers (`demo`): the two arms of a seed then evaluate the
  same seed layers with the same data split and training seeds, so they differ only by what each
  algorithm proposed after them. Both tests are always reported; `--test` names the one fixed
  before the runs.
- Beside it, the paper's own Fig. 10 metric at the end of the budget: the mean fitness of the 10
  best layers trained to the end, a missing one at chance (`top10_mean`), with the same paired test.
- `--evolution-arm prescreen --summarize-only --runs DIR` reads experiments/prescreen_arms.py's
  prescreened runs as the evolution arm against its random arm: those runs are this experiment's
  runs with the prescreen on (the same configs, one worker of one thread, the arms of a seed side
  by side), so Fig. 10 with the prescreen needs no runs of its own. Its plain-evolution arm
  (`--evolution-arm evolution --runs` the same folder) is the comparison beside it, with the same
  tests and fresh seeds: both arms beat random search on the search's metrics (p = 0.031 each, seen
  before that comparison's fresh-seed runs were added), so only both together say whether the
  prescreen or evolution itself is what beats random search.
- Fresh training seeds (`--fresh-seeds N`): a run's best fitness is the best of several noisy
  evaluations, biased upward. For each seed where the arms' best layers differ, both are trained again
  with N fresh training seeds on that seed's data split and training setting (as `evonorm retrain`);
  a seed where both arms' best is the same layer counts as a difference of 0. The paired test then
  runs on the fresh means (`fresh_seeds.json`): whether evolution's wins train better, or are noise it
  selected.
Every run is reported (`runs.json`), and `summary.json` holds the numbers and the test.
Runs so far: docs/findings.md, each with its protocol, in results/evolution_vs_random/.

    python experiments/evolution_vs_random.py                      # 5 seeds x 2 arms, scratch
    python experiments/evolution_vs_random.py --preset demo --test paired
    python experiments/evolution_vs_random.py --preset demo --test paired --final-train-runs 4
    python experiments/evolution_vs_random.py --summarize-only     # tables from the runs so far
    python experiments/evolution_vs_random.py --preset demo --test paired --budget-seconds 900 \
        --final-train-runs 4 --seeds 0 1 2 3 4 5 6 7 8 9 --summarize-only --fresh-seeds 4
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from multiprocessing import get_context
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, add_search_flags, log, map_jobs, out_dir, save_png, search_settings  # noqa: E402

from evonorm.search.executors import die_with_parent  # noqa: E402
from evonorm.stats import mann_whitney_greater, paired_sign_flip_greater  # noqa: E402
from evonorm.proxy.config import ProxyTask

ARMS = ("evolution", "random")
TESTS = {"mann-whitney": "one-sided exact Mann-Whitney U (evolution > random)",
         "paired": "one-sided exact paired permutation (sign-flip) test of evolution - random over "
                   "the seeds (the two arms of a seed share their seed layers' evaluations, data "
                   "split and training seeds)"}


def run_config(preset: str, algorithm: str, seed: int, budget_seconds: float, settings: dict | None = None):
    """One arm's search: the preset with `settings` (the same for both arms, by keyword of
    `get_preset`, a data seed already resolved), one worker of one thread."""
    from evonorm.proxy.api import start
    from evonorm.proxy.presets import get_preset

    return start(get_preset(preset, **(settings or {}), algorithm=algorithm, seed=seed,
                      budget=100_000, budget_seconds=budget_seconds, workers=1, threads=1,
                      executor="local"))[0]


def _one_run(run: str, cfg_dict: dict) -> None:
    """One search to its worker-seconds budget (in its own process; resumes an earlier one)."""
    from evonorm.proxy.objective import ProxyObjective
    from evonorm.search.config import SearchConfig
    from evonorm.search.driver import init_run, run_search
    from evonorm.search.lock import RunLock
    from evonorm.search.store import Store

    die_with_parent()  # a killed experiment leaves no search writing on into the folder
    cfg, run, stored = SearchConfig.from_dict(cfg_dict), Path(run), None
    run.mkdir(parents=True, exist_ok=True)
    with RunLock(run):  # one search per folder, as `evonorm search` and `resume` hold it
        if (run / "store.sqlite").is_file():
            with Store(run, readonly=True) as st:
                stored = SearchConfig.from_dict(st.config())
        objective = ProxyObjective.for_run(cfg)
        if stored != cfg:
            init_run(run, cfg, objective, force=True)
        tally = run_search(run, objective=objective, progress=False).tally
    log(f"{run.name}: {tally.line()}")


def run_seed(runs_dir: Path, seed: int, configs: dict, budget_seconds: float, t0: float) -> None:
    """The arms of one search seed side by side, `configs[arm]` into runs_dir/<arm>_s<seed>, so
    that they see the same machine load. Plain processes, each with its own pool (a pool's
    workers, `evonorm.search.executors`' too, are daemons, which may not have children); a progress line a minute, since a
    seed's runs take a quarter of an hour in silence otherwise."""
    procs = [get_context("spawn").Process(target=_one_run, args=(
        str(runs_dir / f"{arm}_s{seed}"), cfg.to_dict())) for arm, cfg in configs.items()]
    for proc in procs:
        proc.start()
    # wait on a run still going (the first to end would return at once and spin the loop)
    while alive := [proc for proc in procs if proc.is_alive()]:
        alive[0].join(timeout=60)
        if alive[0].is_alive():
            log(f"seed {seed}: " + "; ".join(progress_line(runs_dir / f"{arm}_s{seed}", arm,
                                                           budget_seconds) for arm in configs))
    failed = {arm: proc.exitcode for arm, proc in zip(configs, procs) if proc.exitcode != 0}
    if failed:  # a seed with an arm missing is no paired comparison: stop, do not go on past it
        raise RuntimeError(f"seed {seed}: the {', '.join(failed)} run ended with exit code "
                           f"{list(failed.values())} (its error above)")
    log(f"seed {seed} done ({(time.time() - t0) / 60:.1f} min)")


def within_budget(candidates, budget_seconds: float) -> list:
    """The candidates that finished within the first `budget_seconds` worker-seconds."""
    out, spent = [], 0.0
    for c in sorted(candidates, key=lambda c: c.id):
        if spent >= budget_seconds:
            break
        spent += c.seconds
        out.append(c)
    return out


def first_full_at(candidates, stages: int) -> float | None:
    """Worker-seconds spent when the first layer trained through every stage finished (how
    long a search from scratch takes to find a layer that learns on every architecture)."""
    spent = 0.0
    for c in sorted(candidates, key=lambda c: c.id):
        spent += c.seconds
        if c.status == "valid" and c.stage >= stages:
            return round(spent, 1)
    return None


def best_full(candidates, stages: int):
    """The candidate with the best fitness among the layers trained to the end (all stages); None if none."""
    full = [c for c in candidates if c.status == "valid" and c.stage >= stages and c.fitness is not None]
    return max(full, key=lambda c: c.fitness, default=None)


def run_metric(candidates, stages: int, chance: float) -> float:
    """Best fitness of a layer trained to the end (all stages); chance if none."""
    best = best_full(candidates, stages)
    return chance if best is None else best.fitness


def top_mean(candidates, stages: int, chance: float, k: int = 10) -> float:
    """The paper's Fig. 10 metric at the end of a run: the mean fitness of the `k` best layers
    trained to the end, a missing one counting as chance (so finding fewer layers costs)."""
    full = sorted((c.fitness for c in candidates if c.status == "valid" and c.stage >= stages
                   and c.fitness is not None), reverse=True)[:k]
    return (sum(full) + chance * (k - len(full))) / k


def arm_prefix(args, arm: str) -> str:
    """The name an arm's runs go by; `--evolution-arm prescreen` reads
    experiments/prescreen_arms.py's prescreened runs as the evolution arm."""
    return getattr(args, "evolution_arm", "evolution") if arm == "evolution" else arm


def arm_dir(runs_dir: Path, args, arm: str, seed: int) -> Path:
    return runs_dir / f"{arm_prefix(args, arm)}_s{seed}"


def read_run(run: Path, budget_seconds: float):
    """(config, status, chance accuracy, candidates finished within the budget) of one run; None before
    its store exists."""
    from evonorm.search.config import SearchConfig
    from evonorm.proxy.training import search_dataset
    from evonorm.search.store import Store

    if not (run / "store.sqlite").is_file():
        return None
    with Store(run, readonly=True) as st:
        cfg = SearchConfig.from_dict(st.config())
        cands = st.candidates()
        status = st.get_meta("status")
    return cfg, status, 1.0 / search_dataset(ProxyTask.of_run(cfg)).num_classes, within_budget(cands, budget_seconds)


def summarize(runs_dir: Path, args, d: Path) -> dict:
    rows, values = [], {arm: [] for arm in ARMS}
    for arm in ARMS:
        for seed in args.seeds:
            read = read_run(arm_dir(runs_dir, args, arm, seed), args.budget_seconds)
            if read is None:
                continue
            cfg, status, chance, within = read
            metric = round(run_metric(within, cfg.hurdles.num_stages, chance), 4)
            valid = [c for c in within if c.status == "valid"]
            seeded = [c for c in valid if c.origin == "seed"]
            rows.append({"arm": arm, "seed": seed, "status": status, "candidates": len(within),
                         "valid": len(valid),
                         "trained_to_end": sum(c.stage >= cfg.hurdles.num_stages for c in valid),
                         "near_misses": sum(c.evaluation.near_miss for c in within),
                         "first_full_at": first_full_at(within, cfg.hurdles.num_stages),
                         "worker_seconds": round(sum(c.seconds for c in within), 1),
                         "seed_layers_best": (round(run_metric(seeded, cfg.hurdles.num_stages, chance), 4)
                                              if seeded else None),
                         "top10_mean": round(top_mean(within, cfg.hurdles.num_stages, chance), 4),
                         "best_fitness": metric})
            if status == "complete":
                values[arm].append(metric)
    u, p = (mann_whitney_greater(values["evolution"], values["random"])
            if values["evolution"] and values["random"] else (None, None))
    complete = {(r["arm"], r["seed"]): r for r in rows if r["status"] == "complete"}
    both = [s for s in args.seeds if all((arm, s) in complete for arm in ARMS)]

    def paired(metric: str) -> dict[str, list[float]]:  # each arm's values on the seeds both finished
        return {arm: [complete[arm, s][metric] for s in both] for arm in ARMS}

    pairs, top10_pairs = paired("best_fitness"), paired("top10_mean")
    p_paired = paired_sign_flip_greater(pairs["evolution"], pairs["random"]) if both else None
    summary = {
        "metric": ("best fitness (mean held-out accuracy over resnet50_cifar and "
                   "mobilenetv2_cifar, Fashion-MNIST, search split) of a layer trained through "
                   "every stage, among the candidates finished within the budget; 0.1 (chance) "
                   "when none"),
        "budget_worker_seconds": args.budget_seconds,
        "preset": args.preset, "overrides": search_settings(args),
        "evolution": values["evolution"], "random": values["random"],
        "test": TESTS[args.test],
        "p_value": p_paired if args.test == "paired" else p,
        "paired_seeds": both, "paired_p_value": p_paired, "u": u, "mann_whitney_p_value": p,
        "evolution_arm": arm_prefix(args, "evolution"),
        "top10_mean": {**top10_pairs, "metric": "the paper's Fig. 10 metric: mean fitness of the 10 "
                       "best layers trained to the end within the budget, a missing one at chance",
                       "paired_p_value": (paired_sign_flip_greater(top10_pairs["evolution"],
                                                                   top10_pairs["random"])
                                          if both else None)},
        "mean_std": {arm: [statistics.fmean(v), statistics.stdev(v) if len(v) > 1 else 0.0]
                     for arm, v in values.items() if v},
    }
    (d / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    (d / "runs.json").write_text(json.dumps(rows, indent=1) + "\n")
    lines = ["| arm | seed | candidates | valid | trained to the end | near misses | "
             "first trained to the end at (worker-s) | worker-s | best seed layer | top-10 mean | "
             "best fitness |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['arm']} | {r['seed']} | {r['candidates']} | {r['valid']} | "
              f"{r['trained_to_end']} | {r['near_misses']} | {r['first_full_at'] or '-'} | "
              f"{r['worker_seconds']} | {fmt_opt(r['seed_layers_best'])} | {r['top10_mean']:.4f} | "
              f"{r['best_fitness']:.4f} |"
              for r in rows]
    (d / "runs.md").write_text("\n".join(lines) + "\n")
    _plot(rows, d)
    return summary


def _train_fresh(cfg_dict: dict, layer: tuple, seeds: list[int], path: str) -> None:
    """One arm's best layer of one seed, trained with fresh seeds (in a pool worker of one thread)."""
    import torch

    from evonorm.search.config import SearchConfig
    from evonorm.proxy.retrain import train_layers

    torch.set_num_threads(1)
    train_layers(SearchConfig.from_dict(cfg_dict), [layer], seeds, Path(path), log=log)


def fresh_seeds(runs_dir: Path, args, d: Path, n: int) -> dict:
    """Train each seed's two best layers (where they differ) with `n` fresh training seeds, two at a
    time, and test the paired differences of their means; writes fresh_seeds.{json,md}. A fresh run
    that fails (non-finite) counts as chance accuracy, as a layer that trains nothing."""
    from evonorm.proxy.retrain import SEED_OFFSET, load_rows, pending

    def fresh_file(seed: int, arm: str) -> Path:
        return runs_dir / f"fresh_s{seed}_{arm_prefix(args, arm)}.jsonl"

    rows, jobs = [], []
    for seed in args.seeds:
        reads = [read_run(arm_dir(runs_dir, args, arm, seed), args.budget_seconds) for arm in ARMS]
        if any(r is None or r[1] != "complete" for r in reads):
            continue
        cfg, _, chance, _ = reads[0]  # the arms share all but the algorithm, which training does not read
        best = {arm: best_full(within, c.hurdles.num_stages) for arm, (c, _, _, within) in zip(ARMS, reads)}
        keys = {arm: None if c is None else c.key for arm, c in best.items()}
        same = keys["evolution"] == keys["random"]
        seeds = [cfg.seed + SEED_OFFSET + i for i in range(n)]
        row = {"seed": seed, "same_layer": same, "chance": chance}
        for arm, c in best.items():
            row[f"{arm}_id"] = None if c is None else c.id
            row[f"{arm}_search"] = chance if c is None else c.fitness
            if c is None or same:
                continue
            label, path = f"{arm} id {c.id}", fresh_file(seed, arm)
            if pending(path, label, seeds):
                kind = "seed" if c.origin == "seed" else "found"
                jobs.append((cfg.to_dict(), (label, kind, c.graph, c.id), seeds, str(path)))
        rows.append(row)
    if jobs:
        log(f"fresh seeds: {len(jobs)} layers x {n} seeds, two at a time")
        for _ in map_jobs(_train_fresh, jobs, 2):
            pass
    for row in rows:
        for arm in ARMS:
            fits = [r.fitness if r.fitness is not None else row["chance"]
                    for r in load_rows(fresh_file(row["seed"], arm))]
            row[f"{arm}_fresh"] = statistics.fmean(fits) if fits else None
            row[f"{arm}_fresh_runs"] = [round(f, 4) for f in fits]
        if row["same_layer"]:  # (also when neither arm has a layer trained to the end)
            row["difference"] = 0.0
        else:
            vals = [row["chance"] if row[f"{arm}_id"] is None else row[f"{arm}_fresh"] for arm in ARMS]
            row["difference"] = vals[0] - vals[1]
    diffs = [r["difference"] for r in rows]
    out = {"fresh_training_seeds": n, "seeds": [r["seed"] for r in rows],
           "test": "one-sided exact paired permutation (sign-flip) test of the fresh-seed differences",
           "p_value": paired_sign_flip_greater(diffs, [0.0] * len(diffs)) if diffs else None, "rows": rows}
    (d / "fresh_seeds.json").write_text(json.dumps(out, indent=1) + "\n")
    lines = ["| seed | same layer | evolution: layer, search fitness, fresh mean | "
             "random: layer, search fitness, fresh mean | fresh difference |", "|---|---|---|---|---|"]
    for r in rows:
        cells = [f"id {r[f'{a}_id']}, {r[f'{a}_search']:.4f}, {fmt_opt(r[f'{a}_fresh'])}" for a in ARMS]
        lines.append(f"| {r['seed']} | {'yes' if r['same_layer'] else 'no'} | {cells[0]} | {cells[1]} | "
                     f"{r['difference']:+.4f} |")
    lines.append(f"\none-sided exact paired permutation p = {out['p_value']}")
    (d / "fresh_seeds.md").write_text("\n".join(lines) + "\n")
    return out


def progress_line(run: Path, arm: str, budget_seconds: float) -> str:
    """Where one run stands: candidates, worker-seconds spent, best valid fitness so far."""
    from evonorm.search.store import Store

    if not (run / "store.sqlite").is_file():
        return f"{arm} starting"
    with Store(run, readonly=True) as st:
        cands = st.candidates()
    best = max((c.fitness for c in cands if c.status == "valid" and c.fitness is not None), default=None)
    return (f"{arm} {len(cands)} candidates, {sum(c.seconds for c in cands):.0f}/{budget_seconds:g} worker-s, "
            f"best {fmt_opt(best)}")


def fmt_opt(v: float | None) -> str:
    return "-" if v is None else f"{v:.4f}"


def _plot(rows: list[dict], d: Path) -> None:
    from evonorm.report.figures import pyplot

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.6))
    for i, arm in enumerate(ARMS):
        ys = [r["best_fitness"] for r in rows if r["arm"] == arm]
        ax.scatter([i] * len(ys), ys, color=f"C{i}", alpha=0.7)
        if ys:
            ax.hlines(statistics.fmean(ys), i - 0.2, i + 0.2, color=f"C{i}")
    ax.set_xticks(range(len(ARMS)), ARMS)
    ax.set_xlim(-0.6, len(ARMS) - 0.4)
    ax.set_ylabel("best fitness within the budget")
    ax.set_title("Evolution vs random search, equal worker-seconds\n(dot: one seed, bar: mean)",
                 fontsize=9)
    ax.grid(alpha=0.3)
    save_png(fig, d / "evolution_vs_random.png")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--budget-seconds", type=float, default=600.0,
                   help="worker-seconds per run (equal for both arms)")
    p.add_argument("--preset", default="scratch")
    p.add_argument("--test", choices=sorted(TESTS), default="mann-whitney",
                   help="the test behind summary.json's p_value, fixed before the runs "
                        "(paired: for presets with seed layers, which both arms evaluate alike)")
    p.add_argument("--runs", default=None,
                   help="folder for the run stores (not committed; default "
                        "runs/evolution_vs_random/PRESET_BUDGETs)")
    p.add_argument("--out", default=None, help="default results/evolution_vs_random")
    p.add_argument("--summarize-only", action="store_true")
    p.add_argument("--evolution-arm", default="evolution", choices=["evolution", "prescreen"],
                   help="the runs read as the evolution arm: prescreen reads the prescreened runs "
                        "of experiments/prescreen_arms.py (with --summarize-only and its --runs)")
    p.add_argument("--fresh-seeds", type=int, default=0, metavar="N",
                   help="after the runs, train each seed's two best layers again with N fresh "
                        "training seeds and test those (fresh_seeds.json)")
    add_search_flags(p)  # for both arms, e.g. --final-train-runs 4
    args = p.parse_args(argv)
    if args.evolution_arm != "evolution" and not args.summarize_only:
        p.error("--evolution-arm reads another experiment's runs: give it with --summarize-only")
    overrides = search_settings(args)
    suffix = "".join(f"_{k}{v}" for k, v in sorted(overrides.items()))
    runs_dir = Path(args.runs or ROOT / "runs" / "evolution_vs_random"
                    / f"{args.preset}_{args.budget_seconds:g}s{suffix}")
    d = out_dir("evolution_vs_random", args.out)
    if not args.summarize_only:
        t0 = time.time()
        for seed in args.seeds:
            run_seed(runs_dir, seed, {arm: run_config(args.preset, arm, seed, args.budget_seconds,
                                                      search_settings(args, seed)) for arm in ARMS},
                     args.budget_seconds, t0)
            summarize(runs_dir, args, d)
    s = summarize(runs_dir, args, d)
    log(f"evolution {s['evolution']} random {s['random']} U {s['u']} (p {s['mann_whitney_p_value']}), "
        f"paired p {s['paired_p_value']}; {args.test} p {s['p_value']}")
    if args.fresh_seeds:
        f = fresh_seeds(runs_dir, args, d, args.fresh_seeds)
        log(f"fresh seeds: differences {[round(r['difference'], 4) for r in f['rows']]}, paired p {f['p_value']}")
    log(f"wrote {d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
