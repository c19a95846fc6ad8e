"""Speed and memory of every registered layer against BN-ReLU, measured side by side in one process.

For each shape: forward+backward time and the bytes saved for backward (counted with
torch.autograd.graph.saved_tensors_hooks, each storage once), both as ratios to torch's BatchNorm2d + ReLU.
Timing runs in interleaved rounds (the order rotates each round); a layer's ratio is the median over rounds of
its time over BN-ReLU's time in the same round, so load from other processes hits both sides of a ratio
alike. timm's EvoNorm2dB0/S0 join when timm imports. A summary table (layer x shape) ends the output.

    python benchmarks/bench_layers.py                      # CPU, 2 threads, the four default shapes
    python benchmarks/bench_layers.py --device cuda        # on a GPU (EvoNorms: Triton kernels)
    python benchmarks/bench_layers.py --device cuda --impl compile --shapes 256,64,56,56
    python benchmarks/bench_layers.py --shapes 128,64,24,24 --layers evonorm_s0 evonorm_b0
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch
from torch import nn

from evonorm.layers import create_norm_act, list_norm_acts
from evonorm.layers import resolve_groups

DEFAULT_SHAPES = ["128,64,24,24", "128,16,24,24", "8,256,14,14", "32,128,16,16"]
REF = "torch BatchNorm2d+ReLU"


def _timm_layers() -> tuple[dict[str, type], str | None]:
    """timm's EvoNorm2dB0/S0 and a note: (classes, None) when `timm.layers` imports; when only its package
    __init__ fails (timm 1.0.x imports torchvision there), `timm/layers/evo_norm.py` is loaded on its own;
    ({}, the reason) when neither works."""
    try:
        from timm.layers import EvoNorm2dB0, EvoNorm2dS0
    except ImportError as e:
        first = f"{type(e).__name__}: {e}"
        try:
            import importlib
            import importlib.util
            import types

            spec = importlib.util.find_spec("timm")
            if spec is None or spec.origin is None:
                return {}, first
            root = os.path.dirname(spec.origin)
            saved = {k: sys.modules.get(k) for k in ("timm", "timm.layers")}
            for name, path in (("timm", root), ("timm.layers", os.path.join(root, "layers"))):
                pkg = types.ModuleType(name)
                pkg.__path__ = [path]
                sys.modules[name] = pkg
            try:
                evo = importlib.import_module("timm.layers.evo_norm")
            finally:
                for k, v in saved.items():
                    if v is None:
                        sys.modules.pop(k, None)
                    else:
                        sys.modules[k] = v
            EvoNorm2dB0, EvoNorm2dS0 = evo.EvoNorm2dB0, evo.EvoNorm2dS0
            print(f"# timm: `from timm.layers import ...` failed ({first}); loaded timm/layers/evo_norm.py "
                  "without the package __init__")
        except Exception as e2:  # noqa: BLE001 - report and skip the column
            return {}, f"{first}; loading timm/layers/evo_norm.py alone failed too: {type(e2).__name__}: {e2}"
    return {"timm_evonorm_b0": EvoNorm2dB0, "timm_evonorm_s0": EvoNorm2dS0}, None


def saved_bytes(layer: nn.Module, x: torch.Tensor) -> int:
    """Bytes of the tensors autograd keeps for backward after one forward (each storage counted once)."""
    seen: dict[tuple[int, int], int] = {}

    def pack(t: torch.Tensor):
        storage = t.untyped_storage()
        seen[(storage.data_ptr(), storage.nbytes())] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = layer(x)
    del y
    return sum(seen.values())


def _step(layer: nn.Module, x: torch.Tensor, grad: torch.Tensor) -> None:
    x.grad = None
    layer(x).backward(grad)


def time_layers(layers: dict[str, nn.Module], x: torch.Tensor, rounds: int, iters: int,
                clock=time.perf_counter) -> dict[str, list[float]]:
    """Per-iteration fwd+bwd seconds of each layer in each of `rounds` interleaved rounds of `iters` steps."""
    grad = torch.randn_like(x)
    sync = torch.cuda.synchronize if x.is_cuda else (lambda: None)
    for layer in layers.values():  # warm-up
        for _ in range(2):
            _step(layer, x, grad)
    names = list(layers)
    times: dict[str, list[float]] = {name: [] for name in layers}
    for r in range(rounds):
        for name in names[r % len(names):] + names[: r % len(names)]:
            sync()
            t0 = clock()
            for _ in range(iters):
                _step(layers[name], x, grad)
            sync()
            times[name].append((clock() - t0) / iters)
    return times


def _quartiles(values: list[float]) -> tuple[float, float, float]:
    q = statistics.quantiles(values, n=4) if len(values) > 1 else values * 3
    return q[0], statistics.median(values), q[2]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    ap.add_argument("--threads", type=int, default=2, help="CPU threads (default 2)")
    ap.add_argument("--shapes", nargs="+", default=DEFAULT_SHAPES, help="N,C,H,W shapes")
    ap.add_argument("--layers", nargs="+", default=None, help="registry names (default: all)")
    ap.add_argument("--rounds", type=int, default=15, help="interleaved timing rounds (medians are reported)")
    ap.add_argument("--iters", type=int, default=None, help="steps per round (default: 2 on CPU, 20 on CUDA)")
    ap.add_argument("--chunk-kb", type=int, default=None,
                    help="tuning: the EvoNorm kernels' CPU working-set size in KiB (default: the package's)")
    ap.add_argument("--impl", default="auto", choices=["auto", "plain", "fast", "compile", "triton"],
                    help="EvoNorm implementation: auto (Triton kernels on CUDA, kernel on CPU), kernel, compile, "
                         "triton")
    ap.add_argument("--clock", default="wall", choices=["wall", "cpu"],
                    help="wall (default) or cpu: this process's CPU time, which a loaded machine disturbs far less "
                         "(use with --threads 1, where no thread waits for another)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                    help="input dtype (parameters stay float32; EvoNorm statistics run in float32)")
    ap.add_argument("--no-timm", action="store_true", help="skip timm's EvoNorm2dB0/S0")
    args = ap.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("bench_layers: --device cuda but torch.cuda.is_available() is False", file=sys.stderr)
        return 2
    names = args.layers or list_norm_acts()
    unknown = [n for n in names if n not in list_norm_acts()]
    if unknown:
        print(f"bench_layers: unknown layers {unknown}; known: {list_norm_acts()}", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    if args.chunk_kb:
        import evonorm.runtime.common as kernels_common

        kernels_common.CPU_CHUNK_BYTES = args.chunk_kb * 1024
    device = torch.device(args.device)
    iters = args.iters or (20 if device.type == "cuda" else 2)
    timm_layers, timm_reason = ({}, "--no-timm") if args.no_timm else _timm_layers()
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, {args.threads} threads"
    load = f"; load average {os.getloadavg()[0]:.2f}" if hasattr(os, "getloadavg") else ""
    print(f"# torch {torch.__version__}, {where}; fwd+bwd, {args.rounds} interleaved rounds x {iters} steps; "
          f"{args.dtype} input; EvoNorm impl={args.impl}; {args.clock} clock{load}")
    if timm_reason:
        print(f"# timm column skipped: {timm_reason}")
    summary: dict[str, dict[str, str]] = {}
    for spec in args.shapes:
        shape = tuple(int(s) for s in spec.split(","))
        if len(shape) != 4:
            print(f"bench_layers: shape {spec!r} is not N,C,H,W", file=sys.stderr)
            return 2
        c = shape[1]
        torch.manual_seed(0)
        x = torch.randn(shape, device=device).to(getattr(torch, args.dtype)).requires_grad_()
        layers = {REF: nn.Sequential(nn.BatchNorm2d(c), nn.ReLU())}
        layers |= {n: create_norm_act(n, c, impl=args.impl) for n in names}
        layers |= {n: cls(c, groups=resolve_groups(c, 32)) if "s0" in n else cls(c) for n, cls in timm_layers.items()}
        for layer in layers.values():
            layer.to(device).train()
        clock = time.process_time if args.clock == "cpu" else time.perf_counter
        times = time_layers(layers, x, args.rounds, iters, clock)
        ref_b = saved_bytes(layers[REF], x)
        ref_ms = statistics.median(times[REF]) * 1e3
        print(f"\n## shape {shape}: BN-ReLU {ref_ms:.2f} ms (median), {ref_b / 2**20:.1f} MiB saved")
        print("| layer | ms (median) | time / BN-ReLU (median) | quartiles | MiB saved | bytes / BN-ReLU |")
        print("|---|---:|---:|---:|---:|---:|")
        for name, layer in layers.items():
            b = saved_bytes(layer, x)
            lo, mid, hi = _quartiles([t / r for t, r in zip(times[name], times[REF])])
            print(f"| {name} | {statistics.median(times[name]) * 1e3:.2f} | {mid:.2f} | {lo:.2f}-{hi:.2f} | "
                  f"{b / 2**20:.1f} | {b / ref_b:.2f} |", flush=True)
            summary.setdefault(name, {})[spec] = f"{mid:.2f} / {b / ref_b:.2f}"
    print("\n## summary: time / BN-ReLU (median) / bytes saved / BN-ReLU")
    print("| layer | " + " | ".join(f"({s})" for s in args.shapes) + " |")
    print("|---|" + "---|" * len(args.shapes))
    for name, cells in summary.items():
        print(f"| {name} | " + " | ".join(cells[s] for s in args.shapes) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
