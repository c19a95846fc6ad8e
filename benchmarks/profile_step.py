"""Where a `demo` candidate's training step spends its time, per anchor architecture, from torch.profiler.

For each architecture and layer, a `demo` run (its training config, on Fashion-MNIST when installed) trains
`--warm` steps untimed, `--steps` timed, `--steps` more under the profiler, then one evaluation pass
(`Run.score`) is timed, in CPU seconds of the process (one thread: other jobs disturb it far less). A
step's time (measured without the profiler) is split in proportion to the ops' self time: convolutions
forward and backward, the norm-act layer (the C++ graph kernel, or group norm and relu), the optimizer's
foreach ops, autograd's engine, the other aten ops; what no op accounts for is Python and the dispatch
around the ops. The profiler's own cost inflates the small-op shares: read them as proportions.

    python benchmarks/profile_step.py                          # seed GN-ReLU graph, one stored graph, gn_relu
    python benchmarks/profile_step.py --archs mobilenetv2_cifar --layers gn_relu --steps 20
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

from bench_candidate import demo_dataset, named_graphs
from evonorm.proxy.presets import get_preset
from evonorm.proxy.config import ProxyTask

LAYERS = {"GN-ReLU graph": lambda: named_graphs(["GN-ReLU"])["GN-ReLU graph"],  # the demo's first seed layer
          "scratch-winner graph": lambda: named_graphs(["scratch-winner"])["scratch-winner graph"],  # a found one
          "gn_relu": lambda: "gn_relu"}

CATEGORIES = (  # (category, a test on an op's name); the first that matches
    ("conv backward", lambda n: "convolution_backward" in n),
    ("conv forward", lambda n: "conv" in n),
    ("norm-act layer", lambda n: n.startswith("evonorm_graph::") or "group_norm" in n
     or n in ("aten::relu", "aten::relu_", "aten::threshold_backward", "aten::clamp_min", "aten::clamp_min_")),
    ("optimizer", lambda n: n.startswith("aten::_foreach")),
    ("autograd engine", lambda n: n.startswith("autograd::")),
    ("other aten ops", lambda n: True),
)


def is_range(name: str) -> bool:
    """User and profiler annotations (optimizer step, profiler step), not ops: their time is their ops'."""
    return name.startswith(("ProfilerStep", "Optimizer.", "## ")) or "Backward" in name and "::" not in name


def profile_run(layer, ds, tcfg, warm: int, steps: int) -> dict:
    """ms per step by category, and the step's and the evaluation pass's wall ms."""
    from evonorm.train import Run

    run = Run(layer, ds, tcfg)
    run.advance(warm)
    t0 = time.process_time()  # one thread: the work's own time, which other processes disturb far less
    run.advance(warm + steps)
    step_ms = 1e3 * (time.process_time() - t0) / steps
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        t0 = time.perf_counter()  # wall, as the profiler's own times are
        run.advance(warm + 2 * steps)
        profiled_ms = 1e3 * (time.perf_counter() - t0) / steps
    shares = dict.fromkeys([c for c, _ in CATEGORIES], 0.0)
    other: dict[str, float] = {}
    for ev in prof.key_averages():
        if is_range(ev.key):
            continue
        cat = next(c for c, test in CATEGORIES if test(ev.key))
        shares[cat] += ev.self_cpu_time_total / 1e3 / steps
        if cat == "other aten ops":
            other[ev.key] = ev.self_cpu_time_total / 1e3 / steps
    # what no op's self time accounts for: Python, and the dispatch between the ops
    shares["Python + dispatch"] = max(0.0, profiled_ms - sum(shares.values()))
    top_other = dict(sorted(other.items(), key=lambda kv: -kv[1])[:6])
    t0 = time.process_time()
    run.score()
    eval_ms = 1e3 * (time.process_time() - t0)
    return dict(step_ms=step_ms, profiled_ms=profiled_ms, shares=shares, eval_ms=eval_ms, top_other=top_other)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--archs", nargs="+", default=["resnet50_cifar", "mobilenetv2_cifar"])
    p.add_argument("--layers", nargs="+", default=list(LAYERS), choices=list(LAYERS))
    p.add_argument("--warm", type=int, default=10)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", help="also write the rows to this file")
    args = p.parse_args()
    torch.set_num_threads(args.threads)

    cfg = get_preset("demo")
    ds, ds_name = demo_dataset(cfg)
    rows = []
    for arch in args.archs:
        for name in args.layers:
            r = profile_run(LAYERS[name](), ds, ProxyTask.of_run(cfg).training[arch].replace(steps=900, restarts=()), args.warm, args.steps)
            rows.append(dict(arch=arch, layer=name, dataset=ds_name, **r))
            print(f"  {arch} {name}: {r['step_ms']:.1f} ms/step", file=sys.stderr, flush=True)
    cats = [c for c, _ in CATEGORIES] + ["Python + dispatch"]
    print(f"# torch {torch.__version__}, {args.threads} thread(s), demo config, {ds_name}; ms per step "
          f"(CPU ms of a step timed without the profiler; the split from the ops' self CPU time under it)")
    print("| arch | layer | ms/step | " + " | ".join(cats) + " | eval pass ms |")
    print("|---|---|---" + "|---" * (len(cats) + 1) + "|")
    for r in rows:
        scale = r["step_ms"] / r["profiled_ms"]  # the profiler's cost and other jobs' waits, out in proportion
        print(f"| {r['arch']} | {r['layer']} | {r['step_ms']:.1f} | "
              + " | ".join(f"{r['shares'][c] * scale:.1f}" for c in cats) + f" | {r['eval_ms']:.0f} |")
    for r in rows:
        print(f"# {r['arch']} {r['layer']}: largest other ops (ms/step, under the profiler): "
              + ", ".join(f"{k} {v:.1f}" for k, v in r["top_other"].items()))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
