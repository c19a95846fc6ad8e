"""Heavy search checks (pytest -m slow): the real CLI killed with SIGKILL and resumed."""

import subprocess
import sys
import time
from pathlib import Path

import pytest

from _search_fakes import sigkill_after
from evonorm.search.store import Store

EVONORM = str(Path(sys.executable).parent / "evonorm")


@pytest.mark.slow
def test_cli_search_sigkill_and_resume(tmp_path):
    """`search ... &`, then `resume` on the same run while it lives (refused in one line naming
    the process), SIGKILL, and `resume`: it takes over and loses and repeats nothing."""
    run = tmp_path / "run"
    proc = subprocess.Popen([EVONORM, "search", "--preset", "tiny", "--budget", "10",
                             "--workers", "2", "--seed-layers", "evonorm_s0,evonorm_s1",
                             "--out", str(run), "--quiet"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def second_driver_is_refused():
        second = subprocess.run([EVONORM, "resume", str(run), "--quiet"], capture_output=True,
                                text=True, timeout=120)
        assert second.returncode == 2 and f"in use by process {proc.pid}" in second.stderr
        assert len(second.stderr.strip().splitlines()) == 1

    sigkill_after(proc, run, 3, timeout=150, meanwhile=second_driver_is_refused)
    with Store(run, readonly=True) as s:
        before = s.candidates()
        proposals_before = s.num_proposals()
        assert 3 <= len(before) < 10 and s.get_meta("status") == "running"
    time.sleep(2)  # orphaned workers notice their driver is gone and exit
    out = subprocess.run([EVONORM, "resume", str(run)], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert "re-queued" in out.stderr and "search complete: 10/10" in out.stdout
    with Store(run, readonly=True) as s:
        after = s.candidates()
        assert s.get_meta("status") == "complete"
        assert s.num_proposals() == 10 and proposals_before <= 10
    assert after[:len(before)] == before
    assert sorted(c.proposal for c in after) == list(range(10))
    again = subprocess.run([EVONORM, "resume", str(run)], capture_output=True, text=True,
                           timeout=120)
    assert again.returncode == 0 and "already complete" in again.stdout
