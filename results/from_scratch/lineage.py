"""Where the from-scratch runs' layers came from: for each run, its candidates, cache hits and
near misses, and for every layer it trained to the end, the chain of parents back to a random
graph. It reads the stores with the code the runs used, so it runs in the pinned worktree:

    cd ../evonorm-from-scratch && .venv/bin/python ../main/results/from_scratch/lineage.py \
        > ../main/results/from_scratch/lineage.txt
"""

import sys
from pathlib import Path

sys.path.insert(0, "experiments")
from evolution_vs_random import read_run  # noqa: E402  (the pinned commit's reader)

BUDGET = 3600


def kind(c) -> str:
    if c.status == "valid":
        return "valid"
    return "near miss" if c.evaluation and c.evaluation.near_miss else c.status


for run in sorted(Path("runs/from_scratch").iterdir()):
    read = read_run(run, BUDGET)
    if read is None:
        continue
    cfg, status, _, within = read
    by_id = {c.id: c for c in within}
    fresh = [c for c in within if not c.cache_hit]
    print(f"{run.name} [{status}]: {len(within)} candidates within {BUDGET} worker-s, "
          f"{len(within) - len(fresh)} cache hits, {sum(kind(c) == 'near miss' for c in fresh)} "
          f"near misses, {sum(c.status == 'valid' for c in fresh)} valid")
    for c in fresh:
        if c.status != "valid" or c.stage < cfg.hurdles.num_stages:
            continue
        chain, p = [], c.parent_id
        while p is not None and p in by_id:
            chain.append(f"{p} ({kind(by_id[p])})")
            p = by_id[p].parent_id
        print(f"  candidate {c.id}, fitness {c.fitness:.4f}: parents "
              f"{' <- '.join(chain) or 'none (a random graph)'}")
