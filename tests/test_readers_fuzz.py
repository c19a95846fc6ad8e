"""Every reader is total: whatever a run folder's store, JSON-lines files, panels, priors or graph
text hold, a command answers (exit 0) or refuses in one line (exit 2), and a library reader raises
ValueError (DamagedFile and StoreError are ValueErrors): never a traceback, never RecursionError."""

import json
import shutil
import sqlite3

import pytest

hypothesis = pytest.importorskip("hypothesis")
pytest.importorskip("matplotlib", reason="reports need the optional `plots` extra")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import _objectives  # noqa: E402
from evonorm.cli import main as cli  # noqa: E402
from evonorm.graph import Graph  # noqa: E402
from evonorm.measure.fidelity import load_panel  # noqa: E402
from evonorm.proxy.prior import read_prior  # noqa: E402

FUZZ = settings(max_examples=12, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _deep(n: int, inner: str = "0") -> str:
    return "[" * n + inner + "]" * n


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**20, 10**20) | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4),
    max_leaves=12)
json_texts = (json_values.map(json.dumps) | st.integers(1, 300_000).map(_deep)
              | st.sampled_from(["{", "", "NaN", '{"a": Infinity}', "\udcff", '{"nodes": "x"}',
                                 '{"' + "a" * 5000 + '": 1}']))
sql_values = (st.none() | st.integers(-2**63, 2**63 - 1) | st.floats() | st.text(max_size=30)
              | st.binary(max_size=16) | json_texts)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return _objectives.tiny_run(tmp_path_factory.mktemp("fuzz") / "run", 4)


def _copy(base, tmp_path_factory):
    run = tmp_path_factory.mktemp("case") / "run"
    shutil.copytree(base, run)
    return run


def _answers(run, capsys) -> None:
    """report and resume on the run: 0, or 2 with one line on stderr."""
    for argv in (["report", str(run)], ["resume", str(run), "--objective", "_objectives:two",
                                        "--quiet"]):
        code = cli(argv)
        err = capsys.readouterr().err.strip()
        assert code in (0, 2), (argv, code, err)
        if code == 2:
            assert err.count("\n") == 0 and "Traceback" not in err, err


CANDIDATE_COLUMNS = ["graph", "key", "status", "reason", "reason_step", "detail", "stage_scores",
                     "features", "prediction", "scores", "fitness", "cache_hit", "seconds",
                     "timings", "origin", "parent_id", "proposal"]
META_KEYS = ["config", "status", "schema_version", "dataset", "device", "created_at", "finished_at"]


@FUZZ
@given(column=st.sampled_from(CANDIDATE_COLUMNS), value=sql_values, row=st.integers(1, 4))
def test_any_value_in_a_candidate_column_is_read_or_refused_in_one_line(
        base, tmp_path_factory, capsys, column, value, row):
    run = _copy(base, tmp_path_factory)
    db = sqlite3.connect(run / "store.sqlite")
    try:
        with db:
            db.execute(f"UPDATE candidates SET {column} = ? WHERE id = ?", (value, row))
    except sqlite3.IntegrityError:  # NOT NULL / UNIQUE: SQLite itself keeps it out
        return
    finally:
        db.close()
    _answers(run, capsys)


@FUZZ
@given(key=st.sampled_from(META_KEYS), value=sql_values)
def test_any_value_in_the_meta_table_is_read_or_refused_in_one_line(
        base, tmp_path_factory, capsys, key, value):
    run = _copy(base, tmp_path_factory)
    db = sqlite3.connect(run / "store.sqlite")
    try:
        with db:
            db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))
    except sqlite3.IntegrityError:
        return
    finally:
        db.close()
    _answers(run, capsys)


@pytest.mark.parametrize("damage, says", [
    ("DROP TABLE population", "damaged store"), ("DROP TABLE candidates", "not a search store"),
    ("ALTER TABLE candidates DROP COLUMN fitness", "damaged store"),
    ("ALTER TABLE candidates DROP COLUMN timings", "damaged store"),
    ("DELETE FROM proposals", "damaged store"),
    ("ALTER TABLE proposals RENAME COLUMN rng_state TO state", "damaged store"),
    # a schema that holds more or less than the store's: refused before anything in it runs
    ("CREATE TRIGGER wipe AFTER INSERT ON candidates BEGIN DELETE FROM candidates; END",
     "damaged store"),
    ("CREATE TRIGGER wipe2 AFTER INSERT ON proposals BEGIN DELETE FROM candidates; END",
     "damaged store"),
    ("CREATE VIEW best AS SELECT * FROM candidates", "damaged store"),
    ("CREATE INDEX extra ON candidates(status)", "damaged store"),
    ("CREATE TABLE stray (x)", "damaged store"), ("DROP INDEX candidates_key", "damaged store")])
