"""The reference panel: layers trained long, the ground truth a proxy's ranking is measured against
(`evonorm calibrate --build-panel DIR` writes it, `evonorm calibrate --panel DIR/panel.json` reads it).

Each layer trains on both anchor architectures at the reference setting (`REFERENCE`), scored on
the test split at 60%, 80% and 100% of training (every fifth for `CURVE_LAYERS`), so that one can
check that the runs have settled. A run whose loss or logits are not finite scores chance.

A folder holds one panel: `runs.jsonl` (the measurement ledger, a `PanelRow` per finished run),
`panel.json` (rewritten after every run, keeping the `proxies` calibrate wrote into it), `panel.md`
(the table), and a checkpoint per run in progress (at every tenth of training, beside the ledger:
too big for a row), so a killed panel resumes where it stopped.
"""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable

from evonorm.files import key_text, number_problem, update_json
from evonorm.measure.fidelity import seed_agreement
from evonorm.measure.ledger import LEDGER_VERSION, read_ledger, record_rows
from evonorm.search.executors import OK, Outcome, make_executor
from evonorm.search.lock import RunLock, RunLocked
from evonorm.search.settings import norm_relu

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
CHANCE = 0.1
ARCH_NAMES = {"resnet50_cifar": "ResNet50", "mobilenetv2_cifar": "MobileNetV2"}


@dataclass(frozen=True)
class PanelSetting:
    """How every panel run trains: the `demo` proxy's width and learning rates (the paper's widths
    cost 2-4x more per step), batch 64 of crops and flips, 2,000 steps (2.1 epochs of all 60,000
    Fashion-MNIST images; None: every image), cosine after 100 warm-up steps, seeds 0, 1, 2, scored
    on the whole test split. A folder holds one setting: resuming it with another is refused."""

    dataset: str = "fashion_mnist"
    width: float = 0.0625
    steps: int = 2000
    batch_size: int = 64
    schedule: str = "cosine"
    lr_warmup: int = 100
    lr: dict = field(default_factory=lambda: dict(ARCH_LR))
    eval_batch_size: int = 64
    n_train: int | None = 60000
    n_test: int | None = 10000
    seeds: tuple[int, ...] = (0, 1, 2)
    threads_per_run: int = 1
    device: str = "cpu"

    def to_dict(self) -> dict:
        return {**asdict(self), "seeds": list(self.seeds)}

    @classmethod
    def from_dict(cls, d: dict) -> "PanelSetting":
        return cls(**{**d, "seeds": tuple(d["seeds"])})


REFERENCE = PanelSetting()


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


@dataclass(frozen=True)
class PanelRow:
    """One finished (layer, arch, seed) run of the panel, a row of its ledger."""

    layer: str
    graph: dict | None  # the layer as graph JSON; None for a native one
    arch: str
    seed: int
    test_accuracy: float  # chance for a run that was not finite
    status: str  # the training's: "ok" or "nonfinite"
    reason: str | None
    curve: list[list[float | None]]  # [step, test accuracy] at each scoring point
    final_loss: float | None  # the last step's loss; None where it was not finite
    seconds: float
    version: int = LEDGER_VERSION

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.layer, self.arch, self.seed)

    def problem(self) -> str | None:
        """What in the row cannot be true (None: nothing): an accuracy outside [0, 1] or not
        finite, a loss that is not finite, a negative time or seed."""
        checks = [("test_accuracy", number_problem(self.test_accuracy, 0.0, 1.0)),
                  ("final_loss", number_problem(self.final_loss)), ("seconds", number_problem(self.seconds, 0.0)),
                  ("seed", number_problem(self.seed, 0))]
        checks += [(f"curve: step {p[0]}", number_problem(p[-1], 0.0, 1.0)) for p in self.curve]
        return next((f"{key_text(name)}: {p}" for name, p in checks if p), None)

    def stored(self) -> dict:
        """The run as panel.json holds it (what `calibrate --panel` and `seed_agreement` read)."""
        return {k: getattr(self, k) for k in ("layer", "graph", "arch", "seed", "test_accuracy", "status",
                                               "curve", "seconds")}


