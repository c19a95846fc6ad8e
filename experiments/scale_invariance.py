"""Experiment 4: which layers are scale invariant? (SPEC finding 5, paper Sec. 5.6)

For every named graph in `evonorm.graph.library` and every layer in the `evonorm.layers` registry,
measure the relative output change ||f(a*x) - f(x)|| / ||f(x)|| for a in --scales, in training mode
(batch statistics, as during the search), on a random input, once with the layer's initial
parameters and once with randomly perturbed trainable vectors (v0, v1, ...; an identity init can
hide a dependence on scale). float64, so what remains is the eps terms, not rounding.

    python experiments/scale_invariance.py            # seconds
    python experiments/scale_invariance.py --scales 0.001 0.1 10 1000 --channels 64
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import log, out_dir, save_png, write_table  # noqa: E402

INVARIANT_TOL = 1e-2


def layers(channels: int, groups: int) -> dict[str, object]:
    """name -> zero-argument factory of a fresh module, graphs first then the registry."""
    out: dict[str, object] = {}
    try:
        from evonorm.graph.library import NAMED_GRAPHS

        for name, g in NAMED_GRAPHS.items():
            out[f"graph:{name}"] = (lambda g=g: g.to_module(channels, groups=groups))
    except ImportError as err:
        log(f"evonorm.graph.library unavailable ({err}); registry layers only")
    try:
        from evonorm.layers import create_norm_act, list_norm_acts

        for name in list_norm_acts():
            out[f"layer:{name}"] = (lambda n=name: create_norm_act(n, channels, groups=groups))
    except ImportError as err:
        log(f"evonorm.layers unavailable ({err}); graphs only")
    return out


def rel_change(module, x, a: float) -> tuple[float, float]:
    import torch

    with torch.no_grad():
        y0 = module(x)
        y1 = module(a * x)
    n0 = float(y0.norm())
    d = float((y1 - y0).norm())
    return (d / n0 if n0 > 1e-12 else (0.0 if d <= 1e-12 else math.inf)), n0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scales", type=float, nargs="+", default=[0.1, 10.0, 100.0])
    p.add_argument("--channels", type=int, default=32)
    p.add_argument("--groups", type=int, default=8)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--size", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="output folder (default results/scale_invariance)")
    args = p.parse_args(argv)

    import torch

    torch.set_num_threads(min(2, torch.get_num_threads()))
    torch.manual_seed(args.seed)
    x = torch.randn(args.batch, args.channels, args.size, args.size, dtype=torch.float64)
    rows = []
    named = layers(args.channels, args.groups)
    if not named:
        print("error: neither evonorm.graph.library nor evonorm.layers could be imported", file=sys.stderr)
        return 2
    for name, make in named.items():
        for params in ("init", "perturbed"):
            torch.manual_seed(args.seed + 1)
            try:
                m = make().double().train()
                if params == "perturbed":
                    with torch.no_grad():
                        for pname, prm in m.named_parameters():
                            if pname.split(".")[-1] not in ("weight", "bias"):  # keep the final affine
                                prm.add_(0.5 * torch.randn_like(prm))
                row = {"layer": name, "params": params}
                worst = 0.0
                for a in args.scales:
                    r, n0 = rel_change(m, x, a)
                    row[f"a={a:g}"] = r
                    worst = max(worst, r)
                row["max_rel_change"] = worst
                row["output_norm"] = n0
                row["invariant"] = bool(worst < INVARIANT_TOL and n0 > 1e-12)
                row["error"] = ""
            except Exception as err:  # a layer that cannot run is reported, not fatal
                row = {"layer": name, "params": params, "error": f"{type(err).__name__}: {err}"}
            rows.append(row)
            log(f"{name:32s} {params:9s} max rel change {row.get('max_rel_change', float('nan')):.3g}")
    cols = ["layer", "params", *[f"a={a:g}" for a in args.scales], "max_rel_change", "output_norm",
            "invariant", "error"]
    d = out_dir("scale_invariance", args.out)
    write_table(d, "scale_invariance", rows, {"settings": vars(args), "tolerance": INVARIANT_TOL,
                                               "mode": "train (batch statistics), float64"}, columns=cols)
    save_png(figure(rows, args.scales), d / "scale_invariance.png")
    inv = sorted({r["layer"] for r in rows if r.get("invariant") and r["params"] == "perturbed"})
    log(f"scale invariant (max rel change < {INVARIANT_TOL} with perturbed params): {', '.join(inv) or 'none'}")
    log(f"wrote {d}")
    return 0


def figure(rows, scales):
    from evonorm.report.figures import pyplot

    plt = pyplot()
    names = [r["layer"] for r in rows if r["params"] == "perturbed" and "max_rel_change" in r]
    fig, ax = plt.subplots(figsize=(7.5, 0.6 + 0.22 * max(1, len(names))))
    ys = range(len(names))
    by = {(r["layer"], r["params"]): r for r in rows}
    for i, a in enumerate(scales):
        vals = [max(by[(n, "perturbed")][f"a={a:g}"], 1e-17) for n in names]
        ax.scatter(vals, [y + (i - 1) * 0.2 for y in ys], s=14, label=f"a = {a:g}", color=f"C{i}")
    ax.axvline(INVARIANT_TOL, color="k", linestyle="--", linewidth=0.8, label=f"tolerance {INVARIANT_TOL:g}")
    ax.set_xscale("log")
    ax.set_yticks(list(ys))
    ax.set_yticklabels(names, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("relative output change ||f(a·x) − f(x)|| / ||f(x)||  (perturbed params, train mode)")
    ax.legend(fontsize=7, loc="lower right")
    ax.set_title("Scale invariance of named layers")
    ax.grid(alpha=0.3, axis="x")
    return fig


if __name__ == "__main__":
    sys.exit(main())
