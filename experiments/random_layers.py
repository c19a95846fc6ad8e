"""Experiment 1: most random layers do not learn (paper Fig. 2) and a layer that
works on one architecture may fail on another (finding 2, Fig. 4).

Draws --graphs random graphs from the search space and puts each through the search's quality
test (`evonorm.proxy.rejection.quality` with a search preset's settings: train --steps steps on each
anchor architecture, score on the held-out 10% of the training split) on all three architectures, without stopping at the first failure so the calibration can be
drawn. A non-finite loss or an exception counts as chance, as a layer that does not learn.
BN-ReLU, EvoNorm-B0 and EvoNorm-S0 go through the same test as references.

Progress is appended to records.jsonl as each graph finishes; rerunning continues where it stopped.

    python -m experiments.random_layers                       # ~15-25 min on 2 cores, Fashion-MNIST
    python -m experiments.random_layers --graphs 1000 --steps 100 --width 0.25 --dataset cifar10
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import sys
import time
from pathlib import Path

from experiments._common import HelpFormatter, log, map_jobs, out_dir, save_png, write_table
from evonorm.proxy.config import ProxyTask, stored_task

ARCHS = ["resnet50_cifar", "mobilenetv2_cifar", "efficientnet_b0_cifar"]
REFERENCES = ["bn_relu", "evonorm_b0", "evonorm_s0"]


def cfg_schedule(cfg) -> str:
    """The quality run's lr schedule: the search's ("constant") unless --schedule said otherwise."""
    return stored_task(cfg).train.get("schedule", "constant")


def quality_accuracy(norm_act, ds, cfg, arch: str) -> tuple[float | None, str]:
    """The search's quality test on one architecture: (accuracy or None, outcome); never raises."""
    from evonorm.proxy.rejection import quality

    try:
        rej, accs = quality(norm_act, ds, [arch], lambda a: ProxyTask.of_run(cfg).quality_training(a, cfg_schedule(cfg)),
                            factor=stored_task(cfg).quality_factor)
    except Exception as err:  # a random layer may fail to compile or run
        return None, f"error: {type(err).__name__}"
    if arch not in accs:
        return None, rej.reason if rej else "nonfinite"
    return accs[arch], "ok"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("--graphs", type=int, default=200, help="random graphs to test")
    p.add_argument("--space", choices=["b", "s"], default="b",
                   help="b: every op (default), s: no batch_* ops")
    p.add_argument("--archs", nargs="+", default=ARCHS, help="architectures each graph trains on")
    p.add_argument("--dataset", default=None,
                   help="fashion_mnist, cifar10, ... (default: fashion_mnist when installed, else "
                        "synthetic)")
    p.add_argument("--data-root", default=None,
                   help="folder holding the dataset files (default: $EVONORM_DATA, else "
                        "~/.cache/evonorm/data)")
    p.add_argument("--n-train", type=int, default=4000, help="training images, a seeded subset")
    p.add_argument("--steps", type=int, default=40, help="quality-test training steps per architecture")
    p.add_argument("--batch-size", type=int, default=32, help="images per training step")
    p.add_argument("--width", type=float, default=0.125, help="channel multiplier of every architecture")
    p.add_argument("--preset", default="demo", help="search preset whose quality test is used")
    p.add_argument("--schedule", choices=["constant", "cosine"], default=None,
                   help="quality-run lr schedule (default: constant, as the search's quality test)")
    p.add_argument("--seed", type=int, default=0, help="seed of the graphs drawn and of the training")
    p.add_argument("--workers", type=int, default=2, help="parallel processes (one torch thread each)")
    p.add_argument("--device", default="cpu", help="training device (cpu, cuda)")
    p.add_argument("--out", default=None, help="output folder (default results/random_layers)")
    p.add_argument("--summarize-only", action="store_true",
                   help="only write the table and figures from the records gathered so far")
    args = p.parse_args(argv)

    from evonorm.data import default_dataset_name
    from evonorm.graph import random_graph
    from evonorm.proxy.presets import get_preset

    name = args.dataset or default_dataset_name()
    cfg = get_preset(args.preset, dataset=name, data_root=args.data_root, n_train=args.n_train,
                     archs=tuple(args.archs), quality_steps=args.steps, seed=args.seed,
                     train={"batch_size": args.batch_size, "width": args.width, "device": args.device,
                            **({"schedule": args.schedule} if args.schedule else {})})
    chance = 1.0 / (100 if name == "cifar100" else 10)
    d = out_dir("random_layers", args.out)
    rec_path = d / "records.jsonl"
    done = {}
    if rec_path.exists():
        for line in rec_path.read_text().splitlines():
            try:
                r = json.loads(line)
            except ValueError:
                continue  # a line cut by a crash
            done[r["name"]] = r
    settings = {**vars(args), "dataset": name,
                "quality_train": dataclasses.asdict(ProxyTask.of_run(cfg).quality_training(args.archs[0], cfg_schedule(cfg))),
                "search_config": cfg.to_dict()}
    log(f"{name}; {len(done)} records kept from an earlier run; {args.workers} worker(s)")

    rng = random.Random(args.seed)
    todo = [(r, None) for r in REFERENCES]
    for i in range(args.graphs):
        g = random_graph(rng, allow_batch=args.space == "b")  # drawn in order: same graphs on resume
        todo.append((f"random_{i:04d}", g.to_json()))
    if args.summarize_only:
        todo = [t for t in todo if t[0] in done]
        settings["note"] = f"partial: {sum(t[0].startswith('random_') for t in todo)} of {args.graphs} graphs"
    jobs = [(label, g, cfg.to_dict()) for label, g in todo if label not in done]
    t0 = time.time()
    with open(rec_path, "a") as f:
        for k, rec in enumerate(map_jobs(evaluate_layer, [(job,) for job in jobs], args.workers)):
            f.write(json.dumps(rec) + "\n")
            f.flush()
            done[rec["name"]] = rec
            if k % 10 == 0 or not rec["name"].startswith("random_"):
                eta = (time.time() - t0) / (k + 1) * (len(jobs) - k - 1)
                accs = " ".join(f"{v:.2f}" if v is not None else "--" for v in rec["accuracies"].values())
                log(f"{k + 1}/{len(jobs)} {rec['name']}: {accs} ({rec['seconds']}s, eta {eta / 60:.1f} min)")
    summarize([done[label] for label, _ in todo], args.archs, chance, d, settings)
    return 0