def train_run(job: dict) -> dict:
    """One (layer, arch, seed) run (`job`: layer, spec, arch, seed, out, setting as a dict,
    data_root), checkpointed at every tenth of training and at each scoring point, so a kill loses
    at most a tenth of a run; the panel's row of it (`PanelRow` fields) and its checkpoint's path."""
    import torch

    from evonorm.data import load_dataset
    from evonorm.models import resolve_norm_act
    from evonorm.train import Run, TrainConfig

    setting = PanelSetting.from_dict(job["setting"])
    layer, spec, arch, seed = job["layer"], job["spec"], job["arch"], job["seed"]
    torch.set_num_threads(setting.threads_per_run)
    cfg = TrainConfig(arch=arch, width=setting.width, steps=setting.steps,
                      batch_size=setting.batch_size, lr=setting.lr[arch], schedule=setting.schedule,
                      lr_warmup=setting.lr_warmup, eval_batch_size=setting.eval_batch_size,
                      n_train=setting.n_train, n_test=setting.n_test, seed=seed,
                      device=setting.device)
    fifths = (1, 2, 3, 4, 5) if layer in CURVE_LAYERS else (3, 4, 5)
    points = [cfg.steps * k // 5 for k in fifths]
    ckpt = Path(job["out"]) / "ckpt" / f"{run_key(layer, arch, seed)}.pt"
    ds = load_dataset(setting.dataset, job.get("data_root"))
    run = Run(resolve_norm_act(json.dumps(spec) if isinstance(spec, dict) else spec), ds, cfg)
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
            "reason": run.result.reason, "curve": curve, "final_loss": _finite(run.result.final_loss),
            "seconds": round(spent + time.perf_counter() - start, 1), "ckpt": str(ckpt)}


def _finite(loss: float | None) -> float | None:
    """A loss as the row keeps it: a diverged run's is None (its status says it diverged)."""
    return loss if loss is not None and math.isfinite(loss) else None


def read_rows(path: Path) -> list[PanelRow]:
    """The finished runs of a panel folder's ledger (none before the first), read and checked as the
    ledger's reader checks every row (`read_ledger`)."""
    return read_ledger(path, PanelRow)


def write_panel(out: Path, rows: list[PanelRow], wall: float, command: str, setting: PanelSetting,
                layers: list[str] | None = None) -> None:
    """panel.json from every finished run, keeping the proxies calibrate wrote."""
    stored = {**setting.to_dict(), "layers": layers or [name for name, _ in PANEL]}
    reference = {"setting": stored, "command": command,
                 "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}",
                 "wall_seconds": round(wall, 1),
                 "worker_seconds": round(sum(r.seconds for r in rows), 1),
                 "runs": [r.stored() for r in rows]}
    update_json(out / "panel.json", lambda old: {"reference": reference,
                                                 "proxies": (old or {}).get("proxies", {})},
                create=True)


