"""Property-based test of the command line: malformed arguments and files thrown at every
command exit 2 with one line on stderr, no traceback, nothing on stdout and nothing written.

Each example runs `evonorm.cli.main` in-process in a fresh temporary folder (the working
directory too), with one argument or file made bad on top of an otherwise valid command line, so
a check that lets it through would start real work and fail the test. The default suite runs a
few examples per command (seconds); `-m slow` runs many more.
"""

from __future__ import annotations

import contextlib
import io
import keyword
import os
import pickle
import sqlite3
import tempfile
from pathlib import Path
from typing import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evonorm.cli import main
from evonorm.search.driver import init_run
from evonorm.proxy.presets import get_preset

Case = Callable[[Path], list]  # builds the argv in a workspace (making any files it needs)

RUN = "run"  # every workspace holds a tiny run, as `evonorm search` leaves it before training
CORES = os.cpu_count() or 1


# ------------------------------------------------------------------------------- values

def _is_number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


junk = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
               min_size=1, max_size=30)
not_a_number = junk.filter(lambda s: not _is_number(s))
non_positive = st.integers(max_value=0).map(str)
negative = st.integers(max_value=-1).map(str)
bad_int = st.one_of(non_positive, not_a_number, st.floats(0.5, 1e6).map(lambda f: f"{f:.3f}"))
bad_count = st.one_of(negative, not_a_number)  # where 0 means "default"
bad_float = st.one_of(st.floats(max_value=0.0, allow_nan=False).map(repr),
                      st.sampled_from(["nan", "inf", "-inf", "NaN", "Infinity", "1e999"]),
                      not_a_number)
too_many_workers = st.integers(4 * CORES + 1, 10**12).map(str)


def not_in(choices) -> st.SearchStrategy[str]:
    return junk.filter(lambda s: s not in choices)


def option(flag: str, values: st.SearchStrategy[str], *extra: str) -> st.SearchStrategy[Case]:
    """`--flag=VALUE` (the = form, so a value starting with '-' stays a value)."""
    return values.map(lambda v: lambda ws: [f"{flag}={v}", *extra])


unknown_flag = st.from_regex(r"--zz[a-z]{1,8}", fullmatch=True).map(lambda f: lambda ws: [f])


# ------------------------------------------------------------------------------- bad files

def _damage_store(kind: str, data: bytes) -> Callable[[Path], None]:
    def damage(path: Path) -> None:
        if kind == "random":
            path.write_bytes(data or b"x")
        elif kind == "truncated":
            whole = path.read_bytes()
            path.write_bytes(whole[: 100 + len(data) * 37 % (len(whole) - 100)])
        elif kind == "empty":
            path.write_bytes(b"")
        elif kind == "text":
            path.write_text(data.decode("latin1"))
        elif kind == "foreign":
            path.unlink()
            db = sqlite3.connect(path)
            db.execute("CREATE TABLE t (x)")
            db.commit()
            db.close()
        elif kind == "newer":
            db = sqlite3.connect(path)
            db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'",
                       (str(10 + len(data)),))
            db.commit()
            db.close()
        elif kind == "garbled":
            whole = bytearray(path.read_bytes())
            for i in range(4096, len(whole), 5 + len(data) % 7):
                whole[i] ^= 0xA5
            path.write_bytes(bytes(whole))
    return damage


damaged_store = st.builds(_damage_store, st.sampled_from(
    ["random", "truncated", "empty", "text", "foreign", "newer", "garbled"]), st.binary(max_size=64))


def _bad_path(kind: str, name: str) -> Callable[[Path], str]:
    """A path argument that cannot be used: missing, under a regular file, or too long."""
    def make(ws: Path) -> str:
        if kind == "missing":
            return str(ws / "missing" / name)
        if kind == "under-file":
            (ws / "blocker").write_text("x")
            return str(ws / "blocker" / name)
        return str(ws / ("a" * 300 + name))  # longer than a file name may be
    return make


_name = st.from_regex(r"[a-z]{1,8}", fullmatch=True)
bad_path = st.builds(_bad_path, st.sampled_from(["missing", "under-file", "long"]), _name)
unwritable_path = st.builds(_bad_path, st.sampled_from(["under-file", "long"]), _name)