def evaluate_layer(job) -> dict:
    """One layer (registry name or random graph JSON) through the quality test on every arch.
    Runs in a worker process: one torch thread (two threads per process on a busy 2-core machine
    run ~10x slower than one), data loaded once per process."""
    import torch

    from evonorm.graph import Graph
    from evonorm.proxy.training import search_dataset
    from evonorm.search.config import SearchConfig

    torch.set_num_threads(1)
    label, graph, raw = job
    cfg = SearchConfig.from_dict(raw)
    ds = search_dataset(ProxyTask.of_run(cfg))
    g = Graph.from_json(graph) if graph is not None else None
    rec = {"name": label, "graph": graph, "formula": g.to_text() if g is not None else label,
           "key": g.key() if g is not None else None, "accuracies": {}, "outcomes": {}}
    ts = time.time()
    for a in stored_task(cfg).archs:
        acc, outcome = quality_accuracy(g if g is not None else label, ds, cfg, a)
        rec["accuracies"][a] = acc
        rec["outcomes"][a] = outcome
    rec["seconds"] = round(time.time() - ts, 2)
    return rec


def summarize(records, archs, chance, d: Path, settings: dict) -> None:
    from evonorm.report import figures as F
    from evonorm.stats import pearson

    near = chance * 1.5  # "at chance": within half a chance level of it (<= 15% for 10 classes)
    quality = chance * 2.0  # the search's quality threshold
    refs = [r for r in records if not r["name"].startswith("random_")]
    rand = [r for r in records if r["name"].startswith("random_")]
    acc = {a: [r["accuracies"].get(a) if r["accuracies"].get(a) is not None else chance for r in rand]
           for a in archs}
    rows = []
    for a in archs:
        vals = acc[a]
        rows.append({"arch": a, "layers": len(vals),
                     "near_chance": sum(v <= near for v in vals) / len(vals),
                     "below_quality": sum(v < quality for v in vals) / len(vals),
                     "nonfinite_or_error": sum(r["outcomes"].get(a) != "ok" for r in rand) / len(vals),
                     "best": max(vals), **{f"ref_{r['name']}": r["accuracies"].get(a) for r in refs}})
    all_near = sum(all(acc[a][i] <= near for a in archs) for i in range(len(rand))) / len(rand)
    passes = [i for i in range(len(rand)) if all(acc[a][i] >= quality for a in archs)]
    some = [i for i in range(len(rand)) if any(acc[a][i] >= quality for a in archs)]
    rows.append({"arch": "all archs", "layers": len(rand), "near_chance": all_near,
                 "below_quality": 1 - len(passes) / len(rand),
                 "nonfinite_or_error": sum(any(r["outcomes"].get(a) != "ok" for a in archs) for r in rand) / len(rand),
                 "best": max(sum(acc[a][i] for a in archs) / len(archs) for i in range(len(rand)))})
    pairs = []
    for i, a in enumerate(archs):
        for b in archs[i + 1:]:
            pairs.append({"pair": f"{a} vs {b}", "pearson_r": pearson(acc[a], acc[b]),
                          "learns_on_a_only": sum(acc[a][k] >= quality > acc[b][k] for k in range(len(rand))),
                          "learns_on_b_only": sum(acc[b][k] >= quality > acc[a][k] for k in range(len(rand)))})
    meta = {"settings": settings, "chance": chance, "near_chance_threshold": near,
            "quality_threshold": quality, "pass_quality_on_all": len(passes),
            "pass_quality_on_some_not_all": len(some) - len(passes), "pairs": pairs,
            "references": {r["name"]: r["accuracies"] for r in refs},
            "passing_layers": [rand[i]["formula"] for i in passes]}
    write_table(d, "random_layers", rows, meta)
    write_table(d, "calibration_pairs", pairs, {"settings": settings})
    # The report's own figures, fed with these records as candidates.
    cands = [{"id": i, "origin": "random", "status": "rejected", "graph": r["graph"],
              "scores": {a: v for a, v in r["accuracies"].items() if v is not None}}
             for i, r in enumerate(rand)]
    bn = [r for r in refs if r["name"] == "bn_relu"]
    bn_mean = (sum(v for v in bn[0]["accuracies"].values() if v is not None) / len(archs)) if bn else None
    save_png(F.accuracy_histogram(cands, archs, chance=chance, reference=bn_mean), d / "random_layers_histogram.png")
    ref_accs = {r["name"]: {a: v for a, v in r["accuracies"].items() if v is not None} for r in refs}
    save_png(F.calibration(cands, archs, chance=chance, references=ref_accs), d / "random_layers_calibration.png")
    log(f"near chance on all archs: {all_near:.1%}; pass quality on all: {len(passes)}/{len(rand)}, "
        f"on some but not all: {len(some) - len(passes)}; wrote {d}")


if __name__ == "__main__":
    sys.exit(main())
