"""Seconds per full training step (forward, backward, SGD) of a model built with each layer, side by side.

Every layer's model is built once; steps run in interleaved rounds whose order rotates, and a layer's ratio is
the median over rounds of its step time over BN-ReLU's step time in the same round.

    python benchmarks/bench_step.py --device cuda                          # ResNet-50, 224x224, batch 64
    python benchmarks/bench_step.py --device cuda --dtype bfloat16 --channels-last
    python benchmarks/bench_step.py --arch resnet50_cifar --size 24 --batch 8 --rounds 2   # a quick CPU check
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from functools import partial

import torch
import torch.nn.functional as F

from evonorm.layers import create_norm_act, list_norm_acts
from evonorm.models import build_model, list_archs

DEFAULT_LAYERS = ["bn_relu", "gn_relu", "evonorm_b0", "evonorm_b1", "evonorm_b2", "evonorm_s0", "evonorm_s1",
                  "evonorm_s2"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    ap.add_argument("--arch", default="resnet50", choices=list_archs())
    ap.add_argument("--layers", nargs="+", default=DEFAULT_LAYERS, help="registry names; the first is the reference")
    ap.add_argument("--impl", default="auto", choices=["auto", "plain", "fast", "compile", "triton"],
                    help="EvoNorm implementation (auto: Triton kernels on CUDA, kernel on CPU)")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--size", type=int, default=224, help="input height and width")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                    help="bfloat16: the step runs under torch.autocast")
    ap.add_argument("--channels-last", action="store_true")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--iters", type=int, default=3, help="steps per round")
    ap.add_argument("--threads", type=int, default=2, help="CPU threads")
    args = ap.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("bench_step: --device cuda but torch.cuda.is_available() is False", file=sys.stderr)
        return 2
    unknown = [n for n in args.layers if n not in list_norm_acts()]
    if unknown:
        print(f"bench_step: unknown layers {unknown}; known: {list_norm_acts()}", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    fmt = torch.channels_last if args.channels_last else torch.contiguous_format
    torch.manual_seed(0)
    x = torch.randn(args.batch, 3, args.size, args.size, device=device).contiguous(memory_format=fmt)
    target = torch.randint(0, 1000, (args.batch,), device=device)
    models, opts = {}, {}
    for name in args.layers:
        models[name] = build_model(args.arch, partial(create_norm_act, name, impl=args.impl), num_classes=1000).to(
            device, memory_format=fmt).train()
        opts[name] = torch.optim.SGD(models[name].parameters(), lr=1e-3, momentum=0.9)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.dtype == "bfloat16")

    def step(name: str) -> None:
        opts[name].zero_grad(set_to_none=True)
        with autocast:
            loss = F.cross_entropy(models[name](x), target)
        loss.backward()
        opts[name].step()

    for name in args.layers:  # warm-up (and Triton's / Inductor's compilation)
        for _ in range(2):
            step(name)
    times: dict[str, list[float]] = {name: [] for name in args.layers}
    for r in range(args.rounds):
        order = args.layers[r % len(args.layers):] + args.layers[: r % len(args.layers)]
        for name in order:
            sync()
            t0 = time.perf_counter()
            for _ in range(args.iters):
                step(name)
            sync()
            times[name].append((time.perf_counter() - t0) / args.iters)
        print(f"# round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, {args.threads} threads"
    ref = args.layers[0]
    print(f"# torch {torch.__version__}, {where}; {args.arch}, batch {args.batch}, {args.size}x{args.size}, "
          f"{args.dtype}, {'channels_last' if args.channels_last else 'NCHW'}, EvoNorm impl={args.impl}; "
          f"{args.rounds} interleaved rounds x {args.iters} steps")
    print(f"| layer | ms / step (median) | step / {ref} (median over rounds) |")
    print("|---|---:|---:|")
    for name in args.layers:
        ratio = statistics.median(t / r for t, r in zip(times[name], times[ref]))
        print(f"| {name} | {statistics.median(times[name]) * 1e3:.1f} | {ratio:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
