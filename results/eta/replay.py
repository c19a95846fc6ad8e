"""Replay a search's timeline (main_job_timeline.csv: when each candidate started and finished, and
its worker-seconds) through the search's ETA, as it stood before and after the change to the cost
per candidate; prints how far each ETA was from the time the search then still took.

    python results/eta/replay.py [SCALE]

SCALE (default 1) stretches the timeline: 0.0565 puts the run on a machine as fast as the one
`demo`'s measured cost (5.5 worker-s a candidate) came from. "before": this session's mean cost per
candidate, the expected cost until one has finished. "after": `SearchProgress`'s, the expected cost
moved toward each finished candidate's worker-seconds by 1/PRIOR_CANDIDATES.
"""
import csv
import statistics
import sys
from pathlib import Path
from types import SimpleNamespace

from evonorm.search.driver import Tally
from evonorm.search.objective import CandidateCost
from evonorm.search.progress import PRIOR_CANDIDATES, SearchProgress, eta_seconds

BUDGET, WORKERS, EXPECTED = 75, 2, 5.5
scale = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0
with open(Path(__file__).with_name("main_job_timeline.csv")) as f:
    rows = [(float(r["started_s"]) * scale, float(r["finished_s"]) * scale,
             float(r["worker_seconds"]) * scale) for r in csv.DictReader(f)]
end = max(r[1] for r in rows)


def cost_after(done):
    """`SearchProgress`'s cost per candidate after `done` (as `finished` moves it)."""
    shown = SearchProgress(SimpleNamespace(tally=Tally(), spent=0.0),
                           expected=CandidateCost(EXPECTED, "demo's measured cost"))
    for r in sorted(done, key=lambda r: r[1]):
        shown.cost += (r[2] - shown.cost) / PRIOR_CANDIDATES
    return shown.cost


def eta(t, after):
    done = [r for r in rows if r[1] <= t]
    ages = [t - r[0] for r in rows if r[0] <= t < r[1]]
    n, spent = len(done), sum(r[2] for r in done)
    cost = cost_after(done) if after else (spent / n if n else EXPECTED)
    return eta_seconds([r[2] for r in done], ages, max(0, BUDGET - n - len(ages)), cost, WORKERS)


for name, after in (("before", False), ("after", True)):
    errs = [(t, eta(t, after) / (end - t) - 1) for t in (end * k / 200 for k in range(200))]
    within = sum(abs(e) <= 0.3 for _, e in errs) / len(errs)
    print(f"{name}: first ETA {eta(0, after):.0f}s of {end:.0f}s ({errs[0][1]:+.0%}); median |error| "
          f"{statistics.median(abs(e) for _, e in errs):.0%}; within 30% for {within:.0%} of the run; "
          + ", ".join(f"at {q:.0%} {errs[int(q * 200)][1]:+.0%}" for q in (0.25, 0.5, 0.75, 0.9)))
