"""The C++ kernel's cache treated as a package manager treats its own: a library is loaded only when its bytes
are those a child process built and loaded; a folder or file another user could have written is refused; the
build lock dies with its holder and a waiter gives up in bounded time; a failed build is said once and
remembered for its compiler; a build stopped or orphaned leaves no process behind. Every case returns a status
(the Python path runs), never raises. Each test has its own cache folder; only the `slow` one builds for real."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from _processes import alive
from evonorm.graph import cpp as K

FAKE = b"\x7fELF" + bytes(range(256)) * 8  # stands in for a library: never loaded in these tests


def _stamped(folder: Path, data: bytes = FAKE) -> Path:
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    (folder / K.LIBRARY).write_bytes(data)
    (folder / K.STAMP).write_text(K.stamp_of(data) + "\n")
    os.chmod(folder / K.STAMP, 0o600)
    return folder / K.LIBRARY


def _cache(tmp_path: Path, **kw) -> K.KernelCache:
    folder = tmp_path / "kernels" / "key"
    return K.KernelCache(folder, **kw)


def test_a_stamped_library_is_the_one_loaded(tmp_path):
    assert K.checked_library(tmp_path) is None  # nothing built yet
    assert K.checked_library(tmp_path / "k") is None
    lib = _stamped(tmp_path / "k")
    assert K.checked_library(tmp_path / "k") == lib


@settings(max_examples=40, deadline=None)
@given(cut=st.integers(0, len(FAKE) - 1), flip=st.integers(0, len(FAKE) - 1), how=st.sampled_from(
    ["truncate", "flip", "append", "no stamp", "empty stamp"]))
def test_a_damaged_library_is_never_taken_for_the_built_one(tmp_path_factory, cut, flip, how):
    folder = tmp_path_factory.mktemp("k")
    lib = _stamped(folder)
    data = bytearray(FAKE)
    if how == "truncate":
        lib.write_bytes(data[:cut])
    elif how == "flip":
        data[flip] ^= 0x41
        lib.write_bytes(bytes(data))
    elif how == "append":
        lib.write_bytes(bytes(data) + b"\0")
    elif how == "no stamp":
        (folder / K.STAMP).unlink()
    else:
        (folder / K.STAMP).write_text("")
    assert K.checked_library(folder) is None


def test_a_damaged_library_is_rebuilt_not_loaded(tmp_path, monkeypatch):
    """`truncate -s 1000` on the library once crashed the program (SIGBUS while loading it)."""
    cache = _cache(tmp_path)
    lib = _stamped(cache.folder)
    with open(lib, "r+b") as f:
        f.truncate(1000)
    built = []

    def fake_build(folder, build_s, compiler, notice):
        built.append(folder)
        return "no compiler in this test"

    monkeypatch.setattr(K, "build", fake_build)
    status = K.load_from(cache, notice=lambda line: None)
    assert built == [cache.folder] and not status.ok and status.reason == "no compiler in this test"


@pytest.mark.parametrize("case", ["world-writable folder", "group-writable root", "foreign folder",
                                  "group-writable library", "linked library"])
def test_a_cache_others_could_write_is_refused_in_one_line(tmp_path, monkeypatch, case):
    cache = _cache(tmp_path)
    lib = _stamped(cache.folder)
    me = os.getuid()
    if case == "world-writable folder":
        os.chmod(cache.folder, 0o777)
    elif case == "group-writable root":
        os.chmod(cache.folder.parent, 0o775)
    elif case == "foreign folder":  # another user's: as if we were someone else
        monkeypatch.setattr(os, "getuid", lambda: me + 4242)
    elif case == "group-writable library":
        os.chmod(lib, 0o664)
    else:
        elsewhere = tmp_path / "planted.so"
        lib.rename(elsewhere)
        lib.symlink_to(elsewhere)
    said = []
    monkeypatch.setattr(K, "build", lambda *a: pytest.fail("a refused cache must not be built in"))
    status = K.load_from(cache, notice=said.append)
    assert not status.ok
    assert len(said) == 1 and "\n" not in said[0] and "Python path" in said[0]
    assert any(w in status.reason for w in ("writable by group or others", "another user", "symbolic link"))


def test_a_waiter_gives_up_in_bounded_time_and_a_killed_holder_frees_the_lock(tmp_path, monkeypatch):
    cache = _cache(tmp_path, wait_s=0.5)
    cache.folder.mkdir(parents=True, mode=0o700)
    os.chmod(cache.folder.parent, 0o700)
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import fcntl, os, sys, time
        fd = os.open({str(cache.folder / K.LOCK)!r}, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        print("held", flush=True)
        time.sleep(60)""")], stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline() == b"held\n"
        said = []
        monkeypatch.setattr(K, "build", lambda *a: "built")
        start = time.monotonic()
        status = K.load_from(cache, notice=said.append)
        assert time.monotonic() - start < 5
        assert not status.ok and "build lock" in status.reason and len(said) == 1
        holder.send_signal(signal.SIGKILL)  # the OS drops its lock: no stale lock to wait on
        holder.wait()
        status = K.load_from(cache, notice=said.append)
        assert status.reason == "built"
    finally:
        holder.kill()
        holder.wait()


