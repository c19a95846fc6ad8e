"""Ctrl-C in the middle of a staged candidate loses at most the stage it was in: its checkpoint
survives the stop, the resumed search continues it, and the run ends as if never stopped. On a
terminal it prints no traceback from any process, and one line naming the command that resumes."""

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import evonorm
from _processes import env_with_path
from _search_fakes import CountedStages, _wait_for_candidates, counted_stages_config
from evonorm.search.driver import init_run, run_search
from evonorm.search.store import Store

TESTS = Path(__file__).parent
SRC = Path(evonorm.__file__).parents[1]  # the search in a subprocess runs this evonorm too

INTERRUPTIBLE = """
from _search_fakes import CountedStages
from evonorm.search.driver import run_search
run_search({run!r}, objective=CountedStages({marks!r}, seconds=1.0), progress=False)
"""


def _outcomes(run: Path) -> list[tuple]:
    with Store(run, readonly=True) as s:
        return [(c.graph, c.status, c.reason, c.fitness, c.evaluation.stage_fitness, c.cache_hit)
                for c in s.candidates()]


def _stages(marks: Path) -> list[str]:
    log = marks / "stages.log"
    return log.read_text().splitlines() if log.exists() else []


def _ctrl_c_after_a_checkpoint(proc: subprocess.Popen, run: Path, timeout: float) -> None:
    """Once a candidate has saved its first stage, SIGINT to the search's process group, as Ctrl-C
    in a terminal sends it to the driver and its workers alike. Its stages of a second each leave
    two seconds before that candidate is decided, so the signal lands in mid-candidate."""
    deadline = time.monotonic() + timeout
    try:
        while not list((run / "stages").glob("*.pt")):
            assert proc.poll() is None, "the search ended before any candidate saved a stage"
            assert time.monotonic() < deadline, "no candidate saved a stage"
            time.sleep(0.02)
        os.killpg(proc.pid, signal.SIGINT)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_ctrl_c_mid_candidate_then_resume_repeats_at_most_one_stage(tmp_path):
    budget = 3
    cfg = counted_stages_config(budget=budget)
    whole, run = tmp_path / "whole", tmp_path / "stopped"
    (tmp_path / "marks-whole").mkdir()
    (tmp_path / "marks-stopped").mkdir()
    init_run(whole, cfg)
    run_search(whole, objective=CountedStages(tmp_path / "marks-whole"), progress=False)

    init_run(run, cfg)
    script = INTERRUPTIBLE.format(run=str(run), marks=str(tmp_path / "marks-stopped"))
    # SIGINT at its default, as a terminal's foreground job has it: a test run started in the
    # background (`cmd &` in a script) passes it on ignored, and then no Ctrl-C would reach it
    proc = subprocess.Popen([sys.executable, "-c", script], start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
                            env=env_with_path(TESTS, SRC), stderr=subprocess.PIPE, text=True)
    _ctrl_c_after_a_checkpoint(proc, run, timeout=120)
    with Store(run, readonly=True) as s:
        assert s.get_meta("status") == "stopped" and s.num_candidates() < budget
    assert list((run / "stages").glob("*.pt")), "the interrupted candidate's checkpoint is gone"
    assert not list((run / "stages").glob("*.progress.json"))

    res = run_search(run, objective=CountedStages(tmp_path / "marks-stopped"), progress=False)
    assert res.complete
    assert _outcomes(run) == _outcomes(whole)
    once, twice = _stages(tmp_path / "marks-whole"), _stages(tmp_path / "marks-stopped")
    assert sorted(set(twice)) == sorted(once)  # the same stages trained, each layer to the same end
    assert len(twice) - len(once) <= 1  # at most the stage the interrupt cut short, again
    assert not list((run / "stages").glob("*.pt"))  # decided candidates keep no checkpoint


def _ctrl_c_on_a_terminal(args: list[str], run: Path, after: int) -> str:
    """`evonorm ARGS` as a terminal's foreground job, Ctrl-C'd (SIGINT to its process group: the
    command and its workers) once `run` holds `after` candidates and more are being evaluated;
    its stderr."""
    proc = subprocess.Popen([sys.executable, "-m", "evonorm.cli", *args], start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
                            env=env_with_path(TESTS, SRC), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        _wait_for_candidates(proc, run, after, timeout=120)
        time.sleep(0.5)  # the workers are in their next candidates (each sleeps 3 s)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    return err


def test_ctrl_c_prints_no_traceback_and_the_exact_command_that_resumes_every_time(tmp_path):
    run = tmp_path / "my run"
    resume = ["evonorm", "resume", str(run), "--objective", "_objectives:sleepy"]
    err = _ctrl_c_on_a_terminal(["search", "--objective", "_objectives:sleepy", "--preset", "tiny",
                                 "--budget", "12", "--workers", "2", "--out", str(run)], run, after=1)
    for stopped in range(2):  # the search, then the command it named, each stopped
        assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
        lines = [line for line in err.splitlines() if "evonorm resume" in line]
        assert len(lines) == 1 and f"`{shlex.join(resume)}` continues it" in lines[0], err
        assert "interrupted" not in err  # no second line about the same stop
        with Store(run, readonly=True) as s:
            assert s.get_meta("status") == "stopped"
            done = s.num_candidates()
        if not stopped:
            err = _ctrl_c_on_a_terminal(resume[1:], run, after=done + 1)


def test_an_objective_raising_keyboard_interrupt_fails_its_candidate_and_no_process_prints_a_traceback(
        tmp_path):
    """A KeyboardInterrupt raised by the objective's own code is that candidate's error: the search
    goes on to its budget and no worker prints a traceback."""
    run = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "evonorm.cli", "search", "--objective",
                           "_objectives:interrupts", "--preset", "tiny", "--budget", "3", "--workers", "2",
                           "--out", str(run)], env=env_with_path(TESTS, SRC), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    with Store(run, readonly=True) as s:
        cands = s.candidates()
        assert s.get_meta("status") == "complete"
    assert len(cands) == 3
    tried = [c for c in cands if c.status == "failed"]
    assert tried and all("KeyboardInterrupt" in (c.reason or "") for c in tried)
