"""A search worth reading: a long S search on the `demo` proxy, its top found layers re-trained
beside the references and seed layers, one table.

Protocol, fixed before the runs:
- Search: preset `demo` (S space, Fashion-MNIST, ResNet50 and MobileNetV2, the three textbook
  seed layers first), `--budget-seconds` worker-seconds (7200: one hour of both cores with 2
  workers), no candidate budget.
- Re-training: the `--top` distinct found layers (by search fitness), the S references
  (BN-ReLU, GN-ReLU, EvoNorm-S0 as native layers) and the run's valid seed layers, each with
  `--seeds` fresh training seeds on both architectures, on the run's data split and full training
  setting (`evonorm retrain`).
- Per found layer, one-sided Welch t-tests at alpha 0.05 against the best seed layer and against
  EvoNorm-S0, each way: a found layer "beats" a layer when p(found > it) < 0.05, is "below" it
  when p(it > found) < 0.05, and "cannot be told apart" from it otherwise. Three found layers
  are three tests each, uncorrected: a single p just under 0.05 is weak evidence.
- Everything is reported: the table lists every re-trained layer with its per-seed fitness, and
  the run's own report (report.html, report/) is copied next to it.

An interrupted run continues: the search resumes from its store, re-training from
retrain.jsonl.

    python -m experiments.long_search                                  # about 80 min on 2 cores
    python -m experiments.long_search --budget-seconds 600 --seeds 2 --out /tmp/x   # a look
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from experiments._common import ROOT, add_search_flags, HelpFormatter, log, out_dir, search_settings, write_table


def table(run: Path, candidates: list) -> tuple[list[dict], list[str]]:
    """One row per re-trained layer, and one sentence per found layer (`candidates`: the run's,
    for the found layers' search fitness)."""
    from evonorm.report.data import formula
    from evonorm.report.verdict import welch_verdict
    from evonorm.measure.retrain import read_rows
    from evonorm.stats import mean_std

    fitness = {c.id: c.fitness for c in candidates}
    by_layer: dict[str, list] = {}
    for r in read_rows(run):
        by_layer.setdefault(r.layer, []).append(r)
    rows = []
    for label, rs in by_layer.items():
        fit = [r.fitness for r in rs if r.fitness is not None]
        first = rs[0]
        m, s = mean_std(fit) if fit else (None, None)
        rows.append({"layer": label, "kind": first.kind,
                     "formula": formula(first.graph) if first.graph is not None else label,
                     "search_fitness": fitness.get(first.candidate_id),
                     "n": len(fit), "failed": len(rs) - len(fit), "mean": m, "std": s,
                     "per_seed": " ".join(f"{f:.4f}" for f in fit), "_fit": fit})
    seeds = [r for r in rows if r["kind"] == "seed" and r["n"] >= 2]
    best_seed = max(seeds, key=lambda r: r["mean"], default=None)
    s0 = next((r for r in rows if r["layer"] == "evonorm_s0" and r["n"] >= 2), None)
    sentences = []
    for r in rows:
        if r["kind"] != "found":
            continue
        parts = []
        for name, key, other in (("the best seed layer", "seed", best_seed), ("EvoNorm-S0", "s0", s0)):
            if other is None or r["n"] < 2:
                parts.append(f"not tested against {name}")
                continue
            word, up, down = welch_verdict(r["_fit"], other["_fit"])
            r[f"p_over_{key}"], r[f"p_under_{key}"] = up, down
            parts.append(f"{word} {name} ({other['layer']}, {100 * other['mean']:.1f}; "
                         f"p={up:.3f} above, {down:.3f} below)")
        if not r["n"]:
            sentences.append(f"found layer {r['layer']}: no seed finished")
            continue
        sentences.append(f"found layer {r['layer']} `{r['formula']}`, {100 * r['mean']:.1f} +- "
                         f"{100 * r['std']:.1f} over {r['n']} seeds: " + "; ".join(parts))
    for r in rows:
        r.pop("_fit")
    return rows, sentences


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=HelpFormatter)
    p.add_argument("--preset", default="demo", help="search preset of the long search")
    p.add_argument("--budget-seconds", type=float, default=7200.0, help="worker-seconds of the search")
    p.add_argument("--workers", type=int, default=2, help="parallel evaluations")
    p.add_argument("--seed", type=int, default=0, help="the search's seed")
    p.add_argument("--seeds", type=int, default=5, help="re-training seeds per layer")
    p.add_argument("--top", type=int, default=3, help="found layers to re-train")
    p.add_argument("--run", type=Path, default=ROOT / "runs" / "long_search",
                   help="the search's run folder (resumed where it exists)")
    p.add_argument("--out", default=None, help="output folder (default results/long_search)")
    add_search_flags(p)  # e.g. --final-train-runs 2, as the one-hour run had
    args = p.parse_args(argv)

    from evonorm.report import write_report
    from evonorm.proxy import resume, search
    from evonorm.measure.retrain import RETRAIN_FILE, retrain
    from evonorm.search.store import Store

    if not (args.run / "store.sqlite").is_file():
        log(f"search {args.preset}, {args.budget_seconds:g} worker-s -> {args.run}")
        search(out=args.run, preset=args.preset, seed=args.seed, budget=1_000_000,
               budget_seconds=args.budget_seconds, workers=args.workers,
               **search_settings(args, args.seed))
    else:
        with Store(args.run, readonly=True) as store:
            complete = store.get_meta("status") == "complete"
        if not complete:
            log(f"resuming {args.run}")
            resume(args.run)
    log(f"re-training the top {args.top} found layers, references and seed layers, "
        f"{args.seeds} seeds each")
    retrain(args.run, top=args.top, seeds=args.seeds, log=log)
    d = out_dir("long_search", args.out)
    write_report([args.run], d)
    shutil.copyfile(args.run / RETRAIN_FILE, d / RETRAIN_FILE)
    with Store(args.run, readonly=True) as store:
        cands = store.candidates()
        cfg = store.config()
    rows, sentences = table(args.run, cands)
    worker_s = sum(c.seconds for c in cands)
    write_table(d, "long_search", rows,
                {"run": str(args.run), "config": cfg, "candidates": len(cands),
                 "valid": sum(c.status == "valid" for c in cands),
                 "worker_seconds": round(worker_s), "verdicts": sentences},
                columns=["layer", "kind", "formula", "search_fitness", "n", "failed", "mean",
                         "std", "per_seed", "p_over_seed", "p_under_seed", "p_over_s0",
                         "p_under_s0"])
    log(f"{len(cands)} candidates, {sum(c.status == 'valid' for c in cands)} valid, "
        f"{worker_s:.0f} worker-s")
    for s in sentences:
        log(s)
    log(f"wrote {d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
