"""A run folder as a trusted tool treats its data folder: no file is read or written through a symbolic link
(a link planted in the folder would make a command write outside it), and every value read back is checked
where it is read: a damaged file or field exits 2 with one line naming both, before anything is written."""

from __future__ import annotations

import json
import os
import random
import sqlite3
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from evonorm import files
from evonorm.files import DamagedFile, UnsafePath
from evonorm.graph.library import NAMED_GRAPHS
from evonorm.search.driver import init_run
from evonorm.search.evaluation import Evaluation
from evonorm.proxy.presets import get_preset
from evonorm.measure.ledger import LEDGER_VERSION, Row, read_ledger as load_rows
from evonorm.search.store import PendingProposal, Store

from test_hardening import assert_refused, cli, snapshot
from evonorm.proxy.config import ProxyTask, stored_task

GRAPH = NAMED_GRAPHS["evonorm_s0"].to_json()


def _run(tmp_path: Path) -> Path:
    """A tiny run as `evonorm search` makes it, with two finished candidates (one valid) and one in flight."""
    run = tmp_path / "run"
    cfg = get_preset("tiny")
    init_run(run, cfg)
    rng = random.Random(0)
    with Store(run) as s:
        for i, status in enumerate(("valid", "rejected")):
            idx = s.add_proposal(GRAPH, None, "random", rng.getstate())
            accs = {a: 0.3 for a in stored_task(cfg).archs}
            ev = (Evaluation.valid(accs) if status == "valid"
                  else Evaluation("rejected", "precheck:constant"))
            s.add_candidate(PendingProposal(idx, GRAPH, None, "random", time.time()), ev, key=f"k{i}",
                            fingerprint=None, seconds=1.0, join_population=10 if status == "valid" else None)
        s.add_proposal(GRAPH, None, "random", rng.getstate())  # in flight when it stopped
    return run


@pytest.fixture
def run(tmp_path) -> Path:
    return _run(tmp_path)


def _sql(run: Path, query: str, *args) -> None:
    db = sqlite3.connect(run / "store.sqlite")
    db.execute(query, args)
    db.commit()
    db.close()


def _config(run: Path, **changes) -> None:
    db = sqlite3.connect(run / "store.sqlite")
    cfg = json.loads(db.execute("SELECT value FROM meta WHERE key = 'config'").fetchone()[0])
    db.execute("UPDATE meta SET value = ? WHERE key = 'config'", (json.dumps(cfg | changes),))
    db.commit()
    db.close()


def _task(run: Path, **changes) -> None:
    db = sqlite3.connect(run / "store.sqlite")
    cfg = json.loads(db.execute("SELECT value FROM meta WHERE key = 'config'").fetchone()[0])
    cfg["task"] = {**cfg["task"], **changes}
    db.execute("UPDATE meta SET value = ? WHERE key = 'config'", (json.dumps(cfg),))
    db.commit()
    db.close()


# ---------------------------------------------------------------- symbolic links

def _plant(run: Path, name: str, target: Path) -> None:
    entry = run / name
    if entry.exists():
        entry.unlink()
    entry.symlink_to(target)


@pytest.mark.parametrize("name,argv,needle", [
    ("lock", ["rerank"], "lock is a symbolic link"),
    ("lock", ["resume", "--quiet"], "lock is a symbolic link"),
    ("retrain.jsonl", ["retrain", "--seeds", "2"], "retrain.jsonl is a symbolic link"),
    ("retrain.jsonl", ["report"], "retrain.jsonl is a symbolic link"),
    ("references.json", ["report"], "references.json is a symbolic link"),
    ("store.sqlite-wal", ["resume", "--quiet"], "store.sqlite-wal is a symbolic link"),
    ("store.sqlite-journal", ["report"], "store.sqlite-journal is a symbolic link"),
])
def test_a_link_planted_in_the_run_folder_is_refused_and_its_target_untouched(run, tmp_path, name, argv, needle):
    outside = tmp_path / "outside"
    outside.mkdir()
    target = outside / "victim.txt"
    target.write_text("precious\n")
    _plant(run, name, target)
    assert_refused([argv[0], str(run), *argv[1:]], tmp_path, needle)
    assert target.read_text() == "precious\n"


