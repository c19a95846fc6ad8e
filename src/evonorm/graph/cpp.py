"""The compiled CPU kernel of a graph layer: the whole layer in C++, one sample at a time, in cache.

The fast path (`evonorm.graph.fast`) still runs each node as a few torch ops over the whole tensor, with
Python between them: on a CPU at the search's scale that was most of a candidate's training. Every
statistic of a sample-based layer is per sample, so `csrc/graph_kernel.cpp` runs one sample's nodes over
buffers that stay in cache (the tensor is read once, the output written once) and backward recomputes
them and runs autograd's rule for each primitive. The graph reaches it as a table of op codes, never as
code. The kernel is built from source by torch's C++ extension loader on first use (a C++ compiler is
needed; about 20 s, once per machine and torch version) into EVONORM_CPP_CACHE (default
~/.cache/evonorm/kernels); where it cannot be built, `impl="auto"` runs the fast path instead.

The cache is kept as a package manager keeps its own (`load_from`): the build and a first load run in a
child process, the library is renamed into place and stamped, and a process loads only a library that
matches its stamp, from a folder only this user may write; the build lock is an flock with a bounded
wait; a failed build is remembered per compiler. Loading a library is the one thing no check after the
fact can undo (a damaged one ends the process), so every check comes before it.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import platform
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterator

import torch

from evonorm.files import open_regular, write_atomic
from evonorm.graph.fast import FastSpec, Plan, like_input, plain_formula
from evonorm.graph.primitives import NUM_INPUTS
from evonorm.runtime.common import differentiable_grads

SOURCE = Path(__file__).parent / "csrc" / "graph_kernel.cpp"
CODES = {name: i for i, name in enumerate(
    ("add", "mul", "div", "max", "swish", "neg", "sigmoid", "tanh", "exp", "log", "abs", "square", "sqrt",
     "mean", "std", "rms", "norm"))}
"""The kernel's op codes (the order of its `Op` enum): the element-wise primitives, the fused swish
h * sigmoid(v h), the statistics and the fused norm (h - mean(h)) / std(h)."""
AXES = {"layer": 0, "instance": 1, "group": 2}
CPP_DTYPES = (torch.float32, torch.float64)
FLAGS = ["-O3", "-fno-math-errno", "-fno-trapping-math", "-fopenmp-simd", "-march=native"]
"""No -ffast-math: NaN and inf must survive. -fno-trapping-math lets gcc turn the selects of relu, max, sign and
the division guard into vector blends (without it those loops ran scalar, with a mispredicted branch per value:
the seed layers' backward ran 3x slower); values are IEEE's either way, as no floating-point trap is enabled."""


def program(plan: Plan) -> torch.Tensor:
    """A fast-path plan as kernel rows (op, axes, a, b): inputs 0-3 kept, steps renumbered from 4 in order, the
    output last. relu is max(y, zero); a swish without v has b = -1."""
    ids = {i: i for i in range(NUM_INPUTS)}
    rows = []
    for st in plan.steps:
        op, axes, args = st.kind, 0, list(st.args)
        if op == "relu":
            op, args = "max", [args[0], 1]
        elif op == "norm":
            axes = AXES[st.axes]
        elif op not in CODES:
            axes_name, op = op.split("_")
            axes = AXES[axes_name]
        a, b = ids[args[0]], (ids[args[1]] if len(args) > 1 else -1)
        ids[st.nid] = NUM_INPUTS + len(rows)
        rows.append((CODES[op], axes, a, b))
    if not rows or plan.steps[-1].nid != plan.output:
        raise ValueError("the CPU kernel needs a plan whose last step is the output")
    return torch.tensor(rows, dtype=torch.int64)


def _cpu() -> bytes:
    """What identifies this CPU's instruction set (the kernel is built for it: -march=native)."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        info = ""
    lines = [ln for ln in info.splitlines() if ln.startswith(("model name", "flags"))][:2]
    return "\n".join(lines or [platform.machine(), platform.processor()]).encode()


KERNEL = "evonorm_graph_kernel"
LIBRARY = KERNEL + ".so"
STAMP = LIBRARY + ".sha256"  # "<sha256> <size>" of the library a child process built and loaded
FAILED = "build-failed.json"  # {"compiler": ..., "reason": ...}: no retry until the compiler changes
LOCK = "build.lock"
LAYOUT = b"checked-library-1"  # the folder's layout: a change gets a fresh folder, never a mixed one


def cache_dir() -> Path:
    """Where built kernels are kept: one folder per source, flags, torch (version and place), Python environment
    and CPU. A home folder shared by machines with different CPUs, or by two environments (a checkout's venv
    and a clean clone's), gets one build each: one shared folder would be rebuilt at every switch, since the
    build names each environment's torch headers."""
    root = Path(os.environ.get("EVONORM_CPP_CACHE", Path.home() / ".cache" / "evonorm" / "kernels"))
    key = hashlib.sha256(SOURCE.read_bytes() + " ".join(FLAGS).encode() + torch.__version__.encode()
                         + str(Path(torch.__file__).parent).encode() + sys.prefix.encode()
                         + _cpu() + LAYOUT).hexdigest()[:16]
    return root / key


@dataclass(frozen=True)
class CppStatus:
    """Whether the kernel is loaded (then its two ops), and why not."""

    ok: bool
    reason: str = ""
    forward: Callable | None = None
    backward: Callable | None = None


@dataclass(frozen=True)
class KernelCache:
    """Where the kernel is built and how long a process waits for it: a build of our own is stopped after
    `build_s` (a 20 s build that takes 15 times as long is stuck), and another process's build is waited
    for at most `wait_s`, a little longer, so that no waiter gives up on a build that is still healthy."""

    folder: Path
    wait_s: float = 330.0
    build_s: float = 300.0


class CacheRefused(Exception):
    """A cache entry this user cannot trust (another owner, writable by others, not a plain file)."""


def say(line: str) -> None:
    """The kernel's one-line notices go to stderr, so a command's output stays its own."""
    print(f"evonorm: {line}", file=sys.stderr, flush=True)


@lru_cache(maxsize=1)
def load_kernel() -> CppStatus:
    """Build (once per machine) and load the kernel; never raises: a failure is reported in the status."""
    if os.environ.get("EVONORM_CPP", "1") == "0":
        return CppStatus(False, "turned off by EVONORM_CPP=0")
    try:
        cache = KernelCache(cache_dir())
    except OSError as err:
        return CppStatus(False, f"cannot read the kernel source: {err.strerror or err}")
    return load_from(cache)


def load_from(cache: KernelCache, notice: Callable[[str], None] = say) -> CppStatus:
    """The kernel from `cache`, built there first where no checked library is: the library is loaded only
    when its bytes are those a child process built and loaded (so a truncated or foreign file can never take
    this process down), and only from a folder and file of this user that nobody else may write. Each
    failure is a status with its reason; those a user should know of are said in one line (`notice`)."""
    folder = cache.folder
    try:
        private_folder(folder.parent)
        private_folder(folder)
        library = checked_library(folder)
        if library is None:
            compiler = compiler_id()
            with build_lock(folder, cache.wait_s) as held:
                if not held:
                    reason = (f"another process has held the kernel's build lock in {folder} for over "
                              f"{cache.wait_s:.0f} s")
                    notice(f"{reason}; graph layers run the Python path")
                    return CppStatus(False, reason)
                library = checked_library(folder)  # built by the process we waited for
                if library is None:
                    failed = earlier_failure(folder, compiler)
                    if failed is not None:
                        return CppStatus(False, failed)
                    reason = build(folder, cache.build_s, compiler, notice)
                    if reason is not None:
                        return CppStatus(False, reason)
                    library = checked_library(folder)
        if library is None:
            raise CacheRefused(f"the kernel built in {folder} does not match its stamp")
        if not registered():  # a second copy's registration would abort the process
            torch.ops.load_library(str(library))
        ops = torch.ops.evonorm_graph
        return CppStatus(True, forward=ops.forward.default, backward=ops.backward.default)
    except CacheRefused as err:
        notice(f"{err}; graph layers run the Python path")
        return CppStatus(False, str(err))
    except (OSError, RuntimeError, AttributeError) as err:
        reason = f"{type(err).__name__}: {(str(err).strip().splitlines() or [''])[0]}"[:300]
        notice(f"the CPU graph kernel cannot be loaded ({reason}); graph layers run the Python path")
        return CppStatus(False, reason)


def registered() -> bool:
    """Whether this process has the kernel's ops already (loaded from this folder or another)."""
    try:
        torch.ops.evonorm_graph.forward.default
    except (AttributeError, RuntimeError):
        return False
    return True


def private_folder(folder: Path) -> None:
    """`folder` made (0o700) where absent; refused unless it is a real folder of this user that neither
    group nor others may write (a folder others can write lets them plant the library we load)."""
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    except FileExistsError:  # a file, or a link to nothing, in its place
        pass
    owned_by_me(os.stat(folder), folder, stat.S_ISDIR, "folder")


def owned_by_me(st: os.stat_result, path: Path, kind: Callable[[int], bool], what: str) -> None:
    """CacheRefused unless `st` is a `kind` (a folder, a regular file) of this user, not group/world-writable."""
    if not kind(st.st_mode):
        raise CacheRefused(f"the kernel cache's {path} is not a {what}")
    if st.st_uid != os.getuid():
        raise CacheRefused(f"the kernel cache's {path} belongs to another user (uid {st.st_uid})")
    if st.st_mode & 0o022:
        raise CacheRefused(f"the kernel cache's {path} is writable by group or others "
                           f"(mode {stat.S_IMODE(st.st_mode):o})")


def read_private(path: Path) -> bytes | None:
    """A regular file of this user (not followed if a symbolic link; None when absent)."""
    try:
        fd = open_regular(path)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise CacheRefused(f"the kernel cache's {err}") from None
    with os.fdopen(fd, "rb") as f:
        owned_by_me(os.fstat(fd), path, stat.S_ISREG, "regular file")
        return f.read()


def checked_library(folder: Path) -> Path | None:
    """The folder's library when its size and SHA-256 are those stamped after a child process loaded it;
    None when it is absent, damaged (truncated, overwritten) or was never stamped: it is built again."""
    stamp, data = read_private(folder / STAMP), read_private(folder / LIBRARY)
    if stamp is None or data is None:
        return None
    return folder / LIBRARY if stamp.decode("ascii", "replace").strip() == stamp_of(data) else None


def stamp_of(data: bytes) -> str:
    return f"{hashlib.sha256(data).hexdigest()} {len(data)}"


def compiler_id() -> str:
    """The C++ compiler torch's loader runs ($CXX, else c++) by its resolved path, size and time: a failed
    build is retried once this changes (a compiler installed, upgraded or picked by $CXX)."""
    name = os.environ.get("CXX", "c++")
    found = shutil.which(name)
    if found is None:
        return f"{name} (not found)"
    real = os.path.realpath(found)
    st = os.stat(real)
    return f"{name} {real} {st.st_size} {st.st_mtime_ns}"


def earlier_failure(folder: Path, compiler: str) -> str | None:
    """The reason of a build that failed here with this compiler (the source and flags are the folder's key)."""
    raw = read_private(folder / FAILED)
    try:
        record = json.loads(raw) if raw is not None else None
    except ValueError:
        return None
    if not isinstance(record, dict) or record.get("compiler") != compiler:
        return None
    return f"an earlier build failed with this compiler ({record.get('reason')}); remove {folder / FAILED} to retry"


@contextmanager
def build_lock(folder: Path, wait_s: float) -> Iterator[bool]:
    """Hold the folder's build lock (an flock, which the OS drops when its holder dies, even by SIGKILL);
    yields False when another process still holds it after `wait_s`."""
    try:
        fd = open_regular(folder / LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as err:
        raise CacheRefused(f"the kernel cache's {err}") from None
    try:
        owned_by_me(os.fstat(fd), folder / LOCK, stat.S_ISREG, "regular file")
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    yield False
                    return
                time.sleep(0.1)
        yield True
    finally:
        os.close(fd)


BUILD_CHILD = """
import ctypes, json, os, signal, sys
def stop(*_):  # ninja, told too, stops its compilers (each in a process group of its own)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.killpg(0, signal.SIGTERM)
    os._exit(1)
signal.signal(signal.SIGTERM, stop)
prctl = getattr(ctypes.CDLL(None), "prctl", None)  # Linux: PR_SET_PDEATHSIG, the caller's death stops the build
if prctl is not None:
    prctl(1, int(signal.SIGTERM))
if os.getppid() != int(sys.argv[1]):
    stop()
import torch
from torch.utils.cpp_extension import load
name, source, folder, flags = sys.argv[2], sys.argv[3], sys.argv[4], json.loads(sys.argv[5])
load(name, [source], extra_cflags=flags, extra_ldflags=["-lmvec"], build_directory=folder,
     is_python_module=False, verbose=False)
torch.ops.evonorm_graph.forward.default, torch.ops.evonorm_graph.backward.default
"""
"""The build, run in a child process of its own process group: torch's loader builds the library and loads
it, and the kernel's two ops must be there. A crash while loading takes down the child, not the caller; the
group (ninja, the compiler) ends with the caller, and none of it outlives a timeout."""


def build(folder: Path, build_s: float, compiler: str, notice: Callable[[str], None]) -> str | None:
    """Build and check the library in a fresh subfolder, then move it into place and stamp it (each an atomic
    rename). Returns None, or why not: a failure is said in one line and remembered for this compiler."""
    environment_ninja_first()
    for stale in folder.glob("partial-*"):  # left by a build killed half-way (we hold the lock)
        shutil.rmtree(stale, ignore_errors=True)
    notice(f"building the CPU graph kernel in {folder} (once per machine; about 20 s)")
    work = Path(tempfile.mkdtemp(prefix="partial-", dir=folder))
    try:
        proc = subprocess.Popen([sys.executable, "-c", BUILD_CHILD, str(os.getpid()), KERNEL, str(SOURCE),
                                 str(work), json.dumps(FLAGS)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, process_group=0)
        try:
            out, _ = proc.communicate(timeout=build_s)
        except subprocess.TimeoutExpired:
            end_group(proc)
            return remember_failure(folder, compiler, f"the build took over {build_s:.0f} s and was stopped",
                                    notice)
        except BaseException:  # Ctrl-C, or our caller stopped: the build goes with us
            end_group(proc)
            raise
        if proc.returncode < 0:  # killed from outside (out of memory, a user): not the source's fault
            reason = f"the build was killed by signal {-proc.returncode}"
            notice(f"the CPU graph kernel was not built ({reason}); graph layers run the Python path")
            return reason
        if proc.returncode != 0:
            return remember_failure(folder, compiler, first_error(out.decode("utf-8", "replace")), notice)
        data = (work / LIBRARY).read_bytes()
        os.chmod(work / LIBRARY, 0o755)  # whatever the umask: a group-writable library would be refused
        os.replace(work / LIBRARY, folder / LIBRARY)
        write_atomic(folder / STAMP, (stamp_of(data) + "\n").encode())
        return None
    finally:
        shutil.rmtree(work, ignore_errors=True)


def end_group(proc: subprocess.Popen, grace_s: float = 5.0) -> None:
    """Stop the build's process group: SIGTERM first, so that ninja stops the compilers it runs in groups of
    their own, then SIGKILL for whatever is left after `grace_s`; the child is reaped."""
    deadline = time.monotonic() + grace_s
    signal_group(proc.pid, signal.SIGTERM)
    while time.monotonic() < deadline:
        proc.poll()  # reap the child, so that a group whose members all ended reads as gone
        if not signal_group(proc.pid, 0):
            break
        time.sleep(0.05)
    signal_group(proc.pid, signal.SIGKILL)
    proc.wait()


def signal_group(pgid: int, sig: int) -> bool:
    """Send `sig` to a process group; False when none of it is left."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    return True


def first_error(output: str) -> str:
    """The line of a build's output that says what went wrong: the compiler's first error, else the last
    line (the exception a failing loader ended with)."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    errors = [ln for ln in lines if re.search(r"(^|: )(fatal )?error: ", ln)]
    return (errors[0] if errors else lines[-1] if lines else "no output")[:240]


def remember_failure(folder: Path, compiler: str, reason: str, notice: Callable[[str], None]) -> str:
    """Say a failed build in one line and keep it, so no later process retries it with this compiler."""
    write_atomic(folder / FAILED, json.dumps({"compiler": compiler, "reason": reason}).encode())
    notice(f"the CPU graph kernel could not be built ({reason}); graph layers run the Python path "
           f"(remembered: remove {folder / FAILED} to retry)")
    return reason


def environment_ninja_first() -> None:
    """torch's extension loader runs `ninja` from PATH. This environment's own ninja (a dependency) goes first
    for this process: a venv's python run without activating the venv would otherwise find the system's, and
    two ninja versions read each other's build records as stale and rebuild (18 s) at every switch."""
    scripts = str(Path(sys.executable).parent)
    found = shutil.which("ninja", path=scripts)
    if found is not None and shutil.which("ninja") != found:
        os.environ["PATH"] = scripts + os.pathsep + os.environ.get("PATH", "")


def cpp_applies(x: torch.Tensor, params) -> bool:
    """A 4-d float32/float64 CPU input with its parameters (None: absent) in its dtype on the CPU."""
    return (x.dim() == 4 and x.device.type == "cpu" and x.dtype in CPP_DTYPES
            and all(p is None or (p.dtype == x.dtype and p.device.type == "cpu") for p in params))


class CppGraphFunction(torch.autograd.Function):
    """y = graph(x) * weight + bias by the compiled kernel; double backward differentiates the plain formula."""

    @staticmethod
    def forward(ctx, x, v0, v1, weight, bias, spec: FastSpec, prog: torch.Tensor):
        # an absent v0 / v1 is no node of the program: any per-channel tensor stands in (it is not read)
        out, saved = load_kernel().forward(x.contiguous(), weight if v0 is None else v0, weight if v1 is None else v1,
                                    weight, bias, prog, spec.groups, spec.eps)
        ctx.spec, ctx.prog = spec, prog
        ctx.save_for_backward(x, v0, v1, weight, bias, saved)
        return like_input(out, x)

    @staticmethod
    def backward(ctx, dy):
        x, v0, v1, weight, bias, saved = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph=True: differentiate the plain formula instead
            return (*differentiable_grads(plain_formula, (x, v0, v1, weight, bias), (ctx.spec,), dy), None, None)
        dx, dv0, dv1, dw, db = load_kernel().backward(
            dy.contiguous(), x.contiguous(), weight if v0 is None else v0, weight if v1 is None else v1, weight, saved,
            ctx.prog, ctx.spec.groups, ctx.spec.eps)
        return like_input(dx, x), None if v0 is None else dv0, None if v1 is None else dv1, dw, db, None, None
