"""The rejection ladder judged offline, on the candidates of the from-scratch experiment's stored
runs, before any new run: which cheap rungs reject hopeless candidates (those that fail the
ResNet-50 quality test) before the expensive tests, at what cost, and at what loss of the
candidates that pass.

Protocol:
- candidates: every one of the 15 runs (`results/kept/runs+from_scratch.tar.gz`, extracted
  outside the repo) that passed the pre-checks of the layer alone and was evaluated (cache hits,
  failed and prescreen-rejected ones aside): the stability test's rejections, the ResNet-50
  quality test's, the MobileNetV2 quality test's (near misses), non-finite losses, valid layers;
- label: passed the ResNet-50 quality test (a near miss or a valid layer), as the prescreen of a
  search whose population takes near misses learns it;
- rungs, ordered by cost (each's cost measured here per candidate, one torch thread):
  `layer` (a random forest on the engine's features of the layer alone,
  `evonorm.search.features`), `signal` (a forest on those and the network-at-initialisation
  features, `evonorm.proxy.features.signal_features`), `signal_rule` (no fit: a network whose
  loss is not finite at initialisation, or whose logits are alike for every image,
  `evonorm.proxy.features.signal_verdict`), and the
  stability test that the search already runs (its stored cost; it rejects no ResNet-50 pass by
  construction of the candidate set); the whole `ladder` as the `scratch2` preset runs it: the
  layer forest at recall LOOSE_RECALL, the rule, the signal forest, the stability test;
- judged leave one seed out: fitted on four seeds' runs (all arms), judged on the fifth. The
  threshold is chosen on the four seeds alone (their own leave-one-seed-out predictions: the
  highest threshold keeping `--recall` of their passes), as a search fixes it before it runs;
- per rung and for the whole ladder: cost per candidate (worker-s), recall of ResNet-50 passes,
  share of the failures rejected (all failures, and those of the quality tests alone); also on
  the held-out candidates whose function no training seed's run met (`unseen`).

    python -m experiments.ladder_offline --runs /tmp/ladder_runs/runs/from_scratch \\
        --cache /tmp/ladder_features.jsonl --prior
writes results/from_scratch_2/ladder.json ({RUNG: {"cost_s", "recall", "rejected"}}, the whole
ladder as the entry "ladder"), ladder_detail.json (the command, the counts, the thresholds, every
rung's detail, also on unseen functions) and ladder.md. Feature computation is cached in
`--cache` (a rerun only judges).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sqlite3
import sys
import time
from pathlib import Path

from experiments._common import ROOT, command_line, HelpFormatter

PASS = ("valid", "quality:mobilenetv2_cifar")
# the recall at which the layer rung in front of the network's is set: it costs milliseconds, so
# it only takes the candidates it is surest of
LOOSE_RECALL = 0.99
FAIL = ("stability", "quality:resnet50_cifar", "nonfinite")


def outcome(status: str, reason: str | None) -> str | None:
    """A candidate's outcome in the ladder's terms, None for one outside the judged set."""
    if status == "valid":
        return "valid"
    reason = reason or ""
    if status == "rejected" and reason in PASS + FAIL:
        return reason
    return None


def read_candidates(runs: Path) -> list[dict]:
    """The judged candidates of every run folder under `runs` (read with sqlite directly: the
    stores are of the schema the runs were written with)."""
    out = []
    for run in sorted(p for p in runs.iterdir() if (p / "store.sqlite").is_file()):
        arm, seed = run.name.rsplit("_s", 1)
        db = sqlite3.connect(f"file:{run / 'store.sqlite'}?mode=ro", uri=True)
        for cid, graph, key, fp, status, reason, timings, seconds, stages in db.execute(
                "SELECT id, graph, key, fingerprint, status, reason, timings, seconds, stages "
                "FROM candidates WHERE cache_hit = 0 ORDER BY id"):
            kind = outcome(status, reason)
            if kind is None:
                continue
            t = json.loads(timings)
            first = (json.loads(stages) or [{}])[0] if stages and status == "valid" else {}
            out.append({"run": run.name, "arm": arm, "seed": int(seed), "id": cid,
                        "graph": json.loads(graph), "key": key, "fingerprint": fp,
                        "outcome": kind, "passed": kind in PASS,
                        "stability_s": float(t.get("stability", 0.0)),
                        # a valid layer's first-stage fitness, as the prescreen learns it
                        "fitness": sum(first.values()) / len(first) if first else None,
                        "seconds": float(seconds)})
        db.close()
    return out


def compute_features(cands: list[dict], cache: Path) -> dict[tuple[str, int], dict]:
    """Each (layer, seed)'s features and their cost, computed once (kept in `cache`)."""
    import torch

    from evonorm.graph import Graph
    from evonorm.proxy.features import signal_features
    from evonorm.proxy.presets import get_preset
    from evonorm.proxy.api import start
    from evonorm.proxy.config import ProxyTask
    from evonorm.proxy.training import search_dataset
    from evonorm.search.features import layer_features

    torch.set_num_threads(1)
    done: dict[tuple[str, int], dict] = {}
    if cache.is_file():
        for line in cache.read_text().splitlines():
            r = json.loads(line)
            done[r["key"], r["seed"]] = r
    todo = {(c["key"], c["seed"]): c["graph"] for c in cands if (c["key"], c["seed"]) not in done}
    cfgs: dict[int, object] = {}
    with cache.open("a") as f:
        for i, ((key, seed), graph) in enumerate(todo.items()):
            if seed not in cfgs:
                cfgs[seed] = start(get_preset("scratch", seed=seed))[0]
                search_dataset(ProxyTask.of_run(cfgs[seed]))  # loaded once, outside the timings
            t0 = time.perf_counter()
            try:
                layer = layer_features(graph)
            except Exception:  # noqa: BLE001 - a layer that breaks on the probe
                layer = None
            t1 = time.perf_counter()
            signal = signal_features(Graph.from_json(graph), ProxyTask.of_run(cfgs[seed]))
            t2 = time.perf_counter()
            r = {"key": key, "seed": seed, "layer": layer, "signal": signal,
                 "layer_s": t1 - t0, "signal_s": t2 - t1}
            done[key, seed] = r
            f.write(json.dumps(r) + "\n")
            f.flush()
            if i % 100 == 0:
                print(f"features {i}/{len(todo)}", file=sys.stderr, flush=True)
    return done


