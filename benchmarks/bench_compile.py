"""A `demo` candidate's network compiled around the C++ graph kernel, its program handed in as data, against eager.

Each graph layer of the model is swapped for a slot that calls the kernel's two ops through an autograd
function, with the layer's op-code table as a buffer (an input of the compiled graph, not a constant) and a
shape-only ("fake") implementation of each op (the saved statistics have a size known only at run time), so
that torch.compile traces the whole network through the layer. Per architecture, every graph's model is
compiled in turn (the wall seconds of its first steps, and how many graphs torch has compiled by then: a
second candidate that does not recompile leaves the count unchanged), then eager and compiled runs of each
graph train in interleaved rounds, timed in CPU seconds of this process (one thread).

    python benchmarks/bench_compile.py                                  # ResNet-50 and MobileNetV2
    python benchmarks/bench_compile.py --archs resnet50_cifar --graphs GN-ReLU scratch-winner --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch
from torch import nn
from torch._dynamo.utils import counters

from bench_candidate import STORED, demo_dataset, named_graphs
from evonorm.graph.cpp import load_kernel
from evonorm.graph.module import GraphLayer
from evonorm.proxy.presets import get_preset
from evonorm.proxy.config import ProxyTask


def register_fakes() -> None:
    """Shape-only versions of the kernel's ops, for tracing: the saved statistics' width depends on the
    program's values, so it is a size known at run time."""

    @torch.library.register_fake("evonorm_graph::forward")
    def _forward(x, v0, v1, weight, bias, program, groups, eps):
        width = torch.library.get_ctx().new_dynamic_size()
        return [torch.empty_like(x), x.new_empty((x.shape[0], width), dtype=torch.float64)]

    @torch.library.register_fake("evonorm_graph::backward")
    def _backward(dy, x, v0, v1, weight, saved, program, groups, eps):
        return [torch.empty_like(x)] + [weight.new_empty(x.shape[1]) for _ in range(4)]


class KernelOps(torch.autograd.Function):
    """The layer as the kernel's forward and backward ops (absent v0 / v1: the weight stands in, unread)."""

    @staticmethod
    def forward(ctx, x, v0, v1, weight, bias, program, groups: int, eps: float):
        x = x.contiguous()
        a = weight if v0 is None else v0
        b = weight if v1 is None else v1
        out, saved = torch.ops.evonorm_graph.forward(x, a, b, weight, bias, program, groups, eps)
        ctx.save_for_backward(x, a, b, weight, saved, program)
        ctx.groups, ctx.eps, ctx.has = groups, eps, (v0 is not None, v1 is not None)
        ctx.mark_non_differentiable(saved)
        return out, saved  # returned too: a size made inside a traced function must leave it

    @staticmethod
    def backward(ctx, dy, _):
        x, a, b, weight, saved, program = ctx.saved_tensors
        dx, dv0, dv1, dw, db = torch.ops.evonorm_graph.backward(dy.contiguous(), x, a, b, weight, saved, program,
                                                                ctx.groups, ctx.eps)
        return dx, dv0 if ctx.has[0] else None, dv1 if ctx.has[1] else None, dw, db, None, None, None


class KernelSlot(nn.Module):
    """A graph layer's parameters and program, run as `KernelOps` (what torch.compile traces)."""

    def __init__(self, layer: GraphLayer):
        super().__init__()
        for name in ("v0", "v1", "weight", "bias"):  # the layer's own parameters (None: not in the graph)
            self.register_parameter(name, getattr(layer, name, None))
        self.register_buffer("program", layer.cpp_program.clone(), persistent=False)
        self.groups, self.eps = layer.groups, layer.eps

    def forward(self, x):
        return KernelOps.apply(x, self.v0, self.v1, self.weight, self.bias, self.program, self.groups, self.eps)[0]


def slotted(model: nn.Module) -> nn.Module:
    """`model` with every graph layer that runs the kernel behind a `KernelSlot`."""
    for name, child in model.named_children():
        if isinstance(child, GraphLayer) and child.cpp_program is not None:
            setattr(model, name, KernelSlot(child))
        else:
            slotted(child)
    return model


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--archs", nargs="+", default=["resnet50_cifar", "mobilenetv2_cifar"])
    p.add_argument("--graphs", nargs="+", default=["GN-ReLU", "scratch-winner"],
                   help=f"GN-ReLU, LN-ReLU, IN-ReLU, {', '.join(STORED)} or a named graph")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--block", type=int, default=10, help="steps per run per round")
    args = p.parse_args()
    torch.set_num_threads(1)
    if not load_kernel().ok:
        print(f"bench_compile: the C++ kernel could not be built: {load_kernel().reason}", file=sys.stderr)
        return 2
    register_fakes()
    torch._dynamo.config.capture_dynamic_output_shape_ops = True  # the saved statistics' run-time width
    from evonorm.train import Run

    cfg = get_preset("demo")
    ds, ds_name = demo_dataset(cfg)
    graphs = named_graphs(args.graphs)
    print(f"# torch {torch.__version__}, 1 thread, demo config, {ds_name}; CPU ms per step, medians of "
          f"{args.rounds} interleaved rounds of {args.block} steps")
    print("| arch | layer | compile wall s (first 3 steps) | graphs compiled so far | eager ms | compiled ms "
          "| eager / compiled |\n|---|---|---|---|---|---|---|")
    for arch in args.archs:
        tcfg = ProxyTask.of_run(cfg).training[arch].replace(steps=900, restarts=())
        runs, compile_s, compiled = {}, {}, {}
        for label, g in graphs.items():
            runs[label, "eager"] = Run(g, ds, tcfg)
            run = runs[label, "compiled"] = Run(g, ds, tcfg)
            run.step_model = torch.compile(slotted(run.model))
            t0 = time.perf_counter()
            run.advance(3)
            compile_s[label] = time.perf_counter() - t0
            compiled[label] = counters["stats"]["unique_graphs"]
            runs[label, "eager"].advance(3)
        times: dict = {k: [] for k in runs}
        for r in range(args.rounds):
            for key, run in runs.items():
                t0 = time.process_time()
                run.advance(3 + (r + 1) * args.block)
                times[key].append(1e3 * (time.process_time() - t0) / args.block)
        for label in graphs:
            e, c = times[label, "eager"], times[label, "compiled"]
            print(f"| {arch} | {label} | {compile_s[label]:.0f} | {compiled[label]} | {statistics.median(e):.1f} | "
                  f"{statistics.median(c):.1f} | {statistics.median(a / b for a, b in zip(e, c)):.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
