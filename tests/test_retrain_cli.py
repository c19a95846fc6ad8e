"""`evonorm retrain` trains into the run folder under the run lock; `evonorm report` only reads."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest

from evonorm.cli import main as cli_main
from evonorm.search.lock import RunLock
from evonorm.measure.retrain import RETRAIN_FILE, read_rows

from _search_fakes import demo_run
from test_report_store import make_store


def _files(folder):
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_retrain_beside_a_live_search_exits_2_in_one_line(tmp_path):
    run = tmp_path / "run"
    make_store(run)
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from evonorm.search.lock import RunLock; RunLock(sys.argv[1]).acquire(); "
        "print('held', flush=True); time.sleep(60)"), str(run)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        res = subprocess.run([sys.executable, "-m", "evonorm.cli", "retrain", str(run), "--seeds", "2"],
                             capture_output=True, text=True, timeout=120)
    finally:
        holder.kill()
        holder.wait()
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "in use by process" in res.stderr
    assert not (run / RETRAIN_FILE).exists()


def test_retrain_writes_its_rows_and_the_report_reads_them(tmp_path, monkeypatch, capsys):
    pytest.importorskip("matplotlib")
    from _ledger_fakes import fake_train

    run = tmp_path / "run"
    make_store(run)
    monkeypatch.setenv("EVONORM_TEST_CALLS", str(tmp_path / "calls"))
    monkeypatch.setattr("evonorm.measure.ledger.train_job", fake_train)  # the workers train nothing
    assert cli_main(["retrain", str(run), "--seeds", "2", "--top", "1"]) == 0
    out = capsys.readouterr().out
    assert "retrain [8/8]" in out and "evonorm report" in out  # a line per (layer, seed)
    assert len(read_rows(run)) == 8
    RunLock(run).acquire().release()  # released at the end

    before = _files(run)
    assert cli_main(["report", str(run)]) == 0
    after = _files(run)
    written = {name for name in after if before.get(name) != after[name]}
    assert written and all(n == "report.html" or n.startswith("report/") for n in written)
    assert "Welch" in (run / "report.html").read_text()


def test_retrain_trains_each_layer_in_the_stored_setting(tmp_path, monkeypatch):
    """Re-training reads the run's own settings: the worker's trainer is replaced by a recorder of
    what each job would train (nothing trains, the run's Fashion-MNIST need not be installed)."""
    from _ledger_fakes import calls, fake_train

    from evonorm.measure.retrain import SEED_OFFSET, retrain

    run = demo_run(tmp_path / "run")
    monkeypatch.setenv("EVONORM_TEST_CALLS", str(tmp_path / "calls"))
    rows = retrain(run, top=1, seeds=1, log=lambda line: None, fn=fake_train)
    assert {r.kind for r in rows} == {"found", "reference", "seed"} and all(r.fitness == 0.5 + SEED_OFFSET % 7 / 100 for r in rows)
    jobs = calls(tmp_path / "calls")
    assert len(jobs) == len(rows) and all(j["data"]["dataset"] == "fashion_mnist" for j in jobs)
    train = [SimpleNamespace(**t) for j in jobs for t in j["train"]]
    assert len(train) == len(rows) * 2
    by_arch = {c.arch: c for c in train}
    assert set(by_arch) == {"resnet50_cifar", "mobilenetv2_cifar"}
    for c in train:  # demo's full training, from the stored config
        assert (c.steps, c.batch_size, c.width, c.lr_warmup) == (900, 32, 0.0625, 10)
        assert c.restarts == [150] and c.seed == SEED_OFFSET and c.device == "cpu"
    assert by_arch["resnet50_cifar"].lr == 0.1 and by_arch["mobilenetv2_cifar"].lr == 0.03

def test_report_has_no_training_flags():
    for flag in ("--seeds", "--retrain-top", "--references"):
        with pytest.raises(SystemExit) as exc:
            cli_main(["report", "RUN", flag, "3"])
        assert exc.value.code == 2
