"""The search driver with stand-in evaluators: budget, population, cache, failures, resume."""

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from _processes import env_with_path
from _search_fakes import (crashy_fake, detailed_fake, fake_config, fake_objective, near_miss_fake, sigkill_after,
                           slow_fake)
from evonorm.search.driver import init_run, run_search
from evonorm.search.store import Store
from evonorm.proxy.config import configured

TESTS = Path(__file__).parent



def _check_accounting(store, budget):
    cands = store.candidates()
    assert len(cands) == budget == store.num_proposals()
    assert sorted(c.proposal for c in cands) == list(range(budget))  # each proposal once
    assert [c.id for c in cands] == list(range(1, budget + 1))
    assert store.pending_proposals() == []
    return cands


def test_search_spends_budget_and_keeps_aging_population(tmp_path):
    init_run(tmp_path, fake_config())
    res = run_search(tmp_path, objective=fake_objective, progress=False)
    assert res.complete and res.done == 30
    with Store(tmp_path, readonly=True) as s:
        cands = _check_accounting(s, 30)
        valid = [c for c in cands if c.status == "valid"]
        assert s.population() == [c.id for c in valid][-6:]
        assert s.get_meta("status") == "complete"
        by_id = {c.id: c for c in cands}
        kids = [c for c in cands if c.origin == "mutation"]
        assert kids and all(by_id[c.parent_id].status == "valid" and c.parent_id < c.id
                            for c in kids)
        assert all(c.origin == "random" and c.parent_id is None for c in cands[:3])
        assert {c.reason for c in cands if c.status == "rejected"} == {"quality:a1"}
        assert all(c.fitness == pytest.approx(sum(c.scores.values()) / 2) for c in valid)
        assert all(c.worker for c in cands if not c.cache_hit)


def test_the_evaluation_reaches_the_store_whole_with_its_detail(tmp_path):
    init_run(tmp_path, fake_config(budget=40, max_nodes=1, p_random=1.0))
    run_search(tmp_path, objective=detailed_fake, progress=False)
    with Store(tmp_path, readonly=True) as s:
        cands = _check_accounting(s, 40)
    rejected = [c for c in cands if c.status == "rejected"]
    assert rejected and all(c.detail == {"accuracy": 0.01, "threshold": 0.2} for c in rejected)
    assert all(c.detail is None for c in cands if c.status == "valid")
    fresh = [c for c in cands if not c.cache_hit]
    hits = [c for c in cands if c.cache_hit]
    assert hits
    for h in hits:  # a cache hit is the earlier evaluation whole (detail included), less timings
        src = next(c for c in fresh if c.key == h.key or c.fingerprint == h.fingerprint)
        assert h.evaluation == replace(src.evaluation, timings={})


@pytest.mark.parametrize("near_misses", [False, True])
def test_near_misses_are_parents_only_when_asked(tmp_path, near_misses):
    """From scratch nothing may be valid for long: with `near_misses`, layers that learned on one
    architecture before the quality test rejected them become parents (stage 0, below any valid
    layer); without it evolution keeps drawing random graphs."""
    init_run(tmp_path, fake_config(budget=24, initial_population=1, p_random=0.0,
                                   near_misses=near_misses))
    run_search(tmp_path, objective=near_miss_fake, progress=False)
    with Store(tmp_path, readonly=True) as s:
        cands, population = s.candidates(), s.population()
    assert not [c for c in cands if c.status == "valid"]
    near = {c.id for c in cands if c.evaluation.near_miss}
    assert near and near != {c.id for c in cands}  # the fake's chance-level half is not
    kids = [c for c in cands if c.origin == "mutation"]
    if near_misses:
        assert kids and all(c.parent_id in near for c in kids)
        assert population and set(population) <= near
    else:
        assert not kids and population == []


def test_a_valid_layer_beats_every_near_miss_in_a_tournament():
    import random

    from evonorm.search.evolution import AgingPopulation, Member

    pop = AgingPopulation(8, [Member(i, {}, (0.9, 0.1), 0) for i in range(1, 6)]
                          + [Member(9, {}, (0.2, 0.2), 1)])
    rng = random.Random(0)
    assert {pop.tournament(rng, 1.0).id for _ in range(20)} == {9}


def test_random_search_never_mutates(tmp_path):
    init_run(tmp_path, fake_config(algorithm="random", budget=12))
    run_search(tmp_path, objective=fake_objective, progress=False)
    with Store(tmp_path, readonly=True) as s:
        assert {c.origin for c in s.candidates()} == {"random"}


