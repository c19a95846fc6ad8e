"""The holes a careful user or an attacker found, each with the test that failed before.

Every CLI check: exit 2, one line on stderr, no traceback, nothing written.
"""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

from evonorm.cli import main
from evonorm.graph import Graph
from evonorm.graph.library import NAMED_GRAPHS
from evonorm.proxy.objective import ProxyObjective
from evonorm.search.driver import init_run, run_search
from evonorm.proxy.presets import get_preset
from evonorm.search.store import SCHEMA_VERSION, Store


def cli(argv: list[str]) -> tuple[int, str, str]:
    """Run `evonorm ARGV` in-process: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as exc:  # argparse
            rc = exc.code
    return rc, out.getvalue(), err.getvalue()


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else b"<dir>")
            for p in sorted(folder.rglob("*"))}


def assert_refused(argv: list[str], folder: Path, *needles: str) -> str:
    """ARGV exits 2 with one stderr line holding every needle, and leaves `folder` unchanged."""
    before = snapshot(folder)
    rc, _, err = cli(argv)
    assert rc == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err
    assert snapshot(folder) == before
    return err


@pytest.fixture
def run(tmp_path) -> Path:
    """A tiny search run as `evonorm search` creates it, before any candidate (no training)."""
    folder = tmp_path / "run"
    init_run(folder, get_preset("tiny"))
    return folder


# ---------------------------------------------------------------- 1. run lock

HOLDER = textwrap.dedent("""
    import sys, time
    from evonorm.search.lock import RunLock
    RunLock(sys.argv[1]).acquire()
    print("locked", flush=True)
    time.sleep(120)
""")


def hold_lock(run: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(run)], stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_second_driver_on_a_live_run_exits_2_naming_the_holder(run):
    proc = hold_lock(run)
    try:
        for argv in (["resume", str(run), "--quiet"], ["rerank", str(run)],
                     ["search", "--preset", "tiny", "--out", str(run), "--force", "--quiet"]):
            assert_refused(argv, run, f"in use by process {proc.pid}")
    finally:
        proc.kill()
        proc.wait()


def test_lock_of_a_killed_process_is_taken_over(run):
    proc = hold_lock(run)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert str(proc.pid) in (run / "lock").read_text()  # the dead holder's text is still there
    rc, out, err = cli(["rerank", str(run)])  # takes the lock: nothing valid to rerank yet
    assert rc == 0 and "in use" not in err and "no reranked layer" in out


def test_lock_is_held_for_the_whole_search_and_released_after(tmp_path):
    from evonorm.search.lock import RunLock, RunLocked

    lock = RunLock(tmp_path).acquire()
    with pytest.raises(RunLocked, match=str(os.getpid())):
        RunLock(tmp_path).acquire()  # a second open file description: refused, even in-process
    lock.release()
    RunLock(tmp_path).acquire().release()


# ---------------------------------------------------------------- 2. CIFAR without code execution

def write_cifar(folder: Path, n: int = 4, protocol: int = 2) -> None:
    """A CIFAR-10 in the real layout (dict of bytes keys, uint8 array, int lists, bytes names)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        with open(folder / name, "wb") as f:
            pickle.dump({b"batch_label": b"training batch", b"labels": [1] * n,
                         b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
                         b"filenames": [b"a.png"] * n}, f, protocol=protocol)


class _Planted:
    def __init__(self, target: Path):
        self.target = target

    def __reduce__(self):
        return os.mkdir, (str(self.target),)


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_cifar_real_layout_loads_with_every_pickle_protocol(tmp_path, protocol):
    from evonorm.data import load_dataset

    write_cifar(tmp_path / "cifar-10-batches-py", protocol=protocol)
    ds = load_dataset("cifar10", tmp_path)
    assert ds.train_x.shape == (20, 3, 32, 32) and ds.train_y.tolist() == [1] * 20


def test_planted_cifar_pickle_runs_no_code_and_is_named(tmp_path):
    from evonorm.data import load_dataset

    folder = tmp_path / "cifar-10-batches-py"
    write_cifar(folder)
    target = tmp_path / "pwned"
    with open(folder / "data_batch_3", "wb") as f:
        pickle.dump({b"data": _Planted(target), b"labels": [0]}, f, protocol=2)
    with pytest.raises(ValueError, match=r"data_batch_3.*refused global posix\.mkdir"):
        load_dataset("cifar10", tmp_path)
    assert not target.exists()
    # and through the CLI: one line, exit 2, the planted code never ran
    assert_refused(["train", "--layer", "bn_relu", "--dataset", "cifar10", "--data-root",
                    str(tmp_path), "--train-preset", "tiny"], tmp_path, "data_batch_3")
    assert not target.exists()


# ---------------------------------------------------------------- 3./4. damaged, foreign, other-version stores