class _Planted:
    """Unpickling this makes a folder named `pwned` (in the workspace, the working directory)."""

    def __reduce__(self):
        return os.mkdir, ("pwned",)


PLANTED = pickle.dumps({b"data": _Planted(), b"labels": [0]}, protocol=2)


def _cifar_root(name: str, data: bytes) -> Callable[[Path], str]:
    """A --data-root whose CIFAR file is junk (or a pickle naming a global it must refuse)."""
    def make(ws: Path) -> str:
        folder = ws / "data" / "cifar-10-batches-py"
        folder.mkdir(parents=True)
        for f in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
            (folder / f).write_bytes(data)
        (folder / name).write_bytes(PLANTED)
        return str(ws / "data")
    return make


bad_cifar = st.builds(_cifar_root, st.sampled_from(["data_batch_1", "test_batch"]),
                      st.binary(max_size=200))


def _bad_layer_file(data: bytes, depth: int) -> Callable[[Path], str]:
    def make(ws: Path) -> str:
        path = ws / "layer.json"
        path.write_bytes(data + b"\xff" if depth == 0 else b'{"nodes": ' + b"[" * depth)
        return str(path)
    return make


bad_layer_file = st.builds(_bad_layer_file, st.binary(max_size=100),
                           st.sampled_from([0, 5, 5000, 50_000]))


# ------------------------------------------------------------------------------- per command

def _search() -> st.SearchStrategy[Case]:
    from evonorm.data import DATASETS
    from evonorm.models import list_archs
    from evonorm.graph.library import NAMED_GRAPHS
    from evonorm.search.config import EXECUTORS, SPACES
    from evonorm.search.evolution import ALGORITHMS, CRITERIA
    from evonorm.proxy.presets import list_presets

    archs = set(list_archs())
    bad_archs = st.text("abcxyz_,", min_size=1, max_size=20).filter(
        lambda s: not [a for a in s.split(",") if a.strip()] or
        any(a.strip() and a.strip() not in archs for a in s.split(",")))
    bad_seeds = junk.filter(lambda s: any(t.strip() and t.strip() not in NAMED_GRAPHS
                                          for t in s.split(",")))
    cases = st.one_of(
        option("--preset", not_in(list_presets())), option("--space", not_in(SPACES)),
        option("--algorithm", not_in(ALGORITHMS)), option("--criterion", not_in(CRITERIA)),
        option("--executor", not_in(EXECUTORS)), option("--budget", bad_int),
        option("--n-train", st.one_of(bad_int, st.integers(50_001, 10**15).map(str))),
        option("--workers", st.one_of(bad_count, too_many_workers)),
        option("--timeout", bad_float), option("--window", bad_int),
        option("--show", bad_count), option("--seed", not_a_number),
        option("--data-seed", not_a_number), option("--final-train-runs", bad_int),
        option("--archs", bad_archs), option("--dataset", not_in(DATASETS)),
        option("--seed-layers", bad_seeds), option("--address", junk),
        option("--seed-layers", st.integers(1000, 60_000).map(lambda n: '{"nodes": ' + "[" * n)),
        bad_cifar.map(lambda root: lambda ws: ["--dataset", "cifar10", "--data-root", root(ws)]),
        unknown_flag)
    out = st.one_of(st.just(lambda ws: str(ws / "new")), bad_path)

    def build(case: Case, where) -> Case:
        return lambda ws: ["search", "--preset", "tiny", "--quiet", "--out", where(ws), *case(ws)]

    bad_out = unwritable_path.map(lambda where: lambda ws: ["search", "--preset", "tiny",
                                                            "--out", where(ws)])
    used_out = st.just(lambda ws: ["search", "--preset", "tiny", "--out", str(ws / RUN)])
    return st.one_of(st.builds(build, cases, out), bad_out, used_out)


