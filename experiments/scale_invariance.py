"""Experiment 4: which layers are scale invariant? (paper Sec. 5.6)

For every named graph in `evonorm.graph.library` and every layer in the `evonorm.layers` registry,
measure the relative output change ||f(a*x) - f(x)|| / ||f(x)|| for a in --scales, in training mode
(batch statistics, as during the search), on a random input, and the change between f(L*x) and
f(10*L*x) for a large L (asymptotic invariance, the paper's claim for EvoNorm-S0), once with the layer's initial
parameters and once with randomly perturbed trainable vectors (v0, v1, ...; an identity init can
hide a dependence on scale). float64, so what remains is the eps terms, not rounding.

    python -m experiments.scale_invariance            # seconds
    python -m experiments.scale_invariance --scales 0.001 0.1 10 1000 --channels 64
"""

from __future__ import annotations

import argparse
import math
import sys

from experiments._common import HelpFormatter, log, out_dir, save_png, write_table

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


def rel_change(module, x, a: float, base: float = 1.0) -> tuple[float, float]:
    """||f(a x) - f(base x)|| / ||f(base x)|| and ||f(base x)||."""
    import torch

    with torch.no_grad():
        y0 = module(base * x)
        y1 = module(a * x)
    n0 = float(y0.norm())
    d = float((y1 - y0).norm())
    return (d / n0 if n0 > 1e-12 else (0.0 if d <= 1e-12 else math.inf)), n0


def measure(m, x, dtype, params: str, mode: str, args) -> dict:
    import torch

    m = m.to(dtype).train()
    if params == "perturbed":
        with torch.no_grad():
            for pname, prm in m.named_parameters():
                if pname.split(".")[-1] not in ("weight", "bias"):  # keep the final affine
                    prm.add_(0.5 * torch.randn_like(prm))
    if mode == "eval":  # running statistics settle on inputs at scale 1, then stay fixed
        with torch.no_grad():
            for _ in range(50):
                m(x)
        m.eval()
    row, worst = {}, 0.0
    for a in args.scales:
        r, n0 = rel_change(m, x, a)
        row[f"a={a:g}"] = r
        worst = max(worst, r)
    row["max_rel_change"] = worst
    # asymptotic invariance (paper Sec. 5.6 on S0): large inputs, a further x10
    row[f"large: {args.large:g}x vs {10 * args.large:g}x"] = rel_change(m, x, 10 * args.large, args.large)[0]
    row["output_norm"] = n0
    row["invariant"] = bool(worst < INVARIANT_TOL and n0 > 1e-12)
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("--scales", type=float, nargs="+", default=[0.1, 10.0, 100.0],
                   help="factors a: each layer's ||f(a x) - f(x)|| / ||f(x)||")
    p.add_argument("--large", type=float, default=100.0,
                   help="also compare f(10*L*x) with f(L*x) for this L (asymptotic invariance)")
    p.add_argument("--channels", type=int, default=32, help="channels of the test input")
    p.add_argument("--groups", type=int, default=8, help="groups of the group statistics")
    p.add_argument("--batch", type=int, default=16, help="batch of the test input")
    p.add_argument("--size", type=int, default=8, help="height and width of the test input")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the input and of the perturbed parameters")
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
        for mode, params in (("train", "init"), ("train", "perturbed"), ("eval", "perturbed")):
            row = {"layer": name, "mode": mode, "params": params}
            for dtype in (torch.float64, torch.float32):  # float32 for layers that only take it
                torch.manual_seed(args.seed + 1)
                try:
                    row.update(measure(make(), x.to(dtype), dtype, params, mode, args))
                    row["dtype"] = str(dtype).replace("torch.", "")
                    row["error"] = ""
                    break
                except Exception as err:  # a layer that cannot run is reported, not fatal
                    row["error"] = f"{type(err).__name__}: {err}"
            rows.append(row)
            log(f"{name:32s} {mode:5s} {params:9s} max rel change {row.get('max_rel_change', float('nan')):.3g}")
    cols = ["layer", "mode", "params", *[f"a={a:g}" for a in args.scales], "max_rel_change",
            f"large: {args.large:g}x vs {10 * args.large:g}x", "output_norm",
            "invariant", "dtype", "error"]
    d = out_dir("scale_invariance", args.out)
    write_table(d, "scale_invariance", rows, {"settings": vars(args), "tolerance": INVARIANT_TOL,
                                               "mode": "train: batch statistics; eval: running statistics settled on the unscaled input; "
                                                       "float64 where the layer takes it (see dtype)"}, columns=cols)
    save_png(figure(rows, args.scales), d / "scale_invariance.png")
    for mode in ("train", "eval"):
        inv = sorted({r["layer"] for r in rows if r.get("invariant") and r["params"] == "perturbed"
                      and r["mode"] == mode})
        log(f"scale invariant in {mode} mode (max rel change < {INVARIANT_TOL}, perturbed params): "
            f"{', '.join(inv) or 'none'}")
    log(f"wrote {d}")
    return 0


def figure(rows, scales):
    from evonorm.report.figures import pyplot

    plt = pyplot()
    by = {(r["layer"], r["mode"], r["params"]): r for r in rows if "max_rel_change" in r}
    names = list(dict.fromkeys(r["layer"] for r in rows))
    fig, axes = plt.subplots(1, 2, figsize=(11, 0.8 + 0.22 * max(1, len(names))), sharey=True)
    ys = range(len(names))
    for ax, mode in zip(axes, ("train", "eval")):
        for i, a in enumerate(scales):
            pts = [(min(max(by[(n, mode, "perturbed")][f"a={a:g}"], 1e-12), 1e3), y)
                   for y, n in zip(ys, names) if (n, mode, "perturbed") in by]
            ax.scatter([p[0] for p in pts], [p[1] + (i - 1) * 0.2 for p in pts], s=14,
                       label=f"a = {a:g}", color=f"C{i}")
        ax.axvline(INVARIANT_TOL, color="k", linestyle="--", linewidth=0.8, label=f"tolerance {INVARIANT_TOL:g}")
        ax.set_xscale("log")
        ax.set_xlabel("||f(a·x) − f(x)|| / ||f(x)||  (clipped to [1e-12, 1e3])")
        ax.set_title(f"{mode} mode ({'batch' if mode == 'train' else 'running'} statistics)")
        ax.grid(alpha=0.3, axis="x")
    axes[0].set_yticks(list(ys))
    axes[0].set_yticklabels(names, fontsize=7)
    axes[0].invert_yaxis()
    axes[1].legend(fontsize=7, loc="lower right")
    fig.suptitle("Scale invariance: relative output change under x -> a*x (perturbed parameters)")
    return fig


if __name__ == "__main__":
    sys.exit(main())
