"""Stand-ins for `evonorm.measure.ledger.train_job` (importable by spawned workers).

Each call appends one JSON line to the file named by $EVONORM_TEST_CALLS: the worker's pid, the
layer and each architecture's TrainConfig fields, so a test can check what would have trained,
where, and how often.
"""

import json
import os
import signal
import time


def _record(payload: dict) -> int:
    path = os.environ["EVONORM_TEST_CALLS"]
    with open(path, "a") as f:
        f.write(json.dumps({"pid": os.getpid(), "spec": payload["spec"], "train": payload["train"],
                            "data": payload["data"]}) + "\n")
    with open(path) as f:
        return sum(1 for _ in f)


def fake_train(payload: dict) -> dict:
    """0.5 + seed % 7 / 100 on every architecture."""
    _record(payload)
    return {"status": "ok", "reason": None,
            "scores": {t["arch"]: 0.5 + t["seed"] % 7 / 100 for t in payload["train"]}}


def kill_driver_on_third(payload: dict) -> dict:
    """Like `fake_train`, but the third call SIGKILLs the driver (this worker's parent), once the
    ledger named by $EVONORM_TEST_LEDGER holds the first two rows (workers run side by side)."""
    if _record(payload) >= 3:
        deadline = time.time() + 60
        while time.time() < deadline and _lines(os.environ["EVONORM_TEST_LEDGER"]) < 2:
            time.sleep(0.05)
        os.kill(os.getppid(), signal.SIGKILL)
        time.sleep(60)
    return {"status": "ok", "reason": None,
            "scores": {t["arch"]: 0.5 + t["seed"] % 7 / 100 for t in payload["train"]}}


def _lines(path) -> int:
    try:
        with open(path) as f:
            return sum(1 for line in f if line.endswith("\n"))
    except FileNotFoundError:
        return 0


def calls(path) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f]


def die_once(payload: dict) -> dict:
    """Like `fake_train`, but the worker of layer "dies" exits at once while the file named by
    $EVONORM_TEST_DIE exists (removing it: the next try trains)."""
    flag = os.environ["EVONORM_TEST_DIE"]
    if payload["spec"] == "dies" and os.path.exists(flag):
        os.remove(flag)
        os._exit(1)
    return fake_train(payload)
