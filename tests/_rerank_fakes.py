"""Stand-ins for `evonorm.proxy.rerank.train_layer` (importable by spawned workers).

Each call appends "pid graph-json" to the file named by $EVONORM_TEST_CALLS, so a test can count
which layers were trained, and in how many processes.
"""

import json
import os
import signal
import time

from evonorm.search.config import SearchConfig
from evonorm.proxy.config import stored_task


def _archs(payload: dict) -> tuple[str, ...]:
    return stored_task(SearchConfig.from_dict(payload["config"])).archs


def _record(payload: dict) -> int:
    path = os.environ["EVONORM_TEST_CALLS"]
    with open(path, "a") as f:
        f.write(f"{os.getpid()} {json.dumps(payload['graph'], sort_keys=True)}\n")
    with open(path) as f:
        return sum(1 for _ in f)


def fake_train(payload: dict) -> dict:
    """0.5 + 0.01 x the number of nodes on every architecture, after a short 'training'."""
    _record(payload)
    time.sleep(0.3)
    acc = 0.5 + 0.01 * len(payload["graph"]["nodes"])
    return {"status": "ok", "reason": None,
            "scores": {a: acc for a in _archs(payload)}}


def kill_driver_on_second(payload: dict) -> dict:
    """Like `fake_train`, but the second call SIGKILLs the driver (this worker's parent)."""
    if _record(payload) >= 2:
        os.kill(os.getppid(), signal.SIGKILL)
        time.sleep(60)
    return {"status": "ok", "reason": None,
            "scores": {a: 0.7 for a in _archs(payload)}}
