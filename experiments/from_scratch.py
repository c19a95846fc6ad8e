"""From primitives: the paper's Fig. 10 from random graphs only, and whether the layers evolution
finds there hold up when trained long.

Protocol, fixed before the runs (results/from_scratch/README.md says the same, with its commit):
- arms, each the preset `scratch` as shipped (S space, random graphs only, no seed layer; the
  `demo` proxy on Fashion-MNIST: quality test at 75 steps, hurdle there, 900 steps for the
  layers above it; near misses as parents), differing only as named:
  `evolution` (the primary arm: the preset as shipped, prescreen on),
  `evolution_no_prescreen` (the same with the prescreen off),
  `random` (fresh random graphs, prescreen off: the same rejection, hurdles and budget);
- search seeds 0-4 (`--seeds`); a budget of 3,600 worker-seconds per run (`--budget-seconds`:
  the candidates' evaluation times, with the prescreen's feature time charged to the candidates);
  one worker of one torch thread per run; the three arms of a seed side by side, so that they
  see the same machine load;
- per run, over the candidates finished within the budget: `top10_mean` (the paper's: the mean
  fitness of the 10 best layers trained to the end, a missing one at chance, 0.1; each layer once:
  a cache hit is the same layer proposed again), `best_fitness`
  (the best layer trained to the end; chance if none), `valid_per_worker_hour` (valid
  candidates, cache hits not counted, per hour of the budget), `distinct_valid_own` (distinct
  valid functions);
- tests: one-sided exact paired sign-flip tests over the seeds on each metric: evolution >
  random (primary: `top10_mean`), evolution_no_prescreen > random, evolution >
  evolution_no_prescreen (the prescreen's target: at least 5x its valid layers per worker-hour,
  means over the seeds); the prescreen's false negatives on its exploring slots (a child trained
  whatever was predicted, predicted below the threshold, that was worth training: valid or a
  near miss); where each arm's worker-seconds went, by rejection;
- a layer that holds up: the 3 best distinct layers (by function) trained to the end in the two
  evolution arms over all seeds, by the search's own fitness, before any retraining, named
  `winner` (the best), `second`, `third`, are trained at the reference setting of the rank-
  fidelity panel (experiments/fidelity_panel.py: all 60,000 images, 2,000 steps, both anchor
  architectures) at training seeds 10-13, which no search used, beside `gn_relu` and
  `evonorm_s0` at the same seeds. Per layer and seed, the mean test accuracy over the two
  architectures; one-sided exact permutation tests on those per-seed means: `winner` > gn_relu
  (primary), each of the three > gn_relu (Bonferroni x3 for "the best of them"), winner vs
  evonorm_s0 (the moonshot).
Every run is reported. Resumable: a killed run continues from its store, a killed panel from its
checkpoints, a finished step is not run again.

    nohup nice -n 10 python -m experiments.from_scratch > runs/from_scratch.log 2>&1 &
    python -m experiments.from_scratch --step summary      # the tables from what has finished
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from experiments._common import ROOT, HelpFormatter, log, out_dir, write_table
from experiments._arms import arm_numbers, best_full, read_run, run_seed, top_mean

@dataclass(frozen=True)
class Experiment:
    """One from-primitives experiment's protocol: what differs between the first and the second."""

    name: str  # results/<name>/ and runs/<name>/
    preset: str
    arms: dict[str, tuple[str, dict]]  # arm -> (algorithm, the preset's settings it changes)
    comparisons: tuple[tuple[str, str], ...]  # (a, b): one-sided a > b on every metric
    chosen_from: tuple[str, ...]  # the arms whose best layers are trained at the reference setting
    chosen_per_arm: int | None  # None: the best `len(names)` over those arms pooled
    names: tuple[str, ...]  # the pooled choice's names, best first (a per-arm choice names its own)
    reference_seeds: tuple[int, ...]
    seeds: tuple[int, ...]
    metrics: tuple[str, ...]
    primary: str = "evolution"


FIRST = Experiment(
    name="from_scratch", preset="scratch",
    arms={"evolution": ("evolution", {}),
          "evolution_no_prescreen": ("evolution", {"prescreen": False}),
          "random": ("random", {"prescreen": False})},
    comparisons=(("evolution", "random"), ("evolution_no_prescreen", "random"),
                 ("evolution", "evolution_no_prescreen")),
    chosen_from=("evolution", "evolution_no_prescreen"), chosen_per_arm=None,
    names=("winner", "second", "third"), reference_seeds=(10, 11, 12, 13), seeds=(0, 1, 2, 3, 4),
    metrics=("top10_mean", "best_fitness", "valid_per_worker_hour", "distinct_valid_own"))
