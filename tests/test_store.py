"""The run store: config, proposals with rng state, candidates, population, cache lookup, its one schema."""

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


def _columns(path, table: str) -> list[str]:
    db = sqlite3.connect(path / "store.sqlite")
    try:
        return [r[1] for r in db.execute(f"PRAGMA table_info({table})")]
    finally:
        db.close()


def test_a_new_store_is_schema_version_1_with_one_name_per_column(tmp_path):
    ev = Evaluation.valid({"a": 0.5}, stage_scores=[{"a": 0.25}, {"a": 0.5}])
    with Store(tmp_path) as s:
        assert s.get_meta("schema_version") == SCHEMA_VERSION == 1
        s.add_proposal(G, None, "random", [3, [0], None])
        s.add_candidate(s.pending_proposals()[0], ev, key="k", fingerprint=None)
    cols = _columns(tmp_path, "candidates")
    assert "scores" in cols and "stage_scores" in cols and "stages" not in cols and "accuracies" not in cols
    assert _columns(tmp_path, "reranks") == []  # the task's records are the task's, not the store's
    with Store(tmp_path, readonly=True) as r:
        assert r.get_meta("schema_version") == 1 and r.candidates()[0].stage_scores == ev.stage_scores
    with Store(tmp_path) as s:  # opening again changes nothing
        assert s.get_meta("schema_version") == 1 and s.candidates()[0].evaluation == ev


def test_a_reader_never_deletes_a_writer_s_wal(tmp_path, monkeypatch):
    """The race: a reader checks a cleanly closed store (no -wal), a writer opens it meanwhile, commits
    and crashes before any checkpoint; everything it committed lives in the -wal, which the reader
    must leave alone. (A reader that removed the sidecars it had seen missing lost those rows.)"""
    import subprocess
    import sys

    from evonorm.search import store as store_module

    with Store(tmp_path) as s:
        s.set_config({"evolution": {"budget": 3}})
    path = tmp_path / "store.sqlite"
    assert not path.with_name("store.sqlite-wal").exists()
    writer = (  # commits 5 rows in WAL mode, then dies without closing (no checkpoint, -wal kept)
        "import os, sqlite3, sys\n"
        "db = sqlite3.connect(sys.argv[1]); db.execute('PRAGMA journal_mode=WAL')\n"
        "db.execute('PRAGMA wal_autocheckpoint=0')\n"
        "for i in range(5):\n"
        "    db.execute(\"INSERT INTO meta VALUES (?, '1')\", (f'row{i}',)); db.commit()\n"
        "os._exit(9)\n")
    slow_reader_uri = store_module._readonly_uri

    def uri_while_a_writer_starts(p):
        uri = slow_reader_uri(p)  # decided with no -wal present: read as immutable
        assert subprocess.run([sys.executable, "-c", writer, str(path)]).returncode == 9
        assert path.with_name("store.sqlite-wal").exists()
        return uri

    monkeypatch.setattr(store_module, "_readonly_uri", uri_while_a_writer_starts)
    store_module.check_store(path)
    monkeypatch.undo()
    assert path.with_name("store.sqlite-wal").exists()
    db = sqlite3.connect(path)
    assert db.execute("SELECT count(*) FROM meta WHERE key LIKE 'row%'").fetchone()[0] == 5
    db.close()


def test_a_store_whose_schema_differs_in_comments_and_spacing_only_is_read(tmp_path):
    import sqlite3

    from evonorm.search import store

    path = tmp_path / "store.sqlite"
    db = sqlite3.connect(path)
    db.executescript(store._SCHEMA.replace("-- proposal order, 0-based", "-- reworded later")
                     .replace("graph TEXT NOT NULL,", "graph   TEXT NOT NULL,"))
    db.execute("INSERT INTO meta VALUES ('schema_version', '1')")
    db.commit()
    db.close()
    store.check_store(path)
