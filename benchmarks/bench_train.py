"""Seconds per training step of the proxy task, and the real-data check.

Speed: ResNet50-CIFAR (0.25x) at batch 128 on 24x24 crops, BN-ReLU and EvoNorm-S0, with and without
channels_last and torch.compile, all measured side by side in one process, interleaved over
`--rounds` so that load from other processes hits every variant alike (median reported).

    python benchmarks/bench_train.py --threads 2                 # speed table
    python benchmarks/bench_train.py --threads 2 --accuracy      # + Fashion-MNIST small preset

Prints a Markdown table; `--json PATH` also writes the numbers.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import statistics
import sys
import time

import torch

from evonorm.data import default_dataset_name, load_dataset, synthetic_dataset
from evonorm.train import get_train_preset, train

PAPER_HOURS = (3, 10)  # appendix C: per proxy model on a 2-core CPU worker


def speed(args) -> list[dict]:
    ds = synthetic_dataset(2048, 64, seed=0)
    variants = list(itertools.product(args.layers, (False, True), (False, True)))
    if not args.compile:
        variants = [v for v in variants if not v[2]]
    times: dict[tuple, list[float]] = {v: [] for v in variants}
    compile_s: dict[tuple, float] = {}
    for rnd in range(args.rounds):
        for layer, cl, comp in variants:
            cfg = get_train_preset("paper-b", steps=args.steps + 3, batch_size=args.batch_size,
                             channels_last=cl, compile=comp, n_test=64, device=args.device)
            torch._dynamo.reset()
            res = train(layer, ds, cfg)
            times[(layer, cl, comp)].append(res.step_seconds)
            if comp and rnd == 0:
                compile_s[(layer, cl, comp)] = res.seconds - res.step_seconds * args.steps
            print(f"  round {rnd} {layer:12s} channels_last={cl!s:5s} compile={comp!s:5s} "
                  f"{res.step_seconds:.3f} s/step", file=sys.stderr, flush=True)
    rows = []
    for (layer, cl, comp), ts in times.items():
        med = statistics.median(ts)
        base = statistics.median(times[(layer, False, False)])
        rows.append(dict(layer=layer, channels_last=cl, compile=comp, s_per_step=med,
                         speedup=base / med, first_run_overhead_s=compile_s.get((layer, cl, comp)),
                         paper_b_hours=med * 2000 / 3600, paper_s_hours=med * 5000 / 3600))
    return rows


def accuracy(args) -> list[dict]:
    name = args.dataset or default_dataset_name()
    ds = load_dataset(name)
    rows = []
    for layer in args.layers:
        cfg = get_train_preset("small", device=args.device)
        res = train(layer, ds, cfg)
        rows.append(dict(layer=layer, dataset=name, arch=cfg.arch, width=cfg.resolved_width(),
                         steps=cfg.steps, batch_size=cfg.batch_size, n_train=cfg.n_train,
                         n_test=cfg.n_test, accuracy=res.accuracy, status=res.status,
                         seconds=res.seconds))
        print(f"  {layer}: accuracy {res.accuracy} in {res.seconds:.0f}s", file=sys.stderr,
              flush=True)
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--layers", nargs="+", default=["bn_relu", "evonorm_s0"])
    p.add_argument("--steps", type=int, default=5, help="timed steps per run (after 3 warm-up)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--no-compile", dest="compile", action="store_false")
    p.add_argument("--accuracy", action="store_true", help="also the Fashion-MNIST small preset")
    p.add_argument("--only-accuracy", action="store_true")
    p.add_argument("--dataset", default=None)
    p.add_argument("--device", default="cpu")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} threads, {platform.processor() or platform.machine()}"
          f", {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}, device {args.device}")
    out = {"threads": args.threads, "torch": torch.__version__, "load": os.getloadavg()[0]}
    if not args.only_accuracy:
        rows = speed(args)
        out["speed"] = rows
        print(f"\nResNet50-CIFAR 0.25x, batch {args.batch_size}, 24x24, {args.threads} threads "
              f"(median of {args.rounds} rounds x {args.steps} steps)\n")
        print("| layer | channels_last | compile | s/step | speed-up | paper-b (2000 steps) h "
              "| paper-s (5000 steps) h |")
        print("|---|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['layer']} | {r['channels_last']} | {r['compile']} | {r['s_per_step']:.3f} "
                  f"| {r['speedup']:.2f}x | {r['paper_b_hours']:.2f} | {r['paper_s_hours']:.2f} |")
        print(f"\npaper (appendix C): {PAPER_HOURS[0]}-{PAPER_HOURS[1]} h per proxy model on a "
              f"2-core worker")
    if args.accuracy or args.only_accuracy:
        rows = accuracy(args)
        out["accuracy"] = rows
        print("\n| layer | dataset | arch (width) | steps x batch | train/test images | accuracy "
              "| seconds |")
        print("|---|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['layer']} | {r['dataset']} | {r['arch']} ({r['width']:g}) | "
                  f"{r['steps']} x {r['batch_size']} | {r['n_train']}/{r['n_test']} | "
                  f"{r['accuracy']:.4f} | {r['seconds']:.0f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
