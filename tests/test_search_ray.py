"""The Ray executor: a tiny real search, and a worker that raises, dies or hangs (ray is optional)."""

import time

import pytest

pytestmark = pytest.mark.extras
ray = pytest.importorskip("ray", reason="ray is not installed (the `ray` extra)")

import _search_fakes  # noqa: E402
from evonorm.proxy.objective import ProxyObjective  # noqa: E402
from evonorm.search.driver import init_run, run_search  # noqa: E402
from evonorm.search.executors import DIED, ERROR, OK, TIMEOUT, RayExecutor  # noqa: E402
from evonorm.proxy.presets import get_preset  # noqa: E402
from evonorm.search.store import Store  # noqa: E402
from evonorm.proxy.config import stored_task


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    # the stand-in evaluators live in tests/, which Ray's workers cannot import: ship them by value
    ray.cloudpickle.register_pickle_by_value(_search_fakes)
    yield
    ray.shutdown()


def test_ray_worker_raise_die_hang(local_ray):
    ex = RayExecutor(_search_fakes.scripted, workers=2, timeout=120.0)
    ex.submit(1, {"action": "raise"})
    ex.submit(2, {"action": "die"})
    got, end = {}, time.monotonic() + 120
    while len(got) < 2 and time.monotonic() < end:
        got.update({o.task_id: o for o in ex.wait(0.5)})
    assert got[1].kind == ERROR and "layer exploded on purpose" in got[1].error
    assert got[2].kind == DIED
    # The timeout counts from submission, and Ray starts the replacement of the worker that died
    # lazily (importing torch, over 20 s on a loaded 2-core machine): two tasks at once bring both
    # workers up first, so the short timeout below only ever meets the hang.
    ex.submit(5, {"action": "sleep", "seconds": 2.0})
    ex.submit(6, {"action": "sleep", "seconds": 2.0})
    got, end = {}, time.monotonic() + 120
    while len(got) < 2 and time.monotonic() < end:
        got.update({o.task_id: o for o in ex.wait(0.5)})
    assert got[5].kind == OK and got[6].kind == OK and got[5].result["pid"] != got[6].result["pid"]
    ex.timeout = 10.0
    ex.submit(3, {"action": "hang"})
    ex.submit(4, {"action": "ok", "value": 4})
    got, end = {}, time.monotonic() + 120
    while len(got) < 2 and time.monotonic() < end:
        got.update({o.task_id: o for o in ex.wait(0.5)})
    assert got[4].kind == OK and got[4].result["value"] == 4 and ":" in got[4].worker
    assert got[3].kind == TIMEOUT
    ex.close()


def test_ray_tiny_search(local_ray, tmp_path):
    cfg = get_preset("tiny", executor="ray", workers=2, budget=4, seed_layers=("evonorm_s0",))
    init_run(tmp_path, cfg)
    res = run_search(tmp_path, objective=ProxyObjective.for_run(cfg), progress=False)
    assert res.complete and res.done == 4
    with Store(tmp_path, readonly=True) as s:
        cands = s.candidates()
    assert sorted(c.proposal for c in cands) == [0, 1, 2, 3]
    seed = next(c for c in cands if c.origin == "seed")
    assert seed.status == "valid" and set(seed.scores) == set(stored_task(cfg).archs)
    assert all(c.worker for c in cands if not c.cache_hit)