def test_cache_hits_reuse_earlier_results(tmp_path):
    # one-node S graphs: a small space, so the same layer comes up again and again
    init_run(tmp_path, fake_config(budget=40, max_nodes=1, p_random=1.0))
    run_search(tmp_path, objective=fake_objective, progress=False)
    with Store(tmp_path, readonly=True) as s:
        cands = _check_accounting(s, 40)
    hits = [c for c in cands if c.cache_hit]
    fresh = [c for c in cands if not c.cache_hit]
    assert len(hits) >= 5
    assert len({c.key for c in fresh}) == len(fresh)  # no layer evaluated twice
    for h in hits:
        src = next(c for c in fresh if c.key == h.key or c.fingerprint == h.fingerprint)
        assert src.id < h.id
        assert (h.status, h.reason, h.scores, h.fitness) == (
            src.status, src.reason, src.scores, src.fitness)
        assert h.worker is None


def test_worker_that_raises_or_dies_is_recorded_and_search_goes_on(tmp_path):
    init_run(tmp_path, fake_config(budget=24, retries=1))
    res = run_search(tmp_path, objective=crashy_fake, progress=False)
    assert res.complete
    with Store(tmp_path, readonly=True) as s:
        cands = _check_accounting(s, 24)
    failed = [c for c in cands if c.status == "failed"]
    reasons = {c.reason for c in failed}
    assert "worker died (exit code 9)" in reasons
    assert any(r.startswith("error: ValueError: boom (at _search_fakes.py:") for r in reasons)
    assert any(c.status == "valid" for c in cands)
    assert res.tally.failed == len(failed)


def _proposal_graphs(run):
    with Store(run, readonly=True) as s:
        return [p for p in s._db.execute("SELECT idx, graph, origin, parent_id FROM proposals "
                                          "ORDER BY idx").fetchall()]


def test_resume_continues_the_random_stream(tmp_path):
    """Stopping after 7 candidates and resuming gives exactly the uninterrupted sequence."""
    cfg = fake_config(budget=16, workers=1)
    init_run(tmp_path / "whole", cfg)
    run_search(tmp_path / "whole", objective=fake_objective, progress=False)
    init_run(tmp_path / "parts", configured(cfg, budget=7))
    run_search(tmp_path / "parts", objective=fake_objective, progress=False)
    with Store(tmp_path / "parts") as s:
        s.set_config(cfg.to_dict())
    run_search(tmp_path / "parts", objective=fake_objective, progress=False)
    assert [tuple(r) for r in _proposal_graphs(tmp_path / "parts")] == \
        [tuple(r) for r in _proposal_graphs(tmp_path / "whole")]


KILLABLE = """
from _search_fakes import slow_fake
from evonorm.search.driver import run_search
run_search({run!r}, objective=slow_fake, progress=False)
"""


def test_sigkill_then_resume_loses_and_repeats_nothing(tmp_path):
    cfg = fake_config(budget=20, workers=1)
    whole, run = tmp_path / "whole", tmp_path / "killed"
    init_run(whole, cfg)
    run_search(whole, objective=fake_objective, progress=False)
    init_run(run, cfg)
    proc = subprocess.Popen([sys.executable, "-c", KILLABLE.format(run=str(run))],
                            env=env_with_path(TESTS))
    sigkill_after(proc, run, 6, timeout=120)
    with Store(run, readonly=True) as s:
        before = s.candidates()
        assert 6 <= len(before) < 20
    run_search(run, objective=fake_objective, progress=False)
    with Store(run, readonly=True) as s:
        after = _check_accounting(s, 20)
    assert after[:len(before)] == before  # nothing finished was lost or redone
    assert [tuple(r) for r in _proposal_graphs(run)] == [tuple(r) for r in _proposal_graphs(whole)]


def test_budget_seconds_stops_proposing_once_the_worker_time_is_spent(tmp_path):
    # a second of worker time: candidates of ~0.01 s each, room for a loaded machine's slower ones
    cfg = fake_config(budget=10_000, budget_seconds=1.0, workers=1)
    run = init_run(tmp_path / "run", cfg)
    res = run_search(run, objective=fake_objective, progress=False)
    with Store(run, readonly=True) as store:
        cands = store.candidates()
        status = store.get_meta("status")
    spent = sum(c.seconds for c in cands)
    assert res.complete and status == "complete" and 5 < len(cands) < 10_000
    assert spent >= 1.0 and spent - cands[-1].seconds < 1.0  # the last one crossed the line


def test_sigterm_stops_the_search_as_ctrl_c_does_and_says_how_to_resume(tmp_path):
    import signal

    from _search_fakes import _wait_for_candidates

    run = init_run(tmp_path / "run", fake_config(budget=200, workers=1))
    proc = subprocess.Popen([sys.executable, "-c", KILLABLE.format(run=str(run))],
                            env=env_with_path(TESTS), stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_candidates(proc, run, 3, timeout=120)
        os.kill(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    with Store(run, readonly=True) as s:
        assert s.get_meta("status") == "stopped" and 3 <= s.num_candidates() < 200
    assert f"`evonorm resume {run}`" in err
    res = run_search(run, objective=fake_objective, progress=False)  # and it resumes
    assert res.complete and res.done == 200
