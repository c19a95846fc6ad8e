"""The prescreen's shipped prior for a preset: labelled candidates of searches at seeds that no
measurement of the prescreen uses, written beside the proxy task as package data.

Protocol (fixed before the runs):
- searches: the preset as shipped (`--preset`, default `demo`: S space, Fashion-MNIST), evolution,
  prescreen off (features are computed afterwards exactly as the prescreen computes them at
  birth), search seeds `--seeds` (default 100-105; the prescreen's measurements use 0-9),
  `--budget-seconds` worker-seconds each (default 900), one worker of one thread per search, two
  searches at once;
- the prior: every candidate that teaches the surrogate (not a cache hit, not failed), with its
  features at birth; degenerate layers left out (the task's pre-checks reject those before the
  surrogate sees them); written to src/evonorm/proxy/priors/<preset>-<space>.json with its
  provenance (the runs, their counts, the command, the date, and the searches' worker-seconds in
  all: its cost), and printed.
Evolution rather than random search: random search finds one valid layer in 1,000-1,500, so a
prior of random layers would teach P(valid) from rejections alone.

    python -m experiments.prescreen_prior                       # demo, seeds 100-105, 900 s each
    python -m experiments.prescreen_prior --build-only          # the prior from the runs as they are
"""

from __future__ import annotations

import argparse
from pathlib import Path

from evonorm.proxy.prior import PRIORS, build_prior, read_prior, write_prior
from experiments._arms import run_config, run_side_by_side
from experiments._common import ROOT, command_line, HelpFormatter, log


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=HelpFormatter)
    p.add_argument("--preset", default="demo", help="the preset whose prior is built")
    p.add_argument("--seeds", type=int, nargs="+", default=list(range(100, 106)),
                   help="search seeds, none of those the prescreen's measurements use")
    p.add_argument("--budget-seconds", type=float, default=900.0, help="worker-seconds per search")
    p.add_argument("--runs", type=Path, default=ROOT / "runs" / "prescreen_prior",
                   help="folder of the run folders, <preset>_s<seed>")
    p.add_argument("--build-only", action="store_true",
                   help="build the prior from the runs as they are, no searching")
    args = p.parse_args()
    command = command_line()
    runs = {seed: args.runs / f"{args.preset}_s{seed}" for seed in args.seeds}
    if not args.build_only:
        seeds = list(runs)
        for pair in (seeds[i:i + 2] for i in range(0, len(seeds), 2)):  # two searches at once
            run_side_by_side({f"seed {seed}": (runs[seed], run_config(
                args.preset, "evolution", seed, args.budget_seconds)) for seed in pair})
    done = [r for r in runs.values() if (r / "store.sqlite").is_file()]
    prior = build_prior(done, command)
    made = prior.provenance
    out = PRIORS / f"{args.preset}-{made['runs'][0]['space']}.json"
    if out.is_file() and _same(read_prior(out), prior):  # a queue's rerun: keep its provenance
        log(f"{out}: unchanged, kept")
        return
    write_prior(out, prior)
    log(f"{out}: {made['rows']} rows, {made['valid']} valid, from {len(done)} runs, "
        f"{made['worker_seconds']:.0f} worker-seconds")


def _same(a, b) -> bool:
    """The same rows under the same setting (when and by which command aside)."""
    return (a.setting, a.rows) == (b.setting, b.rows)


if __name__ == "__main__":
    main()
