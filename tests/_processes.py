"""Process helpers shared by the tests that kill a parent and check what it started."""

from __future__ import annotations

import os
from pathlib import Path


def alive(pid: int) -> bool:
    """Whether process `pid` still runs (a zombie has ended: only its parent has not reaped it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split()[2] == "Z")


def env_with_path(*folders) -> dict:
    """This process's environment with `folders` first on PYTHONPATH: a child interpreter that
    imports the test helpers (or spawned workers of it) finds them."""
    import os

    path = [str(f) for f in folders] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
