"""How long a command takes to start, against the floor it cannot go below: `evonorm show` needs torch (its
functional fingerprint evaluates the graph), so it is timed beside a bare `import torch`; `evonorm list`
needs no torch. Each of `--rounds` runs the three one after another as fresh processes, so that load from
other processes hits them alike; the table gives each one's median wall seconds and the median over
rounds of show's ratio to the bare torch import.

    python benchmarks/bench_start.py --rounds 8
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

RUNS = {
    "evonorm show evonorm_s0": [sys.executable, "-m", "evonorm.cli", "show", "evonorm_s0"],
    "import torch": [sys.executable, "-c", "import torch"],
    "evonorm list": [sys.executable, "-m", "evonorm.cli", "list"],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args()
    seconds: dict[str, list[float]] = {name: [] for name in RUNS}
    for _ in range(args.rounds):
        for name, cmd in RUNS.items():
            start = time.perf_counter()
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            seconds[name].append(time.perf_counter() - start)
    for name, values in seconds.items():
        print(f"{name:<26} {statistics.median(values):6.2f} s")
    ratios = [s / t for s, t in zip(seconds["evonorm show evonorm_s0"], seconds["import torch"])]
    print(f"show / import torch: {statistics.median(ratios):.3f} (median of {args.rounds} rounds)")


if __name__ == "__main__":
    main()