def rows_of(cands: list[dict], feats: dict, rung: str) -> list[dict | None]:
    """Each candidate's features for a rung's forest; None where the layer alone has none (a
    layer degenerate on the probe: the prescreen trains it, it cannot rank it)."""
    out = []
    for c in cands:
        f = feats[c["key"], c["seed"]]
        if f["layer"] is None:
            out.append(None)
        elif rung == "layer":
            out.append(f["layer"])
        else:
            out.append({**f["layer"], **{f"task_signal_{k}": v for k, v in f["signal"].items()}})
    return out


def forest_scores(train: list[tuple[dict, bool]], test: list[dict | None], seed: int) -> list[float]:
    """P(passes) of each test row from a forest fitted on `train`, as the prescreen's surrogate
    fits one (`evonorm.search.surrogate.Surrogate`: the same forest, features and missing values);
    1.0 for a row without features (never rejected)."""
    from sklearn.ensemble import RandomForestClassifier

    from evonorm.search.surrogate import feature_matrix

    names = sorted({k for f, _ in train for k in f})
    clf = RandomForestClassifier(n_estimators=200, min_samples_leaf=1, random_state=seed,
                                 n_jobs=1).fit(feature_matrix([f for f, _ in train], names),
                                               [int(v) for _, v in train])
    have = [r for r in test if r is not None]
    p = iter(clf.predict_proba(feature_matrix(have, names))[:, list(clf.classes_).index(1)]
             if have else [])
    return [1.0 if r is None else float(next(p)) for r in test]


def threshold_for(scores: list[float], passed: list[bool], recall: float) -> float:
    """The highest threshold (reject below it) that keeps `recall` of the passes."""
    pos = sorted(s for s, v in zip(scores, passed) if v)
    if not pos:
        return 0.0
    return pos[min(len(pos) - 1, int(math.floor((1.0 - recall) * len(pos))))]


