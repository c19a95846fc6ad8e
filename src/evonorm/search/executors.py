"""Where candidates are evaluated: a local process pool (default) or a Ray cluster.

Both expose the same small interface to the driver: `submit(task_id, payload)` while
`free_slots() > 0`, `wait(timeout) -> [Outcome]`, `close()`. A worker that raises, dies (os._exit,
segfault, OOM kill) or runs past its timeout yields an Outcome saying so; the pool replaces the worker
and carries on, so one bad layer never takes the search down. Retrying is the driver's decision;
`run_tasks` is that loop for a fixed set of tasks (a calibration's runs, a rerank's layers).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import socket
import threading
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.connection import wait as mp_wait
from typing import Any, Callable, Iterator, Literal, Mapping, Protocol

import evonorm

OutcomeKind = Literal["ok", "error", "died", "timeout"]
OK: OutcomeKind = "ok"
ERROR: OutcomeKind = "error"
DIED: OutcomeKind = "died"
TIMEOUT: OutcomeKind = "timeout"


@dataclass
class Outcome:
    """What came back for one task: `kind` is ok | error | died | timeout."""

    task_id: int
    kind: OutcomeKind
    result: Any  # what the task function returned (an Evaluation for the search), when ok
    error: str | None
    worker: str | None
    seconds: float


class Executor(Protocol):
    """What the driver needs from a pool of workers (`LocalExecutor`, `RayExecutor`)."""

    def free_slots(self) -> int:
        """How many more tasks `submit` takes now."""

    def submit(self, task_id: int, payload: dict) -> None:
        """Start the task function on `payload`; its Outcome comes back from `wait`."""

    def wait(self, timeout: float) -> list[Outcome]:
        """The outcomes that arrive within `timeout` seconds (possibly none)."""

    def close(self) -> None:
        """Stop every worker (tasks still running are abandoned)."""


# torch threads per local worker unless the config says: one, with a worker per core. Alone on idle
# cores two threads train a `demo` candidate a little faster than one, but beside other work on the
# cores several times slower (OpenMP's threads wait for each other; benchmarks/bench_threads.py), and a
# search's other workers are such work.
THREADS_PER_WORKER = 1


class WorkerStartError(RuntimeError):
    """A worker that cannot be started: the search cannot go on (one line for the user)."""


def _set_threads(threads: int) -> None:
    os.environ["OMP_NUM_THREADS"] = str(threads)
    try:
        import torch
        torch.set_num_threads(threads)
    except ImportError:  # a pure-Python evaluator needs no torch
        pass


def _format_error(err: BaseException) -> str:
    tb = traceback.extract_tb(err.__traceback__)
    where = f" (at {tb[-1].filename.rsplit('/', 1)[-1]}:{tb[-1].lineno})" if tb else ""
    return f"{type(err).__name__}: {err}{where}"


def die_with_parent() -> None:
    """In a worker process: end it when the process that started it ends (e.g. SIGKILLed), so that
    no orphan finishes its task or trains on into files the next start resumes from. A thread
    watches the parent's pid: Linux's PR_SET_PDEATHSIG fires when the *thread* that started the
    worker ends, and a pool starts its replacement workers from a thread that ends when the pool
    closes, which would kill idle workers holding the task queue's lock and hang the pool."""
    import threading

    parent = mp.parent_process()
    pid = parent.pid if parent is not None else os.getppid()
    if os.getppid() != pid:  # the parent ended before this started
        os._exit(1)

    def watch() -> None:
        while os.getppid() == pid:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="evonorm-parent-watch").start()


def _worker_main(conn, fn: Callable[[dict], dict], threads: int) -> None:
    """A pool worker: evaluate payloads from the pipe until told to stop (None).

    It ignores SIGINT: Ctrl-C reaches a terminal's whole process group, and the driver alone stops
    the search (and its workers), so no worker prints a KeyboardInterrupt traceback. It is ignored
    from the worker's start, through its imports (`_sigint_ignored_by_children`). A KeyboardInterrupt
    the objective raises itself is then the candidate's error, like any other."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _set_threads(threads)
    die_with_parent()
    conn.send(("ready", os.getpid()))  # start-up (imports) does not count against a task's timeout
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        task_id, payload = msg
        start = time.perf_counter()
        try:
            reply = (task_id, OK, fn(payload), None, time.perf_counter() - start)
        except (Exception, KeyboardInterrupt) as err:  # the candidate's error, reported back; the worker lives on
            reply = (task_id, ERROR, None, _format_error(err), time.perf_counter() - start)
        conn.send(reply)


@contextmanager
def _sigint_ignored_by_children() -> Iterator[None]:
    """Processes started inside start with SIGINT ignored (an ignored signal stays ignored through
    exec, and Python then installs no KeyboardInterrupt handler). This process's own Ctrl-C is held
    (blocked, not lost) meanwhile and delivered on the way out. Off the main thread, where Python
    cannot change a handler, nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