def test_a_store_not_of_its_schema_is_refused_in_one_line_before_anything_runs(
        base, tmp_path_factory, capsys, damage, says):
    run = _copy(base, tmp_path_factory)
    with sqlite3.connect(run / "store.sqlite") as db:
        db.execute(damage)
    before = (run / "store.sqlite").read_bytes()
    for argv in (["report", str(run)], ["resume", str(run), "--objective", "_objectives:two",
                                        "--budget", "6", "--quiet"]):
        assert cli(argv) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and says in err, err
    assert (run / "store.sqlite").read_bytes() == before


@FUZZ
@given(name=st.sampled_from(["retrain.jsonl", "rerank.jsonl", "references.json"]),
       lines=st.lists(json_texts, min_size=1, max_size=3))
def test_any_run_folder_file_is_read_or_refused_in_one_line(base, tmp_path_factory, capsys, name,
                                                            lines):
    run = _copy(base, tmp_path_factory)
    (run / name).write_text("\n".join(lines) + "\n", errors="surrogateescape")
    _answers(run, capsys)


@FUZZ
@given(text=json_texts)
def test_panels_priors_and_graphs_are_read_or_refused_with_a_value_error(tmp_path, text):
    path = tmp_path / "file.json"
    path.write_text(text, errors="surrogateescape")
    for read in (load_panel, read_prior, lambda p: Graph.from_json(p.read_bytes())):
        try:
            read(path)
        except ValueError:
            pass


def _columns(db) -> list[tuple[str, str]]:
    tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    return [(t, r[1]) for t in tables for r in db.execute(f"PRAGMA table_info({t})")]


with sqlite3.connect(":memory:") as _db:
    from evonorm.search.store import _SCHEMA  # noqa: E402

    _db.executescript(_SCHEMA)
    ALL_COLUMNS = _columns(_db)
STORAGE_CLASSES = {"null": None, "integer": 7, "real": 0.5, "text": "x", "blob": b"\x00\xff"}


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(column=st.sampled_from(ALL_COLUMNS), cls=st.sampled_from(sorted(STORAGE_CLASSES)))
def test_every_storage_class_in_every_column_is_read_or_refused_in_one_line(
        base, tmp_path_factory, capsys, column, cls):
    from evonorm.search import load

    table, name = column
    run = _copy(base, tmp_path_factory)
    db = sqlite3.connect(run / "store.sqlite")
    try:
        with db:  # a value SQLite keeps as given: a blob stays a blob, "x" stays text in a REAL column
            db.execute(f"UPDATE {table} SET {name} = ? WHERE rowid = (SELECT min(rowid) FROM {table})",
                       (STORAGE_CLASSES[cls],))
    except sqlite3.IntegrityError:  # NOT NULL / UNIQUE / primary key: SQLite itself keeps it out
        return
    finally:
        db.close()
    _answers(run, capsys)
    try:
        load(run)
    except ValueError as err:
        assert "\n" not in str(err)


def test_a_blob_where_text_belongs_is_named_in_one_line(base, tmp_path_factory, capsys):
    run = _copy(base, tmp_path_factory)
    with sqlite3.connect(run / "store.sqlite") as db:
        db.execute("UPDATE candidates SET reason = ? WHERE id = 1", (b"\x00",))
    assert cli(["report", str(run)]) == 2
    err = capsys.readouterr().err.strip()
    assert "candidate 1: reason holds blob, not text or null" in err, err


@pytest.mark.parametrize("cls", sorted(STORAGE_CLASSES))
def test_the_store_check_knows_every_column_s_storage_classes(base, tmp_path, cls):
    """Exhaustive: every storage class in every column of a valid store, against the check alone
    (the readers' answers on a sample are fuzzed above)."""
    from evonorm.search.store import StoreError, _schema, check_store

    for table, name in ALL_COLUMNS:
        run = tmp_path / f"{table}.{name}"
        shutil.copytree(base, run)
        db = sqlite3.connect(run / "store.sqlite")
        try:
            with db:
                db.execute(f"UPDATE {table} SET {name} = ? WHERE rowid = (SELECT max(rowid) FROM {table})",
                           (STORAGE_CLASSES[cls],))
                stored = db.execute(f"SELECT typeof({name}) FROM {table} ORDER BY rowid DESC LIMIT 1").fetchone()
        except sqlite3.IntegrityError:
            continue
        finally:
            db.close()
        if stored is None:  # an empty table (the run's population may be)
            continue
        if stored[0] in _schema().columns[table][name]:
            continue  # converted by the column's affinity, or of its class: readers check the value
        with pytest.raises(StoreError, match=f"{table.removesuffix('s')} \\d+: {name} holds {stored[0]}"):
            check_store(run)