SECOND = Experiment(
    name="from_scratch_2", preset="scratch2",
    arms={"evolution": ("evolution", {}), "random": ("random", {})},
    comparisons=(("evolution", "random"),), chosen_from=("evolution", "random"), chosen_per_arm=3,
    names=(), reference_seeds=(10, 11, 12, 13, 14), seeds=(0, 1, 2, 3, 4, 5),
    metrics=(*FIRST.metrics, "worker_s_per_valid", "distinct_normalizing_valid", "repeat_share"))
EXPERIMENTS = {e.name: e for e in (FIRST, SECOND)}
ARMS = FIRST.arms


def arm_config(arm: str, seed: int, budget_seconds: float, exp: Experiment = FIRST):
    """One arm's search at `seed`: the experiment's preset as shipped but for the arm's changes,
    one worker of one torch thread."""
    from evonorm.proxy.presets import get_preset
    from evonorm.proxy.api import start

    algorithm, changes = exp.arms[arm]
    return start(get_preset(exp.preset, **changes, algorithm=algorithm, seed=seed,
                                   budget=100_000, budget_seconds=budget_seconds, workers=1,
                                   threads=1, executor="local"))[0]


def run_metrics(candidates, stages: int, chance: float, budget_seconds: float) -> dict:
    """The protocol's four numbers for one run; each layer counts once (a cache hit is a layer
    proposed again, answered from the store: the same layer, not another one found)."""
    rate, own, _ = arm_numbers(candidates, budget_seconds)
    candidates = [c for c in candidates if not c.cache_hit]
    best = best_full(candidates, stages)
    return {"top10_mean": round(top_mean(candidates, stages, chance), 4),
            "best_fitness": round(chance if best is None else best.fitness, 4),
            "valid_per_worker_hour": round(rate, 3), "distinct_valid_own": own}


def normalizing(graph: dict) -> bool:
    """Whether a layer normalizes: its output, in training mode with perturbed parameters (float64),
    changes by less than scale_invariance.py's tolerance when its input is scaled by 0.1 or 10."""
    import torch

    from evonorm.graph import Graph
    from experiments.scale_invariance import measure

    torch.manual_seed(0)
    x = torch.randn(16, 32, 8, 8, dtype=torch.float64)
    settings = SimpleNamespace(scales=(0.1, 10.0), large=100.0)
    try:
        module = Graph.from_json(graph).to_module(32, groups=8)
        return measure(module, x, torch.float64, "perturbed", "train", settings)["invariant"]
    except Exception:  # a layer that cannot run in float64 is not counted
        return False


def second_metrics(run: Path, candidates) -> dict:
    """The second experiment's added numbers for one run: worker-seconds per valid layer (None
    without one), distinct valid layers that normalize (by function), and the share of children
    drawn that computed a function the run had already scored (drawn again, or a cache hit)."""
    from evonorm.search.store import Store

    with Store(run, readonly=True) as st:
        repeats = st.get_meta("repeats", {}) or {}
    valid = [c for c in candidates if c.status == "valid" and not c.cache_hit]
    spent = sum(c.seconds for c in candidates)
    own = {c.key: c.graph for c in valid if c.origin != "seed"}
    hits = sum(1 for c in candidates if c.cache_hit)
    children = max(int(repeats.get("children", 0)), len(candidates))
    return {"worker_s_per_valid": round(spent / len(valid), 1) if valid else None,
            "distinct_normalizing_valid": sum(normalizing(g) for g in own.values()),
            "repeat_share": round((int(repeats.get("redrawn", 0)) + hits) / children, 3)
            if children else None}


def spending(candidates) -> dict[str, dict]:
    """Where a run's worker-seconds went: per outcome (valid, or the rejection's kind), the
    candidates and their worker-seconds (cache hits apart: they cost nothing)."""
    from evonorm.search.candidates import reason_group

    out: dict[str, dict] = defaultdict(lambda: {"candidates": 0, "worker_seconds": 0.0})
    for c in candidates:
        kind = "cache hit" if c.cache_hit else (
            "valid" if c.status == "valid" else reason_group(c.reason, fine=True))
        out[kind]["candidates"] += 1
        out[kind]["worker_seconds"] = round(out[kind]["worker_seconds"] + c.seconds, 1)
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["worker_seconds"]))


