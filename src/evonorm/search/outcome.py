"""The one gate between what an objective hands back and what the store writes.

An objective is the user's code: it may return numpy scalars, raise `Reject` with a numpy step, a
detail that JSON cannot hold, text that is not UTF-8. Written as given, such values either break the
write (the candidate stays pending, and every resume stops at it) or are written and then refused
by the store's own reader, so the run can never be reported or resumed again. So the worker passes
every evaluation through `storable` before it leaves: numpy scalars become Python numbers, and an
outcome that still cannot be stored becomes a failed candidate whose reason says what the objective
returned (the search goes on; the layer is not judged).

Stdlib only: numpy values are recognised by their `item()` method, as numpy is not imported here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
from typing import Any, Callable, Iterator, NoReturn

from evonorm.search.evaluation import Evaluation

MAX_DEPTH = 8  # nesting of a detail: what a measurement needs, far below JSON readers' limits
MAX_TEXT = 300  # characters of a reason (the store's reasons are one line)
MAX_NAME = 100  # characters of a score or timing name
MAX_DETAIL = 64_000  # characters of a detail as JSON


class Unstorable(ValueError):
    """What the objective returned, and why it cannot be stored."""


def plain(value: Any) -> Any:
    """A numpy scalar as the Python number it holds; anything else unchanged."""
    item = getattr(value, "item", None)
    if callable(item) and type(value).__module__ == "numpy" and getattr(value, "shape", None) == ():
        return item()
    return value


def _text(value: Any, what: str, limit: int) -> str:
    if not isinstance(value, str):
        raise Unstorable(f"{what} is {type(value).__name__}, not text")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise Unstorable(f"{what} is not valid UTF-8 text") from None
    if len(value) > limit:
        raise Unstorable(f"{what} is {len(value)} characters long (at most {limit})")
    return value


def _number(value: Any, what: str, *, finite: bool = True) -> float:
    value = plain(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Unstorable(f"{what} is {type(value).__name__}, not a number")
    if finite and not math.isfinite(value):
        raise Unstorable(f"{what} is {value}, not a finite number")
    return float(value)


def _step(value: Any) -> int | None:
    value = plain(value)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise Unstorable(f"the rejection's step is {type(value).__name__} {value!r:.40}, not an integer")
    return value


def _json(value: Any, what: str, depth: int = 0) -> Any:
    """A detail's value as plain JSON: objects with text keys, lists, text, finite numbers,
    true/false/null."""
    value = plain(value)
    if depth > MAX_DEPTH:
        raise Unstorable(f"{what} is nested deeper than {MAX_DEPTH} levels")
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        return _number(value, what)
    if isinstance(value, str):
        return _text(value, what, MAX_DETAIL)
    if isinstance(value, dict):
        return {_text(k, f"a key of {what}", MAX_NAME): _json(v, f"{what}[{k!r:.40}]", depth + 1)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json(v, f"{what}[{i}]", depth + 1) for i, v in enumerate(value)]
    raise Unstorable(f"{what} is {type(value).__name__}, not a JSON value")


def _named(values: Any, what: str, *, finite: bool = True) -> dict[str, float]:
    if not isinstance(values, dict):
        raise Unstorable(f"{what} are {type(values).__name__}, not an object of numbers")
    return {_text(k, f"a name in {what}", MAX_NAME): _number(v, f"{what}[{k!r:.40}]", finite=finite)
            for k, v in values.items()}


def check(e: Evaluation) -> Evaluation:
    """`e` with every field in the form the store writes and reads back; Unstorable otherwise."""
    detail = None
    if e.detail is not None:
        if not isinstance(e.detail, dict):
            raise Unstorable(f"the rejection's detail is {type(e.detail).__name__}, not an object")
        detail = _json(e.detail, "the rejection's detail")
        if len(json.dumps(detail)) > MAX_DETAIL:
            raise Unstorable(f"the rejection's detail is over {MAX_DETAIL} characters as JSON")
    return dataclasses.replace(
        e, reason=None if e.reason is None else _text(e.reason, "the reason", MAX_TEXT),
        reason_step=_step(e.reason_step), detail=detail,
        scores=_named(e.scores, "the scores"),
        fitness=None if e.fitness is None else _number(e.fitness, "the fitness"),
        timings=_named(e.timings, "the timings"),
        stage_scores=[_named(s, f"the scores of stage {k + 1}")
                      for k, s in enumerate(e.stage_scores or [])])


def storable(e: Evaluation) -> Evaluation:
    """`e` made storable (`check`), or a failed evaluation saying what could not be stored."""
    try:
        return check(e)
    except Unstorable as err:
        failed = Evaluation.failed(f"error: the objective returned what cannot be stored: {err}"[:MAX_TEXT])
        try:
            timings = _named(e.timings, "the timings")
        except Unstorable:
            timings = {}
        return dataclasses.replace(failed, timings=timings)


# ---------------------------------------------------------------------- the objective's hooks
# Besides its outcomes, an objective may hand the search more through optional methods (hooks): its
# run's facts (`run_facts`), the files it keeps in the run folder (`run_files`), its expected cost
# (`expected_cost`), a prescreen prior (`prescreen_prior`) and a layer's features (`prescreen_features`).
# They are the user's code as the objective is: each passes this gate before the search uses what it
# returned, so a hook that raises, exits or returns something else is said in one line naming it.


class HookFailed(ValueError):
    """An objective's hook that raised, or returned what the search cannot use."""


