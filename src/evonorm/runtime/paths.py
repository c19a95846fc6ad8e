"""Which implementation a layer call ran, for a run to record, and the one line a layer says when it runs
another path than the kernel it was asked for (`impl="cpp"` for graph layers, `impl="triton"` for EvoNorm
layers): a slower path taken in silence reads as a slow search, not as a missing kernel.

Calls are counted only inside `recording()` (a context variable, so nothing is kept outside it), and
never while torch.compile traces: the compiled graph holds no Python side effects. torch is imported in
the functions a layer calls (it is loaded by then), so a search's engine can record without loading it.
"""

from __future__ import annotations

import sys
from collections import Counter
from contextlib import contextmanager
from contextvars import ContextVar
from functools import cache
from typing import Iterator

_CALLS: ContextVar[Counter | None] = ContextVar("evonorm_layer_paths", default=None)


@contextmanager
def recording() -> Iterator[Counter]:
    """`with recording() as calls:` counts the layer calls per path ("cpp", "fast", "plain",
    "triton", "compile", "synced") made inside the block."""
    calls: Counter = Counter()
    token = _CALLS.set(calls)
    try:
        yield calls
    finally:
        _CALLS.reset(token)


def ran(path: str) -> None:
    """Count one layer call on `path` (nothing outside `recording()`)."""
    import torch

    if torch.compiler.is_compiling():
        return
    calls = _CALLS.get()
    if calls is not None:
        calls[path] += 1


def fell_back(asked: str, path: str, why: str) -> None:
    """A layer asked for `asked` ran `path`: count it, and say so once per process and reason."""
    import torch

    ran(path)
    if not torch.compiler.is_compiling():
        notice_once(f"a layer asked for impl={asked!r} runs the {path} path instead ({why})")


@cache
def notice_once(line: str) -> None:
    """Print `line` to stderr the first time this process meets it."""
    print(f"evonorm: {line}", file=sys.stderr, flush=True)
