"""The run-folder lock: one writer (`search`, `resume`, `rerank`) per run at a time.

Liveness comes from `fcntl.flock` on an open lock file, which the kernel drops when the holding
process dies (even by SIGKILL), so a lock left by a killed run never blocks `resume`. The file's
text (pid and host of the holder) only serves the message for a second driver.
"""

from __future__ import annotations

import fcntl
import os
import socket
from pathlib import Path

from evonorm.files import open_regular

LOCK_NAME = "lock"


class RunLocked(RuntimeError):
    """Another live process holds the run folder."""


class RunLock:
    """`with RunLock(run):` holds RUN/lock for this process, or raises RunLocked at once."""

    def __init__(self, run_dir: str | Path):
        self.path = Path(run_dir) / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> "RunLock":
        fd = open_regular(self.path, os.O_RDWR | os.O_CREAT)  # a link planted as RUN/lock is refused
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode("utf-8", "replace").split()
            os.close(fd)
            pid = holder[0] if holder else "?"
            host = f" on {holder[1]}" if len(holder) > 1 else ""
            raise RunLocked(f"run {self.path.parent} is in use by process {pid}{host} "
                            "(a search, resume or rerank); wait for it or stop it first") from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {socket.gethostname()}\n".encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        """Drop the lock; the file stays (deleting it could let two processes lock two inodes)."""
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
