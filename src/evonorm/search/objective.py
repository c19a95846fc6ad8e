"""The objective protocol: how a search scores one candidate layer.

An objective is a function `objective(norm_act, trial) -> float | dict[str, float]`:

- `norm_act(num_features, **kw) -> nn.Module` builds the candidate layer (its graph compiled to a
  module, `Graph.to_module`), to put in the objective's own model wherever a
  normalization-activation layer goes;
- `trial` carries `seed`, `device`, `graph` (the candidate's `evonorm.graph.Graph`, for checks that
  need the layer itself), `checkpoint` (a file where a staged objective may keep its state across a
  killed worker; local runs only, else None), `data_dir` (the run's data folder where a remote
  worker received it, else None), `report(value, step)` and `should_stop()` (the search's hurdles),
  and `phase(name)` (what it is doing now, e.g. "quality test", for the search's progress).
  It carries nothing else of the run's settings: an objective that needs settings holds them
  itself (a callable object, such as the built-in proxy task's `evonorm.proxy.ProxyObjective`).

A float is the candidate's fitness as stored (under the name "objective"); a dict names several
objectives, compared per name in the evolution's Pareto tournaments. `raise Reject("why")` rejects
the layer with that reason; a non-finite value rejects it as unstable ("nonfinite"); any other
exception makes the candidate failed, its reason ("error: ...") stored, and the search goes on.

This module is the search engine's side of the protocol (stdlib at import). Graph and fingerprint
imports are made where a candidate is built or identified: they load torch, which this module does
not need at import.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import math
import os
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from evonorm.search.evaluation import Evaluation
from evonorm.search.reject import Reject

Objective = Callable[[Callable[..., Any], "Trial"], Any]
SCORE_NAME = "objective"  # the name a float result is stored under


def as_scores(value: Any) -> dict[str, float]:
    """An objective's value as named scores: a number -> {"objective": value}, a dict -> itself
    with float values. TypeError for anything else (None, a string, an empty dict)."""
    if isinstance(value, Mapping):
        if not value:
            raise TypeError("the objective returned an empty dict")
        return {str(k): _number(v, f"value of {k!r}") for k, v in value.items()}
    return {SCORE_NAME: _number(value, "value")}


def _number(v: Any, what: str) -> float:
    if v is None or isinstance(v, (str, bytes, bool)):
        raise TypeError(f"the objective's {what} is {type(v).__name__}, not a number")
    try:
        return float(v)
    except (TypeError, ValueError):
        raise TypeError(f"the objective's {what} is {type(v).__name__}, not a number") from None


def _mean(scores: Mapping[str, float]) -> float:
    return sum(scores.values()) / len(scores)


PROGRESS_BYTES = 4096  # a progress file is one short JSON object (~60 bytes)


@dataclass(frozen=True)
class TrialProgress:
    """Where a running candidate is, as its worker last said: the phase it named (`Trial.phase`),
    how many stages it has reported and the step of the last, and the training step it is at now
    and of which run (`Trial.training_step`). A worker writes it to a small file the driver reads
    for its progress display (local runs: the file is in the run folder)."""

    phase: str | None = None
    reports: int = 0
    step: int | None = None
    at: int | None = None  # the training step in flight, where the objective says it
    of: str | None = None  # which of its trainings (e.g. an architecture), where it says

    def write(self, path: str | Path) -> None:
        """Atomically: the driver never reads half a file."""
        from evonorm.files import write_atomic

        write_atomic(path, json.dumps(dataclasses.asdict(self)).encode())

    @classmethod
    def read(cls, path: str | Path) -> "TrialProgress | None":
        """What the file says; None where there is none (yet) or it is not one of these: a link or a
        FIFO planted there is never followed, nor waited on, a file over PROGRESS_BYTES never read,
        and one whose fields are not of their types and ranges (`{"reports": Infinity}`, a negative
        step) never believed. The phase is shown quoted (`printable`): a control sequence in it
        would otherwise act on the terminal."""
        from evonorm.files import check_record, parse_json, printable, read_bytes

        try:
            d = check_record(cls, parse_json(read_bytes(path, PROGRESS_BYTES) or b"null"), path, "")
        except (OSError, ValueError):  # DamagedFile is a ValueError
            return None
        if set(d) != {f.name for f in dataclasses.fields(cls)}:  # `write` writes every field
            return None
        progress = cls(**d)
        if progress.reports < 0 or any(v is not None and v < 0 for v in (progress.step, progress.at)):
            return None
        quoted = {k: None if v is None else printable(v)[:40]
                  for k, v in (("phase", progress.phase), ("of", progress.of))}
        return dataclasses.replace(progress, **quoted)

    def describe(self, num_stages: int | None) -> str:
        """E.g. "stage 2/3 (resnet50_cifar step 450)": the stage it is in and the step in flight
        (else the step of its last report), once it reported a stage of several; else its phase.
        `num_stages` None: the count is not known (an objective of one's own reports as many as it
        does), so the stage is given alone."""
        where = self.at if self.at is not None else self.step
        step = "" if where is None else f" ({self.of + ' ' if self.of else ''}step {where})"
        total = "" if num_stages is None else f"/{num_stages}"
        several = num_stages is None or num_stages > 1
        if self.reports and several:
            stage = self.reports + 1 if num_stages is None else min(self.reports + 1, num_stages)
            return f"stage {stage}{total}{step}"
        if several and self.phase == TRAINING:
            return f"stage 1{total}{step}"
        return (self.phase or "") + step


@dataclass(frozen=True)
class CandidateCost:
    """What the objective expects a candidate to cost before the run has timings of its own
    (its `expected_cost()`): mean worker-seconds per candidate, and where the number is from
    ("demo's measured cost"), which the ETA says until this session's own timings replace it."""

    seconds: float
    source: str


