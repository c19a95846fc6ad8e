"""Experiment 7: one layer against the references on data splits no search has seen (a confirmatory test).

A layer a search picked is the best of many noisy evaluations on one data split, so its search score
and even a re-training on that split favour it. This trains it beside the reference layers on fresh
splits, every layer on the same (split, training seed) pairs, and tests the paired differences.

Protocol (fixed before the runs; docs/findings.md gives each run's):
- the layer: `--graph`, a graph JSON file (a search candidate's `graph`) or a named graph; the rivals:
  `--against`, registry layers;
- the setting: the preset's full training (`--preset`, default demo) on each of its architectures;
  fitness is the mean held-out accuracy over them, as in the search. `--setting rerank` takes the
  preset's rerank setting instead (longer training on more images, scored on the dataset's test split);
- the splits: `--data-seeds` (each draws its own training subset and held-out part); on each split,
  training seeds 2000 .. 2000 + `--seeds` - 1 for every layer, so each (split, seed) pair is a pair;
- the test: for each rival, the exact one-sided paired sign-flip test of layer - rival over the pairs,
  both ways; `--primary` names the one comparison fixed before the runs. A run that fails (not finite)
  counts as chance accuracy, as a layer that learns nothing.
Each finished (split, layer, seed) is a line in `<out>/split<D>_<layer>.jsonl`, so a stopped run resumes;
`confirm.{json,md}` hold every value and the tests.

    python -m experiments.confirm_layer --graph results/confirm_layer/layer.json \
        --against gn_relu evonorm_s0 bn_relu --primary gn_relu --data-seeds 100 101 102 --seeds 4
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from experiments._common import command_line, HelpFormatter, log, out_dir
from evonorm.proxy.config import ProxyTask, configured

SEED_BASE = 2000  # training seeds: apart from the search's (cfg.seed) and retrain's (1000 + ...)


def rows_file(d: Path, data_seed: int, label: str) -> Path:
    """The re-training rows of one layer on one split."""
    return d / f"split{data_seed}_{label}.jsonl"


def analyze(d: Path, labels: list[str], data_seeds: list[int], seeds: list[int], chance: float,
            primary: str) -> dict:
    """Per layer its fitness on every (split, seed); per rival the paired differences and both one-sided p."""
    from evonorm.measure.ledger import read_ledger
    from evonorm.stats import mean_std, paired_sign_flip_greater

    fit: dict[str, dict[tuple[int, int], float]] = {}
    for label in labels:
        fit[label] = {}
        for ds in data_seeds:
            for r in read_ledger(rows_file(d, ds, label)):
                fit[label][(ds, r.seed)] = chance if r.fitness is None else r.fitness
    pairs = [(ds, s) for ds in data_seeds for s in seeds]
    found, rivals = labels[0], labels[1:]
    layers = {}
    for label in labels:
        vals = [fit[label][k] for k in pairs if k in fit[label]]
        per_split = {str(ds): statistics.fmean(v) for ds in data_seeds
                     if (v := [fit[label][(ds, s)] for s in seeds if (ds, s) in fit[label]])}
        m, sd = mean_std(vals) if vals else (None, None)
        layers[label] = {"runs": len(vals), "mean": m, "std": sd, "per_split": per_split,
                         "values": {f"{ds}/{s}": fit[label][(ds, s)] for ds, s in pairs if (ds, s) in fit[label]}}
    tests = {}
    for rival in rivals:
        both = [k for k in pairs if k in fit[found] and k in fit[rival]]
        a, b = [fit[found][k] for k in both], [fit[rival][k] for k in both]
        tests[rival] = {"pairs": len(both), "mean_difference": statistics.fmean(x - y for x, y in zip(a, b))
                        if both else None,
                        "p_above": paired_sign_flip_greater(a, b) if both else None,
                        "p_below": paired_sign_flip_greater(b, a) if both else None}
    complete = all(layers[label]["runs"] == len(pairs) for label in labels)
    t = tests.get(primary)
    verdict = None
    if complete and t is not None:
        verdict = (f"the layer is above {primary} (paired p = {t['p_above']:.4f} < 0.05)" if t["p_above"] < 0.05
                   else f"the layer cannot be told above {primary} (paired p = {t['p_above']:.4f} >= 0.05)")
    return {"data_seeds": data_seeds, "training_seeds": seeds, "chance": chance, "primary": primary,
            "complete": complete, "verdict": verdict, "layers": layers, "tests": tests,
            "test": "exact one-sided paired sign-flip test of layer - rival over the (split, training seed) pairs"}


def write_md(d: Path, out: dict, graph_text: str) -> None:
    cols = " | ".join(f"split {ds}" for ds in out["data_seeds"])
    lines = [f"Layer: `{graph_text}`", "",
             f"| layer | {cols} | mean +- std ({len(out['data_seeds'])} x {len(out['training_seeds'])} runs) | "
             "layer - it (paired mean) | p (layer above) | p (layer below) |",
             "|---|" + "---|" * len(out["data_seeds"]) + "---|---|---|---|"]
    for label, row in out["layers"].items():
        splits = " | ".join(f"{row['per_split'].get(str(ds), float('nan')):.4f}" for ds in out["data_seeds"])
        t = out["tests"].get(label)
        tail = (f"{t['mean_difference']:+.4f} | {t['p_above']:.4f} | {t['p_below']:.4f}" if t and t["pairs"]
                else " | | ")
        mean = f"{row['mean']:.4f} +- {row['std']:.4f}" if row["runs"] else "-"
        lines.append(f"| {label} | {splits} | {mean} | {tail} |")
    lines += ["", f"Test: {out['test']}; primary comparison fixed before the runs: {out['primary']}.",
              f"Verdict: {out['verdict'] or 'incomplete (runs missing)'}."]
    (d / "confirm.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    from evonorm.graph import Graph
    from evonorm.graph.library import resolve_graph
    from evonorm.layers import list_norm_acts
    from evonorm.proxy.api import start
    from evonorm.proxy.training import search_dataset
    from evonorm.proxy.presets import get_preset, list_presets
    from evonorm.measure.retrain import pending, train_layers

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=HelpFormatter)
    ap.add_argument("--graph", required=True,
                    help="the layer: a graph JSON file ({\"nodes\": [...]}) or a named graph "
                         "(evonorm list graphs)")
    ap.add_argument("--against", nargs="+", default=["gn_relu", "evonorm_s0", "bn_relu"],
                    help="registry layers")
    ap.add_argument("--primary", default="gn_relu",
                    help="the comparison fixed before the runs (one of --against)")
    ap.add_argument("--preset", default="demo", choices=sorted(list_presets()),
                    help="search preset whose task trains the layers")
    ap.add_argument("--setting", default="search", choices=["search", "rerank"],
                    help="search: the preset's full training on its split (default); rerank: its rerank "
                         "setting, trained on the training split less the split's held-out images, "
                         "scored on the dataset's test split")
    ap.add_argument("--data-seeds", type=int, nargs="+", default=[100, 101, 102],
                    help="data splits the layer was not picked on, each with its own training seeds")
    ap.add_argument("--seeds", type=int, default=4, help="training seeds per split")
    ap.add_argument("--workers", type=int, default=2, help="(layer, seed) runs trained at a time, one thread each")
    ap.add_argument("--analyze-only", action="store_true",
                    help="tables from the rows so far, no training")
    ap.add_argument("--out", help="output folder (default results/confirm_layer)")
    args = ap.parse_args(argv)
    try:  # a graph JSON file, else a named graph (evonorm list graphs)
        path = Path(args.graph)
        graph = Graph.from_json(json.loads(path.read_text())) if path.is_file() else resolve_graph(args.graph)
        spec, text = graph.to_json(), str(graph)
    except (OSError, ValueError, KeyError, TypeError) as err:
        print(f"confirm_layer: --graph {args.graph}: {err}", file=sys.stderr)
        return 2
    unknown = [n for n in args.against if n not in list_norm_acts()]
    if unknown or args.primary not in args.against or args.seeds < 1 or args.workers < 1:
        print(f"confirm_layer: --against needs registry layers (unknown: {unknown}), --primary one of them, "
              f"--seeds and --workers >= 1", file=sys.stderr)
        return 2
    d = out_dir("confirm_layer", args.out)
    labels = ["layer", *args.against]
    seeds = [SEED_BASE + i for i in range(args.seeds)]
    cfgs = {ds: start(configured(get_preset(args.preset), data_seed=ds))[0] for ds in args.data_seeds}
    if not args.analyze_only:
        jobs = [(cfgs[ds], (label, "found" if label == "layer" else "reference",
                            spec if label == "layer" else label, None), rows_file(d, ds, label))
                for ds in args.data_seeds for label in labels if pending(rows_file(d, ds, label), label, seeds)]
        log(f"confirm_layer: {len(labels)} layers x {len(args.data_seeds)} splits x {args.seeds} seeds, "
            f"{len(jobs)} (split, layer) jobs to train, {args.workers} at a time -> {d}")
        for cfg, layer, path in jobs:  # the package's ledger: resumable, on `workers` workers of one thread
            train_layers(cfg.replace(execution=cfg.execution.replace(workers=args.workers, threads=1)), [layer],
                         seeds, path, log=log, rerank=args.setting == "rerank")
    chance = 1.0 / search_dataset(ProxyTask.of_run(cfgs[args.data_seeds[0]])).num_classes
    out = analyze(d, labels, args.data_seeds, seeds, chance, args.primary)
    out.update(graph=spec, layer=text, preset=args.preset, setting=args.setting, command=command_line())
    (d / "confirm.json").write_text(json.dumps(out, indent=1) + "\n")
    write_md(d, out, text)
    log((d / "confirm.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