@dataclass
class _Slot:
    index: int
    proc: Any = None
    conn: Any = None
    task_id: int | None = None
    started: float = 0.0

    @property
    def name(self) -> str:
        return f"{socket.gethostname()}/local{self.index}:{self.proc.pid if self.proc else '-'}"


class LocalExecutor:
    """A pool of `workers` spawned processes, each with `threads` torch threads.

    Hand-rolled rather than concurrent.futures: a ProcessPoolExecutor is broken for good when one
    worker dies, and it cannot stop a task that hangs; here each worker has its own pipe, so a dead
    or hung one is killed and replaced and only its task is reported.
    """

    def __init__(self, fn: Callable[[dict], dict], workers: int = 0, *, timeout: float = 3600.0,
                 threads: int | None = None):
        self.fn = fn
        self.workers = workers or os.cpu_count() or 1
        self.timeout = timeout
        self.threads = threads or THREADS_PER_WORKER
        self._ctx = mp.get_context("spawn")  # fork after torch threads exist can deadlock
        self._slots = [_Slot(i) for i in range(self.workers)]
        self.startup_timeout = 300.0
        self.start_attempts = 3  # a worker that dies while starting (an OOM kill) is started again

    def _start(self, slot: _Slot) -> None:
        """Start the slot's worker and wait for its "ready"; WorkerStartError, one line, when it
        dies or hangs while starting `start_attempts` times in a row."""
        for attempt in range(1, self.start_attempts + 1):
            parent, child = self._ctx.Pipe()
            slot.proc = self._ctx.Process(target=_worker_main, args=(child, self.fn, self.threads),
                                          name=f"evonorm-worker-{slot.index}", daemon=True)
            with _sigint_ignored_by_children():
                slot.proc.start()
            child.close()
            slot.conn = parent
            try:
                if parent.poll(self.startup_timeout):
                    parent.recv()
                    return
                why = f"did not start in {self.startup_timeout:g} s"
            except (EOFError, OSError):  # it died before saying ready: its pipe closed
                slot.proc.join(timeout=5)
                why = f"died while starting (exit code {slot.proc.exitcode})"
            self._stop(slot, kill=True)
        raise WorkerStartError(f"local worker {slot.index} {why}, {self.start_attempts} times in a "
                               "row (out of memory, or the objective's module failing on import?)")

    def _stop(self, slot: _Slot, kill: bool = False) -> None:
        if slot.proc is None:
            return
        if kill and slot.proc.is_alive():
            slot.proc.kill()
        slot.proc.join(timeout=5)
        if slot.proc.is_alive():
            slot.proc.kill()
            slot.proc.join(timeout=5)
        slot.conn.close()
        slot.proc = slot.conn = None

    def free_slots(self) -> int:
        return sum(s.task_id is None for s in self._slots)

    def submit(self, task_id: int, payload: dict) -> None:
        slot = next((s for s in self._slots if s.task_id is None), None)
        if slot is None:
            raise RuntimeError("no free worker: wait for a result first")
        if slot.proc is None or not slot.proc.is_alive():
            if slot.proc is not None:
                self._stop(slot)
            self._start(slot)
        slot.conn.send((task_id, payload))
        slot.task_id, slot.started = task_id, time.monotonic()

    def _finish(self, slot: _Slot, kind: OutcomeKind, result=None, error=None,
                seconds: float | None = None) -> Outcome:
        out = Outcome(slot.task_id, kind, result, error, slot.name,
                      seconds if seconds is not None else time.monotonic() - slot.started)
        slot.task_id = None
        if kind in (DIED, TIMEOUT):
            self._stop(slot, kill=True)  # replaced on the next submit
        return out

    def wait(self, timeout: float) -> list[Outcome]:
        """Results that arrive within `timeout` seconds (possibly none)."""
        busy = [s for s in self._slots if s.task_id is not None]
        if not busy:
            time.sleep(min(timeout, 0.05))
            return []
        now = time.monotonic()
        next_deadline = min(s.started + self.timeout for s in busy) - now
        handles = {}
        for s in busy:
            handles[s.conn] = s
            handles[s.proc.sentinel] = s
        ready = mp_wait(list(handles), timeout=max(0.0, min(timeout, next_deadline)))
        outcomes, seen = [], set()
        for h in ready:
            slot = handles[h]
            if slot.index in seen or slot.task_id is None:
                continue
            seen.add(slot.index)
            try:
                if slot.conn.poll():
                    task_id, kind, result, error, seconds = slot.conn.recv()
                    outcomes.append(self._finish(slot, kind, result, error, seconds))
                    continue
            except (EOFError, OSError):
                pass
            slot.proc.join(timeout=1)
            code = slot.proc.exitcode
            outcomes.append(self._finish(slot, DIED, error=f"worker died (exit code {code})"))
        now = time.monotonic()
        for s in busy:
            if s.task_id is not None and s.index not in seen and now - s.started > self.timeout:
                outcomes.append(self._finish(s, TIMEOUT,
                                             error=f"timeout: worker killed after {self.timeout:g}s"))
        return outcomes

    def close(self) -> None:
        for s in self._slots:
            if s.proc is not None:
                try:
                    if s.task_id is None and s.conn is not None:  # None: it never started
                        s.conn.send(None)
                except (OSError, BrokenPipeError):
                    pass
                self._stop(s, kill=s.task_id is not None)
                s.task_id = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def ray_runtime_env(data_dir: str | None = None, ship: list[str] | tuple[str, ...] = ()) -> dict:
    """What a Ray worker on another machine needs besides torch: this evonorm package and the
    objective's own package or module file (`ship`; py_modules, so every node runs the driver's
    code) and, when given, the data folder (working_dir: uploaded once per run, the worker's
    current directory). Ray limits an upload to about 500 MiB."""
    mods = [os.path.dirname(os.path.abspath(evonorm.__file__))]
    for path in ship:
        if not os.path.exists(path):
            raise ValueError(f"cannot ship {path!r} to the Ray workers: it does not exist")
        mods.append(os.path.abspath(path))
    env: dict[str, Any] = {"py_modules": mods}
    if data_dir:
        if not os.path.isdir(data_dir):
            raise ValueError(f"data folder {data_dir!r} does not exist")
        env["working_dir"] = os.path.abspath(data_dir)
    return env


