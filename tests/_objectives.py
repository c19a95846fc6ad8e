"""User-style objectives for the objective-protocol tests (importable by spawned workers)."""

import hashlib

from evonorm.search import Reject

OUTCOMES = {"evonorm_s1": "reject", "evonorm_s2": "nan", "s_top1": "raise"}


def _h(trial) -> int:
    return int(hashlib.sha256(trial.graph.key().encode()).hexdigest()[:8], 16)


def _outcome(trial) -> str | None:
    from evonorm.graph.library import NAMED_GRAPHS

    return next((o for n, o in OUTCOMES.items() if NAMED_GRAPHS[n].key() == trial.graph.key()), None)


def mixed(norm_act, trial) -> float:
    """A float objective that builds the layer, and rejects, returns nan or raises for the seed
    layers named in OUTCOMES."""
    import torch

    layer = norm_act(8)
    layer(torch.randn(2, 8, 4, 4))
    outcome = _outcome(trial)
    if outcome == "reject":
        raise Reject("too slow on my phone")
    if outcome == "nan":
        return float("nan")
    if outcome == "raise":
        raise RuntimeError("my objective broke")
    return (_h(trial) % 1000) / 1000


def two(norm_act, trial) -> dict:
    """Two objectives by name."""
    h = _h(trial)
    return {"acc": (h % 97) / 100, "speed": ((h >> 8) % 89) / 100}


def other(norm_act, trial) -> float:
    return 0.5


def staged(norm_act, trial) -> float:
    """Reports two stages and stops where the search says."""
    base = (_h(trial) % 100) / 100
    for k in range(2):
        trial.report(base + 0.1 * k, step=k)
        if trial.should_stop():
            break
    return base + 0.1 * k


not_callable = 3


def wrong_signature(norm_act) -> float:
    return 0.0


def needs_max(norm_act, trial) -> float:
    """Valid only for a layer with a live max (a ReLU-like op): a rule a surrogate can learn from
    the graph's structure, for the prescreen tests."""
    g = trial.graph
    if not any(g.node(n)[0] == "max" for n in g.live_nodes() if n >= 4):
        raise Reject("no max")
    return 0.5 + (_h(trial) % 100) / 1000


class NeedsMaxWithPrior:
    """`needs_max` with a prior: labelled rows where valid layers have a live max (and one
    malformed row when `broken`), handed over as the objective's `prescreen_prior`."""

    def __init__(self, broken: bool = False):
        self.broken = broken

    def __call__(self, norm_act, trial) -> float:
        return needs_max(norm_act, trial)

    def prescreen_prior(self):
        rows = [{"features": {"graph_op_max": float(i % 2 == 0)}, "valid": i % 2 == 0,
                 "fitness": 0.55 if i % 2 == 0 else None} for i in range(12)]
        return rows + ([{"features": {}, "valid": "yes"}] if self.broken else [])


class NeedsMaxScreened:
    """`needs_max` whose features at birth reject a layer without a live max (as the built-in
    task's network rung rejects a hopeless network), handed over as `prescreen_features`."""

    def __call__(self, norm_act, trial) -> float:
        return needs_max(norm_act, trial)

    def prescreen_features(self, graph):
        if not any(graph.node(n)[0] == "max" for n in graph.live_nodes() if n >= 4):
            raise Reject("signal", step=0, detail={"why": "no max"})
        return {"has_max": 1.0}


# What an objective may hand back that the store cannot hold as given (numpy values, text that is
# not UTF-8, a detail that is not a JSON object of finite values): `HOSTILE[name](trial)`.
def _np():
    import numpy as np

    return np


HOSTILE = {
    "np_step": lambda: Reject("low", step=_np().int64(3)),
    "np_detail": lambda: Reject("low", detail={"s": _np().float32(0.25), "n": [_np().int32(2)]}),
    "np_scores": lambda: Reject("low", scores={"a": _np().float64(0.5)}),
    "text_step": lambda: Reject("low", step="three"),
    "text_score": lambda: Reject("low", scores={"a": "high"}),
    "text_detail": lambda: Reject("low", detail="str"),
    "nan_detail": lambda: Reject("low", detail={"x": float("nan")}),
    "deep_detail": lambda: Reject("low", detail=_deep(100)),
    "surrogate": lambda: Reject("\udcff x"),
    "object_detail": lambda: Reject("low", detail={"f": object()}),
}


def _deep(n: int) -> dict:
    d: dict = {}
    for _ in range(n):
        d = {"d": d}
    return d


