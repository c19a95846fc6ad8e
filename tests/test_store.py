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


# The schema as version 1 of the code wrote it: no candidates.detail column.
V1_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE proposals (idx INTEGER PRIMARY KEY, graph TEXT NOT NULL, parent_id INTEGER,
    origin TEXT NOT NULL, rng_state TEXT NOT NULL, created_at REAL NOT NULL);
CREATE TABLE candidates (id INTEGER PRIMARY KEY,
    proposal INTEGER UNIQUE NOT NULL REFERENCES proposals(idx), graph TEXT NOT NULL,
    key TEXT NOT NULL, fingerprint TEXT, parent_id INTEGER, origin TEXT NOT NULL,
    status TEXT NOT NULL, reason TEXT, reason_step INTEGER, accuracies TEXT NOT NULL,
    fitness REAL, cache_hit INTEGER NOT NULL, seconds REAL NOT NULL, timings TEXT NOT NULL,
    worker TEXT, created_at REAL NOT NULL, finished_at REAL NOT NULL);
CREATE INDEX candidates_key ON candidates(key);
CREATE INDEX candidates_fp ON candidates(fingerprint);
CREATE TABLE population (pos INTEGER PRIMARY KEY, candidate_id INTEGER NOT NULL);
CREATE TABLE reranks (id INTEGER PRIMARY KEY, candidate_id INTEGER NOT NULL, preset TEXT NOT NULL,
    accuracies TEXT NOT NULL, mean REAL, status TEXT NOT NULL, reason TEXT, search_fitness REAL,
    seconds REAL NOT NULL, created_at REAL NOT NULL, UNIQUE (candidate_id, preset));
INSERT INTO meta VALUES ('schema_version', '1');
INSERT INTO meta VALUES ('config', '{"budget": 2}');
INSERT INTO proposals VALUES (0, '{"nodes": [["sigmoid", 0], ["mul", 0, 4]]}', NULL, 'random',
    '[3, [0], null]', 1.0);
INSERT INTO proposals VALUES (1, '{"nodes": [["tanh", 0]]}', 1, 'mutation', '[3, [1], null]', 2.0);
INSERT INTO candidates VALUES (1, 0, '{"nodes": [["sigmoid", 0], ["mul", 0, 4]]}', 'k1', 'f1',
    NULL, 'random', 'valid', NULL, NULL, '{"a": 0.5}', 0.5, 0, 3.0, '{"train": 3.0}', 'w0', 1.0, 4.0);
INSERT INTO population VALUES (0, 1);
INSERT INTO reranks VALUES (1, 1, 'tiny', '{"a": 0.6}', 0.6, 'ok', NULL, 0.5, 9.0, 5.0);
"""


def test_a_version_1_store_reads_then_migrates_in_place_keeping_its_rows(tmp_path):
    db = sqlite3.connect(tmp_path / "store.sqlite")
    db.executescript(V1_SCHEMA)
    db.close()
    with Store(tmp_path, readonly=True) as r:  # read-only: no migration, detail reads as None
        (old,) = r.candidates()
        assert (old.id, old.status, old.scores, old.fitness, old.detail) == (
            1, "valid", {"a": 0.5}, 0.5, None)
        assert r.get_meta("schema_version") == 1
        assert r.reranks()[0]["split"] is None  # scored on the search's held-out images
    with Store(tmp_path) as s:  # for writing: migrated to the current schema
        assert s.get_meta("schema_version") == SCHEMA_VERSION == 8
        assert s.candidates() == [old] and s.population() == [1]
        assert s.config()["evolution"]["budget"] == 2  # the flat config, nested by part
        assert s.search_config().budget == 2 and s.search_config().task == {}
        (rr,) = s.reranks()
        assert (rr["candidate_id"], rr["mean"], rr["split"]) == (1, 0.6, None)
        # an old rerank does not count as done for a rerank scored on the test split
        assert s.reranked_ids("tiny") == {1} and s.reranked_ids("tiny", "test") == set()
        (prop,) = s.pending_proposals()
        ev = Evaluation("rejected", "stability", 4, {"grad_norm": 3e8})
        assert s.add_candidate(prop, ev, key="k2", fingerprint=None).evaluation == ev
    with Store(tmp_path) as s:  # opening again changes nothing
        assert s.get_meta("schema_version") == SCHEMA_VERSION
        assert [c.detail for c in s.candidates()] == [None, {"grad_norm": 3e8}]


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

