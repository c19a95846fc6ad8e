"""What the second from-primitives experiment's runs cost in time, and their curves. Adds to the
pinned worktree's results/from_scratch_2/summary.json (the experiment's summary step keeps keys it
does not write, and the queue copies the file here):

- `wall_times`: per run, the hours in which some candidate of it was in flight (the union of its
  candidates' proposal-to-finish intervals, so a pause between sessions does not count; two runs
  side by side on the 2-core machine, beside other work: what a user waits, not compute);
- `first_normalizing_valid_at_worker_seconds`: per arm, per finished seed, the worker-seconds
  spent until the run's first valid layer that normalizes (None: none within the budget), the
  cost a user pays for the first layer worth a look;

and draws curves.png beside this file: per arm and seed, the best fitness so far and the valid layers so far,
against the worker-seconds spent. It reads the stores with the code the runs used, so it runs in
the pinned worktree:

    cd ../evonorm-from-scratch-2 && PYTHONPATH=src:experiments .venv/bin/python \
        ../main/results/from_scratch_2/analyse.py
"""

import json
from pathlib import Path

from evolution_vs_random import read_run  # the pinned commit's reader
from from_scratch import normalizing

BUDGET = 3600
HERE = Path(__file__).resolve().parent
RUNS = Path("runs/from_scratch_2")
SUMMARY = Path("results/from_scratch_2/summary.json")
COLOURS = {"evolution": "tab:blue", "random": "tab:red"}


def busy_seconds(candidates) -> float:
    """The length of the union of the candidates' [proposed, finished] intervals."""
    spans = sorted((c.created_at, c.finished_at) for c in candidates
                   if c.created_at is not None and c.finished_at is not None)
    total, end = 0.0, float("-inf")
    for start, finish in spans:
        total += max(0.0, finish - max(start, end))
        end = max(end, finish)
    return total


def main() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_best, ax_valid) = plt.subplots(1, 2, figsize=(11, 4))
    wall, first_norm = {}, {arm: {} for arm in COLOURS}
    for run in sorted(RUNS.iterdir()):
        read = read_run(run, BUDGET)
        if read is None:
            continue
        cfg, status, chance, within = read
        arm, seed = run.name.rsplit("_s", 1)
        wall[run.name] = round(busy_seconds(within) / 3600, 2)
        spent, best, valid, first = 0.0, chance, 0, None
        xs, bests, valids = [0.0], [chance], [0]
        for c in sorted(within, key=lambda c: c.id):
            spent += c.seconds
            if c.status == "valid" and not c.cache_hit:
                valid += 1
                if c.stage >= cfg.hurdles.num_stages:
                    best = max(best, c.fitness)
                if first is None and normalizing(c.graph):
                    first = round(spent, 1)
            xs.append(spent), bests.append(best), valids.append(valid)
        if status == "complete":
            first_norm[arm][seed] = first
        label = arm if seed == "0" else None
        ax_best.step(xs, bests, where="post", color=COLOURS[arm], alpha=0.7, label=label)
        ax_valid.step(xs, valids, where="post", color=COLOURS[arm], alpha=0.7, label=label)
    for ax, title in ((ax_best, f"best fitness so far (chance {chance:g})"),
                      (ax_valid, "valid layers so far")):
        # the candidate that crosses the budget counts (it started within it): hence past BUDGET
        ax.set_xlabel("worker-seconds"), ax.set_title(title), ax.set_xlim(0, 1.06 * BUDGET)
        ax.axvline(BUDGET, color="grey", linestyle="--", linewidth=0.8), ax.grid(alpha=0.3)
    ax_best.legend(loc="upper left")
    fig.suptitle("From random graphs with the rejection ladder: 3,600 worker-s a run (one line a run)")
    fig.tight_layout()
    fig.savefig(HERE / "curves.png", dpi=110)
    summary = json.loads(SUMMARY.read_text()) if SUMMARY.is_file() else {}
    summary["wall_times"] = {"hours": wall, "note": "some candidate in flight; two runs side by "
                             "side on the 2-core machine beside other work"}
    summary["first_normalizing_valid_at_worker_seconds"] = {
        arm: {"seeds": [int(s) for s in sorted(v, key=int)],
              "worker_s": [v[s] for s in sorted(v, key=int)]} for arm, v in first_norm.items()}
    SUMMARY.write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps({"wall_times": wall, "first_normalizing": first_norm}))


if __name__ == "__main__":
    main()
