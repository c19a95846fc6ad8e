"""Where the from-scratch runs' layers came from, and their curves. Writes, beside this file:

- lineage.txt: per run, its candidates, cache hits and near misses, and for every layer it
  trained to the end, the chain of parents back to a random graph;
- curves.png: per arm and seed, the best fitness so far (of layers trained to the end; chance
  before the first) and the valid layers so far, against the worker-seconds spent.

It reads the stores with the code the runs used, so it runs in the pinned worktree:

    cd ../evonorm-from-scratch && .venv/bin/python ../main/results/from_scratch/analyse.py
"""

import sys
from pathlib import Path

sys.path.insert(0, "experiments")
from evolution_vs_random import read_run  # noqa: E402  (the pinned commit's reader)

BUDGET = 3600
HERE = Path(__file__).resolve().parent
ARMS = {"evolution": "tab:blue", "evolution_no_prescreen": "tab:green", "random": "tab:red"}


def kind(c) -> str:
    if c.status == "valid":
        return "valid"
    return "near miss" if c.evaluation and c.evaluation.near_miss else c.status


def main() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_best, ax_valid) = plt.subplots(1, 2, figsize=(11, 4))
    lines = []
    for run in sorted(Path("runs/from_scratch").iterdir()):
        read = read_run(run, BUDGET)
        if read is None:
            continue
        cfg, status, chance, within = read
        by_id = {c.id: c for c in within}
        fresh = [c for c in within if not c.cache_hit]
        lines.append(f"{run.name} [{status}]: {len(within)} candidates within {BUDGET} worker-s, "
                     f"{len(within) - len(fresh)} cache hits, "
                     f"{sum(kind(c) == 'near miss' for c in fresh)} near misses, "
                     f"{sum(c.status == 'valid' for c in fresh)} valid")
        spent, best, valid = 0.0, chance, 0
        xs, bests, valids = [0.0], [chance], [0]
        for c in sorted(within, key=lambda c: c.id):
            spent += c.seconds
            if c.status == "valid" and not c.cache_hit:
                valid += 1
                if c.stage >= cfg.hurdles.num_stages:
                    best = max(best, c.fitness)
                    chain, p = [], c.parent_id
                    while p is not None and p in by_id:
                        chain.append(f"{p} ({kind(by_id[p])})")
                        p = by_id[p].parent_id
                    lines.append(f"  candidate {c.id}, fitness {c.fitness:.4f}: parents "
                                 f"{' <- '.join(chain) or 'none (a random graph)'}")
            xs.append(spent), bests.append(best), valids.append(valid)
        arm = run.name.rsplit("_s", 1)[0]
        seed = int(run.name.rsplit("_s", 1)[1])
        label = arm if seed == 0 else None
        ax_best.step(xs, bests, where="post", color=ARMS[arm], alpha=0.7, label=label)
        ax_valid.step(xs, valids, where="post", color=ARMS[arm], alpha=0.7, label=label)
    (HERE / "lineage.txt").write_text("\n".join(lines) + "\n")
    for ax, title in ((ax_best, "best fitness so far (chance 0.1)"),
                      (ax_valid, "valid layers so far")):
        # the candidate that crosses the budget counts (it started within it): hence past BUDGET
        ax.set_xlabel("worker-seconds"), ax.set_title(title), ax.set_xlim(0, 1.06 * BUDGET)
        ax.axvline(BUDGET, color="grey", linestyle="--", linewidth=0.8), ax.grid(alpha=0.3)
    ax_best.legend(loc="upper left")
    fig.suptitle("From random graphs: 5 seeds per arm, 3,600 worker-s a run (one line a run)")
    fig.tight_layout()
    fig.savefig(HERE / "curves.png", dpi=110)


if __name__ == "__main__":
    main()
