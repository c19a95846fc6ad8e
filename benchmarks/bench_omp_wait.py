"""What OpenMP's wait policy does to two torch processes that share the cores.

Torch's CPU ops run on OpenMP threads, which by default spin for a while when they wait for work.
Two processes of two threads each on a 2-core machine (a test run's two workers, a test beside
the worker pool it starts, or a test run beside a long training) then take turns spinning against
each other. This times one training step of a small conv net (ten 16-channel 3x3 conv +
GroupNorm + ReLU blocks, batch 32 of 24x24) in a process of `--threads` threads: alone, and as one
of two such processes started together, with the default policy and with
`OMP_WAIT_POLICY=PASSIVE` (set before torch loads OpenMP, as tests/conftest.py does). Each case
runs `--rounds` times in turn, so the cases of a round see the same machine; the table gives each
case's median milliseconds per step and its ratio to "alone, default" of the same round.

    python benchmarks/bench_omp_wait.py                # 3 rounds: about a minute idle
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

CHILD = """
import os, sys, time
import torch
torch.set_num_threads(int(sys.argv[1]))
net = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Conv2d(16, 16, 3, padding=1),
                                                torch.nn.GroupNorm(4, 16), torch.nn.ReLU())
                            for _ in range(10)])
x = torch.randn(32, 16, 24, 24)
for _ in range(3):
    net(x).sum().backward()
t = time.perf_counter()
for _ in range(int(sys.argv[2])):
    net(x).sum().backward()
print((time.perf_counter() - t) / int(sys.argv[2]) * 1000)
"""


def step_ms(threads: int, steps: int, together: int, policy: str | None) -> float:
    """Median over `together` processes started at once of their milliseconds per step."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if policy:
        env["OMP_WAIT_POLICY"] = policy
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, str(threads), str(steps)], env=env,
                              stdout=subprocess.PIPE, text=True) for _ in range(together)]
    return statistics.median(float(p.communicate()[0]) for p in procs)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=20)
    args = p.parse_args()
    cases = {"alone, default": (1, None), "alone, passive": (1, "PASSIVE"),
             "two at once, default": (2, None), "two at once, passive": (2, "PASSIVE")}
    ms = {c: [] for c in cases}
    for r in range(args.rounds):
        for case, (together, policy) in cases.items():
            ms[case].append(step_ms(args.threads, args.steps, together, policy))
        print(f"round {r + 1}/{args.rounds}: " + ", ".join(f"{c} {v[-1]:.0f} ms"
                                                          for c, v in ms.items()), flush=True)
    base = ms["alone, default"]
    print(f"\n{args.threads} threads per process, {os.cpu_count()} cores\n")
    print("| case | ms per step (median) | ratio to alone, default (median, range) |")
    print("|---|---|---|")
    for case, v in ms.items():
        ratios = [a / b for a, b in zip(v, base)]
        print(f"| {case} | {statistics.median(v):.0f} | {statistics.median(ratios):.2f} "
              f"({min(ratios):.2f}-{max(ratios):.2f}) |")


if __name__ == "__main__":
    main()