def false_negatives(candidates, threshold: float) -> dict:
    """The prescreen's exploring slots: children trained whatever it predicted. Of those it
    predicted below its threshold (it would have rejected them untrained), how many were worth
    training (valid, or a near miss)."""
    explored = [c for c in candidates if (c.prediction or {}).get("explore")
                and (c.prediction or {}).get("p_valid") is not None and not c.cache_hit]
    below = [c for c in explored if c.prediction["p_valid"] < threshold]
    worth = [c for c in below if c.status == "valid" or c.evaluation.near_miss]
    return {"explored": len(explored), "predicted_below_threshold": len(below),
            "worth_training_among_them": len(worth)}


def exact_sign_flip(a: list[float], b: list[float]) -> float | None:
    """One-sided exact paired sign-flip p-value, mean(a - b) > 0 (None below two seeds)."""
    from evonorm.stats import paired_sign_flip_greater

    return round(paired_sign_flip_greater(a, b), 4) if len(a) >= 2 else None


def exact_two_sample(a: list[float], b: list[float]) -> float | None:
    """One-sided exact permutation p-value of mean(a) > mean(b), independent samples."""
    from scipy.stats import permutation_test

    if len(a) < 2 or len(b) < 2:
        return None
    res = permutation_test((a, b), lambda x, y: statistics.fmean(x) - statistics.fmean(y),
                           permutation_type="independent", alternative="greater",
                           n_resamples=10**6)
    return round(float(res.pvalue), 4)


def search_step(args) -> None:
    exp, runs_dir, t0 = args.exp, args.runs, time.time()
    for seed in args.seeds:
        configs = {arm: arm_config(arm, seed, args.budget_seconds, exp) for arm in exp.arms}
        done = [read_run(runs_dir / f"{arm}_s{seed}", args.budget_seconds) for arm in exp.arms]
        if all(r is not None and r[1] == "complete" for r in done):
            continue
        log(f"seed {seed}: {', '.join(exp.arms)} side by side, {args.budget_seconds:.0f} worker-s each")
        run_seed(runs_dir, seed, configs, args.budget_seconds, t0)


def read_arms(args) -> dict:
    """Per arm, per finished seed: its config, metrics, spending, false negatives and the layers
    it trained to the end."""
    exp, arms = args.exp, {}
    for arm in exp.arms:
        arms[arm] = {"seeds": [], **{m: [] for m in exp.metrics}, "spending": {},
                     "false_negatives": {}, "first_valid_at_worker_seconds": [], "full": []}
        for seed in args.seeds:
            read = read_run(args.runs / f"{arm}_s{seed}", args.budget_seconds)
            if read is None or read[1] != "complete":
                continue
            cfg, _, chance, within = read
            stages = cfg.hurdles.num_stages
            arms[arm]["seeds"].append(seed)
            metrics = run_metrics(within, stages, chance, args.budget_seconds)
            if "repeat_share" in exp.metrics:
                metrics.update(second_metrics(args.runs / f"{arm}_s{seed}", within))
            for m in exp.metrics:
                arms[arm][m].append(metrics[m])
            arms[arm]["spending"][str(seed)] = spending(within)
            if cfg.evolution.prescreen:
                arms[arm]["false_negatives"][str(seed)] = false_negatives(
                    within, cfg.evolution.prescreen_threshold)
            spent, first = 0.0, None
            for c in within:
                spent += c.seconds
                if first is None and c.status == "valid" and not c.cache_hit:
                    first = round(spent, 1)
            arms[arm]["first_valid_at_worker_seconds"].append(first)
            arms[arm]["full"] += [(c.fitness, c.key, c.graph, arm, seed, c.id) for c in within
                                  if c.status == "valid" and c.stage >= stages and not c.cache_hit]
            arms[arm]["config"] = cfg.to_dict()
    return arms


