"""The compiled CPU kernel of a graph layer: the whole layer in C++, one sample at a time, in cache.

The fast path (`evonorm.graph.fast`) still runs each node as a few torch ops over the whole tensor, with
Python between them: on a CPU at the search's scale that was most of a candidate's training. Every
statistic of a sample-based layer is per sample, so `csrc/graph_kernel.cpp` runs one sample's nodes over
buffers that stay in cache (the tensor is read once, the output written once) and backward recomputes
them and runs autograd's rule for each primitive. The graph reaches it as a table of op codes, never as
code. The kernel is built from source by torch's C++ extension loader on first use (a C++ compiler is
needed; about 20 s, once per machine and torch version) into EVONORM_CPP_CACHE (default
~/.cache/evonorm/kernels); where it cannot be built, `impl="auto"` runs the fast path instead.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import sys
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable

import torch

from evonorm.graph.fast import FastSpec, Plan, like_input, plain_formula
from evonorm.graph.primitives import NUM_INPUTS
from evonorm.layers import differentiable_grads

SOURCE = Path(__file__).parent / "csrc" / "graph_kernel.cpp"
CODES = {name: i for i, name in enumerate(
    ("add", "mul", "div", "max", "swish", "neg", "sigmoid", "tanh", "exp", "log", "abs", "square", "sqrt",
     "mean", "std", "rms", "norm"))}
"""The kernel's op codes (the order of its `Op` enum): the element-wise primitives, the fused swish
h * sigmoid(v h), the statistics and the fused norm (h - mean(h)) / std(h)."""
AXES = {"layer": 0, "instance": 1, "group": 2}
CPP_DTYPES = (torch.float32, torch.float64)
FLAGS = ["-O3", "-fno-math-errno", "-fopenmp-simd", "-march=native"]  # no -ffast-math: NaN and inf must survive


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


def cache_dir() -> Path:
    """Where built kernels are kept: one folder per source, flags, torch (version and place), Python environment
    and CPU. A home folder shared by machines with different CPUs, or by two environments (a checkout's venv
    and a clean clone's), gets one build each: one shared folder would be rebuilt at every switch, since the
    build names each environment's torch headers."""
    root = Path(os.environ.get("EVONORM_CPP_CACHE", Path.home() / ".cache" / "evonorm" / "kernels"))
    key = hashlib.sha256(SOURCE.read_bytes() + " ".join(FLAGS).encode() + torch.__version__.encode()
                         + str(Path(torch.__file__).parent).encode() + sys.prefix.encode()
                         + _cpu()).hexdigest()[:16]
    return root / key


@dataclass(frozen=True)
class CppStatus:
    """Whether the kernel is loaded (then its two ops), and why not."""

    ok: bool
    reason: str = ""
    forward: Callable | None = None
    backward: Callable | None = None


@lru_cache(maxsize=1)
def load() -> CppStatus:
    """Build (once per machine) and load the kernel; never raises: a failure is reported in the status."""
    if os.environ.get("EVONORM_CPP", "1") == "0":
        return CppStatus(False, "turned off by EVONORM_CPP=0")
    try:
        from torch.utils.cpp_extension import load as load_extension

        environment_ninja_first()
        build = cache_dir()
        build.mkdir(parents=True, exist_ok=True)
        clear_stale_lock(build)
        if not any(build.glob("*.so")):
            print(f"evonorm: building the CPU graph kernel in {build} (once per machine; about 20 s)",
                  file=sys.stderr, flush=True)
        load_extension("evonorm_graph_kernel", [str(SOURCE)], extra_cflags=FLAGS, extra_ldflags=["-lmvec"],
                       build_directory=str(build), is_python_module=False, verbose=False)
    except Exception as e:  # no compiler, no headers, a read-only home: the fast path runs instead
        first = str(e).strip().splitlines()
        return CppStatus(False, f"{type(e).__name__}: {first[0] if first else ''}"[:300])
    ops = torch.ops.evonorm_graph
    return CppStatus(True, forward=ops.forward.default, backward=ops.backward.default)


def clear_stale_lock(build: Path, max_age: float = 600.0) -> None:
    """torch's loader builds under a lock file and waits for any lock it finds: a build killed half-way (Ctrl-C,
    an out-of-memory kill) would leave every later process waiting forever. A lock older than any build removed."""
    lock = build / "lock"
    try:
        if time.time() - lock.stat().st_mtime > max_age:
            lock.unlink(missing_ok=True)
    except FileNotFoundError:
        pass


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
        out, saved = load().forward(x.contiguous(), weight if v0 is None else v0, weight if v1 is None else v1,
                                    weight, bias, prog, spec.groups, spec.eps)
        ctx.spec, ctx.prog = spec, prog
        ctx.save_for_backward(x, v0, v1, weight, bias, saved)
        return like_input(out, x)

    @staticmethod
    def backward(ctx, dy):
        x, v0, v1, weight, bias, saved = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph=True: differentiate the plain formula instead
            return (*differentiable_grads(plain_formula, (x, v0, v1, weight, bias), (ctx.spec,), dy), None, None)
        dx, dv0, dv1, dw, db = load().backward(
            dy.contiguous(), x.contiguous(), weight if v0 is None else v0, weight if v1 is None else v1, weight, saved,
            ctx.prog, ctx.spec.groups, ctx.spec.eps)
        return like_input(dx, x), None if v0 is None else dv0, None if v1 is None else dv1, dw, db, None, None
