"""The paper's Table 3 trend at small scale: accuracy as the batch shrinks.

BN-ReLU, GN-ReLU, EvoNorm-S0 and EvoNorm-B0 on ResNet50-CIFAR, trained on the same number of
images at batch 128, 32, 8 and 2 with the learning rate scaled linearly (0.1 per 128 images) and
a cosine schedule, on Fashion-MNIST (default; `--dataset cifar10` for CIFAR-10). Batch layers
(BN, EvoNorm-B0) see only the batch they are given, as a worker does in the paper's Table 3.

    python -m experiments.batch_size                      # ~10-15 min on an idle 2-core machine
    python -m experiments.batch_size --images 50000 --seeds 0 1 2 --width 0.25   # larger

Writes results/batch_size/{runs.csv (one line per run, appended as runs finish, so an
interrupted run resumes), table.csv, table.md, table.json, plot.png}.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import time
from functools import lru_cache
from pathlib import Path

from experiments._common import fmt, HelpFormatter, log, map_jobs, out_dir, write_table

LAYERS = ("bn_relu", "gn_relu", "evonorm_s0", "evonorm_b0")
RUN_FIELDS = ("layer", "batch_size", "seed", "lr", "steps", "accuracy", "status", "reason",
              "seconds")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=HelpFormatter)
    p.add_argument("--dataset", default="fashion_mnist", help="fashion_mnist (default) or cifar10")
    p.add_argument("--data-root", default=None,
                   help="folder holding the dataset files (default: $EVONORM_DATA, else "
                        "~/.cache/evonorm/data)")
    p.add_argument("--layers", nargs="+", default=list(LAYERS),
                   help="registry layers to train at every batch size")
    p.add_argument("--batches", nargs="+", type=int, default=[128, 32, 8, 2],
                   help="batch sizes, the images seen per run the same at each")
    p.add_argument("--arch", default="resnet50_cifar", help="the architecture (a built-in name)")
    p.add_argument("--width", type=float, default=0.125, help="channel multiplier (paper: 0.25)")
    p.add_argument("--images", type=int, default=6144,
                   help="training images seen per run, the same at every batch size")
    p.add_argument("--base-lr", type=float, default=0.1, help="learning rate at --base-batch")
    p.add_argument("--base-batch", type=int, default=128,
                   help="the batch at which the learning rate is --base-lr; it scales linearly with the "
                        "batch")
    p.add_argument("--n-train", type=int, default=10000, help="training subset (seeded)")
    p.add_argument("--n-test", type=int, default=2000, help="test subset (seeded)")
    p.add_argument("--seeds", nargs="+", type=int, default=[0], help="training seeds per (layer, batch)")
    p.add_argument("--threads", type=int, default=2, help="torch threads per run")
    p.add_argument("--jobs", type=int, default=1, help="runs in parallel (each --threads)")
    p.add_argument("--out", default=None, help="output folder (default results/batch_size)")
    p.add_argument("--fresh", action="store_true", help="ignore runs.csv from an earlier run")
    args = p.parse_args(argv)
    if min(args.batches) < 1 or args.images < max(args.batches):
        p.error("--images must be at least the largest batch, and batches >= 1")
    return args


@lru_cache(maxsize=1)
def _dataset(name: str, root: str | None, n_train: int, n_test: int):
    from evonorm.data import load_dataset
    return load_dataset(name, root, n_train=n_train, n_test=n_test, seed=0)


def run_one(args: argparse.Namespace, layer: str, batch: int, seed: int) -> dict:
    """One training run (in a worker process when --jobs > 1)."""
    import torch

    from evonorm.train import TrainConfig, train
    torch.set_num_threads(args.threads)
    ds = _dataset(args.dataset, args.data_root, args.n_train, args.n_test)
    lr = args.base_lr * batch / args.base_batch
    cfg = TrainConfig(arch=args.arch, width=args.width, batch_size=batch, lr=lr,
                      steps=max(1, args.images // batch), schedule="cosine", seed=seed)
    res = train(layer, ds, cfg)
    return dict(layer=layer, batch_size=batch, seed=seed, lr=lr, steps=cfg.steps,
                accuracy=res.accuracy, status=res.status, reason=res.reason,
                seconds=round(res.seconds, 2))


def read_runs(path: Path) -> list[dict]:
    if not path.exists():
        return []
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        r["batch_size"], r["seed"], r["steps"] = int(r["batch_size"]), int(r["seed"]), int(r["steps"])
        r["lr"], r["seconds"] = float(r["lr"]), float(r["seconds"])
        r["accuracy"] = float(r["accuracy"]) if r["accuracy"] not in ("", "None") else None
    return rows


def append_run(path: Path, row: dict) -> None:
    new = not path.exists()
    with open(path, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=RUN_FIELDS)
        if new:
            w.writeheader()
        w.writerow(row)
        f.flush()
        os.fsync(f.fileno())


def summarize(rows: list[dict], layers, batches) -> list[dict]:
    """One row per layer: mean accuracy (%) over seeds at each batch size, and the drop."""
    table = []
    for layer in layers:
        row: dict = {"layer": layer}
        for b in batches:
            accs = [r["accuracy"] for r in rows if r["layer"] == layer and r["batch_size"] == b]
            ok = [a for a in accs if a is not None]
            row[f"b{b}"] = 100 * sum(ok) / len(ok) if ok and len(ok) == len(accs) else None
        first, last = row.get(f"b{batches[0]}"), row.get(f"b{batches[-1]}")
        row["change"] = None if first is None or last is None else last - first
        table.append(row)
    return table


def plot(table: list[dict], batches, path: Path, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for row in table:
        ys = [row[f"b{b}"] for b in batches]
        ax.plot(batches, [float("nan") if y is None else y for y in ys], marker="o",
                label=row["layer"])
    ax.set_xscale("log", base=2)
    ax.set_xticks(batches, [str(b) for b in batches])
    ax.invert_xaxis()
    ax.set_xlabel("batch size (learning rate scaled linearly)")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    args = parse_args(argv)
    d = out_dir("batch_size", args.out)
    runs_path = d / "runs.csv"
    if args.fresh and runs_path.exists():
        runs_path.unlink()
    done = read_runs(runs_path)
    n_earlier = len(done)
    done_keys = {(r["layer"], r["batch_size"], r["seed"]) for r in done}
    todo = [(layer, b, s) for s in args.seeds for b in args.batches for layer in args.layers
            if (layer, b, s) not in done_keys]
    log(f"{len(todo)} runs to do ({len(done)} already in {runs_path}), {args.jobs} at a time, "
        f"{args.threads} threads each")
    start = time.perf_counter()
    for row in map_jobs(run_one, [(args, *job) for job in todo], args.jobs, threads=args.threads):
        append_run(runs_path, row)
        done.append(row)
        log(f"{row['layer']:11s} batch {row['batch_size']:4d}: accuracy "
            f"{fmt(row['accuracy'])} ({row['seconds']:.0f}s)")
    rows = [r for r in done if r["layer"] in args.layers and r["batch_size"] in args.batches
            and r["seed"] in args.seeds]
    table = summarize(rows, args.layers, args.batches)
    cpu_seconds = sum(r["seconds"] for r in rows)
    meta = dict(dataset=args.dataset, arch=args.arch, width=args.width, images=args.images,
                base_lr=args.base_lr, base_batch=args.base_batch, n_train=args.n_train,
                n_test=args.n_test, seeds=args.seeds, threads=args.threads, jobs=args.jobs,
                sum_run_seconds=round(cpu_seconds, 1), runs_from_earlier_invocation=n_earlier,
                wall_seconds=round(time.perf_counter() - start, 1))
    write_table(d, "table", table, meta)
    title = (f"{args.arch} x{args.width:g} on {args.dataset}, {args.images} images per run\n"
             f"lr {args.base_lr:g} x batch/{args.base_batch}, cosine, seeds {args.seeds}")
    plot(table, args.batches, d / "plot.png", title)
    log(f"wrote {d}/table.md and plot.png; runs took {cpu_seconds:.0f}s in total")
    print((d / "table.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