def test_a_failed_build_is_said_once_and_not_retried_until_the_compiler_changes(tmp_path, monkeypatch):
    cache = _cache(tmp_path)
    compilers = {"name": "c++ /usr/bin/g++ 1 1"}
    monkeypatch.setattr(K, "compiler_id", lambda: compilers["name"])
    tries = []

    def failing_build(folder, build_s, compiler, notice):
        tries.append(compiler)
        return K.remember_failure(folder, compiler, "g++: fatal error: no input files", notice)

    monkeypatch.setattr(K, "build", failing_build)
    said = []
    assert not K.load_from(cache, notice=said.append).ok
    assert len(said) == 1 and "could not be built (g++: fatal error: no input files)" in said[0]
    again = K.load_from(cache, notice=said.append)  # a later process: nothing said, nothing built
    assert len(said) == 1 and len(tries) == 1 and "earlier build failed" in again.reason
    assert json.loads((cache.folder / K.FAILED).read_text())["compiler"] == compilers["name"]
    compilers["name"] = "c++ /usr/bin/g++ 2 2"  # upgraded: tried again
    K.load_from(cache, notice=said.append)
    assert len(tries) == 2 and len(said) == 2


def test_a_failing_compiler_gives_one_line_with_its_reason(tmp_path, monkeypatch):
    """The real build child with a compiler that fails: one line, the reason in it, remembered."""
    monkeypatch.setenv("CXX", "/bin/false")
    cache = _cache(tmp_path)
    said = []
    status = K.load_from(cache, notice=said.append)
    assert not status.ok and "/bin/false" in status.reason
    failures = [s for s in said if "could not be built" in s]
    assert len(failures) == 1 and "\n" not in failures[0] and "Traceback" not in failures[0]
    assert (cache.folder / K.FAILED).exists() and not list(cache.folder.glob("partial-*"))


def test_a_build_past_its_time_is_stopped_with_its_whole_process_group(tmp_path, monkeypatch):
    pidfile = tmp_path / "pid"
    monkeypatch.setattr(K, "BUILD_CHILD", textwrap.dedent(f"""
        import subprocess, time
        p = subprocess.Popen(["sleep", "60"])
        open({str(pidfile)!r}, "w").write(str(p.pid))
        time.sleep(60)"""))
    cache = _cache(tmp_path, build_s=2.0)
    said = []
    status = K.load_from(cache, notice=said.append)
    assert not status.ok and "took over 2 s" in status.reason
    grandchild = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(grandchild)
    assert not list(cache.folder.glob("partial-*"))


def test_a_killed_caller_takes_its_build_with_it(tmp_path):
    """SIGKILL of the process that started a build: the build child (told by the kernel: parent-death
    signal) kills its group, so no compiler is left behind."""
    pidfile = tmp_path / "compiler.pid"
    cxx = tmp_path / "slow-c++"
    cxx.write_text(f'#!/bin/sh\ncase "$*" in *" -c "*) echo $$ > {pidfile}; exec sleep 60;; esac\nexec c++ "$@"\n')
    cxx.chmod(0o755)
    caller = subprocess.Popen(
        [sys.executable, "-c", "from evonorm.graph import cpp as K; import sys; "
         f"K.load_from(K.KernelCache(K.Path({str(tmp_path / 'k')!r})))"],
        env=os.environ | {"CXX": str(cxx)}, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not pidfile.exists() and time.monotonic() < deadline and caller.poll() is None:
            time.sleep(0.2)
        assert pidfile.exists(), "the build never reached the compiler"
        time.sleep(0.2)
        compiler = int(pidfile.read_text())
        caller.send_signal(signal.SIGKILL)
        caller.wait()
        deadline = time.monotonic() + 10
        while alive(compiler) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(compiler)
    finally:
        caller.kill()
        caller.wait()


@pytest.mark.slow
def test_a_truncated_library_is_rebuilt_by_the_next_process(tmp_path):
    """A library in a fresh cache, cut to 1000 bytes, and a second process: it rebuilds and runs the
    kernel (it once died of SIGBUS). The first library is a copy of the one this environment built
    already, where there is one (a build is half a minute), else a real build."""
    env = os.environ | {"EVONORM_CPP_CACHE": str(tmp_path)}
    built = K.checked_library(K.cache_dir())
    if built is not None:
        _stamped(tmp_path / K.cache_dir().name, built.read_bytes())
    code = ("from evonorm.graph.cpp import load_kernel; import sys; s = load_kernel(); print(s.ok, s.reason); "
            "sys.exit(0 if s.ok else 1)")
    first = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stdout + first.stderr
    (lib,) = tmp_path.glob(f"*/{K.LIBRARY}")
    os.truncate(lib, 1000)
    second = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "building the CPU graph kernel" in second.stderr
    assert lib.stat().st_size > 1000
