"""What a setting of the rank-fidelity chart costs against `demo`, measured side by side.

The chart's cost (experiments/proxy_fidelity.py) is each setting's mean CPU seconds per panel
layer, measured when its runs trained; its settings trained in different sessions, and on this
shared machine the same steps took up to a fifth longer in one session than in another. Near the
1.5x cap that is the difference between in and out, so the cap is checked here as a ratio taken
side by side: one process, one thread, each layer's whole evaluation (every stage and run, as
the chart's panel jobs, `evonorm.measure.calibrate.measure`) under `demo` and under each setting in
turn, the order rotating by round, timed in this process's CPU seconds. One process per layer,
the layers' processes side by side (as the chart's two workers ran). The table gives per setting
the median over layers and rounds of the ratio to `demo` within a round, and its range.

    python benchmarks/bench_setting_cost.py --settings steps900-1run            # about 15 min
    python benchmarks/bench_setting_cost.py --settings steps900-1run steps600-1run --rounds 3 \
        --json results/fidelity/cost_side_by_side.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict
from multiprocessing import get_context
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PANEL = ROOT / "results" / "fidelity" / "panel.json"
sys.path.insert(0, str(ROOT))  # the experiments package, whose settings this measures


def _rounds(layer: str, settings: list[str], rounds: int) -> dict[str, list[float]]:
    """CPU seconds of `layer`'s evaluation under each setting, `rounds` times, in this process."""
    import torch

    from evonorm.graph.cpp import load_kernel
    from evonorm.measure.calibrate import Job, measure
    from evonorm.measure.fidelity import load_panel
    from evonorm.proxy.config import ProxyTask
    from evonorm.proxy.training import search_dataset
    from experiments.proxy_fidelity import setting_config

    torch.set_num_threads(1)
    cfgs = {name: setting_config(name) for name in settings}
    for cfg in cfgs.values():  # the process's one-off costs, untimed: data, the kernel
        search_dataset(ProxyTask.of_run(cfg))
    load_kernel()
    graph = {x.name: x.graph for x in load_panel(PANEL)[1]}[layer]
    job = Job("panel", layer, 0, graph or {})  # the chart's job for this layer at seed 0
    times: dict[str, list[float]] = {name: [] for name in settings}
    for r in range(rounds):
        for name in settings[r % len(settings):] + settings[:r % len(settings)]:
            start = time.process_time()
            rec = measure({"job": asdict(job), "config": cfgs[name].to_dict()})
            times[name].append(time.process_time() - start)
            print(f"{layer} round {r + 1}/{rounds} {name}: {times[name][-1]:.0f} CPU-s", flush=True)
            if rec["status"] != "valid":
                raise SystemExit(f"{layer} under {name}: {rec['status']} ({rec['reason']})")
    return times


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--settings", nargs="+", required=True, help="settings besides demo")
    p.add_argument("--layers", nargs="+", default=["evonorm_s0", "gn_relu"])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--json", default=None, help="also write the raw times here")
    args = p.parse_args()
    from proxy_fidelity import SETTINGS

    unknown = [s for s in args.settings if s not in SETTINGS]
    if unknown:
        raise SystemExit(f"bench_setting_cost: unknown setting {unknown[0]!r}")
    settings = ["demo", *[s for s in args.settings if s != "demo"]]
    print(f"{len(args.layers)} layers side by side, {args.rounds} rounds of {settings}",
          flush=True)
    with ProcessPoolExecutor(len(args.layers), mp_context=get_context("spawn")) as pool:
        futures = {layer: pool.submit(_rounds, layer, settings, args.rounds)
                   for layer in args.layers}
        times = {layer: f.result() for layer, f in futures.items()}
    print("| setting | CPU-s per layer (median) | ratio to demo (median) | range |")
    print("|---|---|---|---|")
    rows = {}
    for name in settings:
        secs = [t for layer in args.layers for t in times[layer][name]]
        ratios = [a / b for layer in args.layers
                  for a, b in zip(times[layer][name], times[layer]["demo"])]
        rows[name] = {"median_seconds": statistics.median(secs),
                      "ratio": statistics.median(ratios), "range": [min(ratios), max(ratios)]}
        print(f"| {name} | {rows[name]['median_seconds']:.0f} | {rows[name]['ratio']:.2f} | "
              f"{min(ratios):.2f}-{max(ratios):.2f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"command": "python " + " ".join(sys.argv), "layers": args.layers,
             "rounds": args.rounds, "times": times, "summary": rows,
             "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}, indent=1) + "\n")


if __name__ == "__main__":
    main()