def test_a_report_folder_linked_elsewhere_gets_no_figures(run, tmp_path):
    pytest.importorskip("matplotlib", reason="reports need the optional `plots` extra")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (run / "report").symlink_to(elsewhere, target_is_directory=True)
    assert_refused(["report", str(run)], tmp_path, "report is a symbolic link")
    assert not any(elsewhere.iterdir())


@pytest.mark.parametrize("command", [["resume", "--quiet", "--budget", "50"], ["rerank"], ["retrain", "--seeds", "2"]])
def test_a_stages_folder_linked_elsewhere_stops_a_command_before_it_writes(run, tmp_path, command):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (run / "stages").symlink_to(elsewhere, target_is_directory=True)
    assert_refused([command[0], str(run), *command[1:]], tmp_path, "stages is a symbolic link")
    assert not any(elsewhere.iterdir())


def test_a_report_file_linked_elsewhere_is_replaced_not_followed(run, tmp_path):
    pytest.importorskip("matplotlib", reason="reports need the optional `plots` extra")
    target = tmp_path / "victim.html"
    target.write_text("precious\n")
    (run / "report.html").symlink_to(target)
    rc, _, err = cli(["report", str(run)])
    assert rc == 0, err
    assert target.read_text() == "precious\n" and not (run / "report.html").is_symlink()


ENTRIES = ["link to a file", "link to a folder", "dangling link", "folder", "fifo"]


def _entry(path: Path, kind: str, target_dir: Path) -> None:
    if kind == "link to a file":
        (target_dir / "f").write_text("precious")
        path.symlink_to(target_dir / "f")
    elif kind == "link to a folder":
        path.symlink_to(target_dir, target_is_directory=True)
    elif kind == "dangling link":
        path.symlink_to(target_dir / "nothing")
    elif kind == "folder":
        path.mkdir()
    else:
        os.mkfifo(path)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(ENTRIES), op=st.sampled_from(["read", "append", "open", "json", "jsonl", "entry"]))
def test_no_helper_goes_through_a_link_or_into_a_non_file(tmp_path_factory, kind, op):
    """Whatever sits at a run-folder file's name that is not a regular file, every reader and writer refuses it
    (UnsafePath, an OSError: one line through the commands) and the target keeps its bytes."""
    folder, target_dir = tmp_path_factory.mktemp("run"), tmp_path_factory.mktemp("outside")
    path = folder / "file"
    _entry(path, kind, target_dir)
    before = snapshot(target_dir)
    calls = {"read": lambda: files.read_bytes(path), "append": lambda: files.append_line(path, "{}"),
             "open": lambda: files.open_regular(path, os.O_RDWR | os.O_CREAT), "json": lambda: files.read_json(path),
             "jsonl": lambda: files.read_jsonl(path, Row), "entry": lambda: files.check_entry(path)}
    with pytest.raises(OSError) as err:
        calls[op]()
    assert isinstance(err.value, UnsafePath) or kind in ("folder", "link to a folder") and op != "entry", err.value
    assert snapshot(target_dir) == before


@pytest.mark.parametrize("kind", ["link to a folder", "dangling link", "link to a file"])
def test_a_subfolder_is_a_real_folder(tmp_path, kind):
    target = tmp_path / "outside"
    target.mkdir()
    _entry(tmp_path / "report", kind, target)
    with pytest.raises(UnsafePath):
        files.check_folder(tmp_path / "report", create=True)


def test_an_atomic_write_replaces_a_link_and_leaves_no_temporary_file(tmp_path):
    target = tmp_path / "victim"
    target.write_text("precious")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "x.json").symlink_to(target)
    files.write_atomic(tmp_path / "run" / "x.json", b"{}")
    assert target.read_text() == "precious" and (tmp_path / "run" / "x.json").read_bytes() == b"{}"
    assert [p.name for p in (tmp_path / "run").iterdir()] == ["x.json"]


