"""What a reader's check of a store costs beyond SQLite's own `quick_check`: `check_store` (the header,
`quick_check`, the whole `sqlite_master` against the schema, and one scan per table for values of a
storage class their column does not hold) against `PRAGMA quick_check` alone, on a store of `--candidates`
rejected candidates, in interleaved rounds in one process; prints the median seconds of each and their ratio.

    python benchmarks/bench_store_check.py                    # 20,000 candidates (the paper's budget)
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from evonorm.graph.library import NAMED_GRAPHS
from evonorm.search.store import Store, check_store

ROW = ("INSERT INTO candidates (proposal, graph, key, fingerprint, origin, status, reason, reason_step, detail,"
       " scores, cache_hit, seconds, timings, created_at, finished_at, stage_scores, features, prediction)"
       " VALUES (?, ?, ?, ?, 'random', 'rejected', 'quality:resnet50_cifar', 150, '{\"accuracy\": 0.1}',"
       " '{\"a\": 0.1, \"b\": 0.2}', 0, 1.0, '{\"train\": 1.0}', 0, 0, '[{\"a\": 0.1}]', ?, ?)")


def build(run: Path, n: int) -> None:
    graph = json.dumps(NAMED_GRAPHS["s_top1"].to_json())
    features = json.dumps({f"f{i}": 0.5 for i in range(40)})
    with Store(run) as s:
        with s._db:
            for i in range(n):
                s._db.execute("INSERT INTO proposals VALUES (?, ?, NULL, 'random', '[3, [1], null]', 0)", (i, graph))
                s._db.execute(ROW, (i, graph, f"k{i}", f"fp{i}", features, '{"p_valid": 0.1}'))


def quick_check(run: Path) -> None:
    db = sqlite3.connect(f"file:{run / 'store.sqlite'}?mode=ro&immutable=1", uri=True)
    try:
        assert db.execute("PRAGMA quick_check").fetchone()[0] == "ok"
    finally:
        db.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--candidates", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    run = Path(tempfile.mkdtemp()) / "run"
    build(run, args.candidates)
    times: dict[str, list[float]] = {"quick_check": [], "check_store": []}
    for _ in range(args.rounds):
        for name, fn in (("quick_check", quick_check), ("check_store", check_store)):
            t0 = time.perf_counter()
            fn(run)
            times[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    size = (run / "store.sqlite").stat().st_size / 1e6
    print(f"store of {args.candidates} candidates ({size:.0f} MB): quick_check {med['quick_check']:.3f} s, "
          f"check_store {med['check_store']:.3f} s, ratio {med['check_store'] / med['quick_check']:.2f} "
          f"(median of {args.rounds} interleaved rounds)")


if __name__ == "__main__":
    main()
