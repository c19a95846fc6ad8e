"""Stand-in evaluators for the search machinery tests (importable by spawned workers)."""

import hashlib
import json
import os
import time


def fake_config(**kw):
    """The tiny preset on the synthetic set with two fake architectures (for the fake evaluators below)."""
    from evonorm.search.presets import get_preset

    base = dict(dataset="synthetic", budget=30, workers=2, window=6, initial_population=3,
                tournament_fraction=0.5, archs=("a1", "a2"), timeout=60.0)
    base.update(kw)
    return get_preset("tiny", **base)


def scripted(payload: dict) -> dict:
    """Does what the payload says: ok (echo), raise, die (os._exit), hang."""
    action = payload.get("action", "ok")
    if action == "raise":
        raise RuntimeError("layer exploded on purpose")
    if action == "die":
        os._exit(7)
    if action == "hang":
        time.sleep(600)
    if action == "sleep":
        time.sleep(payload["seconds"])
    return {"value": payload.get("value"), "pid": os.getpid(),
            "threads": int(os.environ.get("OMP_NUM_THREADS", "0"))}


def _h(graph: dict) -> int:
    return int(hashlib.sha256(json.dumps(graph, sort_keys=True).encode()).hexdigest()[:8], 16)


def fitness_of(graph: dict, archs) -> dict:
    h = _h(graph)
    return {a: ((h >> (4 * i)) % 97) / 100 for i, a in enumerate(archs)}


def fake_evaluate(payload: dict) -> dict:
    """A deterministic 'training' from the graph's hash: 1/4 rejected by quality, the rest valid."""
    cfg, graph = payload["config"], payload["graph"]
    h = _h(graph)
    if cfg.get("n_train") == -7:  # marker: some candidates crash their worker or raise
        if h % 5 == 0:
            os._exit(9)
        if h % 5 == 1:
            raise ValueError("boom")
    time.sleep(0.01)
    if h % 4 == 0:
        return {"status": "rejected", "reason": f"quality:{cfg['archs'][0]}", "reason_step": 2,
                "accuracies": {}, "fitness": None, "timings": {"quality": 0.01}}
    accs = fitness_of(graph, cfg["archs"])
    return {"status": "valid", "reason": None, "reason_step": None, "accuracies": accs,
            "fitness": sum(accs.values()) / len(accs), "timings": {"train": 0.01}}


def slow_fake(payload: dict) -> dict:
    """fake_evaluate at a pace a test can kill the driver in the middle of."""
    time.sleep(0.25)
    return fake_evaluate(payload)


def sigkill_after(proc, run, n: int, timeout: float) -> None:
    """Wait until `run`'s store holds n finished candidates, then SIGKILL `proc` (a search).

    Fails if the process ends first: the test must kill a search in mid-flight."""
    import signal
    import sqlite3

    from evonorm.search.store import Store

    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and proc.poll() is None:
            if (run / "store.sqlite").exists():
                try:
                    with Store(run, readonly=True) as s:
                        if s.num_candidates() >= n:
                            break
                except (sqlite3.OperationalError, ValueError):  # the search is still creating its store
                    pass
            time.sleep(0.05)
        assert proc.poll() is None, "the search ended before it could be killed"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()


def detailed_fake(payload: dict):
    """fake_evaluate as an Evaluation, every rejection carrying what its check measured."""
    from evonorm.search.evaluation import Evaluation

    ev = Evaluation.from_dict(fake_evaluate(payload))
    if ev.status == "rejected":
        ev = Evaluation("rejected", ev.reason, ev.reason_step, {"accuracy": 0.01, "threshold": 0.2})
    return ev


def staged_evaluate(payload: dict) -> dict:
    """A fake staged evaluator: stage k's fitness is the hash fitness plus 0.1 per stage; a layer
    stops where the payload's hurdle for that stage is above it (records the hurdles it saw)."""
    cfg, graph = payload["config"], payload["graph"]
    base = fitness_of(graph, cfg["archs"])
    stages = []
    for k in range(len(cfg["stages"]) + 1):
        accs = {a: v + 0.1 * k for a, v in base.items()}
        stages.append(accs)
        hurdles = payload.get("hurdles") or []
        h = hurdles[k] if k < len(hurdles) else None
        if h is not None and sum(accs.values()) / len(accs) < h:
            break
    return {"status": "valid", "accuracies": stages[-1], "stages": stages,
            "fitness": sum(stages[-1].values()) / len(stages[-1]),
            "detail": {"hurdles": payload.get("hurdles")}}


def near_miss_fake(payload: dict) -> dict:
    """Nothing valid: every layer fails the quality test, half of them after learning on the
    first architecture (near misses), the other half at chance there."""
    archs, h = payload["config"]["archs"], _h(payload["graph"])
    accs = {archs[0]: 0.5, archs[1]: 0.05} if h % 2 else {archs[0]: 0.05}
    return {"status": "rejected", "reason": f"quality:{list(accs)[-1]}", "reason_step": 2,
            "detail": {"accuracy": 0.05, "threshold": 0.2}, "accuracies": accs,
            "fitness": None, "timings": {"quality": 0.01}}