# ---------------------------------------------------------------- damaged values

# a re-training and a rerank row as this version writes them (`evonorm.measure.ledger.Row`)
GOOD_ROW = {"layer": "bn_relu", "kind": "reference", "seed": 1000, "setting": "full", "split": "s",
            "scores": {"a": 0.5}, "fitness": 0.5, "status": "ok", "version": LEDGER_VERSION}
RERANK_ROW = GOOD_ROW | {"layer": "id 1", "kind": "found", "seed": 0, "setting": "tiny", "candidate_id": 1,
                         "search_fitness": 0.5, "seconds": 1.0, "created_at": 1.0}


def _damage_references_list(run):
    (run / "references.json").write_text("[1, 2]")


def _damage_references_value(run):
    (run / "references.json").write_text(json.dumps({"bn_relu": {"resnet": "high"}}))


def _damage_retrain_fitness(run):
    row = GOOD_ROW | {"fitness": "high"}
    (run / "retrain.jsonl").write_text(json.dumps(row) + "\n")


def _damage_rerank_mean(run):
    row = RERANK_ROW | {"fitness": "high"}
    (run / "rerank.jsonl").write_text(json.dumps(row) + "\n")


DAMAGE = {  # what is damaged -> (how, the commands that read it, what the line names)
    "references.json is a list": (_damage_references_list, ["report", "retrain"], ["references.json", "a list"]),
    "a reference's accuracy": (_damage_references_value, ["report", "retrain"], ["references.json", "resnet"]),
    "retrain.jsonl fitness": (_damage_retrain_fitness, ["report", "retrain", "resume"],
                              ["retrain.jsonl", "line 1", "fitness"]),
    "rerank.jsonl fitness": (_damage_rerank_mean, ["report", "rerank", "resume"], ["rerank.jsonl", "line 1", "fitness"]),
    "config archs": (lambda r: _config(r, archs=3), ["report", "resume", "retrain", "rerank"],
                     ["store.sqlite", "config", "archs"]),
    "config train": (lambda r: _config(r, train=[1, 2]), ["report", "resume", "retrain", "rerank"],
                     ["store.sqlite", "config", "train"]),
    # as this version stores it: the task's settings in their own part
    "config task archs": (lambda r: _task(r, archs=3), ["report", "resume", "retrain", "rerank"],
                          ["store.sqlite", "config: task: archs"]),
    "config hurdles": (lambda r: _config(r, hurdles={"stage_steps": "75"}), ["report", "resume"],
                       ["store.sqlite", "config: hurdles", "stage_steps"]),
    "config unknown": (lambda r: _config(r, frobs=1), ["resume", "retrain", "rerank"], ["store.sqlite", "config"]),
    "rng_state garbage": (lambda r: _sql(r, "UPDATE proposals SET rng_state = 'x{' WHERE idx = 2"), ["resume"],
                          ["store.sqlite", "proposal 2", "rng_state"]),
    "rng_state wrong": (lambda r: _sql(r, "UPDATE proposals SET rng_state = '[3, [1], null]' WHERE idx = 2"),
                        ["resume"], ["store.sqlite", "proposal 2", "rng_state"]),
    "candidate graph not JSON": (lambda r: _sql(r, "UPDATE candidates SET graph = '{x' WHERE id = 1"),
                                 ["report", "resume", "retrain", "rerank"], ["store.sqlite", "candidate 1", "graph"]),
    "valid candidate graph not a graph": (
        lambda r: _sql(r, "UPDATE candidates SET graph = ? WHERE id = 1", '{"nodes": [["frob", 0]]}'),
        ["resume", "retrain", "rerank"], ["store.sqlite", "candidate 1", "graph"]),
    "pending graph": (lambda r: _sql(r, "UPDATE proposals SET graph = '7' WHERE idx = 2"), ["resume"],
                      ["store.sqlite", "proposal 2", "graph"]),
    "fitness text": (lambda r: _sql(r, "UPDATE candidates SET fitness = 'abc' WHERE id = 1"),
                     ["report", "resume", "retrain", "rerank"], ["store.sqlite", "candidate 1", "fitness"]),
    "scores list": (lambda r: _sql(r, "UPDATE candidates SET scores = '[1]' WHERE id = 1"),
                    ["report", "resume", "retrain", "rerank"], ["candidate 1", "scores"]),
    "timings text": (lambda r: _sql(r, "UPDATE candidates SET timings = '{\"a\": \"b\"}' WHERE id = 2"),
                     ["report", "resume", "retrain", "rerank"], ["candidate 2", "timings"]),
    "meta dataset": (lambda r: _sql(r, "INSERT OR REPLACE INTO meta VALUES ('dataset', '{bad')"),
                     ["report", "resume", "retrain", "rerank"], ["store.sqlite", "meta dataset"]),
}


