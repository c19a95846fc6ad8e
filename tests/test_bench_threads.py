"""The threads benchmark's summary: steps/s and same-round speed ratios from given timings."""

import pytest

from _scripts import BENCHMARKS, load_script

load_script("bench_candidate", BENCHMARKS)  # what bench_threads imports from beside it
spread, summarize = (getattr(load_script("bench_threads", BENCHMARKS), n) for n in ("spread", "summarize"))


def test_the_summary_pairs_each_round_with_the_reference_of_the_same_round():
    seconds = {("idle", "a", 1): [1.0, 2.0, 1.0], ("idle", "a", 2): [2.0, 2.0, 4.0],
               ("loaded", "a", 1): [2.0, 2.0, 2.0], ("loaded", "a", 2): [1.0, 1.0, 1.0]}
    rows = {r["condition"]: r for r in summarize(seconds, steps=4)}
    assert rows["idle"]["reference_threads"] == 1
    assert rows["idle"]["steps_per_s"] == {1: 4.0, 2: 2.0}
    # per round 1/2, 2/2, 1/4: a ratio of medians (1/2) would hide the spread
    assert rows["idle"]["speed"][2] == (0.5, 0.25, 1.0)
    assert rows["loaded"]["speed"][2] == (2.0, 2.0, 2.0)
    assert 1 not in rows["loaded"]["speed"]


def test_spread_is_median_min_max():
    assert spread([3.0, 1.0, 2.0, 10.0]) == (2.5, 1.0, 10.0)
    with pytest.raises(ValueError):
        spread([])
