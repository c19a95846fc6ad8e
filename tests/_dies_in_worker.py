"""An objective whose module kills any other process that imports it (a worker, unpickling the
objective), as an OOM kill of a fresh worker would: the test process that sets
`EVONORM_TEST_IMPORTER` to its own pid imports it safely."""

import os

if os.environ.get("EVONORM_TEST_IMPORTER") != str(os.getpid()):
    os._exit(1)


def objective(norm_act, trial) -> float:
    return 0.5


def task(payload: dict) -> dict:
    return payload
