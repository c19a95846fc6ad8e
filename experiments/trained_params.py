"""What a layer's parameters become when trained at the reference setting.

Why a found layer works can turn on the values its parameters take: a per-channel divisor that
stays positive before a ReLU only rescales the affine after it (the ReLU is positively
homogeneous), one that turns negative lets a channel pass its negative part. This trains one
(layer, architecture, seed) run exactly as the rank-fidelity panel does (`evonorm.measure.panel.train_run`)
and summarises one of the layer's parameters (`v0`, `v1`, `weight`, ...) over every layer of the
network: how many values, how many negative, their range.

    python -m experiments.trained_params --layer 'found_2845=<graph JSON>' \\
        --arch mobilenetv2_cifar --seed 0 --param v1 --out results/long_search_prescreen/trained_v1

`<out>/<layer>__<arch>__s<seed>__<param>.json`: the summary, overall and per layer, with the run's
test accuracy and the command.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from dataclasses import replace
from pathlib import Path

from experiments._common import command_line, HelpFormatter, log, refuse
from experiments.fidelity_panel import DRY_RUN

from evonorm.measure.panel import ARCH_LR, REFERENCE, named_layers, train_run


def layer_params(spec: str | dict) -> list[str]:
    """The names of the layer's parameters (one module of it, 8 channels): to refuse a parameter it
    does not have before training."""
    from evonorm.models import resolve_norm_act

    value = json.dumps(spec) if isinstance(spec, dict) else spec
    return [n for n, _ in resolve_norm_act(value)(8).named_parameters()]


def spread(values: list[float]) -> dict:
    """How many values, how many negative, their range and median."""
    return {"n": len(values), "negative": sum(x < 0 for x in values), "min": min(values),
            "median": statistics.median(values), "max": max(values)}


def summarise(weights: dict, param: str) -> dict:
    """`spread` of every `*.<param>` tensor, overall and per layer."""
    per_layer = {name: t.detach().flatten().tolist() for name, t in weights.items()
                 if name.rsplit(".", 1)[-1] == param}
    return {**spread([x for v in per_layer.values() for x in v]),
            "per_layer": {name: spread(v) for name, v in per_layer.items()}}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=HelpFormatter)
    p.add_argument("--layer", required=True, metavar="NAME=LAYER",
                   help="as fidelity_panel.py reads it: a registry name, a named graph, graph JSON")
    p.add_argument("--arch", required=True, choices=sorted(ARCH_LR),
                   help="the architecture the layer trains on")
    p.add_argument("--seed", type=int, default=0, help="training seed")
    p.add_argument("--param", default="v1", help="the layer's parameter to summarise")
    p.add_argument("--out", type=Path, required=True, help="folder for the summary JSON")
    p.add_argument("--dry-run", action="store_true",
                   help="a few steps on 640 images (a check of the script, not a measurement)")
    args = p.parse_args(argv)
    try:
        (name, spec), = named_layers([args.layer])
    except ValueError as err:
        refuse("trained_params", str(err))
    params = layer_params(spec)
    if args.param not in params:
        refuse("trained_params", f"the layer {name!r} has no parameter {args.param!r} (it "
               f"has {', '.join(params) or 'none'})")
    setting = replace(REFERENCE, **(DRY_RUN if args.dry_run else {}))
    import torch

    log(f"training {name} on {args.arch}, seed {args.seed}, {setting.steps} steps")
    with tempfile.TemporaryDirectory() as tmp:
        row = train_run({"layer": name, "spec": spec, "arch": args.arch, "seed": args.seed,
                         "out": tmp, "setting": setting.to_dict(), "data_root": None})
        weights = torch.load(row["ckpt"], weights_only=True)["run"]["model"]
    summary = {"layer": name, "graph": row["graph"], "arch": args.arch, "seed": args.seed,
               "param": args.param, "test_accuracy": row["test_accuracy"],
               "status": row["status"], "setting": setting.to_dict(),
               "command": command_line(argv),
               **summarise(weights, args.param)}
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{name}__{args.arch}__s{args.seed}__{args.param}.json"
    path.write_text(json.dumps(summary, indent=1) + "\n")
    log(f"{name} {args.arch} seed {args.seed}: accuracy {row['test_accuracy']:.4f}; {args.param}: "
        f"{summary['negative']} of {summary['n']} negative, range {summary['min']:.3f}.."
        f"{summary['max']:.3f}, median {summary['median']:.3f}; wrote {path}")


if __name__ == "__main__":
    main()
