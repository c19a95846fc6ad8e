"""The prescreen's surrogate on held-out candidates of an existing run: how well it tells, from the
features at birth alone, which candidates pass rejection and how valid ones rank.

Protocol (fixed before the run):
- Data: the candidates of one run folder, or of several of one setting pooled (`--run`; the first
  measurement read the main job of 2026-11-27, main-2e787d5: `demo` preset, S space,
  Fashion-MNIST, 2 cores), read-only. Kept: evaluated ones
  (not cache hits, not failed, not prescreen rejections) whose layer is not degenerate (the
  engine's features exist: constant, x-independent or non-finite layers are the pre-checks'
  and never reach the surrogate). Features are computed offline exactly as `--prescreen on`
  computes them at birth: the engine's plus the proxy task's under the run's own config.
- Labels: passes rejection (status valid); fitness of valid layers (the first stage's, which the
  surrogate learns). Also, as a secondary label because valid layers are rare: passes the stability
  test (reaches the quality test: rejected by "quality:..." or valid).
- Learning curve: for each n in `--sizes`, `--splits` random permutations (seeds 0..splits-1):
  the surrogate (`evonorm.search.surrogate.Surrogate`, random forests, min_each=1) learns from the
  first n, and is scored on all the others: AUC (Mann-Whitney, ties 1/2) where the held-out part
  has both classes and the learned part has both, Spearman for fitness where >= 3 held-out valid
  layers have a prediction. Reported: the mean and range over splits that could be scored, and how
  many could. Beside it, scikit-learn's HistGradientBoostingClassifier on the same splits, to pick
  the model by measurement.
- Ablation (added with the task's 4-step fit features, before their first run): the same
  splits with them left out (`--drop fit_ --name holdout-nofit`), to see what they add.
- Outputs: results/prescreen/holdout.json (every number, the command, the run's counts) and
  holdout.md. Minutes of CPU at most.

    python -m experiments.surrogate_holdout --run RUN --sizes 10,20,30 --splits 20
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

from evonorm.proxy.objective import ProxyObjective
from evonorm.search.store import Store
from evonorm.search.surrogate import Prescreen, Surrogate
from evonorm.search.surrogate import label as candidate_label
from evonorm.stats import spearman
from evonorm.proxy.config import stored_task
from experiments._common import command_line, HelpFormatter

OUT = Path("results/prescreen")


def auc(scores: list[float], labels: list[bool]) -> float | None:
    """Area under the ROC curve: P(score of a positive > score of a negative), ties 1/2."""
    pos = [s for s, y in zip(scores, labels) if y]
    neg = [s for s, y in zip(scores, labels) if not y]
    if not pos or not neg:
        return None
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def labelled(run: Path, drop: tuple[str, ...] = ()) -> tuple[list[dict], dict]:
    """The kept candidates with features and labels, and the run's counts; features whose name
    contains one of `drop` are left out (an ablation)."""
    with Store(run, readonly=True) as st:
        cfg = st.search_config()
        cands = st.candidates()
        status = st.get_meta("status")
    screen = Prescreen(cfg, ProxyObjective.for_run(cfg).prescreen_features)
    rows, degenerate = [], 0
    # what the search's surrogate learns from, labelled as it labels them
    evaluated = [(c, t) for c, t in ((c, candidate_label(c)) for c in cands) if t is not None]
    for c, (valid, fitness) in evaluated:
        feats = screen.features(c.graph)
        if feats is None:
            degenerate += 1
            continue
        feats = {k: v for k, v in feats.items() if not any(d in k for d in drop)}
        rows.append({"id": c.id, "features": feats, "valid": valid,
                     "stable": valid or (c.reason or "").startswith("quality:"),
                     "fitness": fitness, "reason": c.reason})
    counts = {"candidates": len(cands), "status": status, "evaluated": len(evaluated),
              "degenerate": degenerate, "kept": len(rows),
              "valid": sum(r["valid"] for r in rows), "stable": sum(r["stable"] for r in rows),
              "preset": cfg.preset, "space": cfg.evolution.space, "dataset": stored_task(cfg).dataset}
    return rows, counts


def boosting_p(train: list[dict], test: list[dict], label: str, seed: int) -> list[float] | None:
    from sklearn.ensemble import HistGradientBoostingClassifier

    from evonorm.search.surrogate import feature_matrix

    names = sorted({k for r in train for k in r["features"]})
    y = [int(r[label]) for r in train]
    if len(set(y)) < 2:
        return None
    clf = HistGradientBoostingClassifier(random_state=seed, min_samples_leaf=2).fit(
        feature_matrix([r["features"] for r in train], names), y)
    return list(clf.predict_proba(feature_matrix([r["features"] for r in test], names))[:, 1])


def curve(rows: list[dict], sizes: list[int], splits: int) -> list[dict]:
    out = []
    for n in sizes:
        if n >= len(rows):
            continue
        res = {"n": n, "auc_valid": [], "auc_stable": [], "auc_stable_boosting": [],
               "spearman_fitness": []}
        for seed in range(splits):
            order = rows[:]
            random.Random(seed).shuffle(order)
            train, test = order[:n], order[n:]
            for label in ("valid", "stable"):
                s = Surrogate(min_each=1, seed=seed)
                for r in train:
                    s.add(r["features"], r[label], r["fitness"] if label == "valid" else None)
                if not s.ready:
                    continue
                preds = [s.predict(r["features"]) for r in test]
                a = auc([p.p_valid for p in preds], [r[label] for r in test])
                if a is not None:
                    res[f"auc_{label}"].append(a)
                if label == "valid":
                    pairs = [(p.fitness, r["fitness"]) for p, r in zip(preds, test)
                             if r["valid"] and p.fitness is not None]
                    rho = spearman(*map(list, zip(*pairs))) if len(pairs) >= 3 else None
                    if rho is not None:
                        res["spearman_fitness"].append(rho)
                if label == "stable":
                    pb = boosting_p(train, test, "stable", seed)
                    ab = auc(pb, [r["stable"] for r in test]) if pb is not None else None
                    if ab is not None:
                        res["auc_stable_boosting"].append(ab)
        out.append(res)
    return out


def fmt(values: list[float]) -> str:
    if not values:
        return "not scorable"
    m = sum(values) / len(values)
    return f"{m:.2f} [{min(values):.2f}, {max(values):.2f}] ({len(values)} splits)"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=HelpFormatter)
    p.add_argument("--run", nargs="+", required=True,
                   help="run folders of one setting (their candidates pooled)")
    p.add_argument("--sizes", default="8,12,16,20,24,28",
                   help="comma-separated learning-curve sizes: the surrogate learns from the first "
                        "n candidates and is scored on the others")
    p.add_argument("--splits", type=int, default=20, help="random orders of the candidates per size")
    p.add_argument("--out", type=Path, default=OUT, help="output folder")
    p.add_argument("--drop", nargs="*", default=[],
                   help="leave out features whose name contains any of these (an ablation)")
    p.add_argument("--name", default="holdout", help="output file name, without extension")
    args = p.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    start = time.time()
    rows, counts = [], {}
    for run in args.run:  # pooled: the counts summed, the setting's names from the first run
        more, c = labelled(Path(run), tuple(args.drop))
        rows += more
        counts = {k: counts[k] + v if isinstance(v, int) and k in counts else counts.get(k, v)
                  for k, v in c.items()}
    seconds_features = time.time() - start
    results = curve(rows, sizes, args.splits)
    summary = {"command": command_line(), "run": args.run, "counts": counts,
               "feature_seconds_wall": round(seconds_features, 1), "splits": args.splits,
               "model": "evonorm.search.surrogate.Surrogate (random forests, min_each=1)",
               "dropped_features": args.drop,
               "curve": results}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(summary, indent=1) + "\n")
    lines = ["# The prescreen's surrogate on held-out candidates", "",
             f"Command: `{summary['command']}`; run(s) {', '.join(args.run)} ({counts['preset']}, "
             f"{counts['space'].upper()} space, {counts['dataset']}, store status "
             f"{counts['status']}): {counts['candidates']} candidates, {counts['evaluated']} "
             f"evaluated (no cache hits or failures), {counts['degenerate']} degenerate "
             f"(no features), {counts['kept']} kept: {counts['valid']} valid, {counts['stable']} "
             f"passed the stability test. Protocol: the script's docstring."
             + (f" Features left out: names containing {', '.join(args.drop)}." if args.drop
                else ""), "",
             "| learned from | AUC passes rejection | AUC passes stability (forest) | "
             "AUC passes stability (boosting) | Spearman fitness (valid) |", "|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['n']} | {fmt(r['auc_valid'])} | {fmt(r['auc_stable'])} | "
                     f"{fmt(r['auc_stable_boosting'])} | {fmt(r['spearman_fitness'])} |")
    (args.out / f"{args.name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
