"""What a search candidate costs: build a `demo` model and train it 60 steps, per layer, as a ratio to
native GroupNorm-ReLU.

Layers: native BN-ReLU, GN-ReLU and EvoNorm-S0 (the hand-written modules), and graphs compiled by
`Graph.to_module` on the plain fx path, the fast path and the compiled C++ kernel (`impl="plain"` / `"fast"` /
`"cpp"`, `--impls`): GroupNorm-ReLU as a graph (the `demo` preset's first seed layer), EvoNorm-S0 and the
paper's s_top1 (`--graphs`). The C++ kernel is built before the timing starts (its one-off build, about 20 s
per machine, is not a candidate's cost).
Every variant runs in one process: in each of `--rounds`, the models are built one after another and
then trained in turns of `--block` steps, so that load from other processes hits them alike; timed
in CPU seconds of this process (with one thread, what the work costs; wall time on a
shared machine also counts the other processes). The table gives the median seconds per candidate (model
built + 60 steps), ms per step, and the ratio to native GN-ReLU on the same architecture: the median over
rounds of each round's ratio, with their range. The demo's training config (`train_config`), on
Fashion-MNIST when installed, else the synthetic set; 1 thread by default. One untimed short run per
architecture first takes the process's one-off start-up costs out of the first variant. With `--device cuda`
the times are wall seconds after a synchronize (CPU time does not see the GPU's work).

    python benchmarks/bench_candidate.py                       # the table (about 7 minutes idle)
    python benchmarks/bench_candidate.py --layer-only          # one layer, forward + backward, ms
    python benchmarks/bench_candidate.py --device cuda --rounds 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch

from evonorm.graph import Graph
from evonorm.graph.cpp import load_kernel
from evonorm.graph.library import get_graph
from evonorm.proxy.presets import get_preset
from evonorm.proxy.config import ProxyTask

NATIVE = ("bn_relu", "gn_relu", "evonorm_s0")
STORED = {  # five valid layers that searches found (where each is stored, by its file)
    "scratch-winner": '{"nodes": [["tanh", 2], ["max", 0, 0], ["max", 0, 2], ["add", 0, 6], ["layer_std", 6], '
                      '["log", 3], ["group_rms", 0], ["tanh", 9], ["neg", 1], ["tanh", 7]]}',  # from_scratch/summary.json
    "scratch-second": '{"nodes": [["group_rms", 3], ["layer_mean", 4], ["instance_mean", 0], ["layer_std", 6], '
                      '["neg", 6], ["add", 7, 0], ["abs", 6], ["instance_rms", 6], ["group_rms", 1], ["tanh", 9]]}',
    "scratch-third": '{"nodes": [["tanh", 3], ["div", 0, 4], ["sigmoid", 0], ["layer_mean", 4], ["sqrt", 4], '
                     '["div", 7, 8], ["layer_rms", 7], ["square", 2], ["layer_rms", 9], ["tanh", 5]]}',
    "main-found_17": '{"nodes": [["layer_rms", 0], ["neg", 4], ["add", 0, 5], ["layer_std", 0], ["div", 6, 7], '
                     '["max", 8, 1]]}',  # fidelity/main_job/panel.json
    "long-573": '{"nodes": [["mul", 2, 0], ["instance_mean", 4], ["add", 0, 5], ["instance_rms", 6], ["div", 6, 7], '
                '["neg", 8]]}',  # long_search/retrain.jsonl
}


def named_graphs(names: list[str]) -> dict[str, Graph]:
    """The graphs by short name: GN/LN/IN-ReLU (the `demo` seed layers), a stored found layer (`STORED`) or a
    named graph of the library."""
    seeds = dict(zip(("GN-ReLU", "LN-ReLU", "IN-ReLU"), (Graph.from_json(s) for s in get_preset("demo").evolution.seed_layers)))
    seeds.update({name: Graph.from_json(text) for name, text in STORED.items()})
    return {f"{n} graph": seeds[n] if n in seeds else get_graph(n) for n in names}


def _variants(impls: list[str], graphs: list[str]) -> dict[str, object]:
    """Label -> layer (a registry name, or a factory for a graph with its impl)."""
    out: dict[str, object] = {f"native {n}": n for n in NATIVE}
    for label, g in named_graphs(graphs).items():
        for impl in impls:
            out[f"{label} ({impl})"] = lambda c, g=g, impl=impl, **kw: g.to_module(c, impl=impl, **kw)
    return out


def demo_dataset(cfg):
    """The demo's data (Fashion-MNIST) when installed, else a synthetic set of its shape; and its name."""
    from evonorm.data import default_dataset_name, synthetic_dataset
    from evonorm.proxy.api import start
    from evonorm.proxy.training import search_dataset

    try:
        default_dataset_name(fallback=False)
    except FileNotFoundError:
        return synthetic_dataset(2048, 256, channels=1, size=28, seed=0), "synthetic"
    return search_dataset(ProxyTask.of_run(start(cfg)[0])), "fashion_mnist"


def _clock(device: str):
    """CPU seconds of this process on a CPU; on a GPU, wall seconds once its queued work is done."""
    if not device.startswith("cuda"):
        return time.process_time

    def wall() -> float:
        torch.cuda.synchronize()
        return time.perf_counter()
    return wall