def loso_scores(cands: list[dict], rows: list[dict | None], seeds: list[int]) -> list[float]:
    """Each candidate's score from a forest fitted on the other seeds' candidates."""
    scores = [0.0] * len(cands)
    for s in seeds:
        train = [(r, c["passed"]) for c, r in zip(cands, rows) if c["seed"] != s and r is not None]
        idx = [i for i, c in enumerate(cands) if c["seed"] == s]
        for i, p in zip(idx, forest_scores(train, [rows[i] for i in idx], s)):
            scores[i] = p
    return scores


def judge_rung(cands, rows, recall: float, keep: list[bool] | None = None,
               learn: list[bool] | None = None):
    """Per held-out seed: the rung fitted on the other four seeds, its threshold from their own
    leave-one-seed-out scores at `recall`. `keep`: the candidates an earlier rung let through (the
    rung sees only those, and learns only from those); `learn`: the candidates it learns from,
    where not all it sees (a rung in front of the rule learns, as in the search, from those the
    rule keeps: the others have no features stored). Returns (kept flags, thresholds)."""
    seeds = sorted({c["seed"] for c in cands})
    kept = [False] * len(cands)
    thresholds = {}
    on = keep or [True] * len(cands)
    taught = [a and b for a, b in zip(on, learn or on)]
    for s in seeds:
        fit = [i for i, c in enumerate(cands) if c["seed"] != s and taught[i]]
        inner = loso_scores([cands[i] for i in fit], [rows[i] for i in fit],
                            [t for t in seeds if t != s])
        t = threshold_for(inner, [cands[i]["passed"] for i in fit], recall)
        thresholds[s] = t
        test = [i for i, c in enumerate(cands) if c["seed"] == s and on[i]]
        train = [(rows[i], cands[i]["passed"]) for i in fit if rows[i] is not None]
        for i, p in zip(test, forest_scores(train, [rows[i] for i in test], s)):
            kept[i] = p >= t
    return kept, thresholds


def summary(cands, kept: list[bool], cost: list[float], subset: list[bool] | None = None) -> dict:
    """Cost per candidate, recall of the passes and share of failures rejected, over `subset`."""
    on = subset or [True] * len(cands)
    sel = [(c, k, s) for c, k, s, o in zip(cands, kept, cost, on) if o]
    pos = [k for c, k, _ in sel if c["passed"]]
    neg = [(c, k) for c, k, _ in sel if not c["passed"]]
    quality = [k for c, k in neg if c["outcome"] != "stability"]
    saved = sum(c["seconds"] for c, k in neg if not k)
    lost = sum(c["seconds"] for c, k, _ in sel if c["passed"] and not k)
    return {"candidates": len(sel), "passes": len(pos),
            "cost_s": round(sum(s for _, _, s in sel) / max(1, len(sel)), 4),
            "recall": round(sum(pos) / max(1, len(pos)), 4),
            "rejected": round(sum(not k for _, k in neg) / max(1, len(neg)), 4),
            "rejected_quality_failures": round(sum(not k for k in quality) / max(1, len(quality)), 4),
            "failures_worker_s_saved": round(saved, 1), "passes_worker_s_lost": round(lost, 1)}