def _truncated(p: Path) -> None:
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])


def _foreign(p: Path) -> None:
    p.unlink()
    db = sqlite3.connect(p)
    db.execute("CREATE TABLE notes (x)")
    db.commit()
    db.close()


def _version(raw: str | None):
    """Damage: the stored schema version's raw text set to `raw` (None: the row removed)."""
    def damage(p: Path) -> None:
        db = sqlite3.connect(p)
        if raw is None:
            db.execute("DELETE FROM meta WHERE key = 'schema_version'")
        else:
            db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (raw,))
        db.commit()
        db.close()
    return damage


# a store of any schema version but this one's (older, newer, none, not an integer) is refused by name
VERSIONS = {"8": "8", "2": "2", "99": "99", "0": "0", "-1": "-1", '"1"': "'\"1\"'", "1.0": "'1.0'",
            "true": "'true'", "x{": "'x{'", None: "none"}


DAMAGE = {
    "truncated": (_truncated, "damaged store"),
    "random": (lambda p: p.write_bytes(np.random.default_rng(1).bytes(8192)), "not a search store"),
    "plain": (lambda p: p.write_text("name,accuracy\nbn_relu,0.5\n"), "not a search store"),
    "empty": (lambda p: p.write_bytes(b""), "empty file"),
    "foreign": (_foreign, "no meta, proposals, candidates table"),
    **{f"version {raw}": (_version(raw), f"schema version {found}, expected {SCHEMA_VERSION} ")
       for raw, found in VERSIONS.items()},
}


@pytest.mark.parametrize("kind", list(DAMAGE))
@pytest.mark.parametrize("command", [["resume"], ["report"], ["rerank"], ["report", "--compare"]])
def test_damaged_or_foreign_store_exits_2_and_writes_nothing(run, kind, command):
    damage, message = DAMAGE[kind]
    store = run / "store.sqlite"
    damage(store)
    if command == ["report", "--compare"]:
        good = run.parent / "good"
        init_run(good, get_preset("tiny"))
        argv = ["report", str(good), "--compare", str(run)]
    else:
        argv = [*command, str(run)]
    assert_refused(argv, run.parent, message, str(store))


def test_resume_refuses_a_plain_file_given_as_the_store(tmp_path):
    path = tmp_path / "results.csv"
    path.write_text("a,b\n1,2\n")
    assert_refused(["resume", str(path)], tmp_path, "not a search store")


@pytest.mark.parametrize("raw", list(VERSIONS))
def test_a_store_of_another_schema_version_is_not_opened_and_left_as_it_is(run, raw):
    from evonorm.search.store import StoreError

    _version(raw)(run / "store.sqlite")
    before = snapshot(run)
    for readonly in (True, False):
        with pytest.raises(StoreError, match=f"schema version {VERSIONS[raw]}, expected 1 "):
            Store(run, readonly=readonly)
    assert snapshot(run) == before  # not a byte written, no -wal or -journal beside it


# ---------------------------------------------------------------- 5. --workers bound, status

def test_workers_bound_says_why_and_writes_nothing(tmp_path):
    out = tmp_path / "run"
    err = assert_refused(["search", "--preset", "tiny", "--workers", "100000000", "--out", str(out)],
                         tmp_path, "--workers 100000000", "per core")
    assert not out.exists(), err


def test_resume_workers_bound(run):
    assert_refused(["resume", str(run), "--workers", "100000000"], run.parent, "per core")


class _BrokenExecutor:
    def free_slots(self):
        return 1

    def submit(self, task_id, payload):
        raise RuntimeError("executor broke")

    def close(self):
        pass


def test_no_run_is_left_running_after_an_early_failure(run):
    with Store(run, readonly=True) as s:
        assert s.get_meta("status") == "created"  # not "running" before any worker exists
    with pytest.raises(RuntimeError, match="executor broke"):
        run_search(run, objective=ProxyObjective.for_run(get_preset("tiny")), executor=_BrokenExecutor(),
                   progress=False)
    with Store(run, readonly=True) as s:
        assert s.get_meta("status") == "stopped"


# ---------------------------------------------------------------- 6. read-only or impossible --out

@pytest.fixture
def readonly_dir(tmp_path):
    """A folder this process cannot write in: chmod for a normal user, a read-only tmpfs for root."""
    folder = tmp_path / "ro"
    folder.mkdir()
    if os.geteuid() != 0:
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)
        return
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(folder)],
                      capture_output=True).returncode != 0:
        pytest.skip("root without the right to mount a read-only tmpfs: no read-only folder")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def test_search_into_a_read_only_folder(readonly_dir):
    for out in (readonly_dir / "run", readonly_dir):
        assert_refused(["search", "--preset", "tiny", "--out", str(out), "--quiet"], readonly_dir,
                       "cannot write")


