"""What the prescreen's features at birth cost, as a share of one `demo` quality test.

The quality test of `demo` is the first stage of its staged training: each anchor architecture
(ResNet-50 and MobileNetV2 at width 0.0625) trains `stages[0]` steps in each of its `train_runs`
runs (150 steps in one run; 75 in each of 2 before 2026-11-28, the same training), and is scored on
the held-out images; it is what every candidate that
passes the stability test costs. The features are the engine's (`evonorm.search.features`: the
layer alone, on probe tensors) and the proxy task's (`evonorm.proxy.features`: each anchor
architecture at initialisation on one batch: gradient profile and the classifier's Fisher
spectrum), exactly as `--prescreen on` computes them for a child.

Both run side by side in one process, one thread, in each of `--rounds` rounds per layer, timed in
CPU seconds of this process (on a shared machine, wall time would also count the other
processes). The table gives per layer the median seconds of each and the median over rounds of
each round's ratio, with its range. One untimed warm-up of each first takes the process's
one-off costs (the C++ kernel's build and load, the data) out of the first round. On
Fashion-MNIST when installed, else the synthetic set (said in the output).

    python benchmarks/bench_features.py              # 3 rounds x 2 layers: a few minutes idle
    python benchmarks/bench_features.py --rounds 5 --json out.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from evonorm.graph import Graph
from evonorm.graph.library import get_graph
from evonorm.proxy.presets import get_preset
from evonorm.proxy.config import ProxyTask, configured, stored_task


def quality_test(graph, ds, cfg) -> float:
    """The demo's first stage for one layer (as `evaluator.train_stages` runs it): the mean
    held-out accuracy over architectures and training runs."""
    from evonorm.train import Run

    accs = []
    for arch in stored_task(cfg).archs:
        for i in range(stored_task(cfg).train_runs):
            run = Run(graph, ds, ProxyTask.of_run(cfg).training[arch].replace(seed=ProxyTask.of_run(cfg).run_seed(i)))
            run.advance(cfg.hurdles.stage_steps[0])
            accs.append(run.score() or 0.0)
    return sum(accs) / len(accs)


def features(graph, cfg) -> int:
    """The prescreen's features of one child: the engine's, then the task's (their count)."""
    from evonorm.search.features import layer_features
    from evonorm.proxy.features import task_features

    f = layer_features(graph)
    return len(f or {}) + len(task_features(graph, ProxyTask.of_run(cfg)))


def cpu(fn, *args) -> float:
    start = time.process_time()
    fn(*args)
    return time.process_time() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", default=None, help="also write the raw times here")
    args = p.parse_args()
    torch.set_num_threads(args.threads)

    from evonorm.data import default_dataset_name
    from evonorm.proxy.training import search_dataset

    cfg = configured(get_preset("demo"), dataset=default_dataset_name(fallback=True))
    ds = search_dataset(ProxyTask.of_run(cfg))
    layers = {"GN-ReLU graph": Graph.from_json(cfg.evolution.seed_layers[0]),
              "EvoNorm-S0 graph": get_graph("evonorm_s0")}
    print(f"demo quality test ({cfg.hurdles.stage_steps[0]} steps x {stored_task(cfg).train_runs} runs x "
          f"{', '.join(stored_task(cfg).archs)}) on {stored_task(cfg).dataset}, {args.threads} thread(s), CPU seconds")
    g0 = next(iter(layers.values()))
    features(g0, cfg)  # warm-up: kernel, data, model code paths
    cpu(quality_test, g0, ds, configured(cfg, stages=(2,)))
    raw: dict[str, list[dict]] = {name: [] for name in layers}
    for r in range(args.rounds):
        for name, g in layers.items():
            f = cpu(features, g, cfg)
            q = cpu(quality_test, g, ds, cfg)
            raw[name].append({"features": f, "quality": q, "ratio": f / q})
            print(f"round {r + 1} {name}: features {f:.3f} s, quality test {q:.2f} s, "
                  f"ratio {100 * f / q:.2f}%", flush=True)
    print("\n| layer | features (s) | quality test (s) | ratio, median [min, max] |")
    print("|---|---|---|---|")
    for name, rows in raw.items():
        ratios = [x["ratio"] for x in rows]
        print(f"| {name} | {statistics.median(x['features'] for x in rows):.3f} | "
              f"{statistics.median(x['quality'] for x in rows):.2f} | "
              f"{100 * statistics.median(ratios):.2f}% [{100 * min(ratios):.2f}, "
              f"{100 * max(ratios):.2f}] |")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"dataset": stored_task(cfg).dataset, "threads": args.threads, "rounds": raw}, fh, indent=1)


if __name__ == "__main__":
    main()
