"""Stand-in evaluators for the search machinery tests (importable by spawned workers)."""

import hashlib
import json
import os
import time

ARCHS = ("a1", "a2")  # the fake objectives' score names, as `fake_config` names them


def fake_config(**kw):
    """The tiny preset on the synthetic set with two fake architectures (for the fake evaluators
    below), the checks of the layer alone off: the fakes score every graph, which is what the
    engine's tests count on (tests/test_objective.py checks the checks)."""
    from evonorm.proxy.presets import get_preset

    base = dict(dataset="synthetic", budget=30, workers=2, window=6, initial_population=3,
                tournament_fraction=0.5, archs=ARCHS, timeout=60.0, prechecks=False)
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


def fake_objective(norm_act, trial) -> dict:
    """A deterministic 'training' from the graph's hash: 1/4 rejected by quality, the rest valid."""
    from evonorm.search.objective import Reject

    graph = trial.graph.to_json()
    h = _h(graph)
    time.sleep(0.01)
    if h % 4 == 0:
        raise Reject(f"quality:{ARCHS[0]}", step=2)
    return fitness_of(graph, ARCHS)


def crashy_fake(norm_act, trial) -> dict:
    """fake_objective, but some candidates crash their worker or raise."""
    h = _h(trial.graph.to_json())
    if h % 5 == 0:
        os._exit(9)
    if h % 5 == 1:
        raise ValueError("boom")
    return fake_objective(norm_act, trial)


def slow_fake(norm_act, trial) -> dict:
    """fake_objective at a pace a test can kill the driver in the middle of."""
    time.sleep(0.25)
    return fake_objective(norm_act, trial)


def sigkill_after(proc, run, n: int, timeout: float, meanwhile=None) -> None:
    """Wait until `run`'s store holds n finished candidates, then SIGKILL `proc` (a search).

    With `meanwhile`, the search is first stopped (SIGSTOP: it keeps its lock and its store stays
    at n candidates however fast the machine) and `meanwhile()` runs against the live search.
    Fails if the process ends first: the test must kill a search in mid-flight."""
    import signal

    try:
        _wait_for_candidates(proc, run, n, timeout)
        if meanwhile is not None:
            os.kill(proc.pid, signal.SIGSTOP)
            meanwhile()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()


def _wait_for_candidates(proc, run, n: int, timeout: float) -> None:
    import sqlite3

    from evonorm.search.store import Store

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
    assert proc.poll() is None, f"the search ended before it held {n} candidates"


def detailed_fake(norm_act, trial) -> dict:
    """fake_objective, every rejection carrying what its check measured."""
    from evonorm.search.objective import Reject

    try:
        return fake_objective(norm_act, trial)
    except Reject as rej:
        raise Reject(rej.reason, step=rej.step, detail={"accuracy": 0.01, "threshold": 0.2}) from None


def staged_objective(norm_act, trial) -> dict:
    """A fake staged objective in two stages: stage k's fitness is the hash fitness plus 0.1 per
    stage, reported after each stage; it stops where the search says (`trial.should_stop()`: below
    the hurdle)."""
    base = fitness_of(trial.graph.to_json(), ARCHS)
    for k in range(2):
        accs = {a: v + 0.1 * k for a, v in base.items()}
        trial.report(accs, k)
        if trial.should_stop():
            break
    return accs


def near_miss_fake(norm_act, trial) -> dict:
    """Nothing valid: every layer fails the quality test, half of them after learning on the
    first architecture (near misses), the other half at chance there."""
    from evonorm.search.objective import Reject

    archs, h = ARCHS, _h(trial.graph.to_json())
    accs = {archs[0]: 0.5, archs[1]: 0.05} if h % 2 else {archs[0]: 0.05}
    raise Reject(f"quality:{list(accs)[-1]}", step=2, detail={"accuracy": 0.05, "threshold": 0.2},
                 scores=accs)


SEED_GRAPH = {"nodes": [["group_mean", 0], ["neg", 4], ["add", 0, 5], ["group_std", 0], ["div", 6, 7], ["max", 8, 1]]}
FOUND_GRAPH = {"nodes": [["group_mean", 0], ["square", 2], ["add", 0, 5], ["group_std", 0], ["div", 6, 7],
                         ["max", 8, 1]]}  # the seed layer mutated at its second node


def demo_run(folder):
    """A finished `demo` run written without training: a valid seed layer (SEED_GRAPH, id 1) and a
    valid found layer (FOUND_GRAPH, id 2), what experiments that read a run's found layers need."""
    from evonorm.proxy.presets import get_preset
    from evonorm.search.driver import init_run
    from evonorm.search.evaluation import Evaluation
    from evonorm.search.objective import layer_identity
    from evonorm.search.store import Store

    cfg = get_preset("demo", dataset="fashion_mnist", seed_layers=(json.dumps(SEED_GRAPH),))
    init_run(folder, cfg)
    with Store(folder) as store:
        for i, (graph, origin, fit) in enumerate(((SEED_GRAPH, "seed", 0.34), (FOUND_GRAPH, "mutation", 0.28))):
            store.add_proposal(graph, None if i == 0 else 1, origin, [3, [i], None])
            key, fp = layer_identity(graph)
            store.add_candidate(store.pending_proposals()[0], Evaluation.valid({a: fit for a in cfg.scores}),
                                key=key, fingerprint=fp, join_population=cfg.evolution.window)
        store.set_meta("status", "complete")
    return folder


class CountedStages:
    """A staged objective of `STAGE_STEPS` plus the end, each stage `seconds` of sleep: it keeps the
    stages it has done in `trial.checkpoint` and continues from there, and writes a line to
    `folder`/stages.log as it starts each stage it trains, so that a test counts the training
    repeated after an interrupt. Its fitness is the hash fitness plus 0.1 per stage."""

    STAGE_STEPS = (1, 2)

    def __init__(self, folder, seconds: float = 0.5):
        self.folder, self.seconds = str(folder), seconds

    def __call__(self, norm_act, trial) -> dict:
        from pathlib import Path

        from evonorm.files import write_atomic

        base = fitness_of(trial.graph.to_json(), ARCHS)
        ckpt = Path(trial.checkpoint) if trial.checkpoint else None
        done = int(ckpt.read_text()) if ckpt is not None and ckpt.is_file() else 0
        ends = [*self.STAGE_STEPS, self.STAGE_STEPS[-1] + 1]
        for k, step in enumerate(ends):
            accs = {a: v + 0.1 * k for a, v in base.items()}
            if k >= done:
                trial.phase("training")
                with open(Path(self.folder) / "stages.log", "a") as log:
                    log.write(f"{trial.graph.key()} {k}\n")
                time.sleep(self.seconds)
            trial.report(accs, step)
            if k == len(ends) - 1 or trial.should_stop():
                return accs
            if ckpt is not None and k >= done:
                write_atomic(ckpt, str(k + 1).encode())
        return accs


class FiveStages(CountedStages):
    """`CountedStages` reporting 4 stages and its end: more than the engine preset's stages, as an
    objective of one's own may."""

    STAGE_STEPS = (1, 2, 3, 4)


def counted_stages_config(**kw):
    """`fake_config` staged as `CountedStages` trains, one worker."""
    return fake_config(stage_steps=CountedStages.STAGE_STEPS, quality_steps=0, workers=1, **kw)