def _ray_task(fn: Callable[[dict], dict], threads: int, payload: dict, shipped_data: bool = False) -> dict:
    _set_threads(threads)
    if shipped_data:  # the data folder arrived as the working_dir: read it from here
        payload = {**payload, "data_dir": os.getcwd()}  # `Trial.data_dir`
    start = time.perf_counter()
    result = fn(payload)
    return {"result": result, "worker": f"{socket.gethostname()}:{os.getpid()}",
            "seconds": time.perf_counter() - start}


def gpu_share(device: str, gpus_per_worker: float | None) -> float | None:
    """A Ray task's GPU share for a run on `device`: none on the CPU; on CUDA `gpus_per_worker`
    (e.g. 0.25: four workers per GPU), or None for the cluster's GPUs divided among the workers."""
    return gpus_per_worker if device.split(":", 1)[0] == "cuda" else 0.0


def ray_task_options(num_gpus: float) -> dict:
    """What each Ray task asks for: one CPU, its GPU share, and no retries by Ray (the driver
    retries dead and hung workers the same way for every executor)."""
    return {"num_cpus": 1, "num_gpus": num_gpus, "max_retries": 0}


class RayExecutor:
    """The same interface on Ray: local Ray (`address=None`) or an existing cluster (`address`).

    Tasks ask for `ray_task_options`. `runtime_env` (see `ray_runtime_env`) is the job's when this
    executor starts Ray (Ray uploads local folders only for a whole job); `num_gpus` is each task's
    GPU share (`gpu_share`), None for the cluster's GPUs divided among the workers.
    """

    def __init__(self, fn: Callable[[dict], dict], workers: int = 0, *, timeout: float = 3600.0,
                 threads: int = 1, address: str | None = None, runtime_env: dict | None = None,
                 num_gpus: float | None = 0.0):
        try:
            import ray
        except ImportError as err:
            raise RuntimeError("the Ray executor needs ray: pip install -e '.[ray]' in the evonorm clone") from err
        self._ray = ray
        self.fn = fn
        self.timeout = timeout
        self.threads = threads
        self._started_ray = not ray.is_initialized()
        if self._started_ray:
            kw: dict[str, Any] = {"address": address, "include_dashboard": False,
                                  "log_to_driver": False, "configure_logging": False}
            if address is None:
                kw["num_cpus"] = workers or os.cpu_count() or 1
            if runtime_env:  # uploads (package, data folder) are only possible for the whole job
                kw["runtime_env"] = runtime_env
            ray.init(**kw)
        self.workers = workers or int(ray.cluster_resources().get("CPU", 1))
        if num_gpus is None:  # a GPU run: the cluster's GPUs shared by the workers (at most one each)
            gpus = ray.cluster_resources().get("GPU", 0)
            if gpus <= 0:
                raise RuntimeError("a GPU run, but the Ray cluster has no GPU")
            num_gpus = min(1.0, gpus / self.workers)
        self.num_gpus = num_gpus
        # where the caller initialised Ray, its own ray.init(runtime_env=...) decides what is shipped
        self._shipped_data = self._started_ray and bool(runtime_env and "working_dir" in runtime_env)
        self._remote = ray.remote(**ray_task_options(num_gpus))(_ray_task)
        self._fn_ref = ray.put(fn)
        self._running: dict[Any, tuple[int, float]] = {}

    def free_slots(self) -> int:
        return max(0, self.workers - len(self._running))

    def submit(self, task_id: int, payload: dict) -> None:
        ref = self._remote.remote(self._fn_ref, self.threads, payload, self._shipped_data)
        self._running[ref] = (task_id, time.monotonic())

    def wait(self, timeout: float) -> list[Outcome]:
        ray = self._ray
        if not self._running:
            time.sleep(min(timeout, 0.05))
            return []
        now = time.monotonic()
        next_deadline = min(t + self.timeout for _, t in self._running.values()) - now
        ready, _ = ray.wait(list(self._running), num_returns=len(self._running),
                            timeout=max(0.0, min(timeout, next_deadline)))
        outcomes = []
        for ref in ready:
            task_id, started = self._running.pop(ref)
            try:
                r = ray.get(ref)
                outcomes.append(Outcome(task_id, OK, r["result"], None, r["worker"], r["seconds"]))
            except ray.exceptions.RayTaskError as err:  # the evaluator raised
                cause = err.cause if getattr(err, "cause", None) is not None else err
                outcomes.append(Outcome(task_id, ERROR, None, _format_error(cause), None,
                                        time.monotonic() - started))
            except ray.exceptions.RayError as err:  # worker crashed, node lost, ...
                outcomes.append(Outcome(task_id, DIED, None, f"worker died ({type(err).__name__})",
                                        None, time.monotonic() - started))
        now = time.monotonic()
        for ref, (task_id, started) in list(self._running.items()):
            if now - started > self.timeout:
                ray.cancel(ref, force=True)
                del self._running[ref]
                outcomes.append(Outcome(task_id, TIMEOUT, None,
                                        f"timeout: worker killed after {self.timeout:g}s", None,
                                        now - started))
        return outcomes

    def close(self) -> None:
        for ref in list(self._running):
            self._ray.cancel(ref, force=True)
        self._running.clear()
        if self._started_ray:
            self._ray.shutdown()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def make_executor(kind: str, fn: Callable[[dict], Any], workers: int, *, timeout: float,
                  address: str | None = None, device: str = "cpu",
                  gpus_per_worker: float | None = None, data_dir: str | None = None,
                  threads: int = 0, ship: list[str] | tuple[str, ...] = ()) -> Executor:
    """The executor named by the config (`local` | `ray`). On an existing Ray cluster (`address`) the
    package and the data folder are shipped to the workers; `device` "cuda" asks Ray for GPU shares
    (`gpu_share`). Local workers on "cuda" all share the machine's GPU: `workers` processes, each
    with its own copy of the model and the data on it. `threads`: torch threads per worker on
    this machine (0: THREADS_PER_WORKER; a remote cluster's workers get 1).
    `ship`: the objective's package folders or module files, shipped to Ray workers (on a local
    Ray too, whose workers need not see the driver's import path)."""
    if kind == "local":
        return LocalExecutor(fn, workers, timeout=timeout, threads=threads or None)
    if kind == "ray":
        return RayExecutor(fn, workers, timeout=timeout,
                           threads=(threads or THREADS_PER_WORKER) if address is None else 1,
                           address=address,
                           runtime_env=(ray_runtime_env(data_dir if address else None, ship)
                                        if address or ship else None),
                           num_gpus=gpu_share(device, gpus_per_worker))
    raise ValueError(f"unknown executor {kind!r} (choose from local, ray)")


def run_tasks(pool: Executor, payloads: Mapping[int, dict], *, poll: float = 5.0, retries: int = 0,
              on_retry: Callable[[Outcome], None] | None = None) -> Iterator[list[Outcome]]:
    """Keep `pool` busy with `payloads` (task id -> payload, submitted in order) and yield what
    each wait of at most `poll` seconds brought back, until every task has its final Outcome.

    A wait that brings nothing yields [], so a caller can report progress between outcomes. A task
    whose worker died or ran past its timeout goes again, up to `retries` times (`on_retry` hears
    of each), since a lost worker is not the task's fault; its last Outcome is yielded then."""
    queue = list(payloads)
    attempts = dict.fromkeys(payloads, 0)
    running = 0
    while queue or running:
        while queue and pool.free_slots() > 0:
            task_id = queue.pop(0)
            pool.submit(task_id, payloads[task_id])
            running += 1
        done = []
        for o in pool.wait(poll):
            running -= 1
            if o.kind in (DIED, TIMEOUT) and attempts[o.task_id] < retries:
                attempts[o.task_id] += 1
                queue.append(o.task_id)
                if on_retry is not None:
                    on_retry(o)
            else:
                done.append(o)
        yield done