TRAINING = "training"  # the phase of a staged objective's stages (`Trial.phase`)


@dataclass
class Trial:
    """One candidate's evaluation, as the objective sees it (see the module docstring)."""

    graph: Any  # evonorm.graph.Graph
    seed: int = 0
    device: str = "cpu"
    checkpoint: str | None = None
    data_dir: str | None = None  # the run's data folder as a remote worker received it
    # the search's hurdle for each stage (None: none yet); stage k is the k-th report
    hurdles: Sequence[float | None] = ()
    reports: list[tuple[int, dict[str, float]]] = field(default_factory=list)  # (step, scores)
    timings: dict[str, float] = field(default_factory=dict)  # seconds per phase, if it says
    stopped: bool = False  # should_stop() said so: the last report is where the layer stopped
    progress_file: str | None = None  # where the driver reads `TrialProgress` (local runs)
    current_phase: str | None = None
    at: int | None = None  # the training step in flight (`training_step`)
    of: str | None = None
    told: float = float("-inf")  # when the driver was last told (`tell`)

    def report(self, value: float | Mapping[str, float], step: int) -> None:
        """Record the candidate's fitness after a stage of its evaluation (training step `step`)."""
        self.reports.append((int(step), as_scores(value)))
        self.tell()

    def phase(self, name: str) -> None:
        """Say what the evaluation is doing now ("stability test", "quality test", "training"),
        for the search's progress display."""
        self.current_phase, self.at, self.of = str(name), None, None  # a step was the last phase's
        self.tell()

    def training_step(self, step: int, of: str | None = None) -> None:
        """Say which training step the evaluation is at (and of which training, e.g. an
        architecture), for the search's progress display. Cheap to call every step: the driver
        is told at most once a second."""
        self.at, self.of = int(step), of
        now = time.monotonic()
        if now - self.told >= 1.0:
            self.tell()

    def tell(self) -> None:
        """Hand the driver where this evaluation is (`TrialProgress`), where it listens. Progress
        is only shown: a file that cannot be written never fails the candidate."""
        if self.progress_file is None:
            return
        self.told = time.monotonic()
        step = self.reports[-1][0] if self.reports else None
        try:
            TrialProgress(self.current_phase, len(self.reports), step, self.at,
                          self.of).write(self.progress_file)
        except OSError:
            pass

    def should_stop(self) -> bool:
        """True when the last report is non-finite, or below the search's hurdle for its stage
        (the mean fitness there of the recent layers that reached it): stop, the layer is kept,
        valid, at the stage it reached."""
        if not self.reports:
            return False
        k, scores = len(self.reports) - 1, self.reports[-1][1]
        if not all(math.isfinite(v) for v in scores.values()):
            return True
        hurdle = self.hurdles[k] if k < len(self.hurdles) else None
        self.stopped = hurdle is not None and _mean(scores) < hurdle
        return self.stopped


def error_reason(err: BaseException) -> str:
    """An exception as a stored reason: "error: Type: first line (at file:line)"."""
    tb = traceback.extract_tb(err.__traceback__)
    where = f" (at {tb[-1].filename.rsplit('/', 1)[-1]}:{tb[-1].lineno})" if tb else ""
    msg = str(err).splitlines()[0] if str(err) else ""
    return f"error: {type(err).__name__}: {msg}"[:280] + where


PATH_PREFIX = "calls:"
"""A candidate's timings also count its layer's calls per implementation path ("calls:cpp", "calls:fast",
"calls:plain"), so a run shows whether its candidates ran on the C++ kernel or a slower path."""


