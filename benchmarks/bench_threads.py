"""Training steps per second of a `demo` candidate at 1 and 2 torch threads, idle and beside a load.

The question is how many torch threads a search worker (or `evonorm train`) should run. Each of the
`demo` preset's anchor architectures trains the candidate layer (default: the demo's first seed layer,
GN-ReLU as a graph, on the C++ kernel where it builds) with the demo's training config, in one process:
in each of `--rounds` rounds, under each condition, the thread counts take turns, `--steps` wall-timed
steps each after one untimed step (the switch's own cost). Conditions: "idle" (nothing this benchmark
started; other processes on the machine are measured and printed: the load average and the share of
CPU busy in the second before the benchmark started) and "loaded" (`--load-procs` processes, default
one per core but one, each spinning a Python loop, started for the condition and stopped after it, so
every thread count of a round sees the same load). The orders of conditions and of thread counts
rotate by round. The table gives per condition and architecture the median steps/s of each thread
count and, for each count after the first, its speed over the first's in the same round: median and
range over rounds. OpenMP's default wait policy, as a user's process has it (`OMP_WAIT_POLICY` is
printed; tests/conftest.py sets PASSIVE for the tests, not for this).

    python benchmarks/bench_threads.py                       # 3 rounds x 8 steps: about 8 minutes on 2 busy cores
    python benchmarks/bench_threads.py --rounds 3 --archs resnet50_cifar --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from contextlib import contextmanager
from typing import Iterator

import torch

from bench_candidate import demo_dataset, named_graphs
from evonorm.proxy.config import ProxyTask, stored_task
from evonorm.proxy.presets import get_preset

CONDITIONS = ("idle", "loaded")
SPIN = "import os\nparent = os.getppid()\nwhile os.getppid() == parent:\n    pass\n"  # busy until its parent ends


def spread(values: list[float]) -> tuple[float, float, float]:
    """Median, minimum and maximum."""
    return statistics.median(values), min(values), max(values)


def summarize(seconds: dict[tuple[str, str, int], list[float]], steps: int) -> list[dict]:
    """Rows per (condition, arch) from wall seconds per block of `steps` steps, keyed by (condition,
    arch, threads), one value per round: steps/s per thread count and, for every count after the
    first (the reference), the speed ratio to the reference within each round."""
    groups: dict[tuple[str, str], list[int]] = {}
    for cond, arch, threads in seconds:
        groups.setdefault((cond, arch), []).append(threads)
    rows = []
    for (cond, arch), counts in groups.items():
        ref = seconds[(cond, arch, counts[0])]
        row: dict = dict(condition=cond, arch=arch, reference_threads=counts[0], steps_per_s={}, speed={})
        for t in counts:
            secs = seconds[(cond, arch, t)]
            row["steps_per_s"][t] = steps / statistics.median(secs)
            if t != counts[0]:
                row["speed"][t] = spread([r / s for r, s in zip(ref, secs)])
        rows.append(row)
    return rows


def cpu_busy(seconds: float = 1.0) -> float | None:
    """Share of all cores' time spent busy over `seconds` (Linux /proc/stat; None elsewhere)."""
    def sample() -> tuple[int, int]:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
        return sum(fields), idle
    try:
        total0, idle0 = sample()
        time.sleep(seconds)
        total1, idle1 = sample()
    except OSError:
        return None
    return 1.0 - (idle1 - idle0) / max(1, total1 - total0)


def cpu_model() -> str:
    """The processor's model name (Linux /proc/cpuinfo), else the machine type."""
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.machine()


@contextmanager
def load(condition: str, procs: int) -> Iterator[None]:
    """Under "loaded", `procs` spinning processes for the duration (given a moment to be scheduled)."""
    spinners = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(procs if condition == "loaded" else 0)]
    try:
        if spinners:
            time.sleep(0.5)
        yield
    finally:
        for p in spinners:
            p.terminate()
        for p in spinners:
            p.wait()