def panel_table(rows: list[PanelRow]) -> str:
    """The panel as it stands, best reference first: each architecture's mean over its seeds, the
    reference (the mean of both), and how far each run moved over the last fifth of training
    (80% to 100%: the convergence check; mean over seeds, and the largest move)."""
    by_layer: dict[str, dict[str, list[PanelRow]]] = {}
    for r in rows:
        by_layer.setdefault(r.layer, {}).setdefault(r.arch, []).append(r)

    mean = statistics.fmean

    def reference(layer: str) -> float:
        return mean([mean([r.test_accuracy for r in runs]) for runs in by_layer[layer].values()])

    lines = ["| layer | " + " | ".join(f"{a} (seeds)" for a in ARCH_NAMES.values()) + " | reference | "
             + " | ".join(f"{a}, last fifth" for a in ARCH_NAMES.values()) + " |",
             "|---|" + "---|" * (2 * len(ARCH_NAMES) + 1)]
    for layer in sorted(by_layer, key=reference, reverse=True):
        acc, moved = [], []
        for arch in ARCH_NAMES:
            runs = sorted(by_layer[layer].get(arch, []), key=lambda r: r.seed)
            if not runs:
                acc.append("")
                moved.append("")
                continue
            acc.append(f"{100 * mean([r.test_accuracy for r in runs]):.1f} "
                       f"({', '.join(str(r.seed) for r in runs)})")
            d = [100 * (r.curve[-1][1] - r.curve[-2][1]) for r in runs
                 if len(r.curve) >= 2 and r.curve[-1][1] is not None and r.curve[-2][1] is not None]
            moved.append(f"{mean(d):+.1f} (largest {max(d, key=abs):+.1f})" if d else "")
        lines.append(f"| {layer} | " + " | ".join(acc) + f" | {100 * reference(layer):.1f} | "
                     + " | ".join(moved) + " |")
    agreement = seed_agreement([r.stored() for r in rows])
    lines += ["", "The reference's agreement with itself (Spearman of one seed against the mean of "
              "the others, mean over seeds; about what a proxy as good as the reference, run once, "
              "would reach): " + ("not measurable before two seeds are done on every architecture"
                                  if agreement is None else f"{agreement:.2f}")]
    return "\n".join(lines) + "\n"


def stored_setting(out: Path) -> PanelSetting | None:
    """The setting a panel folder was started with (None: a new folder)."""
    path = out / "panel.json"
    if not path.exists():
        return None
    stored = dict(json.loads(path.read_text())["reference"]["setting"])
    stored.pop("layers", None)
    return PanelSetting.from_dict({"device": "cpu", **stored})  # panels before --device: the CPU


def named_layers(items: list[str]) -> list[tuple[str, str | dict]]:
    """`NAME=LAYER` arguments (LAYER as `evonorm train --layer` reads it) as panel entries;
    ValueError naming the first bad one."""
    from evonorm.graph import Graph
    from evonorm.graph.library import read_layer, resolve_graph
    from evonorm.layers import list_norm_acts

    out: list[tuple[str, str | dict]] = []
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or not name or not text:
            raise ValueError(f"layer {item!r}: expected NAME=LAYER")
        spec = read_layer(text)
        if isinstance(spec, Graph):
            spec = spec.to_json()
        elif spec not in list_norm_acts():
            spec = resolve_graph(spec).to_json()  # a named graph or graph JSON; ValueError if neither
        out.append((name, spec))
    return out


def found_layers(run: Path, top: int) -> list[tuple[str, str | dict]]:
    """A run's `top` best distinct found layers (seed layers left out) as panel entries, named by
    candidate id; ValueError, one line, for a folder that is not a run or a run with none."""
    from evonorm.measure.retrain import retrain_plan

    if top < 1:
        raise ValueError(f"--top must be >= 1, got {top}")
    if not (run / "store.sqlite").is_file():
        raise ValueError(f"--run {run}: not a run folder (no store.sqlite)")
    _, layers = retrain_plan(run, top)
    found = [(f"found_{cid}", graph) for _, kind, graph, cid in layers if kind == "found"]
    if not found:
        raise ValueError(f"--run {run}: the run has no valid found layer")
    return found


@dataclass(frozen=True)
class PanelProgress:
    """One finished (or failed) run of `build_panel`, for a progress line."""

    index: int
    total: int
    row: PanelRow | None  # None: the run failed (`error`), nothing recorded, so a rerun retries it
    error: str | None
    seconds_left: float  # at this start's pace


