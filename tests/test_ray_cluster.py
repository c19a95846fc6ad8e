"""The search on an existing Ray cluster (`ray start --head` on 127.0.0.1, started and stopped here): the
workers run the evonorm package and read the data folder the driver ships (runtime_env), not this tree."""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory):
    """A one-node cluster (declaring one GPU, a Ray resource only: nothing runs on it) in its own process group
    (stopped by its id: never `ray stop`, which would end every Ray process on the machine). One for the
    module's tests: each start and stop costs about half a minute."""
    pytest.importorskip("ray", reason="ray is not installed (the `ray` extra)")
    with pytest.MonkeyPatch.context() as monkeypatch:
        yield from _ray_head(tmp_path_factory.mktemp("ray_head"), monkeypatch)


def _ray_head(tmp_path: Path, monkeypatch):
    import ray._private.ray_constants as ray_constants

    # Ray turns 127.0.0.1 into the machine's interface address unless told this is a one-machine
    # cluster; keep the head and this driver on the loopback address only.
    monkeypatch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    monkeypatch.setattr(ray_constants, "ENABLE_RAY_CLUSTER", False)
    port = _free_port()
    log = open(tmp_path / "ray_head.log", "w")
    # its own temp dir (short: Ray's socket paths must stay short), so it never leaves the machine-wide
    # /tmp/ray/ray_current_cluster behind, which a later `ray.init()` elsewhere would try to join
    temp_dir = tempfile.mkdtemp(prefix="evr")
    head = subprocess.Popen(
        [str(Path(sys.executable).with_name("ray")), "start", "--head", "--block", f"--port={port}",
         f"--temp-dir={temp_dir}",
         "--node-ip-address=127.0.0.1", "--num-cpus=2", "--num-gpus=1", "--include-dashboard=false", "--disable-usage-stats"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        # a home of its own: a ~/.ray/auth_token left by another Ray session would make this head ask for a
        # token that the driver below does not send
        env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled",
             "HOME": str(tmp_path / "home")})
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if head.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"ray start --head did not come up: {(tmp_path / 'ray_head.log').read_text()[-2000:]}")
                time.sleep(1)
        yield f"127.0.0.1:{port}"
    finally:
        # a cluster of this test's own, in a temp dir of its own that goes with it: its clean shutdown
        # took about half a minute, which no test needs, so it gets a few seconds before the kill
        os.killpg(head.pid, signal.SIGTERM)
        try:
            head.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait(timeout=30)
        log.close()
        shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.mark.extras
@pytest.mark.slow
def test_existing_cluster_gets_package_and_data(ray_head, tmp_path):
    import ray

    import _ray_probe
    from evonorm.proxy.objective import ProxyObjective
    from evonorm.search.driver import init_run, run_search
    from evonorm.search.executors import OK, make_executor
    from evonorm.proxy.presets import get_preset
    from evonorm.search.store import Store

    data = tmp_path / "data"
    data.mkdir()
    (data / "marker.txt").write_text("shipped")
    ray.cloudpickle.register_pickle_by_value(_ray_probe)
    ex = make_executor("ray", _ray_probe.probe, 2, timeout=300.0, address=ray_head, data_dir=str(data),
                       device="cuda")
    try:
        assert ex.num_gpus == 0.5  # the cluster's one GPU shared by the 2 workers
        ex.submit(1, {"data_dir": "/not/on/the/worker"})
        got, end = [], time.monotonic() + 300
        while not got and time.monotonic() < end:
            got = ex.wait(1.0)
    finally:
        ex.close()
    assert got and got[0].kind == OK, got
    assert got[0].result["gpus"] == "0"  # Ray gave the task its GPU share
    assert got[0].result["marker"] == "shipped"  # read from the uploaded copy of the data folder
    shipped = got[0].result["evonorm"]
    assert not shipped.startswith(str(ROOT)), shipped  # imported from the uploaded package

    cfg = get_preset("tiny", executor="ray", workers=2, budget=2, address=ray_head, seed_layers=("evonorm_s0",))
    init_run(tmp_path / "run", cfg)
    res = run_search(tmp_path / "run", objective=ProxyObjective.for_run(cfg), progress=False)
    assert res.complete and res.done == 2
    with Store(tmp_path / "run", readonly=True) as store:
        assert all(c.status in ("valid", "rejected") and c.worker for c in store.candidates())


@pytest.mark.extras
@pytest.mark.slow
def test_own_objective_reaches_workers_that_cannot_import_it(ray_head, tmp_path, monkeypatch):
    """The objective's package lives only in a folder on the driver's path: the search ships it
    (runtime_env py_modules) and the cluster's workers import it from the uploaded copy."""
    from evonorm.search import search
    from evonorm.search.store import Store

    home = tmp_path / "userside"
    (home / "myproj").mkdir(parents=True)
    (home / "myproj" / "__init__.py").write_text("")
    (home / "myproj" / "task.py").write_text(
        f"HOME = {str(home)!r}\n\n"
        "def objective(norm_act, trial):\n"
        "    norm_act(8)\n"
        "    return {'score': len(trial.graph.key()) / 100,\n"
        "            'shipped': float(not __file__.startswith(HOME))}\n")
    monkeypatch.syspath_prepend(str(home))
    from myproj.task import objective

    res = search(objective, out=tmp_path / "run", preset="tiny", budget=2, workers=2,
                 executor="ray", address=ray_head, seed_layers=("evonorm_s0",), progress=False,
                 prechecks=False)  # every candidate reaches the shipped objective
    assert res.complete and res.done == 2
    with Store(tmp_path / "run", readonly=True) as store:
        cands = store.candidates()
    assert all(c.status == "valid" and c.worker for c in cands), [c.reason for c in cands]
    assert all(c.scores["shipped"] == 1.0 for c in cands)  # imported from the upload