def run_trial(objective: Objective, payload: dict) -> Evaluation:
    """Evaluate one candidate with `objective` (runs in a worker).

    payload: {"graph": graph JSON, "seed", "device", and optional "staged" (the run scores in
    stages), "hurdles", "checkpoint", "progress" (where `Trial` tells the driver how far it is),
    "data_dir" and "prechecks" (default on: the checks of the
    layer alone, `evonorm.search.checks`, before the objective)}: what the `Trial` carries. In a
    staged run the candidate's stored stages are its reports, then the returned value (unless it
    was the last report, or a hurdle stopped the layer there). What leaves is storable
    (`outcome.storable`): an outcome the store could not hold is a failed candidate saying why.
    """
    from evonorm.search.outcome import storable

    return storable(_evaluate(objective, payload))


def _evaluate(objective: Objective, payload: dict) -> Evaluation:
    """`run_trial`'s evaluation as the objective's outcome gives it, before the gate."""
    from evonorm.graph import Graph
    from evonorm.runtime.paths import recording

    start = time.perf_counter()
    trial = Trial(Graph.from_json(payload["graph"]), seed=int(payload.get("seed", 0)),
                  device=str(payload.get("device", "cpu")), checkpoint=payload.get("checkpoint"),
                  data_dir=payload.get("data_dir"), hurdles=payload.get("hurdles") or (),
                  progress_file=payload.get("progress"))

    def timings() -> dict[str, Any]:
        spent = dict(trial.timings) or {SCORE_NAME: time.perf_counter() - start}
        return spent | {f"{PATH_PREFIX}{path}": float(n) for path, n in sorted(calls.items())}

    if payload.get("prechecks", True):  # the layer alone, before the objective trains it
        from evonorm.search.checks import layer_checks

        trial.phase("pre-checks")
        t0 = time.perf_counter()
        try:
            rej = layer_checks(trial.graph, seed=trial.seed)
        except Exception as err:  # noqa: BLE001 - a layer that raises on a probe: the layer's fault
            rej = Reject(f"precheck:error: {type(err).__name__}: {str(err)[:200]}", step=0)
        trial.timings["precheck"] = time.perf_counter() - t0
        if rej is not None:
            return Evaluation.rejected(rej, timings=dict(trial.timings))
    trial.phase("evaluating")
    try:
        with recording() as calls:  # which implementation the layer ran on: a kernel, or a slower path
            scores = as_scores(objective(trial.graph.to_module, trial))
    except Reject as rej:
        return Evaluation.rejected(rej, rej.scores, timings())
    except (KeyboardInterrupt, SystemExit, MemoryError):
        raise
    except Exception as err:  # the objective's failure: stored with its reason, the search goes on
        return dataclasses.replace(Evaluation.failed(error_reason(err)), timings=timings())
    bad = [(s, v) for s, v in [*trial.reports, (None, scores)]
           if not all(math.isfinite(x) for x in v.values())]
    if bad:
        return Evaluation.rejected(Reject("nonfinite", step=bad[0][0]), timings=timings())
    stage_scores = [s for _, s in trial.reports]
    if not trial.stopped and (not stage_scores or stage_scores[-1] != scores):
        stage_scores.append(scores)  # the returned value is the last stage, unless it was reported
    return Evaluation.valid(scores, timings(), stage_scores if payload.get("staged") else None)


# ---------------------------------------------------------------------- naming and loading

def objective_name(fn: Callable) -> str:
    """How a run records its objective: "module:qualified.name". A function of the script that
    is running (`__main__`) is recorded under the name that script imports as (its module name
    under `python -m`, else its file's stem), so that the run resumes from another script
    (`from myscript import objective`) or from the command line (`--objective
    myscript:objective`), as from the script itself."""
    module = getattr(fn, "__module__", None) or type(fn).__module__
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    if module == "__main__":
        module = main_module_name() or module
    return f"{module}:{name}"