def hostile(norm_act, trial):
    """Rejects each layer with one of HOSTILE's outcomes in turn (by the layer's hash), or returns
    a numpy float, or sets a timing that is not a number."""
    kinds = [*HOSTILE, "np_value", "text_timing"]
    kind = kinds[_h(trial) % len(kinds)]
    if kind == "np_value":
        return _np().float32(0.5)
    if kind == "text_timing":
        trial.timings["t"] = "slow"
        return 0.5
    raise HOSTILE[kind]()


def sleepy(norm_act, trial) -> float:
    """A candidate that takes a few seconds, so that a progress display must move meanwhile."""
    import time

    time.sleep(3.0)
    return 0.5


def tiny_run(out, budget: int):
    """A finished `tiny` search on `two` (no training: fake scores) in `out`, for tests that read
    a real run folder."""
    from evonorm.search import search

    search(two, out=out, preset="tiny", budget=budget, workers=1, seed_layers=(), progress=False)
    return out


class Priced:
    """`sleepy` (1 s), with an expected cost per candidate handed to the engine
    (`expected_cost`), as the built-in task hands its preset's measured cost; `seconds` None:
    a value that is not a cost."""

    def __init__(self, seconds: float | None = 100.0):
        self.seconds = seconds

    def __call__(self, norm_act, trial) -> float:
        import time

        time.sleep(1.0)
        return 0.5

    def expected_cost(self):
        from evonorm.search.objective import CandidateCost

        if self.seconds is None:
            return {"seconds": 5}
        return CandidateCost(self.seconds, "test's measured cost")


class WithFacts:
    """`needs_max` with facts of its own (`run_facts`), which the engine stores with the run."""

    def __call__(self, norm_act, trial) -> float:
        return needs_max(norm_act, trial)

    def run_facts(self) -> dict:
        return {"data": {"name": "mine", "rows": 10}}


class Hooked:
    """`needs_max` whose hooks misbehave as `hook` says: `mode` "raise", "exit" (sys.exit), "none",
    "list", "array" (a numpy array), "numpy" (numpy scalars: fine) or "text"."""

    def __init__(self, hook: str, mode: str):
        self.hook, self.mode = hook, mode

    def __call__(self, norm_act, trial) -> float:
        return needs_max(norm_act, trial)

    def _value(self, good):
        import sys

        np = _np()
        if self.mode == "raise":
            raise RuntimeError("hook broke\nsecond line")
        if self.mode == "exit":
            sys.exit(7)
        if self.mode == "os_exit":
            import os

            os._exit(7)
        if self.mode == "fork":  # a child the hook forks ends with os._exit, as multiprocessing's do
            import os

            pid = os.fork()
            if pid == 0:
                os._exit(3)
            assert os.waitpid(pid, 0)[1] >> 8 == 3
            return good
        return {"none": None, "list": [1.0, 2.0], "array": np.ones(3), "text": "x",
                "numpy": good}.get(self.mode, good)

    def prescreen_features(self, graph):
        if self.hook != "prescreen_features":
            return {"n": 1.0}
        np = _np()
        return self._value({"n": np.float32(len(graph.live_nodes())), "big": np.float64("inf")})

    def expected_cost(self):
        return self._value(None) if self.hook == "expected_cost" else None

    def prescreen_prior(self):
        return self._value(None) if self.hook == "prescreen_prior" else None

    def run_facts(self):
        return self._value({"mine": 1}) if self.hook == "run_facts" else {}


hooked_cost = Hooked("expected_cost", "raise")  # for --objective: a callable object at module level


def mathy(norm_act, trial) -> dict:
    """`two` under score names that matplotlib would read as broken mathtext."""
    scores = two(norm_act, trial)
    return dict(zip(["$a^$", "$\\frac{$"], scores.values()))


CONTROL = "\x1b]0;owned\x07\x1b[2J\x00"  # sets a terminal's title, clears its screen; a NUL


def escapes(norm_act, trial) -> float:
    """Says a phase and rejects every other layer with a reason full of control characters."""
    trial.phase("p" + CONTROL)
    if _h(trial) % 2:
        raise Reject("bad" + CONTROL)
    return 0.5


def escaped_names(norm_act, trial) -> dict:
    """Scores under names full of control characters (what the figures' axes are labelled with)."""
    return {"a" + CONTROL: 0.4 + 0.1 * (_h(trial) % 3), "b" + CONTROL: 0.5 - 0.1 * (_h(trial) % 2)}


def interrupts(norm_act, trial) -> float:
    """Raises KeyboardInterrupt itself (a user's code that does), not a Ctrl-C of the search."""
    raise KeyboardInterrupt
