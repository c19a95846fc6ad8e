"""`evonorm report RUN --watch`: a live page that reloads itself while the search runs, checked in
a real headless browser (Chromium, screenshot), and a last page that no longer reloads."""

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("matplotlib", reason="reports need the optional `plots` extra")

import _objectives  # noqa: E402
from evonorm.cli import main as cli  # noqa: E402
from evonorm.search.store import Store  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
REFRESH = '<meta http-equiv="refresh" content="1">'


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return _objectives.tiny_run(tmp_path_factory.mktemp("watch") / "run", 6)


def _wait_for(predicate, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False


def test_watch_rewrites_a_reloading_page_while_the_run_runs_and_ends_with_one_that_does_not(run):
    with Store(run) as st:
        st.set_meta("status", "running")
    page = run / "report.html"
    page.unlink(missing_ok=True)
    proc = subprocess.Popen([sys.executable, "-m", "evonorm.cli", "report", str(run), "--watch", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert _wait_for(lambda: page.is_file() and REFRESH in page.read_text()), proc.stderr
        assert "Live: this page is rewritten every 1 s" in page.read_text()
        first = page.stat().st_mtime_ns
        assert _wait_for(lambda: page.stat().st_mtime_ns != first)  # rewritten as it goes
        with Store(run) as st:
            st.set_meta("status", "complete")
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert REFRESH not in page.read_text() and "no longer watching" in out.splitlines()[-1]


@pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium: apt-get install chromium "
                                             "(scripts/test.sh installs it where it can)")
def test_the_live_page_renders_in_a_headless_browser(run, tmp_path):
    import matplotlib.image

    with Store(run) as st:
        st.set_meta("status", "running")
    assert cli(["report", str(run), "--out", str(tmp_path)]) == 0  # the same page, written once
    shot = tmp_path / "shot.png"
    subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                    "--no-first-run", "--disable-background-networking", "--disable-component-update",
                    "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}",
                    "--window-size=1200,1600", f"--screenshot={shot}",
                    (tmp_path / "report.html").as_uri()], check=True, capture_output=True, timeout=120)
    pixels = matplotlib.image.imread(shot)
    assert pixels.shape[0] == 1600 and pixels.shape[1] == 1200
    assert pixels[..., :3].std() > 0.05  # text and figures, not a blank page
    dark = (pixels[..., :3].mean(axis=-1) < 0.5).mean()
    assert 0.005 < dark < 0.6, dark


def test_watch_refuses_an_interval_below_a_second(run, capsys):
    assert cli(["report", str(run), "--watch", "0.1"]) == 2
    assert "--watch takes seconds >= 1" in capsys.readouterr().err