def _resume() -> st.SearchStrategy[Case]:
    from evonorm.search.config import EXECUTORS

    cases = st.one_of(
        option("--budget", st.one_of(bad_int, st.integers(1, 5).map(str))),  # tiny's is 6
        option("--workers", st.one_of(bad_count, too_many_workers)),
        option("--executor", not_in(EXECUTORS)), option("--address", junk),
        option("--show", bad_count), unknown_flag)
    return st.one_of(
        cases.map(lambda c: lambda ws: ["resume", str(ws / RUN), "--quiet", *c(ws)]),
        damaged_store.map(lambda d: lambda ws: [d(ws / RUN / "store.sqlite"), "resume",
                                                str(ws / RUN)][1:]),
        bad_path.map(lambda p: lambda ws: ["resume", p(ws)]))


def _rerank() -> st.SearchStrategy[Case]:
    from evonorm.train import TRAIN_PRESETS

    cases = st.one_of(
        option("--top", bad_int), option("--train-preset", not_in(TRAIN_PRESETS)),
        option("--steps", bad_int), option("--width", bad_float), option("--n-train", bad_int),
        unknown_flag)
    return st.one_of(
        cases.map(lambda c: lambda ws: ["rerank", str(ws / RUN), *c(ws)]),
        damaged_store.map(lambda d: lambda ws: [d(ws / RUN / "store.sqlite"), "rerank",
                                                str(ws / RUN)][1:]),
        bad_path.map(lambda p: lambda ws: ["rerank", p(ws)]))


def _report() -> st.SearchStrategy[Case]:
    return st.one_of(
        unwritable_path.map(lambda p: lambda ws: ["report", str(ws / RUN), "--out", p(ws)]),
        bad_path.map(lambda p: lambda ws: ["report", p(ws)]),
        damaged_store.map(lambda d: lambda ws: [d(ws / RUN / "store.sqlite"), "report",
                                                str(ws / RUN)][1:]),
        damaged_store.map(lambda d: lambda ws: _compare(ws, d)),
        unknown_flag.map(lambda c: lambda ws: ["report", str(ws / RUN), *c(ws)]))


def _retrain() -> st.SearchStrategy[Case]:
    from evonorm.graph.library import NAMED_GRAPHS
    from evonorm.layers import list_norm_acts

    known = set(NAMED_GRAPHS) | set(list_norm_acts())
    refs = st.lists(not_in(known).filter(lambda s: not s.startswith("-")), min_size=1,
                    max_size=3)
    negative = st.sampled_from([["--seeds", "-1"], ["--top", "-2"], ["--seeds", "0"]])
    return st.one_of(
        refs.map(lambda names: lambda ws: ["retrain", str(ws / RUN), "--references", *names]),
        negative.map(lambda c: lambda ws: ["retrain", str(ws / RUN), *c]),
        bad_path.map(lambda p: lambda ws: ["retrain", p(ws)]),
        damaged_store.map(lambda d: lambda ws: [d(ws / RUN / "store.sqlite"), "retrain",
                                                str(ws / RUN)][1:]),
        unknown_flag.map(lambda c: lambda ws: ["retrain", str(ws / RUN), *c(ws)]))


def _compare(ws: Path, damage) -> list:
    other = ws / "other"
    init_run(other, get_preset("tiny"))
    damage(other / "store.sqlite")
    return ["report", str(ws / RUN), "--compare", str(other)]


def _train() -> st.SearchStrategy[Case]:
    from evonorm.data import DATASETS
    from evonorm.graph.library import NAMED_GRAPHS
    from evonorm.layers import list_norm_acts
    from evonorm.models import list_archs
    from evonorm.train import TRAIN_PRESETS

    known = set(NAMED_GRAPHS) | set(list_norm_acts())
    bad_holdout = st.one_of(st.floats(max_value=0.0, allow_nan=False).map(repr),
                            st.floats(min_value=1.0, allow_infinity=True).map(repr),
                            st.just("nan"), not_a_number)
    cases = st.one_of(
        option("--layer", not_in(known).filter(lambda s: not s.startswith("@"))),
        bad_layer_file.map(lambda f: lambda ws: [f"--layer=@{f(ws)}"]),
        st.just(lambda ws: ["--layer=@" + str(ws / "missing.json")]),
        option("--arch", not_in(set(list_archs()))), option("--train-preset", not_in(TRAIN_PRESETS)),
        option("--dataset", not_in(DATASETS)), option("--batch-size", bad_int),
        option("--steps", bad_int), option("--lr", bad_float), option("--width", bad_float),
        option("--n-train", st.one_of(bad_int, st.integers(2049, 10**15).map(str))),
        option("--n-test", st.one_of(bad_int, st.integers(513, 10**15).map(str))),
        option("--groups", bad_int), option("--threads", bad_count),
        option("--holdout", bad_holdout), option("--device", not_in({"cpu", "cuda"}).filter(
            lambda s: not s.strip().lower().startswith("cpu"))),
        option("--schedule", not_in({"constant", "cosine"})), option("--seed", not_a_number),
        unwritable_path.map(lambda p: lambda ws: [f"--out={p(ws)}"]),
        bad_cifar.map(lambda root: lambda ws: ["--dataset=cifar10", f"--data-root={root(ws)}"]),
        unknown_flag)
    return cases.map(lambda c: lambda ws: ["train", "--layer", "bn_relu", "--dataset",
                                           "synthetic", "--train-preset", "tiny", "--steps", "2",
                                           *c(ws)])


