"""The run store: config, proposals with rng state, candidates, population, cache lookup, reranks."""

import random
import sqlite3

import pytest

from evonorm.search.store import Store

G = {"nodes": [["sigmoid", 0], ["mul", 0, 4]]}


def _add(store, proposal, status="valid", key="k", fp="f", cache_hit=False, window=None, **kw):
    return store.add_candidate(proposal=proposal, graph=G, key=key, fingerprint=fp, parent_id=None,
                               origin="random", status=status, accuracies=kw.pop("acc", {"a": 0.5}),
                               fitness=0.5 if status == "valid" else None, cache_hit=cache_hit,
                               seconds=1.0, join_population=window, **kw)


def test_round_trip_and_read_api(tmp_path):
    with Store(tmp_path) as s:
        s.set_config({"budget": 3, "archs": ["a"]})
        rng = random.Random(3)
        i0 = s.add_proposal(G, None, "random", rng.getstate())
        i1 = s.add_proposal(G, 1, "mutation", rng.getstate())
        assert (i0, i1) == (0, 1)
        cid = _add(s, i1, reason=None, window=2, worker="w0", timings={"train": 1.0})
        assert cid == 1
        assert [p.idx for p in s.pending_proposals()] == [0]
    assert (tmp_path / "store.sqlite").is_file()
    db = sqlite3.connect(tmp_path / "store.sqlite")
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    with Store(tmp_path / "store.sqlite", readonly=True) as r:
        assert r.config() == {"budget": 3, "archs": ["a"]}
        (c,) = r.candidates()
        assert (c.id, c.proposal, c.graph, c.status, c.accuracies, c.worker) == (
            1, 1, G, "valid", {"a": 0.5}, "w0")
        assert c.timings == {"train": 1.0} and c.cache_hit is False and c.finished_at >= c.created_at
        assert r.population() == [1]
        assert r.reranks() == []
        state = r.last_rng_state()
        assert state[1][:3] == list(random.Random(3).getstate()[1][:3])
        with pytest.raises(sqlite3.OperationalError):
            r.set_meta("x", 1)


def test_population_keeps_newest_window(tmp_path):
    with Store(tmp_path) as s:
        for i in range(5):
            s.add_proposal(G, None, "random", [3, [0], None])
            status = "rejected" if i == 2 else "valid"
            _add(s, i, status=status, window=3 if status == "valid" else None)
        assert s.population() == [2, 4, 5]


def test_cache_lookup_by_key_then_fingerprint_skips_failed_and_hits(tmp_path):
    with Store(tmp_path) as s:
        for i in range(4):
            s.add_proposal(G, None, "random", [3, [0], None])
        _add(s, 0, status="failed", key="k1", fp="f1")
        assert s.find_cached("k1", "f1") is None  # a dead worker says nothing about the layer
        _add(s, 1, status="rejected", key="k2", fp="f2", reason="quality:a", reason_step=100)
        _add(s, 2, status="valid", key="k2", fp="f2", cache_hit=True)
        hit = s.find_cached("k2", None)
        assert (hit.id, hit.reason, hit.reason_step) == (2, "quality:a", 100)
        assert s.find_cached("other", "f2").id == 2  # same function, different structure
        assert s.find_cached("other", "nope") is None


def test_proposal_candidate_is_unique(tmp_path):
    with Store(tmp_path) as s:
        s.add_proposal(G, None, "random", [3, [0], None])
        _add(s, 0)
        with pytest.raises(sqlite3.IntegrityError):
            _add(s, 0)
        assert s.num_candidates() == 1


def test_reranks_sorted_by_mean(tmp_path):
    with Store(tmp_path) as s:
        s.add_rerank(candidate_id=3, preset="p", accuracies={"a": 0.4}, mean=0.4, status="ok",
                     reason=None, search_fitness=0.6, seconds=2.0)
        s.add_rerank(candidate_id=5, preset="p", accuracies={"a": 0.7}, mean=0.7, status="ok",
                     reason=None, search_fitness=0.5, seconds=2.0)
        s.add_rerank(candidate_id=3, preset="p", accuracies={"a": 0.45}, mean=0.45, status="ok",
                     reason=None, search_fitness=0.6, seconds=2.0)  # replaces, not duplicates
        r = s.reranks()
        assert [(x["candidate_id"], x["rank"], x["mean"]) for x in r] == [(5, 1, 0.7), (3, 2, 0.45)]
        assert s.reranked_ids("p") == {3, 5}


def test_readonly_missing_store_is_clear(tmp_path):
    with pytest.raises(FileNotFoundError, match="no search store"):
        Store(tmp_path / "nope", readonly=True)
