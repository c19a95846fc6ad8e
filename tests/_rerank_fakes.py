"""Stand-ins for the ledger's `train_job` in a rerank (importable by spawned workers).

Each call appends "pid graph-json" to the file named by $EVONORM_TEST_CALLS, so a test can count
which layers were trained, and in how many processes.
"""

import json
import os
import signal
import time


def _archs(payload: dict) -> list[str]:
    return [t["arch"] for t in payload["train"]]


def _record(payload: dict) -> int:
    path = os.environ["EVONORM_TEST_CALLS"]
    with open(path, "a") as f:
        f.write(f"{os.getpid()} {json.dumps(payload['spec'], sort_keys=True)}\n")
    with open(path) as f:
        return sum(1 for _ in f)


def fake_train(payload: dict) -> dict:
    """0.5 + 0.01 x the number of nodes on every architecture, after a short 'training'."""
    _record(payload)
    time.sleep(0.3)
    acc = 0.5 + 0.01 * len(payload["spec"]["nodes"])
    return {"status": "ok", "reason": None,
            "scores": {a: acc for a in _archs(payload)}}


def kill_driver_on_second(payload: dict) -> dict:
    """Like `fake_train`, but the second call SIGKILLs the driver (this worker's parent)."""
    if _record(payload) >= 2:
        os.kill(os.getppid(), signal.SIGKILL)
        time.sleep(60)
    return {"status": "ok", "reason": None,
            "scores": {a: 0.7 for a in _archs(payload)}}
