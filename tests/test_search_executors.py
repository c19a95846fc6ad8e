"""Executors: results come back; a worker that raises, dies or hangs is reported and replaced."""

import os
import time
from pathlib import Path

import pytest

from _processes import alive
from _search_fakes import scripted
from evonorm.search.executors import DIED, ERROR, OK, TIMEOUT, LocalExecutor, Outcome, run_tasks


def _drain(ex, n, limit=60.0):
    out, end = [], time.monotonic() + limit
    while len(out) < n and time.monotonic() < end:
        out += ex.wait(0.2)
    return {o.task_id: o for o in out}


def test_the_configs_threads_reach_each_local_worker():
    from evonorm.search.executors import make_executor

    for threads, expected in ((1, 1), (3, 3), (0, 1)):  # 0: one thread, even for one worker of many cores
        with make_executor("local", scripted, 1, timeout=30.0, threads=threads) as ex:
            ex.submit(1, {"action": "ok"})
            assert _drain(ex, 1)[1].result["threads"] == expected


def test_local_pool_survives_raise_die_and_hang():
    with LocalExecutor(scripted, workers=2, timeout=3.0) as ex:
        assert ex.free_slots() == 2
        ex.submit(1, {"action": "raise"})
        ex.submit(2, {"action": "die"})
        assert ex.free_slots() == 0
        with pytest.raises(RuntimeError, match="no free worker"):
            ex.submit(99, {})
        got = _drain(ex, 2)
        assert got[1].kind == ERROR and "RuntimeError: layer exploded on purpose" in got[1].error
        assert got[2].kind == DIED and "exit code 7" in got[2].error
        ex.submit(3, {"action": "hang"})
        ex.submit(4, {"action": "ok", "value": 42})
        got = _drain(ex, 2)
        assert got[4].kind == OK and got[4].result["value"] == 42
        assert got[4].result["threads"] == 1  # THREADS_PER_WORKER
        assert got[3].kind == TIMEOUT and got[3].seconds >= 3.0
        # the pool is whole again: both slots work
        ex.submit(5, {"action": "ok", "value": 5})
        ex.submit(6, {"action": "ok", "value": 6})
        got = _drain(ex, 2)
        assert {got[5].result["value"], got[6].result["value"]} == {5, 6}
        assert got[5].worker and got[5].worker != got[6].worker


def test_a_worker_that_dies_while_starting_is_started_again_then_reported_in_one_line(monkeypatch):
    monkeypatch.setenv("EVONORM_TEST_IMPORTER", str(os.getpid()))
    import _dies_in_worker
    from evonorm.search.executors import LocalExecutor, WorkerStartError

    with LocalExecutor(_dies_in_worker.task, workers=1, threads=1) as ex:
        ex.start_attempts = 2
        with pytest.raises(WorkerStartError, match=r"died while starting \(exit code 1\), 2 times"):
            ex.submit(1, {})


def test_the_search_command_says_in_one_line_that_its_workers_cannot_start(tmp_path, capsys,
                                                                          monkeypatch):
    from evonorm.cli import main as cli

    monkeypatch.setenv("EVONORM_TEST_IMPORTER", str(os.getpid()))
    monkeypatch.chdir(Path(__file__).resolve().parent)
    code = cli(["search", "--objective", "_dies_in_worker:objective", "--preset", "tiny",
                "--out", str(tmp_path / "run"), "--budget", "1", "--workers", "1", "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "died while starting" in err[0], err


def test_a_worker_ends_with_the_process_that_started_it():
    """A killed driver or experiment leaves no worker training on into its files (`die_with_parent`);
    a worker started from a thread that has ended lives on (a pool starts its replacement workers from a thread that ends
    when the pool closes: killing them there hung the pool)."""
    import os
    import signal
    import subprocess
    import sys

    code = ("import os, time; "
            "from evonorm.search.executors import die_with_parent; die_with_parent(); "
            "print('ready', os.getpid(), flush=True); time.sleep(120)")
    # the thread that starts the worker ends 3 s later, after the worker is ready
    parent = ("import subprocess, sys, threading, time; "
              "t = threading.Thread(target=lambda: (subprocess.Popen("
              "[sys.executable, '-c', sys.argv[1]]), time.sleep(3))); t.start(); "
              "t.join(); time.sleep(120)")
    proc = subprocess.Popen([sys.executable, "-c", parent, code],
                            stdout=subprocess.PIPE, text=True)
    try:
        word, pid = proc.stdout.readline().split()
        assert word == "ready"
        child = int(pid)
        time.sleep(4.5)  # the thread has ended; the worker's watch looks every second
        assert alive(child), "the worker ended with the thread that started it"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if not alive(child):
            break
        time.sleep(0.2)
    else:
        os.kill(child, signal.SIGKILL)
        raise AssertionError("the worker outlived the process that started it")


class _Pool:
    """Two slots, one outcome per wait (none on the first): task 2 raises, task 3's worker dies
    on its first try, every other try succeeds."""

    def __init__(self):
        self.running, self.submitted, self.waits = [], [], 0

    def free_slots(self):
        return 2 - len(self.running)

    def submit(self, task_id, payload):
        self.running.append(task_id)
        self.submitted.append((task_id, payload["n"]))

    def wait(self, timeout):
        self.waits += 1
        if self.waits == 1:
            return []
        t = self.running.pop(0)
        kind = ERROR if t == 2 else DIED if t == 3 and len(self.submitted) < 4 else OK
        return [Outcome(t, kind, None, None, None, 0.0)]


def test_run_tasks_keeps_the_pool_full_and_retries_lost_workers_only():
    payloads = {1: {"n": 1}, 2: {"n": 2}, 3: {"n": 3}}
    pool, retried = _Pool(), []
    waits = list(run_tasks(pool, payloads, retries=1, on_retry=retried.append))
    assert waits[0] == []  # a wait that brings nothing is yielded, for progress lines
    assert {o.task_id: o.kind for arrived in waits for o in arrived} == {1: OK, 2: ERROR, 3: OK}
    assert [o.task_id for o in retried] == [3] and [o.kind for o in retried] == [DIED]
    assert pool.submitted == [(1, 1), (2, 2), (3, 3), (3, 3)]  # the raise is the layer's: not again
    pool = _Pool()
    final = [o for arrived in run_tasks(pool, payloads) for o in arrived]
    assert {o.task_id: o.kind for o in final} == {1: OK, 2: ERROR, 3: DIED}