def test_report_into_a_read_only_folder(run, readonly_dir):
    pytest.importorskip("matplotlib")
    assert_refused(["report", str(run), "--out", str(readonly_dir / "rep")], readonly_dir,
                   "cannot write")


def test_outputs_under_a_regular_file(run, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert_refused(["search", "--preset", "tiny", "--out", str(blocker / "run")], tmp_path,
                   "cannot write")
    assert_refused(["train", "--layer", "bn_relu", "--dataset", "synthetic", "--out",
                    str(blocker / "r.json")], tmp_path, "not a folder")
    if sys.modules.get("matplotlib") or _has("matplotlib"):
        assert_refused(["report", str(run), "--out", str(blocker / "rep")], tmp_path,
                       "cannot write")


def _has(module: str) -> bool:
    import importlib.util
    return importlib.util.find_spec(module) is not None


# ---------------------------------------------------------------- 7. Graph.from_json robustness

@pytest.mark.parametrize("bad, message", [
    ('{"nodes": ' + "[" * 20_000 + "]" * 20_000 + "}", "nested too deeply"),
    (b'{"nodes": [["neg", 0]]}\xff\xfe', "not UTF-8"),
    ('{"nodes": [["neg", 0]], "pad": "' + "x" * 200_000 + '"}', "characters, more than"),
    ({"nodes": [[[[[[[[[[["neg"]]]]]]]]]]]}, "op must be a string"),
])
def test_from_json_raises_value_error(bad, message):
    with pytest.raises(ValueError, match=message):
        Graph.from_json(bad)


def test_show_bad_files_and_arguments(tmp_path):
    nonutf8 = tmp_path / "g.json"
    nonutf8.write_bytes(b'{"nodes": [["neg", 0]]}\xff')
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 50_000)
    assert_refused(["show", str(nonutf8)], tmp_path, "not UTF-8")
    assert_refused(["show", str(deep)], tmp_path, "nested too deeply")
    assert_refused(["show", "a" * 5000], tmp_path, "is not a layer name")
    assert_refused(["show", '{"nodes": ' + "[" * 50_000], tmp_path, "nested too deeply")
    assert_refused(["train", "--layer", f"@{nonutf8}", "--dataset", "synthetic"], tmp_path,
                   "not UTF-8")


# ---------------------------------------------------------------- 8. --n-train bound

def test_n_train_is_bounded_by_the_dataset(tmp_path):
    out = tmp_path / "run"
    assert_refused(["search", "--preset", "tiny", "--n-train", "99999999999", "--out", str(out)],
                   tmp_path, "synthetic has 50000 training images")
    assert_refused(["train", "--layer", "bn_relu", "--dataset", "synthetic", "--n-train",
                    "99999999999"], tmp_path, "--n-train 99999999999 is more than")
    write_cifar(tmp_path / "c" / "cifar-10-batches-py")
    assert_refused(["search", "--preset", "tiny", "--dataset", "cifar10", "--data-root",
                    str(tmp_path / "c"), "--n-train", "21", "--out", str(out)], tmp_path,
                   "cifar10 has 20 training images")


# ---------------------------------------------------------------- 9. --timeout finite

@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "-3"])
def test_timeout_must_be_finite_and_positive(tmp_path, value):
    assert_refused(["search", "--preset", "tiny", f"--timeout={value}", "--out",
                    str(tmp_path / "run")], tmp_path, "timeout must be a finite number")


# ---------------------------------------------------------------- 10. export class names

@pytest.mark.parametrize("name", ["nn", "torch", "op_affine", "resolve_groups", "BatchStat",
                                  "float", "annotations", "op_check", "class", "2x", "a-b"])
def test_show_python_refuses_names_that_break_the_module(tmp_path, name):
    assert_refused(["show", "evonorm_b0", "--python", "--class-name", name], tmp_path,
                   "class_name")


@pytest.mark.parametrize("graph", ["evonorm_b0", "evonorm_s0", "zero"])
@pytest.mark.parametrize("name", ["EvoLayer", "MyNorm", "Layer2", "norm"])
def test_exported_module_runs_for_accepted_names(graph, name):
    import torch

    code = NAMED_GRAPHS[graph].to_python(name)
    namespace: dict = {}
    exec(compile(code, f"<{name}>", "exec"), namespace)
    layer = namespace[name](8, groups=2)
    assert layer(torch.randn(2, 8, 4, 4)).shape == (2, 8, 4, 4)


# ---------------------------------------------------------------- 11. resume with several workers

def test_resume_help_says_when_proposals_may_differ():
    rc, out, _ = cli(["resume", "--help"])
    assert rc == 0 and "arrival order" in " ".join(out.split())
    page = " ".join((Path(__file__).parents[1] / "docs" / "search.md").read_text().split())
    assert "may propose differently" in page