def candidate_seconds(layers: dict, ds, tcfg, block: int = 10) -> dict[str, float]:
    """Per label: seconds to build the model and train `tcfg.steps`. The builds run one after another, then
    the runs advance `block` steps each in turn, so a burst of load from other processes hits every variant
    alike (a block takes about a second; a whole candidate, several)."""
    from evonorm.train import Run

    clock = _clock(tcfg.device)
    secs, runs = {}, {}
    for label, layer in layers.items():
        t0 = clock()
        runs[label] = Run(layer, ds, tcfg)
        secs[label] = clock() - t0
    for step in range(block, tcfg.steps + block, block):
        for label, run in runs.items():
            t0 = clock()
            run.advance(step)
            secs[label] += clock() - t0
    return secs


def bench_train(args) -> list[dict]:

    cfg = get_preset("demo")
    ds, ds_name = demo_dataset(cfg)
    variants = {k: v for k, v in _variants(args.impls, args.graphs).items()
                if k == "native gn_relu" or not args.only or any(o in k for o in args.only)}
    times = {(a, v): [] for a in args.archs for v in variants}
    for arch in args.archs:  # warm-up, untimed
        candidate_seconds({"warm-up": "gn_relu"}, ds, ProxyTask.of_run(cfg).training[arch].replace(steps=3, device=args.device, restarts=()))
    for rnd in range(args.rounds):
        for arch in args.archs:
            secs = candidate_seconds(variants, ds, ProxyTask.of_run(cfg).training[arch].replace(steps=args.steps, device=args.device, restarts=()),
                                     args.block)
            for label, total in secs.items():
                times[(arch, label)].append(total)
                print(f"  round {rnd} {arch:18s} {label:26s} {total:6.2f} s  {1e3 * total / args.steps:6.1f} ms/step",
                      file=sys.stderr, flush=True)
    rows = []
    for arch in args.archs:
        base = times[(arch, "native gn_relu")]
        for label in variants:
            ts = times[(arch, label)]
            ratios = sorted(t / b for t, b in zip(ts, base))  # each round against its own GN-ReLU run
            med = statistics.median(ts)
            rows.append(dict(arch=arch, layer=label, seconds=med, ms_per_step=1e3 * med / args.steps,
                             ratio_to_gn_relu=statistics.median(ratios), ratio_range=(ratios[0], ratios[-1]),
                             dataset=ds_name))
    return rows


def bench_layer(args) -> list[dict]:
    """One layer at (batch, channels, 24, 24), forward + backward in training mode, ms (median of rounds)."""
    from evonorm.layers import create_norm_act

    n, c, h, w = args.shape
    clock = _clock(args.device)
    x = torch.randn(n, c, h, w, device=args.device, requires_grad=True)
    mods = {f"native {n_}": create_norm_act(n_, c) for n_ in NATIVE}
    for label, g in named_graphs(args.graphs).items():
        for impl in args.impls:
            mods[f"{label} ({impl})"] = g.to_module(c, impl=impl)
    for m in mods.values():
        m.to(args.device)
    times: dict[str, list[float]] = {k: [] for k in mods}
    for _ in range(args.rounds):
        for label, m in mods.items():
            for _ in range(3):
                m(x).sum().backward()
            t0 = clock()
            for _ in range(args.reps):
                m(x).sum().backward()
            times[label].append((clock() - t0) / args.reps)
    base = statistics.median(times["native gn_relu"])
    return [dict(layer=k, ms=1e3 * statistics.median(v), ratio_to_gn_relu=statistics.median(v) / base)
            for k, v in times.items()]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--block", type=int, default=10, help="steps each model trains before the next takes its turn")
    p.add_argument("--archs", nargs="+", default=["resnet50_cifar", "mobilenetv2_cifar"])
    p.add_argument("--graphs", nargs="+", default=["GN-ReLU", "evonorm_s0", "s_top1"],
                   help="graph layers: GN-ReLU, LN-ReLU, IN-ReLU (the demo's seed layers), stored found layers ("
                        f"{', '.join(STORED)}) or named graphs")
    p.add_argument("--impls", nargs="+", default=["plain", "fast", "cpp"],
                   choices=["plain", "fast", "cpp", "auto"])
    p.add_argument("--layer-only", action="store_true", help="time one layer's forward + backward instead")
    p.add_argument("--shape", type=int, nargs=4, default=[32, 16, 24, 24], metavar=("N", "C", "H", "W"))
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--only", nargs="+", help="only the variants whose label contains one of these (and GN-ReLU)")
    p.add_argument("--json", help="also write the rows to this file")
    args = p.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("bench_candidate: --device cuda but torch.cuda.is_available() is False", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    if "cpp" in args.impls and not load_kernel().ok:
        print(f"bench_candidate: the C++ kernel could not be built: {load_kernel().reason}", file=sys.stderr)
        return 2
    rows = bench_layer(args) if args.layer_only else bench_train(args)
    if args.layer_only:
        print("| layer | ms (fwd + bwd) | x native GN-ReLU |\n|---|---|---|")
        for r in rows:
            print(f"| {r['layer']} | {r['ms']:.2f} | {r['ratio_to_gn_relu']:.2f} |")
    else:
        unit = "wall s" if args.device.startswith("cuda") else "CPU s"
        print(f"| layer | arch | {unit} (build + {args.steps} steps) | ms/step | x native GN-ReLU (rounds' range) |\n"
              "|---|---|---|---|---|")
        for r in rows:
            lo, hi = r["ratio_range"]
            print(f"| {r['layer']} | {r['arch']} | {r['seconds']:.2f} | {r['ms_per_step']:.1f} | "
                  f"{r['ratio_to_gn_relu']:.2f} ({lo:.2f}-{hi:.2f}) |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