def measure(args) -> tuple[dict[tuple[str, str, int], list[float]], dict[str, list[float]], str]:
    """Wall seconds per block, keyed by (condition, arch, threads); the 1-minute load average when
    each condition started, per condition; the dataset's name."""
    from evonorm.train import Run

    cfg = get_preset("demo")
    ds, ds_name = demo_dataset(cfg)
    graph = named_graphs([args.layer])[f"{args.layer} graph"]
    layer = lambda c, **kw: graph.to_module(c, **kw)  # noqa: E731
    total = args.rounds * len(CONDITIONS) * len(args.threads) * (args.steps + 1) + 10
    runs = {arch: Run(layer, ds, ProxyTask.of_run(cfg).training[arch].replace(steps=total, device="cpu", restarts=())) for arch in args.archs}
    for arch, run in runs.items():  # warm-up, untimed: allocation, the kernel's load
        for t in args.threads:
            torch.set_num_threads(t)
            run.advance(run.step + 2)
    seconds: dict[tuple[str, str, int], list[float]] = {
        (c, a, t): [] for c in CONDITIONS for a in args.archs for t in args.threads}
    loads: dict[str, list[float]] = {c: [] for c in CONDITIONS}
    for rnd in range(args.rounds):
        for cond in CONDITIONS[rnd % 2:] + CONDITIONS[:rnd % 2]:
            loads[cond].append(os.getloadavg()[0])
            with load(cond, args.load_procs):
                for arch, run in runs.items():
                    order = args.threads[rnd % len(args.threads):] + args.threads[:rnd % len(args.threads)]
                    for t in order:
                        torch.set_num_threads(t)
                        run.advance(run.step + 1)
                        t0 = time.perf_counter()
                        run.advance(run.step + args.steps)
                        seconds[(cond, arch, t)].append(time.perf_counter() - t0)
                        if not run.ok:
                            raise RuntimeError(f"{arch}: {run.result.reason} at step {run.result.failed_step}")
                        print(f"  round {rnd + 1}/{args.rounds} {cond:6s} {arch:18s} {t} thread(s) "
                              f"{args.steps / seconds[(cond, arch, t)][-1]:6.2f} steps/s", file=sys.stderr, flush=True)
    return seconds, loads, ds_name


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="thread counts; the first is the reference")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=8, help="timed steps per thread count, condition and round")
    p.add_argument("--archs", nargs="+", default=list(stored_task(get_preset("demo")).archs),
                   help="default: the demo's anchor architectures")
    p.add_argument("--layer", default="GN-ReLU", help="GN-ReLU, LN-ReLU, IN-ReLU (the demo's seed layers) or a named graph")
    p.add_argument("--load-procs", type=int, default=max(1, (os.cpu_count() or 2) - 1),
                   help="spinning processes under the loaded condition (default: one per core but one)")
    p.add_argument("--json", help="also write the rows and conditions to this file")
    args = p.parse_args()
    if min(args.threads) < 1 or args.rounds < 1 or args.steps < 1 or args.load_procs < 1:
        print("bench_threads: --threads, --rounds, --steps and --load-procs must be >= 1", file=sys.stderr)
        return 2
    busy = cpu_busy()
    before = os.getloadavg()
    conditions = dict(torch=torch.__version__, cpu=cpu_model(), cores=os.cpu_count(),
                      omp_wait_policy=os.environ.get("OMP_WAIT_POLICY", "(unset: default)"),
                      load_average_at_start=before, cpu_busy_before_start=busy, load_procs=args.load_procs,
                      date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    seconds, loads, ds_name = measure(args)
    conditions.update(dataset=ds_name, load_average_at_end=os.getloadavg(),
                      load_average_per_condition={c: spread(v) for c, v in loads.items()})
    rows = summarize(seconds, args.steps)
    busy_s = "n/a" if busy is None else f"{100 * busy:.0f}%"
    print(f"# torch {torch.__version__}, {conditions['cpu']}, {os.cpu_count()} cores, OMP_WAIT_POLICY "
          f"{conditions['omp_wait_policy']}, {conditions['date']}; `demo` {args.layer} graph on {ds_name}, "
          f"{args.rounds} rounds x {args.steps} steps, wall clock")
    print(f"# before start: load average {before[0]:.2f} {before[1]:.2f} {before[2]:.2f}, CPU busy {busy_s} "
          f"(what ran besides this benchmark, in both conditions); loaded: + {args.load_procs} spinning process(es)")
    for c, v in loads.items():
        print(f"# 1-min load average as {c} started: median {statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f})")
    ref = args.threads[0]
    others = args.threads[1:]
    print("| condition | arch | " + " | ".join(f"steps/s, {t} thread(s)" for t in args.threads) + " | "
          + " | ".join(f"{t} threads / {ref} (median, range)" for t in others) + " |")
    print("|---|---|" + "---:|" * (len(args.threads) + len(others)))
    for r in rows:
        cells = [f"{r['steps_per_s'][t]:.2f}" for t in args.threads]
        cells += ["{:.2f}x ({:.2f}-{:.2f})".format(*r["speed"][t]) for t in others]
        print(f"| {r['condition']} | {r['arch']} | " + " | ".join(cells) + " |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(conditions=conditions, rows=rows,
                           seconds={"/".join(map(str, k)): v for k, v in seconds.items()}), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
