"""The run's SQLite store (WAL): config, every proposal and candidate, the population.

A search commits after every finished evaluation, and each proposal is written (with the random
state after it) before it is handed to a worker, so a search killed at any moment resumes with no
finished evaluation lost, none repeated, and the random stream continued. Readers (reports) open it
read-only while a search writes. What a task records after a search (the proxy task's reranks and
re-training) is the task's, in files of its own beside the store.
"""

from __future__ import annotations

import functools
import json
import os
import random
import re
import sqlite3
import time
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from evonorm.files import (DamagedFile, UnsafePath, check_entry, check_record, key_text, open_regular,
                           parse_json, type_problem)
from evonorm.search.candidates import Candidate, Origin
from evonorm.search.config import SearchConfig
from evonorm.search.evaluation import Evaluation

STORE_NAME = "store.sqlite"
SCHEMA_VERSION = 1  # the one schema this evonorm reads and writes; a store of any other is refused

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS proposals (
    idx INTEGER PRIMARY KEY,            -- proposal order, 0-based
    graph TEXT NOT NULL,
    parent_id INTEGER,
    origin TEXT NOT NULL,
    rng_state TEXT NOT NULL,            -- the search rng state right after this proposal
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS candidates (
    id INTEGER PRIMARY KEY,             -- evaluation (finish) order, 1-based
    proposal INTEGER UNIQUE NOT NULL REFERENCES proposals(idx),
    graph TEXT NOT NULL,
    key TEXT NOT NULL,
    fingerprint TEXT,
    parent_id INTEGER,
    origin TEXT NOT NULL,
    status TEXT NOT NULL,
    reason TEXT,
    reason_step INTEGER,
    detail TEXT,                        -- JSON: what a rejection measured, or NULL
    stage_scores TEXT,                  -- JSON list of {name: score} per stage reached, or NULL
    features TEXT,                      -- JSON {name: value} at birth, or NULL
    prediction TEXT,                    -- JSON, the surrogate's before training, or NULL
    scores TEXT NOT NULL,               -- JSON {name: score}
    fitness REAL,
    cache_hit INTEGER NOT NULL,
    seconds REAL NOT NULL,
    timings TEXT NOT NULL,
    worker TEXT,
    created_at REAL NOT NULL,
    finished_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS candidates_key ON candidates(key);
CREATE INDEX IF NOT EXISTS candidates_fp ON candidates(fingerprint);
CREATE TABLE IF NOT EXISTS population (pos INTEGER PRIMARY KEY, candidate_id INTEGER NOT NULL);
"""


@dataclass(frozen=True)
class PendingProposal:
    """A proposal committed to the store and not yet evaluated."""

    idx: int
    graph: dict
    parent_id: int | None
    origin: Origin
    created_at: float


def resolve_path(path: str | Path) -> Path:
    """A run folder or the store file itself (`*.sqlite`, `*.db`, an existing file) -> the store
    file; the one rule for every command and the report."""
    p = Path(path)
    return p if p.suffix in (".sqlite", ".db") or p.is_file() else p / STORE_NAME


def run_folder(path: str | Path) -> Path:
    """The run folder of a run folder or of its store file."""
    return resolve_path(path).parent


def _readonly_uri(path: Path) -> str:
    """Read-only; with no -wal beside it (no writer since the last clean close) the file holds
    everything and is read as immutable, so a reader leaves no -wal/-shm behind."""
    wal = path.with_name(path.name + "-wal").exists()
    return f"file:{path}?mode=ro" + ("" if wal else "&immutable=1")


SIDECARS = ("-wal", "-shm", "-journal")


def check_files(path: Path) -> None:
    """The store file and the files SQLite keeps beside it must be regular files where they exist (UnsafePath):
    SQLite opens them by name and follows a symbolic link, so a planted link would send its writes elsewhere."""
    for name in ("", *SIDECARS):
        check_entry(path.with_name(path.name + name))


class StoreError(ValueError):
    """A store file that is damaged, foreign (not ours) or of another schema version: refused, untouched."""


@dataclass(frozen=True)
class _Schema:
    """The schema as SQLite reads `_SCHEMA` (the one place it is written down): every entry of
    `sqlite_master` (type, name, table, SQL) and each table's columns with the storage classes a
    value of theirs may have (SQLite stores any type in any column; affinity converts only some)."""

    entries: frozenset[tuple[str, str, str, str | None]]
    columns: dict[str, dict[str, tuple[str, ...]]]


_CLASSES = {"TEXT": "text", "INTEGER": "integer", "REAL": "real"}


def _master(db: sqlite3.Connection) -> set[tuple[str, str, str, str | None]]:
    """A database's `sqlite_master` entries, their SQL without comments and with single spaces: a comment
    of `_SCHEMA` reworded later does not make every earlier store a stranger."""
    return {(kind, name, table, None if sql is None else " ".join(re.sub(r"--[^\n]*", "", sql).split()))
            for kind, name, table, sql in db.execute("SELECT type, name, tbl_name, sql FROM sqlite_master")}


@functools.cache
def _schema() -> _Schema:
    db = sqlite3.connect(":memory:")
    try:
        db.executescript(_SCHEMA)
        entries = frozenset(_master(db))
        tables = [name for kind, name, _, _ in entries if kind == "table"]
        columns = {t: {name: (_CLASSES[decl],) + (() if notnull or pk else ("null",))
                       for _, name, decl, notnull, _, pk in db.execute(f"PRAGMA table_info({t})")}
                   for t in tables}
        return _Schema(entries, columns)
    finally:
        db.close()


def _schema_problem(db: sqlite3.Connection) -> str | None:
    """What in the store's `sqlite_master` differs from the schema (None: nothing). A trigger, view or
    index planted in a store runs inside every later write or read (a trigger on candidates can delete
    them all), and a table of another definition reads back otherwise than it was written."""
    found, want = _master(db), _schema().entries
    for kind, name, table, _ in sorted(found - want, key=lambda e: (e[0] != "table", e[1])):
        if kind == "table" and name.startswith("sqlite_stat"):  # SQLite's own statistics (ANALYZE)
            continue
        what = "table" if (kind, name) in {(k, n) for k, n, _, _ in want} else "extra " + kind
        return f"its {what} {key_text(name)} on {key_text(table)} is not one this evonorm writes"
    lost = sorted(name for _, name, _, _ in want - found)
    return f"its schema lacks {', '.join(lost)}" if lost else None


def _class_problem(db: sqlite3.Connection) -> str | None:
    """The first value whose storage class its column does not hold (None: none), found in one scan
    of each table: SQLite keeps a blob in a TEXT column, text in a REAL one, and every reader
    would otherwise fail on it half-way through its work."""
    for table, columns in _schema().columns.items():
        names = list(columns)
        checks = " OR ".join(f"typeof({c}) NOT IN ({', '.join(repr(k) for k in columns[c])})" for c in names)
        row = db.execute(f"SELECT rowid, {', '.join(f'typeof({c})' for c in names)} FROM {table} "
                         f"WHERE {checks} LIMIT 1").fetchone()
        if row is not None:
            for name, cls in zip(names, row[1:]):
                if cls not in columns[name]:
                    return (f"{table.removesuffix('s')} {row[0]}: {name} holds {cls}, not "
                            f"{' or '.join(columns[name])}")
    return None


def check_store(path: str | Path) -> None:
    """Refuse (StoreError, one line) a file that is not an intact store of schema SCHEMA_VERSION.

    Reads only: the header is checked by hand (empty, non-SQLite), the rest (truncated, damaged
    pages, tables, schema version) through a read-only connection. It never removes a -wal/-shm:
    a writer may have opened the store since this looked, and its committed candidates live in
    the -wal until a checkpoint (SQLite itself deletes sidecars only under an exclusive lock).
    """
    p = resolve_path(path)
    _check_header(p)
    try:
        db = sqlite3.connect(_readonly_uri(p), uri=True, timeout=30)
        try:
            found = _StoreShape.read(db)
        finally:
            db.close()
    except sqlite3.Error as err:
        raise StoreError(f"{p} is a damaged store ({err})") from None
    found.check(p)


def _check_header(p: Path) -> None:
    """The file is a regular, non-empty SQLite database (checked by hand: SQLite would take an empty
    or foreign file for a new database)."""
    try:
        check_files(p)
        fd = open_regular(p)
        with os.fdopen(fd, "rb") as f:
            size, head = os.fstat(fd).st_size, f.read(100)
    except UnsafePath as err:
        raise StoreError(str(err)) from None
    except OSError as err:
        raise StoreError(f"cannot read store {p}: {err.strerror or err}") from None
    if size == 0:
        raise StoreError(f"{p} is an empty file, not a search store")
    if len(head) < 100 or not head.startswith(b"SQLite format 3\x00"):
        raise StoreError(f"{p} is not a search store (not a SQLite database: damaged or foreign)")


@dataclass(frozen=True)
class _StoreShape:
    """What a store's database holds, as `check_store` judges it: SQLite's integrity check, its
    tables and their columns, its schema version row, the first problem of its schema or classes,
    and its candidates of proposals not in it."""

    status: str
    tables: set[str]
    columns: dict[str, set[str]]
    version: tuple | None
    problem: str | None
    orphans: int

    @classmethod
    def read(cls, db: sqlite3.Connection) -> "_StoreShape":
        status = db.execute("PRAGMA quick_check").fetchone()[0]
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        row = (db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
               if "meta" in tables else None)
        columns = {t: {r[1] for r in db.execute(f"PRAGMA table_info({t})")} for t in tables
                   if t.isidentifier()}
        complete = all(set(want) <= columns.get(t, set()) for t, want in _schema().columns.items())
        problem = _schema_problem(db) if complete else None
        problem = problem or (_class_problem(db) if complete else None)
        orphans = (db.execute("SELECT count(*) FROM candidates WHERE proposal NOT IN "
                              "(SELECT idx FROM proposals)").fetchone()[0]
                   if {"candidates", "proposals"} <= tables and "proposal" in columns.get(
                       "candidates", ()) and "idx" in columns.get("proposals", ()) else 0)
        return cls(status, tables, columns, row, problem, orphans)

    def check(self, p: Path) -> None:
        """StoreError, one line, for the first thing that makes it no intact store of this schema."""
        if self.status != "ok":
            raise StoreError(f"{p} is a damaged store (integrity check: {self.status})")
        missing = [t for t in ("meta", "proposals", "candidates") if t not in self.tables]
        if missing:
            raise StoreError(f"{p} is not a search store (no {', '.join(missing)} table)")
        found = _version_text(self.version)
        if found != str(SCHEMA_VERSION):
            raise StoreError(f"{p} has store schema version {found}, expected {SCHEMA_VERSION} "
                             f"(this evonorm reads no other)")
        for table, want in _schema().columns.items():
            if table not in self.tables:
                raise StoreError(f"{p} is a damaged store (its {table} table is missing)")
            lost = [c for c in want if c not in self.columns[table]]
            if lost:
                raise StoreError(f"{p} is a damaged store (table {table} lacks column "
                                 f"{', '.join(lost)})")
        if self.problem:
            raise StoreError(f"{p} is a damaged store ({self.problem})")
        if self.orphans:
            raise StoreError(f"{p} is a damaged store ({self.orphans} candidate(s) of proposals that "
                             "are not in it)")


def _version_text(row: tuple | None) -> str:
    """The stored schema version as the refusal names it: the integer, else the raw value (on one line)."""
    if row is None:
        return "none"
    try:
        version = parse_json(row[0])
    except (TypeError, ValueError):
        version = None
    if isinstance(version, int) and not isinstance(version, bool):
        return str(version)
    return ascii(row[0])[:60]


class Store:
    """SQLite store of one run; `Store(RUN)` or `Store(RUN/store.sqlite)`.

    An existing file is checked first (`check_store`): a damaged or foreign store, or one of another
    schema version, raises StoreError before anything is written to it; a new one is stamped with
    SCHEMA_VERSION.
    """

    def __init__(self, path: str | Path, readonly: bool = False):
        self.path = resolve_path(path)
        self.readonly = readonly
        check_files(self.path)
        if self.path.exists():
            check_store(self.path)
        if readonly:
            if not self.path.is_file():
                raise FileNotFoundError(f"no search store at {self.path}")
            self._db = sqlite3.connect(_readonly_uri(self.path), uri=True, timeout=30)
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, timeout=30)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(  # all tables and the version at once
                f"BEGIN IMMEDIATE;{_SCHEMA}INSERT OR IGNORE INTO meta VALUES "
                f"('schema_version', '{SCHEMA_VERSION}');COMMIT;")
        self._db.row_factory = sqlite3.Row

    # ------------------------------------------------------------------ read API (reports)
    def config(self) -> dict:
        """The search config as stored when the run started ({} before that)."""
        return self.get_meta("config", {})

    def checked_config(self, task: type | None = None) -> dict:
        """The stored config ({} before a search starts), as stored, once every field is checked
        against its type: the engine's here, the task's settings against `task` (a dataclass the
        caller knows them by, e.g. the proxy task's; the engine does not). A DamagedFile naming
        the field otherwise."""
        raw = self.config()
        if raw == {}:
            return {}
        if not isinstance(raw, dict):
            raise DamagedFile(self.path, "config", "not an object")
        check_record(SearchConfig, raw, self.path, "config")
        if task is not None and isinstance(raw.get("task"), dict):
            check_record(task, raw["task"], self.path, "config: task")
        return raw

    def search_config(self) -> "SearchConfig":
        """The run's config as a SearchConfig; FileNotFoundError when the store holds no search, a
        DamagedFile (one line naming the field) when a field is damaged."""

        raw = self.checked_config()
        if not raw:
            raise FileNotFoundError(f"{run_folder(self.path)} holds no search (no config in its store)")
        try:
            return SearchConfig.from_dict(raw)
        except (TypeError, ValueError) as err:
            raise DamagedFile(self.path, "config", (str(err).splitlines() or [""])[0]) from None

    def check_values(self, task: type | None = None) -> None:
        """Read every stored value once, each checked where it is read (a DamagedFile names the first damaged
        one): for a command that continues a run, before it writes anything (`task`: as `checked_config`).
        The random state is checked where a search reads it (`last_rng_state`), as only a resumed search
        does."""
        self.checked_config(task)
        for (key,) in self._db.execute("SELECT key FROM meta").fetchall():
            self.get_meta(key)
        self.candidates(), self.pending_proposals()

    def candidates(self) -> list[Candidate]:
        """Every finished evaluation, in evaluation order."""
        rows = self._db.execute("SELECT * FROM candidates ORDER BY id").fetchall()
        return [self._candidate(r) for r in rows]

    def population(self) -> list[int]:
        """Candidate ids in the current population, oldest first."""
        return [r[0] for r in self._db.execute("SELECT candidate_id FROM population ORDER BY pos")]

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ meta
    def get_meta(self, key: str, default: Any = None) -> Any:
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return default if row is None else self._json(row[0], f"meta {key}")

    def _json(self, text: Any, where: str, hint: Any = Any) -> Any:
        """A JSON column read back and checked against `hint`: DamagedFile naming the store and `where`."""
        try:
            value = parse_json(text)
        except (TypeError, ValueError) as err:
            raise DamagedFile(self.path, where, f"not valid JSON ({err})") from None
        problem = type_problem(value, hint)
        if problem is not None:
            raise DamagedFile(self.path, where, problem)
        return value

    def set_meta(self, key: str, value: Any) -> None:
        with self._db:
            self._db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, json.dumps(value)))

    def set_config(self, config: dict) -> None:
        self.set_meta("config", config)

    # ------------------------------------------------------------------ proposals
    def add_proposal(self, graph: dict, parent_id: int | None, origin: str,
                     rng_state: Any) -> int:
        """Record a proposal and the rng state after it, committed before any work on it."""
        with self._db:
            cur = self._db.execute(
                "INSERT INTO proposals (idx, graph, parent_id, origin, rng_state, created_at) "
                "VALUES ((SELECT COALESCE(MAX(idx) + 1, 0) FROM proposals), ?, ?, ?, ?, ?)",
                (json.dumps(graph), parent_id, origin, json.dumps(rng_state), time.time()))
            return self._db.execute("SELECT idx FROM proposals WHERE rowid = ?",
                                    (cur.lastrowid,)).fetchone()[0]

    def num_proposals(self) -> int:
        return self._db.execute("SELECT COUNT(*) FROM proposals").fetchone()[0]

    def num_candidates(self) -> int:
        return self._db.execute("SELECT COUNT(*) FROM candidates").fetchone()[0]

    def last_rng_state(self) -> Any | None:
        """The search's random state after its last proposal (None before the first), checked: a state that
        `random.Random.setstate` would refuse is a DamagedFile naming the proposal."""
        row = self._db.execute("SELECT idx, rng_state FROM proposals ORDER BY idx DESC LIMIT 1").fetchone()
        if row is None:
            return None
        where = f"proposal {row[0]}: rng_state"
        state = self._json(row[1], where, list)
        try:
            version, internal, gauss = state
            random.Random().setstate((version, tuple(internal), gauss))
        except (TypeError, ValueError, OverflowError) as err:
            raise DamagedFile(self.path, where, f"not a random state ({err})") from None
        return state

    def pending_proposals(self) -> list[PendingProposal]:
        """Proposals without a finished candidate (in flight when the search stopped)."""
        rows = self._db.execute(
            "SELECT p.* FROM proposals p LEFT JOIN candidates c ON c.proposal = p.idx "
            "WHERE c.id IS NULL ORDER BY p.idx").fetchall()
        return [PendingProposal(r["idx"], self._json(r["graph"], f"proposal {r['idx']}: graph", dict),
                                r["parent_id"], r["origin"], r["created_at"]) for r in rows]

    # ------------------------------------------------------------------ candidates
    def add_candidate(self, proposal: PendingProposal, evaluation: Evaluation, *, key: str,
                      fingerprint: str | None, cache_hit: bool = False, seconds: float = 0.0,
                      worker: str | None = None, join_population: int | None = None,
                      features: dict | None = None, prediction: dict | None = None) -> Candidate:
        """Record a finished evaluation in one committed transaction and return it as stored.

        `join_population=W` also appends it to the stored population, keeping the newest W.
        `features` and `prediction`: the candidate's at birth, with the prescreen on.
        """
        e, now = evaluation, time.time()
        with self._db:
            cur = self._db.execute(
                "INSERT INTO candidates (proposal, graph, key, fingerprint, parent_id, origin, "
                "status, reason, reason_step, detail, scores, fitness, cache_hit, seconds, "
                "timings, worker, created_at, finished_at, stage_scores, features, prediction) "
                "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (proposal.idx, json.dumps(proposal.graph), key, fingerprint, proposal.parent_id,
                 proposal.origin, e.status, e.reason, e.reason_step,
                 None if e.detail is None else json.dumps(e.detail), json.dumps(e.scores),
                 e.fitness, int(cache_hit), seconds, json.dumps(e.timings), worker,
                 proposal.created_at, now, json.dumps(e.stage_scores) if e.stage_scores else None,
                 _json_or_null(features), _json_or_null(prediction)))
            if join_population is not None:
                ids = (self.population() + [cur.lastrowid])[-join_population:]
                self._write_population(ids)
        return self.get_candidate(cur.lastrowid)

    def find_cached(self, key: str, fingerprint: str | None) -> Candidate | None:
        """An earlier non-cached, definitive (valid or rejected) evaluation of the same layer.

        Structure first (canonical key), then function (fingerprint). Failed evaluations are not
        reused: a dead or hung worker says nothing about the layer.
        """
        # a prescreen rejection was never evaluated: a later proposal of the layer is judged anew
        sql = ("SELECT * FROM candidates WHERE {} = ? AND status IN ('valid', 'rejected') "
               "AND cache_hit = 0 AND (reason IS NULL OR reason != 'prescreen') "
               "ORDER BY id LIMIT 1")
        row = self._db.execute(sql.format("key"), (key,)).fetchone()
        if row is None and fingerprint:
            row = self._db.execute(sql.format("fingerprint"), (fingerprint,)).fetchone()
        return None if row is None else self._candidate(row)

    def get_candidate(self, cid: int) -> Candidate:
        row = self._db.execute("SELECT * FROM candidates WHERE id = ?", (cid,)).fetchone()
        if row is None:
            raise KeyError(f"no candidate {cid}")
        return self._candidate(row)

    def _candidate(self, r: sqlite3.Row) -> Candidate:
        """A candidates row, each JSON column checked against its Evaluation field (DamagedFile naming it)."""
        where = f"candidate {r['id']}"
        hints = typing.get_type_hints(Evaluation)
        for name, hint in (("status", str), ("reason", str | None), ("reason_step", int | None),
                           ("fitness", float | None)):
            problem = type_problem(r[name], hint)
            if problem is not None:
                raise DamagedFile(self.path, f"{where}: {name}", problem)
        detail, stages, features, prediction = r["detail"], r["stage_scores"], r["features"], r["prediction"]
        evaluation = Evaluation(
            status=r["status"], reason=r["reason"], reason_step=r["reason_step"],
            detail=None if detail is None else self._json(detail, f"{where}: detail", hints["detail"]),
            scores=self._json(r["scores"], f"{where}: scores", hints["scores"]),
            fitness=r["fitness"], timings=self._json(r["timings"], f"{where}: timings", hints["timings"]),
            stage_scores=self._json(stages, f"{where}: stage_scores", hints["stage_scores"]) if stages else [])
        return Candidate(
            id=r["id"], evaluation=evaluation, graph=self._json(r["graph"], f"{where}: graph", dict), key=r["key"],
            fingerprint=r["fingerprint"], parent_id=r["parent_id"], origin=r["origin"],
            cache_hit=bool(r["cache_hit"]), seconds=r["seconds"], worker=r["worker"],
            created_at=r["created_at"], finished_at=r["finished_at"], proposal=r["proposal"],
            features=None if features is None else self._json(features, f"{where}: features", dict),
            prediction=None if prediction is None else self._json(prediction, f"{where}: prediction",
                                                                  dict))

    def _write_population(self, ids: Iterable[int]) -> None:
        self._db.execute("DELETE FROM population")
        self._db.executemany("INSERT INTO population VALUES (?, ?)", enumerate(ids))


def _json_or_null(value: Any) -> str | None:
    return None if value is None else json.dumps(value)