def top_layers(arms: dict, exp: Experiment = FIRST) -> list[dict]:
    """The layers trained at the reference setting, by the search's own fitness, each function
    (key) once. Pooled (`exp.chosen_per_arm` None): the best `len(exp.names)` of the chosen arms
    together, named `exp.names` in order. Per arm: the best `exp.chosen_per_arm` of each chosen
    arm in turn (a function chosen from an arm before is skipped: that arm's next takes its place),
    named ARM_RANK, but the best of them all by search fitness, which is named `winner`."""
    pools = ([sum((arms[a]["full"] for a in exp.chosen_from), [])] if exp.chosen_per_arm is None
             else [arms[a]["full"] for a in exp.chosen_from])
    per_pool = len(exp.names) if exp.chosen_per_arm is None else exp.chosen_per_arm
    out, seen = [], set()
    for pool in pools:
        taken = 0
        for fitness, key, graph, arm, seed, cid in sorted(pool, key=lambda t: -t[0]):
            if key in seen or taken == per_pool:
                continue
            seen.add(key)
            taken += 1
            name = exp.names[len(out)] if exp.chosen_per_arm is None else f"{arm}_{taken}"
            out.append({"name": name, "graph": graph, "search_fitness": round(fitness, 4),
                        "arm": arm, "seed": seed, "candidate": cid})
    if exp.chosen_per_arm is not None and out:
        max(out, key=lambda t: t["search_fitness"])["name"] = "winner"
    return out


def reference_dir(args) -> Path:
    return args.out / "reference"


def reference_step(args) -> None:
    exp, arms = args.exp, read_arms(args)
    missing = [a for a in exp.arms if len(arms[a]["seeds"]) < len(args.seeds)]
    if missing:
        log(f"reference: waiting for the searches of {', '.join(missing)}")
        return
    top = top_layers(arms, exp)
    if not top:
        log("reference: the chosen arms trained no layer to the end; nothing to retrain")
        return
    d = reference_dir(args)
    d.mkdir(parents=True, exist_ok=True)
    (d / "chosen.json").write_text(json.dumps(top, indent=1) + "\n")
    cmd = [sys.executable, str(ROOT / "experiments" / "fidelity_panel.py"), "--out", str(d),
           "--workers", str(args.workers), "--seeds", *map(str, exp.reference_seeds)]
    for layer in top:
        cmd += ["--layer", f"{layer['name']}={json.dumps(layer['graph'], separators=(',', ':'))}"]
    cmd += ["--layer", "gn_relu=gn_relu", "--layer", "evonorm_s0=evonorm_s0"]
    log("reference: " + " ".join(cmd[1:3]) + " ...")
    subprocess.run(cmd, check=True)


def reference_runs(args) -> list[dict]:
    """The reference panel's finished runs, as panel.json holds them (none before the first)."""
    from evonorm.measure.panel import read_rows

    return [r.stored() for r in read_rows(reference_dir(args) / "runs.jsonl")]


def per_seed_means(runs: list[dict], layer: str) -> dict[int, float]:
    """Mean test accuracy over the architectures, per seed with every architecture done."""
    by_seed: dict[int, list[float]] = defaultdict(list)
    for r in runs:
        if r["layer"] == layer:
            by_seed[r["seed"]].append(r["test_accuracy"])
    archs = len({r["arch"] for r in runs}) or 1
    return {s: statistics.fmean(v) for s, v in sorted(by_seed.items()) if len(v) == archs}


def reference_tests(runs: list[dict], names: tuple[str, ...]) -> dict:
    """Each chosen layer > gn_relu, the best of them > gn_relu (Bonferroni over the chosen),
    winner > evonorm_s0; one-sided exact permutation tests on per-seed means."""
    out = {}
    gn = list(per_seed_means(runs, "gn_relu").values())
    for name in names:
        out[f"{name}>gn_relu"] = exact_two_sample(list(per_seed_means(runs, name).values()), gn)
    out["winner>evonorm_s0"] = exact_two_sample(
        list(per_seed_means(runs, "winner").values()),
        list(per_seed_means(runs, "evonorm_s0").values()))
    found = [out[f"{n}>gn_relu"] for n in names if out.get(f"{n}>gn_relu") is not None]
    if found:
        out[f"best_of_{len(names)}>gn_relu_bonferroni"] = round(min(1.0, len(names) * min(found)), 4)
    return out


