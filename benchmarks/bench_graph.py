"""The compiled search space: speed of graph layers against the hand-written ones, and fingerprint collisions.

Speed: EvoNorm-B0 and S0 built from their graphs (`Graph.to_module`, a torch.fx module) against the
hand-written `evonorm.layers` modules, forward + backward in training mode, eager and under
torch.compile, timed side by side in one process in interleaved rounds (median), as ratios
graph / hand-written.

Collisions: over N random graphs (seeded; half with batch ops, like the B and S searches), how many
distinct canonical keys share a functional fingerprint with another key, and how many of those
shared fingerprints are false (the two layers differ on an independent check input).

    python benchmarks/bench_graph.py                          # speed, 2 threads
    python benchmarks/bench_graph.py --no-compile             # eager only
    python benchmarks/bench_graph.py --collisions 10000       # collision rate only
"""

from __future__ import annotations

import argparse
import collections
import random
import statistics
import time

import torch


def _time_fwd_bwd(module, x, reps: int) -> float:
    t0 = time.perf_counter()
    for _ in range(reps):
        module(x).sum().backward()
        x.grad = None
    return (time.perf_counter() - t0) / reps


def bench_speed(shape: tuple[int, ...], rounds: int, reps: int, compile_: bool) -> list[dict]:
    from evonorm.graph.library import get_graph
    from evonorm.layers import create_norm_act

    n, c, h, w = shape
    rows = []
    for name in ("evonorm_b0", "evonorm_s0"):
        variants = {"hand": create_norm_act(name, c), "graph": get_graph(name).to_module(c)}
        modes = ["eager"] + (["compile"] if compile_ else [])
        runners = {}
        for mode in modes:
            for kind, m in variants.items():
                runners[(mode, kind)] = torch.compile(m) if mode == "compile" else m
        x = torch.randn(shape, requires_grad=True)
        for r in runners.values():  # warm-up (and compilation)
            for _ in range(3):
                r(x).sum().backward()
        times = collections.defaultdict(list)
        for _ in range(rounds):
            for key, r in runners.items():
                times[key].append(_time_fwd_bwd(r, x, reps))
        med = {k: statistics.median(v) for k, v in times.items()}
        for mode in modes:
            rows.append({"layer": name, "mode": mode, "hand_ms": med[(mode, "hand")] * 1e3,
                         "graph_ms": med[(mode, "graph")] * 1e3,
                         "ratio": med[(mode, "graph")] / med[(mode, "hand")]})
        if compile_:
            rows.append({"layer": name, "mode": "graph compiled / hand eager", "hand_ms": med[("eager", "hand")] * 1e3,
                         "graph_ms": med[("compile", "graph")] * 1e3,
                         "ratio": med[("compile", "graph")] / med[("eager", "hand")]})
    return rows


def bench_collisions(count: int, seed: int) -> dict:
    """Fingerprint collisions among distinct canonical keys of `count` random graphs."""
    from evonorm.graph import random_graph
    from evonorm.graph.interpret import interpret

    rng = random.Random(seed)
    by_key = {}
    for i in range(count):
        g = random_graph(rng, allow_batch=i % 2 == 0)
        by_key.setdefault(g.key(), g)
    t0 = time.perf_counter()
    by_fp = collections.defaultdict(list)
    for k, g in by_key.items():
        by_fp[g.fingerprint()].append(k)
    fp_seconds = (time.perf_counter() - t0) / len(by_key)
    shared = [ks for ks in by_fp.values() if len(ks) > 1]
    keys_sharing = sum(len(ks) for ks in shared)

    gen = torch.Generator().manual_seed(seed + 1)  # an independent check input (other shape, groups, values)
    x1 = torch.randn(5, 12, 4, 4, generator=gen, dtype=torch.float64) * 2
    x2 = torch.randn(5, 12, 4, 4, generator=gen, dtype=torch.float64) - 0.5
    v0, v1 = (torch.randn(12, generator=gen, dtype=torch.float64) * 1.5 for _ in range(2))

    def check(g):
        running = {}
        with torch.no_grad():
            return torch.stack([interpret(g, x1, v0, v1, groups=4, training=True, running=running),
                                interpret(g, x2, v0, v1, groups=4, training=False, running=running)])

    false_groups, false_keys = 0, 0
    constant = 0
    for ks in shared:
        outs = [check(by_key[k]) for k in ks]
        ref = outs[0]
        differs = [not torch.allclose(o, ref, rtol=1e-5, atol=1e-8, equal_nan=True) for o in outs[1:]]
        false_groups += any(differs)
        false_keys += sum(differs)
        finite = ref[torch.isfinite(ref)]
        constant += finite.numel() == 0 or bool((finite == finite.flatten()[0]).all())
    return {"graphs": count, "distinct_keys": len(by_key), "distinct_fingerprints": len(by_fp),
            "keys_sharing_a_fingerprint": keys_sharing, "collision_rate": keys_sharing / len(by_key),
            "shared_fingerprints": len(shared), "of_which_constant_or_nonfinite": constant,
            "false_collision_groups": false_groups, "false_collision_keys": false_keys,
            "fingerprint_ms": fp_seconds * 1e3}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--shape", default="32,64,16,16", help="N,C,H,W")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--no-compile", action="store_true")
    p.add_argument("--collisions", type=int, default=0, metavar="N", help="measure fingerprint collisions only")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    if args.collisions:
        r = bench_collisions(args.collisions, args.seed)
        for k, v in r.items():
            print(f"{k:32s} {v:.4f}" if isinstance(v, float) else f"{k:32s} {v}")
        return
    shape = tuple(int(s) for s in args.shape.split(","))
    print(f"torch {torch.__version__}, {args.threads} threads, shape {shape}, fwd+bwd, median of {args.rounds} rounds")
    print("| layer | mode | hand-written ms | graph ms | graph / hand |")
    print("|---|---|---|---|---|")
    for r in bench_speed(shape, args.rounds, args.reps, not args.no_compile):
        print(f"| {r['layer']} | {r['mode']} | {r['hand_ms']:.2f} | {r['graph_ms']:.2f} | {r['ratio']:.2f}x |")


if __name__ == "__main__":
    main()
