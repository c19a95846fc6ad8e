"""How noisy is one search evaluation? EvoNorm-S0, S1 and S2 as the seed layers of a preset, over
several search seeds.

Protocol, fixed before the runs:
- Each search seed runs one search of the preset whose only candidates are its seed layers
  (EvoNorm-S0, S1, S2 written as graphs; budget 3), so every layer goes through exactly what a
  search does with a candidate: pre-checks, stability, the staged training with its quality bar.
- Per layer: is it valid in every seed, and the mean and sample standard deviation (n - 1) of its
  search fitness over the seeds. The bar: valid in every seed and a std <= 0.03 for each layer.
- A configuration is the preset plus settings (`--train-runs 4`; `--data-seed seed` puts each
  search on its own seed's split); each configuration's runs go to their own folder under
  `--runs`, so an interrupted experiment resumes and a finished search is read back, not trained
  again. Every run is reported in `<name>.json`.

    python -m experiments.seed_layer_noise                                 # demo as shipped
    python -m experiments.seed_layer_noise --train-runs 4 --name demo-4runs
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from experiments._common import ROOT, add_search_flags, HelpFormatter, log, out_dir, search_settings, write_table

LAYERS = ("evonorm_s0", "evonorm_s1", "evonorm_s2")


def one_search(run: Path, preset: str, seed: int, workers: int, settings: dict) -> list[dict]:
    """The seed layers' outcomes in one search (run, or read back when it is complete)."""
    from evonorm.graph.library import NAMED_GRAPHS
    from evonorm.proxy import resume, search
    from evonorm.search.store import Store

    seeds = tuple(json.dumps(NAMED_GRAPHS[name].to_json()) for name in LAYERS)
    if (run / "store.sqlite").is_file():
        with Store(run, readonly=True) as store:
            done = store.num_candidates()
        if done < len(LAYERS):
            resume(run, progress=False)
    else:
        search(out=run, preset=preset, seed=seed, budget=len(LAYERS), workers=workers,
               seed_layers=seeds, progress=False, **settings)
    with Store(run, readonly=True) as store:  # the seed layers are the proposals 0, 1, 2 in order
        by_proposal = {c.proposal: c for c in store.candidates()}
    rows = []
    for i, name in enumerate(LAYERS):
        c = by_proposal.get(i)
        rows.append({"layer": name, "seed": seed, "status": c.status if c else "missing",
                     "reason": c.reason if c else None,
                     "fitness": c.fitness if c and c.status == "valid" else None,
                     "accuracies": dict(c.scores) if c else {},
                     "seconds": round(c.seconds, 1) if c else None})
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=HelpFormatter)
    p.add_argument("--preset", default="demo", help="search preset whose seed layers' noise is measured")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2],
                   help="search seeds, one search each")
    p.add_argument("--workers", type=int, default=2, help="searches at a time")
    p.add_argument("--name", default=None, help="the configuration's name (default: the preset)")
    p.add_argument("--runs", type=Path, default=ROOT / "runs" / "seed_layer_noise",
                   help="folder of each configuration's run folders")
    p.add_argument("--out", default=None, help="output folder (default results/seed_layer_noise)")
    add_search_flags(p)
    args = p.parse_args(argv)
    overrides = search_settings(args)
    name = args.name or args.preset
    start = time.perf_counter()
    rows = []
    for seed in args.seeds:
        log(f"{name}: search seed {seed}")
        rows += one_search(args.runs / name / f"seed{seed}", args.preset, seed, args.workers,
                           search_settings(args, seed))
        for r in rows[-len(LAYERS):]:
            log(f"  {r['layer']}: {r['status']} fitness {r['fitness']} ({r['seconds']} s)")
    summary = []
    for layer in LAYERS:
        mine = [r for r in rows if r["layer"] == layer]
        fit = [r["fitness"] for r in mine if r["fitness"] is not None]
        summary.append({"layer": layer, "valid": f"{len(fit)} of {len(mine)}",
                        "mean": statistics.fmean(fit) if fit else None,
                        "std": statistics.stdev(fit) if len(fit) > 1 else None,
                        "per_seed": " ".join(f"{f:.4f}" for f in fit)})
    ok = all(s["valid"].startswith(f"{len(args.seeds)} ") and s["std"] is not None and s["std"] <= 0.03
             for s in summary)
    d = out_dir("seed_layer_noise", args.out)
    write_table(d, name, summary, {"preset": args.preset, "overrides": overrides,
                                   "seeds": args.seeds, "runs": rows, "bar_met": ok,
                                   "wall_seconds": round(time.perf_counter() - start)},
                columns=["layer", "valid", "mean", "std", "per_seed"])
    log(f"{name}: " + "; ".join(f"{s['layer']} {s['valid']} valid, {s['mean'] and round(s['mean'], 4)} "
                                 f"+- {s['std'] and round(s['std'], 4)}" for s in summary)
        + f"; bar (valid everywhere, std <= 0.03): {'met' if ok else 'not met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