def write_prior_file(cands, rows, rule, recall: float, command: str) -> dict:
    """The `scratch2` preset's prior: every candidate that the signal rule keeps and that has
    features, labelled as the search labels its own; and the threshold at `recall` of the passes
    over the five seeds' leave-one-seed-out scores (what the preset's threshold is set from)."""
    from evonorm import __version__
    from evonorm.proxy.presets import get_preset
    from evonorm.proxy.prior import PRIORS, Prior, setting, write_prior
    from evonorm.proxy.api import start
    from evonorm.proxy.config import ProxyTask

    keep = [i for i, (r, k) in enumerate(zip(rows, rule)) if k and r is not None]
    kept = [cands[i] for i in keep]
    seeds = sorted({c["seed"] for c in kept})
    scores = loso_scores(kept, [rows[i] for i in keep], seeds)
    threshold = threshold_for(scores, [c["passed"] for c in kept], recall)
    engine = [{k: v for k, v in rows[i].items() if not k.startswith("task_")} for i in keep]
    layer_threshold = threshold_for(loso_scores(kept, engine, seeds),
                                    [c["passed"] for c in kept], LOOSE_RECALL)
    def short(v):  # 6 significant digits: the forest does not tell more apart, the file is half
        return float(f"{v:.6g}") if isinstance(v, float) and math.isfinite(v) else v

    prior_rows = [{"features": {k: short(v) for k, v in rows[i].items()}, "valid": cands[i]["passed"],
                   "fitness": cands[i]["fitness"] if cands[i]["outcome"] == "valid" else None}
                  for i in keep]
    runs = sorted({c["run"] for c in cands})
    sources = [{"run": r, "seed": next(c["seed"] for c in cands if c["run"] == r),
                "arm": next(c["arm"] for c in cands if c["run"] == r),
                "rows": sum(cands[i]["run"] == r for i in keep),
                "valid": sum(cands[i]["run"] == r and cands[i]["passed"] for i in keep)}
               for r in runs]
    provenance = {
        "fitted_on": "the from-scratch experiment's 15 runs (results/from_scratch, preset "
                     "`scratch`, the `demo` proxy): every evaluated candidate that passed the "
                     "pre-checks, not a cache hit, that the signal rule keeps; features recomputed "
                     "now; valid = passed the ResNet-50 quality test (a near miss or a valid layer)",
        "runs": sources, "command": command, "evonorm": __version__,
        "created": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "rows": len(prior_rows), "valid": sum(r["valid"] for r in prior_rows),
        "threshold_at_recall": {"recall": recall, "threshold": threshold},
        "layer_threshold_at_recall": {"recall": LOOSE_RECALL, "threshold": layer_threshold}}
    cfg = start(get_preset("scratch2"))[0]
    path = PRIORS / f"scratch2-{cfg.evolution.space}.json"
    write_prior(path, Prior(setting(ProxyTask.of_run(cfg), cfg.evolution.space), prior_rows, provenance))
    print(f"prior: {len(prior_rows)} rows ({provenance['valid']} valid) -> {path}; threshold at "
          f"recall {recall}: {threshold:.4f}; the layer rung's at {LOOSE_RECALL}: "
          f"{layer_threshold:.4f}", file=sys.stderr)
    return {"path": str(path.relative_to(ROOT)), "rows": len(prior_rows),
            "valid": provenance["valid"], "threshold": threshold,
            "layer_threshold": layer_threshold}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=HelpFormatter)
    p.add_argument("--runs", type=Path, required=True,
                   help="the extracted run folders (results/kept/runs+from_scratch.tar.gz)")
    p.add_argument("--cache", type=Path, required=True, help="features computed so far (JSONL)")
    p.add_argument("--recall", type=float, default=0.97,
                   help="recall of the training seeds' passes that fixes each threshold")
    p.add_argument("--out", type=Path, default=ROOT / "results" / "from_scratch_2",
                   help="folder for the ladder's tables")
    p.add_argument("--prior", action="store_true",
                   help="also write the prescreen prior of the `scratch2` preset, fitted on every "
                        "candidate the signal rule keeps, and print its threshold")
    args = p.parse_args()
    from evonorm.proxy.features import signal_verdict

    if not args.runs.is_dir():
        sys.exit(f"error: no run folders at {args.runs}")
    cands = read_candidates(args.runs)
    feats = compute_features(cands, args.cache)
    f_of = [feats[c["key"], c["seed"]] for c in cands]
    layer_cost = [f["layer_s"] for f in f_of]
    signal_cost = [f["layer_s"] + f["signal_s"] for f in f_of]
    stab = [c["stability_s"] for c in cands]
    seeds = sorted({c["seed"] for c in cands})
    # a held-out candidate whose function a training seed's run met: the forest may know it
    fps = {s: {c["fingerprint"] or c["key"] for c in cands if c["seed"] == s} for s in seeds}
    unseen = [not any((c["fingerprint"] or c["key"]) in fps[t] for t in seeds if t != c["seed"])
              for c in cands]

    out: dict[str, dict] = {}
    detail: dict[str, dict] = {}

    def record(name: str, kept, cost, note: str) -> None:
        out[name] = {k: v for k, v in summary(cands, kept, cost).items()
                     if k in ("cost_s", "recall", "rejected")}
        detail[name] = {"all": summary(cands, kept, cost), "unseen": summary(cands, kept, cost, unseen),
                        "what": note}

    record("stability", [c["outcome"] != "stability" for c in cands], stab,
           "the stability test as the search runs it (stored cost)")
    rule = [signal_verdict(f["signal"]) is None for f in f_of]
    record("signal_rule", rule, [f["signal_s"] for f in f_of],
           "network at init, no fit: loss finite and logits differ across images")
    layer_rows = rows_of(cands, feats, "layer")
    signal_rows = rows_of(cands, feats, "signal")
    layer_kept, layer_t = judge_rung(cands, layer_rows, args.recall)
    record("layer", layer_kept, layer_cost, "forest on the layer alone's features")
    signal_kept, signal_t = judge_rung(cands, signal_rows, args.recall)
    record("signal", signal_kept, signal_cost,
           "forest on the layer's and the network-at-init features")
    stable = [c["outcome"] != "stability" for c in cands]

    def then_stability(kept, cost):  # the stability test on what a screen keeps
        return ([a and b for a, b in zip(kept, stable)],
                [c0 + (s if k else 0.0) for c0, s, k in zip(cost, stab, kept)])

    # the network at initialisation: the rule, then the signal forest fitted on what it keeps
    screened, screened_t = judge_rung(cands, signal_rows, args.recall, keep=rule)
    record("signal_rule_then_forest", screened, signal_cost,
           "the signal rule, then the signal forest on what it keeps")
    record("ladder_no_layer_rung", *then_stability(screened, signal_cost),
           "the signal rule, the signal forest, then the stability test on their survivors")
    # the ladder the `scratch2` preset runs: the layer rung at a looser recall, learning as in the
    # search from the candidates the rule keeps (the others have no features stored), so that
    # only what it keeps pays for the network's features; then the rule, the signal forest and
    # the stability test
    loose, loose_t = judge_rung(cands, layer_rows, LOOSE_RECALL, learn=rule)
    second, second_t = judge_rung(cands, signal_rows, args.recall,
                                  keep=[a and b for a, b in zip(loose, rule)])
    cost = [lc + (f["signal_s"] if k else 0.0) for lc, f, k in zip(layer_cost, f_of, loose)]
    record("ladder", *then_stability(second, cost),
           "the preset's ladder: the layer rung (loose), the signal rule, the signal forest, the "
           "stability test: the whole screen in front of the quality tests")
    counts = {k: sum(c["outcome"] == k for c in cands) for k in PASS + FAIL}
    meta = {"command": command_line(), "machine": platform.platform(),
            "cpu": "2 cores shared with other jobs, one torch thread",
            "created": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "candidates": len(cands), "outcomes": counts, "seeds": seeds,
            "unseen": sum(unseen), "fit_recall": args.recall,
            "thresholds": {"layer": layer_t, "signal": signal_t, "no_layer_rung": screened_t,
                           "ladder": {"layer": loose_t, "signal": second_t}},
            "detail": detail}
    if args.prior:
        meta["prior"] = write_prior_file(cands, signal_rows, rule, args.recall, meta["command"])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ladder.json").write_text(json.dumps(out, indent=1) + "\n")
    (args.out / "ladder_detail.json").write_text(json.dumps(meta, indent=1) + "\n")
    lines = ["| rung | cost_s | recall | rejected | rejected (quality-test failures) | "
             "recall (unseen) | rejected (unseen) |", "|---|---|---|---|---|---|---|"]
    for name, d in detail.items():
        a, u = d["all"], d["unseen"]
        lines.append(f"| {name} | {a['cost_s']:.3f} | {a['recall']:.3f} | {a['rejected']:.3f} | "
                     f"{a['rejected_quality_failures']:.3f} | {u['recall']:.3f} | "
                     f"{u['rejected']:.3f} |")
    (args.out / "ladder.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