def summary_step(args) -> dict:
    from evonorm.graph import Graph

    exp, arms = args.exp, read_arms(args)
    p_values = {}
    for a, b in exp.comparisons:
        both = [s for s in arms[a]["seeds"] if s in arms[b]["seeds"]]
        for m in exp.metrics:
            va = [arms[a][m][arms[a]["seeds"].index(s)] for s in both]
            vb = [arms[b][m][arms[b]["seeds"].index(s)] for s in both]
            p_values[f"{a}>{b}:{m}"] = (exact_sign_flip(va, vb) if None not in va + vb else None)
    means = {arm: {m: (round(statistics.fmean(v), 4) if (v := [x for x in r[m] if x is not None])
                       else None) for m in exp.metrics} for arm, r in arms.items()}
    top = top_layers(arms, exp)
    runs = reference_runs(args)
    chosen = [{"formula": Graph.from_json(t["graph"]).to_text(), **t} for t in top]
    winner = dict(chosen[0]) if chosen else None
    summary = {
        "protocol": f"experiments/from_scratch.py's docstring (results/{exp.name}/README.md)",
        "command": "python experiments/from_scratch.py " + " ".join(sys.argv[1:]),
        "machine": f"{platform.node()} ({platform.machine()}, 2 cores)",
        "budget_worker_seconds": args.budget_seconds,
        "config": arms[exp.primary].get("config"),
        "arms": {arm: {k: r[k] for k in ("seeds", *exp.metrics, "first_valid_at_worker_seconds",
                                         "spending", "false_negatives")}
                 for arm, r in arms.items()},
        "means": means,
        "p_values": p_values,
        "test": "one-sided exact paired sign-flip over the seeds (scipy.stats.permutation_test)",
        "chosen": chosen,
        "winner": winner,
        "reference": {"setting": f"experiments/fidelity_panel.py's SETTING (results/{exp.name}/"
                                 "reference/panel.json)",
                      "command": f"python experiments/from_scratch.py --experiment {exp.name} "
                                 "--step reference",
                      "seeds": list(exp.reference_seeds),
                      "runs": [{k: r.get(k) for k in ("layer", "graph", "arch", "seed",
                                                        "test_accuracy")} for r in runs],
                      "p_values": reference_tests(runs, tuple(t["name"] for t in top)) if runs else {},
                      "test": "one-sided exact permutation test on per-seed means over the "
                              "two architectures (independent samples)"},
    }
    previous = args.out / "summary.json"
    if previous.is_file():  # fields written beside the script's (the ladder, the wall times) stay
        kept = {k: v for k, v in json.loads(previous.read_text()).items() if k not in summary}
        summary.update(kept)
    args.out.mkdir(parents=True, exist_ok=True)
    previous.write_text(json.dumps(summary, indent=1) + "\n")
    rows = [{"arm": arm, "seed": s, **{m: r[m][i] for m in exp.metrics},
             "first valid at (worker-s)": r["first_valid_at_worker_seconds"][i]}
            for arm, r in arms.items() for i, s in enumerate(r["seeds"])]
    write_table(args.out, "runs", rows, {"budget_worker_seconds": args.budget_seconds})
    log(f"summary: {sum(len(r['seeds']) for r in arms.values())} runs finished; means {means}")
    return summary


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=HelpFormatter)
    p.add_argument("--experiment", choices=sorted(EXPERIMENTS), default=FIRST.name,
                   help="which from-primitives experiment: its arms, seeds and preset")
    p.add_argument("--step", choices=("all", "search", "reference", "summary"), default="all",
                   help="all, or one step: the searches, the reference training of the chosen layers, "
                        "the summary")
    p.add_argument("--seeds", nargs="+", type=int, default=None,
                   help="search seeds (default: the experiment's)")
    p.add_argument("--budget-seconds", type=float, default=3600.0, help="worker-seconds per search")
    p.add_argument("--workers", type=int, default=2, help="parallel runs of the reference step")
    p.add_argument("--runs", type=Path, default=None, help="folder of the run folders (default runs/<experiment>)")
    p.add_argument("--out", type=Path, default=None, help="output folder (default results/<experiment>)")
    args = p.parse_args()
    args.exp = EXPERIMENTS[args.experiment]
    args.seeds = args.seeds or list(args.exp.seeds)
    args.runs = args.runs or ROOT / "runs" / args.exp.name
    args.out = out_dir(args.exp.name, args.out)
    if args.step in ("all", "search"):
        search_step(args)
        summary_step(args)
    if args.step in ("all", "reference"):
        reference_step(args)
    summary_step(args)


if __name__ == "__main__":
    main()