def main_module_name() -> str | None:
    """The importable name of the running script (`__main__`), or None (an interactive session,
    `python -c`, a file whose name is no module name)."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name and spec.name != "__main__":
        return spec.name.removesuffix(".__main__")
    file = getattr(main, "__file__", None)
    stem = Path(file).stem if file else ""
    return stem if stem.isidentifier() else None


def check_objective(fn: Any, what: str = "the objective") -> Callable:
    """`fn` if it can be called as `fn(norm_act, trial)`, else TypeError saying why."""
    if not callable(fn):
        raise TypeError(f"{what} is a {type(fn).__name__}, not a function")
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without a signature: let the call decide
        return fn
    try:
        sig.bind(None, None)
    except TypeError:
        raise TypeError(f"{what} must take (norm_act, trial), but its signature is "
                        f"{getattr(fn, '__name__', what)}{sig}") from None
    return fn


def check_picklable(fn: Callable, what: str = "the objective") -> None:
    """Workers receive the objective by name: TypeError when it cannot be sent (a lambda, a
    function defined inside another)."""
    import pickle

    try:
        pickle.dumps(fn)
    except Exception:
        raise TypeError(f"{what} ({objective_name(fn)}) cannot be sent to the workers: define it "
                        "at the top level of a module") from None


GUARD = 'if __name__ == "__main__":'


def check_local_workers_can_start(fn: Callable) -> None:
    """ValueError, one line, before anything is written or any local worker starts, where the workers
    would fail at their start. Each is a fresh Python process (spawn) that re-runs the running script
    to import what it defines: an objective defined in a script that is no file (read from stdin,
    `python -c`, a notebook) cannot be imported there, and a script that starts the search outside
    the `__main__` guard would start it again in every worker."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    script = path if path and os.path.isfile(path) else None
    module = getattr(fn, "__module__", None) or type(fn).__module__
    if module == "__main__" and script is None:
        raise ValueError(f"the objective {objective_name(fn)} is defined in a script that is no file (stdin, "
                         "python -c, a notebook), which the search's worker processes cannot import: put it "
                         f"in a file, with the search under `{GUARD}`")
    line = _main_line() if script else None
    if line is not None and not _guarded(script, line):
        raise ValueError(f"{script}:{line} starts the search outside `{GUARD}`: each worker process re-runs "
                         "the script as it starts, so put the search under that guard")


def _main_line() -> int | None:
    """The line the running script's own top-level code is at (the call that led here), if any."""
    main = sys.modules.get("__main__")
    frame = inspect.currentframe()
    line = None
    while frame is not None:
        if frame.f_globals is getattr(main, "__dict__", None) and frame.f_code.co_name == "<module>":
            line = frame.f_lineno
        frame = frame.f_back
    return line


def _guarded(script: str, line: int) -> bool:
    """Whether `line` of `script` lies in a top-level `if __name__ == "__main__":` block (a script
    that cannot be read or parsed counts as guarded: nothing to tell)."""
    import ast

    try:
        tree = ast.parse(Path(script).read_bytes())
    except (OSError, SyntaxError, ValueError):
        return True
    for node in tree.body:
        if node.lineno <= line <= (node.end_lineno or node.lineno):
            return (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
                    and ast.unparse(node.test).replace("'", '"') in ('__name__ == "__main__"',
                                                                      '"__main__" == __name__'))
    return True


def load_objective(spec: str) -> Callable:
    """The function named "MODULE:FUNCTION" (the current folder importable, as for `python -m`).

    ValueError, one line, when it cannot be used: not MODULE:FUNCTION, no such module, the module
    raises on import, no such function, not callable, not taking (norm_act, trial).
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name.strip() or not attr.strip():
        raise ValueError(f"--objective must be MODULE:FUNCTION, got {spec!r}")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name.strip())
    except ModuleNotFoundError as err:
        if err.name and module_name.strip().startswith(err.name):
            raise ValueError(f"--objective {spec}: no module named {err.name!r}") from None
        raise ValueError(f"--objective {spec}: importing {module_name} failed: "
                         f"{_first_line(err)}") from None
    except BaseException as err:  # a module that raises (or exits) on import: its own failure
        if isinstance(err, KeyboardInterrupt):
            raise
        raise ValueError(f"--objective {spec}: importing {module_name} failed: "
                         f"{_first_line(err)}") from None
    fn: Any = module
    for part in attr.strip().split("."):
        if not hasattr(fn, part):
            raise ValueError(f"--objective {spec}: {module_name} has no {attr.strip()!r}")
        fn = getattr(fn, part)
    try:
        check_picklable(check_objective(fn, f"--objective {spec}"), f"--objective {spec}")
        return fn
    except TypeError as err:
        raise ValueError(str(err)) from None


def _first_line(err: BaseException) -> str:
    msg = str(err).splitlines()[0] if str(err) else ""
    return f"{type(err).__name__}: {msg}" if msg else type(err).__name__


def ship_path(fn: Callable) -> str | None:
    """What a remote worker needs to import `fn`: the folder of its top-level package, or its
    module's file; None for evonorm's own objectives (the package is shipped anyway) and for
    functions of a script run as __main__ (Ray sends those by value)."""
    module = getattr(fn, "__module__", None) or ""
    top = module.split(".", 1)[0]
    if not top or top in ("__main__", "evonorm") or top not in sys.modules:
        return None
    file = getattr(sys.modules[top], "__file__", None)
    if not file:
        return None
    path = Path(file).resolve()
    return str(path.parent if path.name == "__init__.py" else path)


def layer_identity(graph_json: dict) -> tuple[str, str | None]:
    """(canonical key, functional fingerprint) of a graph, for the store's cache lookup."""
    from evonorm.graph import Graph
    from evonorm.graph.fingerprint import fingerprint_or_none

    g = Graph.from_json(graph_json)
    return g.key(), fingerprint_or_none(g)