@pytest.mark.parametrize("setting, needle", [
    ({"seed": "1"}, "seed: a string"), ({"seed": -1}, "seed must be in"), ({"seed": True}, "seed: true or false"),
    ({"seed_layers": "evonorm_s0"}, "seed_layers: a string"), ({"seed_layers": ("nope",)}, "seed layer 'nope'"),
    ({"max_nodes": 0}, "max_nodes must be in 1..10"), ({"max_nodes": 11}, "max_nodes must be in 1..10"),
    ({"threads": 100000}, "threads must be in 0..256"), ({"tournament_fraction": 0.0}, "tournament_fraction"),
    ({"retries": -1}, "retries must be >= 0")])
def test_a_python_setting_is_checked_before_anything_is_written(tmp_path, setting, needle):
    import _objectives
    from evonorm.search import search

    with pytest.raises(ValueError, match=needle) as err:
        search(_objectives.two, out=tmp_path / "run", preset="tiny", budget=2, workers=1, progress=False,
               **setting)
    assert "\n" not in str(err.value)
    assert not (tmp_path / "run" / "store.sqlite").exists()


@pytest.mark.parametrize("flag", [["--threads", "100000"], ["--seed", "-1"], ["--seed-layers", "nope"]])
def test_a_flag_out_of_range_is_refused_before_anything_is_written(tmp_path, flag):
    rc, _, err = cli(["search", "--objective", "_objectives:two", "--preset", "tiny", "--out",
                      str(tmp_path / "run"), "--quiet", *flag])
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "run" / "store.sqlite").exists()


def test_score_names_with_mathtext_still_give_a_report(tmp_path):
    pytest.importorskip("matplotlib", reason="reports need the optional `plots` extra")
    import _objectives
    from evonorm.search import search

    search(_objectives.mathy, out=tmp_path / "run", preset="tiny", budget=4, workers=1, progress=False,
           seed_layers=())
    rc, _, err = cli(["report", str(tmp_path / "run")])
    assert rc == 0 and (tmp_path / "run" / "report.html").is_file(), err
    assert "$a^$" in (tmp_path / "run" / "report.html").read_text()


def test_a_report_that_fails_leaves_no_report_folder_and_says_why(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib", reason="reports need the optional `plots` extra")
    import _objectives

    _objectives.tiny_run(tmp_path / "run", 2)

    def fails(runs):
        raise ValueError("\nfigure failed\n^")  # as matplotlib's parse errors read: a blank first line

    monkeypatch.setattr("evonorm.report.make_figures", fails)
    rc, _, err = cli(["report", str(tmp_path / "run")])
    assert rc == 2 and "error: figure failed" in err, err
    assert not (tmp_path / "run" / "report").exists()


@pytest.mark.parametrize("objective", ["escapes", "escaped_names"])
def test_text_from_a_run_is_quoted_before_a_terminal_or_a_page(tmp_path, capsys, objective):
    pytest.importorskip("matplotlib", reason="reports need the optional `plots` extra")
    import _objectives
    from evonorm.search import search

    search(getattr(_objectives, objective), out=tmp_path / "run", preset="tiny", budget=6, workers=1,
           progress=True, seed_layers=())
    shown = capsys.readouterr().err
    if objective == "escapes":
        assert "bad\\x1b]0;owned\\x07" in shown, shown  # the reason, as its escapes
    with warnings.catch_warnings(record=True) as said:  # matplotlib's, on a glyph it lacks, would name it raw
        warnings.simplefilter("always")
        rc, out, err = cli(["report", str(tmp_path / "run")])
    assert rc == 0, err
    assert not [w for w in said if "\x1b" in str(w.message) or "\x00" in str(w.message)], said
    page = (tmp_path / "run" / "report.html").read_text()
    for text in (shown, out, err, page):
        assert "\x1b" not in text and "\x00" not in text and "\x07" not in text


@pytest.mark.parametrize("call", ["force", "progress", "budget", "budget_bool"])
def test_python_flags_and_a_resume_budget_are_checked_for_type(tmp_path, call):
    import _objectives
    from evonorm.search import resume, search

    run = _objectives.tiny_run(tmp_path / "run", 1) if call.startswith("budget") else init_run(
        tmp_path / "run", get_preset("tiny"))
    before = snapshot(run)
    with pytest.raises(ValueError, match="is not") as err:
        if call == "force":  # "no" is true: it would start over on the run
            search(_objectives.two, out=run, preset="tiny", budget=2, workers=1, force="no", progress=False)
        elif call == "progress":
            search(_objectives.two, out=tmp_path / "new", preset="tiny", budget=2, progress="no")
        else:
            resume(run, _objectives.two, budget=True if call == "budget_bool" else "5", progress=False)
    assert "\n" not in str(err.value) and snapshot(run) == before
