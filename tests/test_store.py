"""The run store: config, proposals with rng state, candidates, population, cache lookup, reranks."""

import random
import sqlite3
import time

import pytest

from evonorm.search.evaluation import Evaluation
from evonorm.search.store import SCHEMA_VERSION, PendingProposal, Store

G = {"nodes": [["sigmoid", 0], ["mul", 0, 4]]}


def _add(store, proposal, status="valid", key="k", fp="f", cache_hit=False, window=None,
         worker=None, **kw):
    ev = Evaluation(status, scores=kw.pop("acc", {"a": 0.5}),
                    fitness=0.5 if status == "valid" else None, **kw)
    prop = PendingProposal(proposal, G, None, "random", time.time())
    return store.add_candidate(prop, ev, key=key, fingerprint=fp, cache_hit=cache_hit,
                               seconds=1.0, worker=worker, join_population=window).id


def test_round_trip_and_read_api(tmp_path):
    with Store(tmp_path) as s:
        s.set_config({"evolution": {"budget": 3}, "scores": ["a"]})
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
        assert r.config() == {"evolution": {"budget": 3}, "scores": ["a"]}
        (c,) = r.candidates()
        assert (c.id, c.proposal, c.graph, c.status, c.scores, c.worker) == (
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
        s.add_rerank(candidate_id=7, preset="p", accuracies={}, mean=None, status="lost",
                     reason="timeout", search_fitness=0.4, seconds=9.0, split="t")
        s.add_rerank(candidate_id=8, preset="p", accuracies={}, mean=None, status="failed",
                     reason="nonfinite:a@3", search_fitness=0.4, seconds=1.0, split="t")
        # a lost worker's layer is trained again; the layer's own failure is final
        assert s.reranked_ids("p", "t") == {8} and s.reranks()[-1]["split"] == "t"


def test_readonly_missing_store_is_clear(tmp_path):
    with pytest.raises(FileNotFoundError, match="no search store"):
        Store(tmp_path / "nope", readonly=True)


def test_evaluation_round_trips_whole_through_the_store(tmp_path):
    ev = Evaluation("rejected", "quality:a", 7, {"accuracy": 0.11, "threshold": 0.2},
                    {"a": 0.11}, None, {"quality": 1.5})
    with Store(tmp_path) as s:
        idx = s.add_proposal(G, 3, "mutation", [3, [0], None])
        prop = s.pending_proposals()[0]
        stored = s.add_candidate(prop, ev, key="k", fingerprint="f", seconds=2.0, worker="w")
        assert stored.evaluation == ev and stored.proposal == idx
        assert (stored.parent_id, stored.origin, stored.detail) == (3, "mutation", ev.detail)
    with Store(tmp_path, readonly=True) as r:
        (c,) = r.candidates()
        assert c == stored and c.evaluation == ev
        assert r.find_cached("k", None).evaluation == ev
        assert Evaluation.from_dict(ev.to_dict()) == ev


def _version_7_store(path) -> list:
    """A store as version 7 left it: the candidates' scores in a column named accuracies."""
    with Store(path) as s:
        for i in range(3):
            s.add_proposal(G, None, "random", [3, [i], None])
        _add(s, 0, acc={"a": 0.25, "b": 0.75}, window=2)
        _add(s, 1, status="rejected", reason="quality:b", acc={"a": 0.5}, key="k2")
        stored = s.candidates()
    db = sqlite3.connect(path / "store.sqlite")
    db.execute("ALTER TABLE candidates RENAME COLUMN scores TO accuracies")
    db.execute("UPDATE meta SET value = '7' WHERE key = 'schema_version'")
    db.commit()
    db.close()
    return stored


def _columns(path) -> set[str]:
    db = sqlite3.connect(path / "store.sqlite")
    try:
        return {r[1] for r in db.execute("PRAGMA table_info(candidates)")}
    finally:
        db.close()


def test_a_version_7_store_is_migrated_to_scores_with_its_rows_intact(tmp_path):
    stored = _version_7_store(tmp_path)
    with Store(tmp_path) as s:
        assert s.get_meta("schema_version") == SCHEMA_VERSION == 8
        assert s.candidates() == stored
        assert [c.scores for c in s.candidates()] == [{"a": 0.25, "b": 0.75}, {"a": 0.5}]
        (prop,) = s.pending_proposals()  # and a new candidate is written under the new name
        s.add_candidate(prop, Evaluation.valid({"a": 0.125}), key="k3", fingerprint=None)
        assert s.get_candidate(3).scores == {"a": 0.125}
    cols = _columns(tmp_path)
    assert "scores" in cols and "accuracies" not in cols


def test_a_version_7_store_opened_read_only_reads_its_scores_as_they_are(tmp_path):
    stored = _version_7_store(tmp_path)
    with Store(tmp_path, readonly=True) as r:
        assert r.get_meta("schema_version") == 7
        assert r.candidates() == stored
        assert r.candidates()[0].scores == {"a": 0.25, "b": 0.75} and r.population() == [1]
    assert "accuracies" in _columns(tmp_path)  # reading changed nothing

