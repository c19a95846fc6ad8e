"""The reference panel: 16 layers trained long on all of Fashion-MNIST, the ground truth a proxy's
ranking is measured against (`evonorm calibrate --panel`).

A search's fitness is only as good as its ranking of layers agrees with what proper training says.
This trains each panel layer on both anchor architectures, on all 60,000 training images, scored on
the official 10,000 test images, and records the test-accuracy curve so that one can check that the
runs have settled (the accuracy moves by less than a point over the last fifth of training).

Protocol (fixed before the runs):
- layers: `PANEL` below (the registry's native layer where the name is the registry's, else the graph);
- setting: `SETTING` below, per architecture: width 0.0625 (the `demo` proxy's; the paper's 0.25 and
  0.5 cost 2-4x more per step, which 2 cores cannot give 96 runs), batch 64 of 24x24 crops and flips,
  2,000 steps (2.1 epochs), cosine schedule after 100 warm-up steps, the `demo` proxy's learning
  rates (0.1 ResNet50, 0.03 MobileNetV2), training seeds 0, 1, 2;
- scored on the whole test split at 60%, 80% and 100% of training (and at 20% and 40% for BN-ReLU
  and EvoNorm-S0); a run whose loss or logits are not finite scores chance (0.1);
- order: seed 0 of every layer first, so a partial panel is a whole panel of fewer seeds.
(Checkpoints at every tenth of training, added after the first runs, change no number: a run
continued from a checkpoint ends where an uninterrupted one does.)

Each finished run is a line of `<out>/runs.jsonl`; a run in progress is checkpointed (weights,
optimizer and random state, `torch.load(weights_only=True)`) at every scoring point, so a killed
panel resumes where it stopped. `<out>/panel.json` is rewritten after every run, keeping the
`proxies` that `evonorm calibrate` wrote into it, and `<out>/panel.md` with it (the table: `--table`
writes it alone).

    nohup nice -n 15 python experiments/fidelity_panel.py --workers 2 > runs/panel.log 2>&1 &

Where a GPU is lent, the same panel (or a wider one, the paper's proxy widths) is a second reference
in a folder of its own: `--device cuda --width 0.25 --out results/fidelity-gpu`. A folder holds one
setting: resuming it with another is refused in one line.

Other layers at the reference setting (a search's winner, to see whether its lead holds), in a
folder of their own beside the panel's, with the layer as `evonorm train --layer` reads it:

    python experiments/fidelity_panel.py --layer winner=@top.json --out results/fidelity/main_job
    python experiments/fidelity_panel.py --run runs/main --top 3 --out results/fidelity/main_job

(`--run RUN --top N`: the run's N best distinct found layers, as `evonorm retrain` picks them,
named `found_<id>`.) A lead seen at the setting's seeds is checked at seeds no one picked it at,
beside the references trained at the same seeds, in a folder of their own:

    python experiments/fidelity_panel.py --seeds 3 4 5 --layer winner=@top.json \\
        --layer gn_relu=gn_relu --layer evonorm_s0=evonorm_s0 --out results/fidelity/winner_345
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from multiprocessing import get_context
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS, log, refuse  # noqa: E402

from evonorm.files import update_json  # noqa: E402
from evonorm.proxy.fidelity import seed_agreement  # noqa: E402
from evonorm.search.executors import die_with_parent  # noqa: E402
from evonorm.search.lock import RunLock, RunLocked  # noqa: E402
from evonorm.search.settings import norm_relu  # noqa: E402


# (name, how it is built): a registry name, a named graph, or graph JSON. s_top2 and s_top3 of the
# paper's appendix are EvoNorm-S2 written again (the appendix marks them as duplicates).
PANEL: list[tuple[str, str | dict]] = [
    ("bn_relu", "bn_relu"),
    ("evonorm_s0", "evonorm_s0"),
    ("evonorm_s1", "evonorm_s1"),
    ("evonorm_s2", "evonorm_s2"),
    ("gn_relu", "gn_relu"),
    ("ln_relu", "ln_relu"),
    ("in_relu", norm_relu("instance")),
    ("gn_swish", "gn_swish"),
    ("frn", "frn"),
    ("pixelnorm_relu", "pixelnorm_relu"),
    ("s_top1", "s_top1"),
    ("s_top10", "s_top10"),
    # found by this project's searches: a random search's layer (docs/findings.md, section 7), the
    # main job's winner (GroupNorm with no activation, doubled), the one-hour search's ids 573, 159
    ("tanh_group_rms", "tanh_group_rms"),
    ("gn_noact", {"nodes": [["group_mean", 0], ["neg", 4], ["add", 0, 5], ["group_std", 0],
                            ["div", 6, 7], ["add", 8, 8]]}),
    ("hour_573", {"nodes": [["mul", 2, 0], ["instance_mean", 4], ["add", 0, 5], ["instance_rms", 6],
                            ["div", 6, 7], ["neg", 8]]}),
    ("hour_159", {"nodes": [["layer_rms", 2], ["instance_std", 4], ["add", 0, 5], ["group_std", 0],
                            ["div", 6, 7], ["neg", 8]]}),
]
CURVE_LAYERS = ("bn_relu", "evonorm_s0")  # scored at every fifth of training
ARCH_LR = {"resnet50_cifar": 0.1, "mobilenetv2_cifar": 0.03}
SETTING = {"dataset": "fashion_mnist", "width": 0.0625, "steps": 2000, "batch_size": 64,
           "schedule": "cosine", "lr_warmup": 100, "lr": ARCH_LR, "eval_batch_size": 64,
           "n_train": 60000, "n_test": 10000, "seeds": [0, 1, 2], "threads_per_run": 1, "device": "cpu"}
# --dry-run: a few steps on a few images, a check of a script, not a measurement
DRY_RUN = {"steps": 10, "n_train": 640, "n_test": 200, "lr_warmup": 2}
CHANCE = 0.1


def layer_graph(spec: str | dict) -> dict | None:
    """The layer as graph JSON where it is one (a named or literal graph), else None (native)."""
    from evonorm.graph.library import NAMED_GRAPHS
    from evonorm.layers import list_norm_acts

    if isinstance(spec, dict):
        return spec
    if spec in NAMED_GRAPHS:  # the EvoNorm-S layers too: the library's graph is the same function
        return NAMED_GRAPHS[spec].to_json()
    if spec not in list_norm_acts():
        raise ValueError(f"panel layer {spec!r} is neither a registry layer nor a named graph")
    return None


def run_key(layer: str, arch: str, seed: int) -> str:
    return f"{layer}__{arch}__s{seed}"


def train_one(job: tuple) -> dict:
    """One (layer, arch, seed) run in a worker of one thread, checkpointed at every tenth of training
    and at each scoring point (a kill loses at most a tenth of a run)."""
    layer, spec, arch, seed, out, setting = job
    import torch

    from evonorm.data import load_dataset
    from evonorm.models import resolve_norm_act
    from evonorm.train import TrainConfig, Run

    torch.set_num_threads(setting["threads_per_run"])
    cfg = TrainConfig(arch=arch, width=setting["width"], steps=setting["steps"],
                      batch_size=setting["batch_size"], lr=ARCH_LR[arch], schedule="cosine",
                      lr_warmup=setting["lr_warmup"], eval_batch_size=setting["eval_batch_size"],
                      n_train=setting["n_train"], n_test=setting["n_test"], seed=seed,
                      device=setting.get("device", "cpu"))
    fifths = (1, 2, 3, 4, 5) if layer in CURVE_LAYERS else (3, 4, 5)
    points = [cfg.steps * k // 5 for k in fifths]
    ckpt = Path(out) / "ckpt" / f"{run_key(layer, arch, seed)}.pt"
    ds = load_dataset(setting["dataset"])
    spec_value = json.dumps(spec) if isinstance(spec, dict) else spec
    run = Run(resolve_norm_act(spec_value), ds, cfg)
    curve: list[list] = []
    spent = 0.0
    if ckpt.exists():
        saved = torch.load(ckpt, weights_only=True)
        run.restore(saved["run"])
        curve, spent = saved["curve"], float(saved["seconds"])
    start = time.perf_counter()
    for mark in sorted(set(points) | {cfg.steps * k // 10 for k in range(1, 10)}):
        if run.step >= mark:
            continue
        run.advance(mark)
        if mark in points:
            curve.append([mark, run.score()])
        if not run.ok:
            break
        ckpt.parent.mkdir(parents=True, exist_ok=True)
        tmp = ckpt.with_suffix(".tmp")
        torch.save({"run": run.state(), "curve": curve,
                    "seconds": spent + time.perf_counter() - start}, tmp)
        os.replace(tmp, ckpt)
    acc = run.result.accuracy if run.ok else None
    return {"layer": layer, "graph": layer_graph(spec), "arch": arch, "seed": seed,
            "test_accuracy": acc if acc is not None else CHANCE, "status": run.result.status,
            "reason": run.result.reason, "curve": curve, "final_loss": run.result.final_loss,
            "seconds": round(spent + time.perf_counter() - start, 1), "ckpt": str(ckpt)}


def read_rows(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def other_layers(items: list[str]) -> list[tuple[str, str | dict]]:
    """`--layer NAME=LAYER` arguments as panel entries; ValueError naming the first bad one."""
    from evonorm.cli import CommandError
    from evonorm.commands.train import read_layer
    from evonorm.graph import Graph
    from evonorm.graph.library import resolve_graph
    from evonorm.layers import list_norm_acts

    out: list[tuple[str, str | dict]] = []
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or not name or not text:
            raise ValueError(f"--layer {item!r}: expected NAME=LAYER")
        try:
            spec = read_layer(text)
        except CommandError as err:
            raise ValueError(str(err)) from None
        if isinstance(spec, Graph):
            spec = spec.to_json()
        elif spec not in list_norm_acts():
            spec = resolve_graph(spec).to_json()  # a named graph or graph JSON; ValueError if neither
        out.append((name, spec))
    return out


def found_layers(run: Path, top: int) -> list[tuple[str, str | dict]]:
    """A run's `top` best distinct found layers (seed layers left out) as panel entries, named by
    candidate id; ValueError, one line, for a folder that is not a run or a run with none."""
    from evonorm.proxy.retrain import retrain_plan

    if top < 1:
        raise ValueError(f"--top must be >= 1, got {top}")
    if not (run / "store.sqlite").is_file():
        raise ValueError(f"--run {run}: not a run folder (no store.sqlite)")
    _, layers = retrain_plan(run, top)
    found = [(f"found_{cid}", graph) for _, kind, graph, cid in layers if kind == "found"]
    if not found:
        raise ValueError(f"--run {run}: the run has no valid found layer")
    return found


def write_panel(out: Path, rows: list[dict], wall: float, command: str, setting: dict,
                layers: list[str] | None = None) -> None:
    """panel.json from every finished run, keeping the proxies calibrate wrote."""
    setting = {**setting, "layers": layers or [name for name, _ in PANEL]}
    reference = {"setting": setting, "command": command,
                 "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}",
                 "wall_seconds": round(wall, 1),
                 "worker_seconds": round(sum(r["seconds"] for r in rows), 1),
                 "runs": [{k: r[k] for k in ("layer", "graph", "arch", "seed", "test_accuracy",
                                             "status", "curve", "seconds")} for r in rows]}
    # calibrate and proxy_fidelity write their proxies into it too: kept
    update_json(out / "panel.json", lambda old: {"reference": reference,
                                                 "proxies": (old or {}).get("proxies", {})},
                create=True)


def panel_table(rows: list[dict]) -> str:
    """The panel as it stands, best reference first: each architecture's mean over its seeds, the
    reference (the mean of both), and how far each run moved over the last fifth of training
    (80% to 100%: the convergence check; mean over seeds, and the largest move)."""
    archs = {"resnet50_cifar": "ResNet50", "mobilenetv2_cifar": "MobileNetV2"}
    by_layer: dict[str, dict[str, list[dict]]] = {}
    for r in rows:
        by_layer.setdefault(r["layer"], {}).setdefault(r["arch"], []).append(r)

    mean = statistics.fmean

    def reference(layer: str) -> float:
        return mean([mean([r["test_accuracy"] for r in runs]) for runs in by_layer[layer].values()])

    lines = ["| layer | " + " | ".join(f"{a} (seeds)" for a in archs.values()) + " | reference | "
             + " | ".join(f"{a}, last fifth" for a in archs.values()) + " |",
             "|---|" + "---|" * (2 * len(archs) + 1)]
    for layer in sorted(by_layer, key=reference, reverse=True):
        acc, moved = [], []
        for arch in archs:
            runs = sorted(by_layer[layer].get(arch, []), key=lambda r: r["seed"])
            if not runs:
                acc.append("")
                moved.append("")
                continue
            acc.append(f"{100 * mean([r['test_accuracy'] for r in runs]):.1f} "
                       f"({', '.join(str(r['seed']) for r in runs)})")
            d = [100 * (r["curve"][-1][1] - r["curve"][-2][1]) for r in runs
                 if len(r["curve"]) >= 2 and r["curve"][-1][1] is not None
                 and r["curve"][-2][1] is not None]
            moved.append(f"{mean(d):+.1f} (largest {max(d, key=abs):+.1f})" if d else "")
        lines.append(f"| {layer} | " + " | ".join(acc) + f" | {100 * reference(layer):.1f} | "
                     + " | ".join(moved) + " |")
    agreement = seed_agreement(rows)
    lines += ["", "The reference's agreement with itself (Spearman of one seed against the mean of "
              "the others, mean over seeds; about what a proxy as good as the reference, run once, "
              "would reach): " + ("not measurable before two seeds are done on every architecture"
                                  if agreement is None else f"{agreement:.2f}")]
    return "\n".join(lines) + "\n"


def stored_setting(out: Path) -> dict | None:
    """The setting a panel folder was started with (None: a new folder), as `main` builds it."""
    path = out / "panel.json"
    if not path.exists():
        return None
    stored = dict(json.loads(path.read_text())["reference"]["setting"])
    stored.pop("layers", None)
    return {"device": "cpu", **stored}  # panels started before --device ran on the CPU


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=RESULTS / "fidelity")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--only", nargs="*", help="train these panel layers only")
    p.add_argument("--seeds", nargs="*", type=int,
                   help="train these of the setting's seeds only (e.g. 0: a whole panel of one "
                        "seed); with --layer or --run, other seeds too (fresh seeds for a lead "
                        "found at the setting's)")
    p.add_argument("--dry-run", action="store_true",
                   help="a few steps on 640 images (a check of the script, not a panel)")
    p.add_argument("--device", default=SETTING["device"], help="cpu, or cuda for a second reference")
    p.add_argument("--width", type=float, default=SETTING["width"], help="channel multiplier")
    p.add_argument("--layer", action="append", default=[], metavar="NAME=LAYER",
                   help="train this layer instead of the panel (repeatable; with an --out of its "
                        "own): a registry name, a named graph, graph JSON or @file.json")
    p.add_argument("--run", type=Path, help="train this run's best found layers instead of the "
                   "panel (with --top and an --out of their own)")
    p.add_argument("--top", type=int, default=3, help="how many of --run's found layers")
    p.add_argument("--table", action="store_true",
                   help="write <out>/panel.md from the finished runs and stop (it is also "
                        "rewritten after every run)")
    args = p.parse_args()
    if args.table:
        (args.out / "panel.md").write_text(panel_table(read_rows(args.out / "runs.jsonl")))
        return
    try:
        panel = (other_layers(args.layer)
                 + (found_layers(args.run, args.top) if args.run else [])) or PANEL
    except ValueError as err:
        refuse("fidelity_panel", str(err))
    if panel is not PANEL and args.out.resolve() == (RESULTS / "fidelity").resolve():
        refuse("fidelity_panel", "--layer and --run train other layers than the panel's: give "
               "them a folder of their own (--out)")
    if any(s < 0 for s in args.seeds or []):
        refuse("fidelity_panel", f"seeds must be >= 0, got {args.seeds}")
    other_seeds = sorted(set(args.seeds or []) - set(SETTING["seeds"]))
    if other_seeds and panel is PANEL:
        refuse("fidelity_panel", f"seeds {other_seeds} are not the panel's {SETTING['seeds']}: "
               "train other seeds of chosen layers (--layer, --run) in a folder of their own")
    # a folder of other seeds records them: resuming it with the setting's seeds is another setting
    setting = {**SETTING, "device": args.device, "width": args.width,
               "seeds": sorted(set(args.seeds)) if other_seeds else SETTING["seeds"]}
    if args.dry_run:
        setting.update(DRY_RUN)
    stored = stored_setting(args.out)
    if stored not in (None, setting):
        refuse("fidelity_panel", f"{args.out} holds a panel of another setting ({stored}): "
               "give it another --out")
    args.out.mkdir(parents=True, exist_ok=True)
    lock = RunLock(args.out)  # one panel per folder: two would train and append the same runs
    try:
        lock.acquire()
    except RunLocked:
        refuse("fidelity_panel", f"{args.out} is in use by another panel process; wait for it "
               "or stop it first")
    rows_path = args.out / "runs.jsonl"
    done = {run_key(r["layer"], r["arch"], r["seed"]) for r in read_rows(rows_path)}
    jobs = [(name, spec, arch, seed, str(args.out), setting)
            for seed in args.seeds or setting["seeds"] for name, spec in panel for arch in ARCH_LR
            if (not args.only or name in args.only) and run_key(name, arch, seed) not in done]
    wall_path = args.out / "wall_seconds.txt"
    wall0 = float(wall_path.read_text()) if wall_path.exists() else 0.0
    t0 = time.time()
    command = " ".join(["python", *sys.argv])
    log(f"panel: {len(done)} runs done, {len(jobs)} to go, {args.workers} workers")
    with get_context("spawn").Pool(args.workers, initializer=die_with_parent,
                                   maxtasksperchild=1) as pool:
        for i, row in enumerate(pool.imap_unordered(train_one, jobs), 1):
            ckpt = Path(row.pop("ckpt"))
            with open(rows_path, "a") as f:
                f.write(json.dumps(row) + "\n")
            ckpt.unlink(missing_ok=True)
            wall = wall0 + time.time() - t0
            wall_path.write_text(f"{wall:.1f}\n")
            rows = read_rows(rows_path)
            write_panel(args.out, rows, wall, command, setting, [name for name, _ in panel])
            (args.out / "panel.md").write_text(panel_table(rows))
            left = (time.time() - t0) / i * (len(jobs) - i)  # this start's pace
            log(f"[{i}/{len(jobs)}] {row['layer']} {row['arch']} seed {row['seed']}: "
                f"{row['test_accuracy']:.4f} ({row['status']}, {row['seconds']:.0f} s) "
                f"curve {[round(a or 0, 3) for _, a in row['curve']]}; "
                f"about {left / 3600:.1f} h to go at this pace")
    log("panel complete")


if __name__ == "__main__":
    main()