@pytest.mark.parametrize("case,command", [(c, cmd) for c, (_, cmds, _) in DAMAGE.items() for cmd in cmds])
def test_a_damaged_value_exits_2_naming_the_file_and_the_field_before_anything_is_written(run, case, command):
    damage, _, needles = DAMAGE[case]
    damage(run)
    if command == "report":
        pytest.importorskip("matplotlib", reason="reports need the optional `plots` extra")
    extra = {"resume": ["--quiet", "--budget", "50"], "retrain": ["--seeds", "2"]}.get(command, [])
    assert_refused([command, str(run), *extra], run, *needles)


def test_retrain_never_counts_a_row_it_cannot_use(tmp_path):
    path = tmp_path / "retrain.jsonl"
    good = dict(GOOD_ROW)
    files.append_line(path, json.dumps(good))
    path.write_text(path.read_text() + '{"layer": "bn_relu", "kind": "refer')  # torn by a kill
    files.append_line(path, json.dumps(good | {"seed": 1001}))
    assert [r.seed for r in load_rows(path)] == [1000, 1001]  # the torn row is trained again
    files.append_line(path, json.dumps(good | {"seed": "1002"}))
    with pytest.raises(DamagedFile, match="line 4: seed: a string"):  # line 2: the torn one
        load_rows(path)


def test_a_ledger_of_another_format_version_is_refused_in_one_line(tmp_path):
    path = tmp_path / "retrain.jsonl"
    path.write_text(json.dumps(GOOD_ROW | {"version": LEDGER_VERSION + 1}) + "\n")
    with pytest.raises(DamagedFile, match=f"line 1: format version {LEDGER_VERSION + 1}, and this") as err:
        load_rows(path)
    assert "\n" not in str(err.value)
    path.write_text(json.dumps({k: v for k, v in GOOD_ROW.items() if k != "version"}) + "\n")  # an older file
    with pytest.raises(DamagedFile, match="line 1: no format version"):
        load_rows(path)


@pytest.mark.parametrize("change", [{"fitness": float("nan")}, {"fitness": 1e400}, {"scores": {"a": 5.0}},
                                    {"scores": {"a": -float("inf")}}, {"seconds": -1.0}, {"seed": -50}])
def test_a_retrain_row_that_cannot_be_true_is_dropped_with_one_warning(run, capsys, change):
    pytest.importorskip("matplotlib", reason="reports need the optional `plots` extra")
    good = dict(GOOD_ROW)
    lines = [good, good | {"seed": 1001, "scores": {"a": 0.6}, "fitness": 0.6}, good | {"seed": 1002} | change]
    (run / "retrain.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))  # NaN, Infinity as Python writes them
    assert [r.seed for r in load_rows(run / "retrain.jsonl")] == [1000, 1001]
    warned = capsys.readouterr().err.strip().splitlines()
    assert len(warned) == 1 and "dropped 1 row(s)" in warned[0] and "line 3" in warned[0], warned
    rc, _, err = cli(["report", str(run)])
    assert rc == 0 and "Traceback" not in err, err


def test_a_rerank_row_or_reference_that_cannot_be_true_is_dropped_with_one_warning(run, capsys):
    from evonorm.measure.references import read_references
    from evonorm.measure.rerank import read_reranks

    row = RERANK_ROW
    (run / "rerank.jsonl").write_text(json.dumps(row) + "\n" + json.dumps(row | {"fitness": float("nan")}) + "\n")
    assert [r.fitness for r in read_reranks(run)] == [0.5]  # the later row would count: it cannot be true
    (run / "references.json").write_text(json.dumps({"bn_relu": {"a": 0.5}, "gn_relu": {"a": 5.0}}))
    assert read_references(run / "references.json") == {"bn_relu": {"a": 0.5}}
    warned = capsys.readouterr().err.strip().splitlines()
    assert len(warned) == 2 and "rerank.jsonl" in warned[0] and "gn_relu" in warned[1], warned


JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                                        max_size=3), max_leaves=6)