def _show() -> st.SearchStrategy[Case]:
    from evonorm.graph.library import NAMED_GRAPHS

    taken = ["nn", "torch", "op_affine", "op_check", "resolve_groups", "BatchStat", "float",
             "annotations", "x", "super"]  # all in evonorm_b0's exported module
    class_names = st.one_of(junk.filter(lambda s: not s.isidentifier()),
                            st.sampled_from(keyword.kwlist), st.sampled_from(taken))
    return st.one_of(
        not_in(NAMED_GRAPHS).filter(lambda s: not s.startswith("-")).map(
            lambda g: lambda ws: ["show", g]),
        st.integers(256, 5000).map(lambda n: lambda ws: ["show", "g" * n]),
        bad_layer_file.map(lambda f: lambda ws: ["show", f(ws)]),
        junk.map(lambda j: lambda ws: ["show", "{" + j]),
        class_names.map(lambda c: lambda ws: ["show", "evonorm_b0", "--python",
                                              f"--class-name={c}"]),
        unknown_flag.map(lambda c: lambda ws: ["show", "evonorm_b0", *c(ws)]))


def _list() -> st.SearchStrategy[Case]:
    from evonorm.commands.list import SECTIONS

    return st.one_of(not_in(SECTIONS).filter(lambda s: not s.startswith("-")).map(
        lambda s: lambda ws: ["list", s]), unknown_flag.map(lambda c: lambda ws: ["list", *c(ws)]))


STRATEGIES = {"search": _search, "resume": _resume, "rerank": _rerank, "report": _report,
              "retrain": _retrain, "train": _train, "show": _show, "list": _list}


# ------------------------------------------------------------------------------- the property

def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else b"<dir>")
            for p in sorted(folder.rglob("*"))}


def check_refused(case: Case) -> None:
    cwd = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp)
        init_run(ws / RUN, get_preset("tiny"))
        argv = [str(a) for a in case(ws)]
        before = _snapshot(ws)
        out, err = io.StringIO(), io.StringIO()
        os.chdir(ws)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    rc = main(argv)
                except SystemExit as exc:
                    rc = exc.code
        finally:
            os.chdir(cwd)
        shown = [a if len(a) < 80 else a[:77] + "..." for a in argv]
        message = err.getvalue()
        assert rc == 2, (shown, rc, message[-2000:])
        assert "Traceback" not in message and len(message.strip().splitlines()) == 1, \
            (shown, message[-2000:])
        assert out.getvalue() == "", (shown, out.getvalue()[:500])
        assert _snapshot(ws) == before, (shown, "wrote", set(_snapshot(ws)) ^ set(before))


def _run(command: str, examples: int) -> None:
    @settings(max_examples=examples, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(case=STRATEGIES[command]())
    def prop(case):
        check_refused(case)

    prop()


@pytest.mark.parametrize("command", list(STRATEGIES))
def test_malformed_input_exits_2_in_one_line_writing_nothing(command):
    if command == "report":
        pytest.importorskip("matplotlib")
    _run(command, 25)


@pytest.mark.slow
@pytest.mark.parametrize("command", list(STRATEGIES))
def test_malformed_input_exits_2_in_one_line_writing_nothing_many(command):
    if command == "report":
        pytest.importorskip("matplotlib")
    _run(command, 150)