def build_panel(out: Path, setting: PanelSetting = REFERENCE, *, workers: int = 1,
                layers: list[tuple[str, str | dict]] | None = None, only: list[str] | None = None,
                seeds: list[int] | None = None, data_root: str | None = None,
                command: str = "", on_done: Callable[[PanelProgress], None] | None = None) -> int:
    """Train the panel (`layers`, default `PANEL`) at `setting` into the folder `out`, seed by seed
    (a partial panel is a whole panel of fewer seeds), resuming what is there; `only` and `seeds`
    pick some of its runs. The number of runs that failed (0: all done). ValueError, one line, for a
    folder of another setting or one in use by another process."""
    layers = layers or PANEL
    stored = stored_setting(out)
    if stored not in (None, setting):
        raise ValueError(f"{out} holds a panel of another setting ({stored.to_dict()}): give it "
                         "another folder")
    out.mkdir(parents=True, exist_ok=True)
    lock = RunLock(out)  # one panel per folder: two would train and append the same runs
    try:
        lock.acquire()
    except RunLocked:
        raise ValueError(f"{out} is in use by another panel process; wait for it or stop it "
                         "first") from None
    try:
        return _train(out, setting, layers, workers, only, seeds, data_root, command, on_done)
    finally:
        lock.release()


def _train(out: Path, setting: PanelSetting, layers: list[tuple[str, str | dict]], workers: int,
           only: list[str] | None, seeds: list[int] | None, data_root: str | None, command: str,
           on_done: Callable[[PanelProgress], None] | None) -> int:
    """`build_panel`'s jobs with no row in the folder's ledger, each row appended as it arrives and the
    panel files rewritten from the ledger; the number of runs that failed."""
    rows_path = out / "runs.jsonl"
    done = {r.key for r in read_rows(rows_path)}
    jobs = [{"layer": name, "spec": spec, "arch": arch, "seed": seed, "out": str(out),
             "setting": setting.to_dict(), "data_root": data_root}
            for seed in seeds or setting.seeds for name, spec in layers for arch in setting.lr
            if (not only or name in only) and (name, arch, seed) not in done]
    wall_path = out / "wall_seconds.txt"
    wall0 = float(wall_path.read_text()) if wall_path.exists() else 0.0
    t0, failed = time.time(), 0

    def row_of(o: Outcome) -> PanelRow | None:  # a failed run has no row: a rerun retries it
        return PanelRow(**{k: v for k, v in o.result.items() if k != "ckpt"}) if o.kind == OK else None

    with make_executor("local", train_run, max(1, min(workers, len(jobs))), timeout=math.inf,
                       threads=setting.threads_per_run) as pool:
        arrived = (pair for batch in record_rows(rows_path, pool, dict(enumerate(jobs)), row_of, retries=1)
                   for pair in batch)
        for i, (o, row) in enumerate(arrived, 1):
            left = (time.time() - t0) / i * (len(jobs) - i)
            if row is None:
                failed += 1
            else:
                Path(o.result["ckpt"]).unlink(missing_ok=True)
                wall = wall0 + time.time() - t0
                wall_path.write_text(f"{wall:.1f}\n")
                rows = read_rows(rows_path)
                write_panel(out, rows, wall, command, setting, [name for name, _ in layers])
                (out / "panel.md").write_text(panel_table(rows))
            if on_done is not None:
                on_done(PanelProgress(i, len(jobs), row, o.error if row is None else None, left))
    return failed


def progress_line(p: PanelProgress) -> str:
    """One line for a finished run: its accuracy and curve, or why it failed; the time to go."""
    if p.row is None:
        return f"[{p.index}/{p.total}] failed: {p.error}"
    r = p.row
    return (f"[{p.index}/{p.total}] {r.layer} {r.arch} seed {r.seed}: "
            f"{r.test_accuracy:.4f} ({r.status}, {r.seconds:.0f} s) "
            f"curve {[round(a or 0, 3) for _, a in r.curve]}; "
            f"about {p.seconds_left / 3600:.1f} h to go at this pace")


def with_dataset(setting: PanelSetting, dataset: str | None) -> PanelSetting:
    """The setting on another dataset: its whole splits, as the reference's are all of its own."""
    if dataset is None or dataset == setting.dataset:
        return setting
    return replace(setting, dataset=dataset, n_train=None, n_test=None)