def call_hook(objective: Any, name: str, *args: Any) -> Any:
    """`objective.<name>(*args)`, None where it has no such hook. What the hook raises, `sys.exit`
    included, is a HookFailed naming it (its failure, not the search's end); a Ctrl-C in the
    driver still stops the search."""
    try:
        fn = getattr(objective, name, None)
    except Exception as err:  # noqa: BLE001 - a property that raises
        raise HookFailed(f"the objective's {name} raised {type(err).__name__}") from None
    return guarded(fn, name, *args)


class _Exited(BaseException):
    """`os._exit(code)` called by a hook (`_exit_refused`)."""


@contextlib.contextmanager
def _exit_refused() -> Iterator[None]:
    """While a hook runs in the driver, `os._exit` raises instead of ending the driver: the search, its
    workers and its store would otherwise end with no word of why (no handler runs after it). A process
    the hook forks meanwhile keeps the real one (it is another pid), and it is restored after."""
    real, driver = os._exit, os.getpid()

    def refused(code: int) -> NoReturn:
        if os.getpid() != driver:
            real(code)
        raise _Exited(code)

    os._exit = refused
    try:
        yield
    finally:
        os._exit = real


def guarded(fn: Callable[..., Any] | None, name: str, *args: Any,
            passes: tuple[type[BaseException], ...] = ()) -> Any:
    """`fn(*args)` (None where `fn` is None) for the objective's hook `name`: as `call_hook`, but
    what it raises of `passes` is raised as it is (a hook's way to say something, e.g. `Reject`)."""
    try:
        if fn is None:
            return None
        with _exit_refused():
            return fn(*args)
    except (KeyboardInterrupt, MemoryError, *passes):
        raise
    except _Exited as err:
        raise HookFailed(f"the objective's {name} called os._exit({err})") from None
    except BaseException as err:  # noqa: BLE001 - the user's code: said in one line, never a traceback
        lines = str(err).splitlines()
        raise HookFailed(f"the objective's {name} raised {type(err).__name__}"
                         + (f": {lines[0][:200]}" if lines else "")) from None


def features(value: Any, name: str = "prescreen_features") -> dict[str, float | None]:
    """What `prescreen_features` returned, as the store keeps a candidate's features: an object of
    text names and numbers (numpy scalars as Python numbers); a value that is not finite is missing
    (None), as the surrogate takes it. HookFailed otherwise (None, a list, a numpy array, text)."""
    if not isinstance(value, dict):
        raise HookFailed(f"the objective's {name} returned {type(value).__name__}, not an object of "
                         "numbers")
    out: dict[str, float | None] = {}
    try:
        for k, v in value.items():
            v = plain(v)
            key = _text(k, f"a name in what {name} returned", MAX_NAME)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
                raise Unstorable(f"{key!r:.40} is {type(v).__name__}, not a number")
            out[key] = None if v is None or not math.isfinite(v) else float(v)
    except Unstorable as err:
        raise HookFailed(f"the objective's {name} returned what cannot be stored: {err}") from None
    return out


def facts(value: Any) -> dict[str, Any]:
    """What `run_facts` returned, as the store keeps it: an object of plain JSON values (`_json`)."""
    if not isinstance(value, dict):
        raise HookFailed(f"the objective's run_facts returned {type(value).__name__}, not an object")
    try:
        return _json(value, "what run_facts returned")
    except Unstorable as err:
        raise HookFailed(f"the objective's run_facts returned what cannot be stored: {err}") from None


def file_names(value: Any) -> tuple[str, ...]:
    """What `run_files` holds: plain file names in the run folder (a `--force` search removes them, so
    a path that leaves the folder, or the store's own name, is refused)."""
    names = () if value is None else value
    if isinstance(names, str) or not isinstance(names, (list, tuple)):
        raise HookFailed(f"the objective's run_files is {type(value).__name__}, not a list of file names")
    for n in names:
        if (not isinstance(n, str) or not n or n in (".", "..") or "/" in n or "\\" in n or "\0" in n
                or n.startswith("store.sqlite")):
            raise HookFailed(f"the objective's run_files holds {n!r:.60}, not the name of a file in the "
                             "run folder")
    return tuple(names)