@settings(max_examples=200, deadline=None)
@given(field=st.sampled_from(["layer", "kind", "seed", "scores", "fitness", "candidate_id", "seconds",
                              "reason"]), value=JSON_VALUES)
@example(field="scores", value={"\n": False})  # a key with a line break: the message stays one line
def test_any_row_is_a_retrain_row_of_the_declared_types_or_refused(tmp_path_factory, field, value):
    """Fuzz: a row with any JSON value in any field either loads, with that field of its declared type, is
    dropped (a value of its type that cannot be true), or raises DamagedFile naming the line and the field."""
    path = tmp_path_factory.mktemp("run") / "retrain.jsonl"
    row = dict(GOOD_ROW)
    path.write_text(json.dumps(row | {field: value}) + "\n")
    try:
        loaded = load_rows(path)
    except DamagedFile as err:
        assert f"line 1: {field}:" in str(err) and "\n" not in str(err)
        return
    if not loaded:
        assert Row(**(row | {field: value})).problem() is not None
        return
    (loaded,) = loaded
    got = getattr(loaded, field)
    assert files.type_problem(got, {"layer": str, "kind": str, "seed": int, "scores": dict[str, float | None],
                                    "fitness": float | None, "candidate_id": int | None, "seconds": float,
                                    "reason": str | None}[field]) is None


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(["archs", "budget", "train", "seed", "holdout", "stage_steps", "device",
                              "space", "evolution", "hurdles", "task"]),
       value=JSON_VALUES)
def test_any_config_field_is_of_its_type_or_refused_in_one_line(tmp_path_factory, field, value):
    """Fuzz: the stored config with any JSON value in a field reads back as a SearchConfig or is a DamagedFile
    naming the store and the field; nothing else escapes."""
    run = tmp_path_factory.mktemp("r") / "run"
    init_run(run, get_preset("tiny"))
    _config(run, **{field: value})
    with Store(run, readonly=True) as s:
        try:
            s.search_config()
        except DamagedFile as err:
            assert "store.sqlite: config" in str(err) and "\n" not in str(err)


@pytest.mark.parametrize("name", ["retrain.jsonl", "rerank.jsonl", "references.json"])
def test_a_sparse_ledger_of_gigabytes_is_refused_before_it_is_read(run, monkeypatch, name):
    pytest.importorskip("matplotlib", reason="reports need the optional `plots` extra")
    with open(run / name, "wb") as f:
        f.truncate(2 << 30)  # no disk; read whole, 2 GB of memory
    monkeypatch.setattr(files, "parse_json", lambda *a: pytest.fail("read"))
    assert_refused(["report", str(run)], run, name, "bytes, more than")


def test_a_sparse_prior_of_gigabytes_is_skipped_before_it_is_read(tmp_path, capsys):
    from evonorm.proxy.prior import prior_for

    (tmp_path / "a.json").touch()
    with open(tmp_path / "a.json", "wb") as f:
        f.truncate(2 << 30)
    tiny = get_preset("tiny")
    assert prior_for(ProxyTask.of_run(tiny), tiny.evolution.space, tiny.preset, tmp_path) is None
    assert "bytes, more than" in capsys.readouterr().err
