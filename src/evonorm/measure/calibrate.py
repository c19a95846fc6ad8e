"""Calibration of a search preset: can its proxy task tell good layers from random ones?

Reference layers (the paper's and the textbook's) run with several training seeds, and random graphs
of the same space run once, through exactly what a search does: `search_dataset`, the evaluator's
pre-checks, stability test and full training, and the rejection module's quality test with the
preset's bar. References take the quality test on every architecture (not stopping at the first
failure) so the table shows each one. Every finished run is a row of the measurement ledger
`runs.jsonl` (its own row type, `RunRecord`, read by the ledger's one reader), so a killed
calibration resumes where it stopped.

Graph imports are made where a layer is built: they load torch, which this module's tables do
not need.
"""

from __future__ import annotations

import json
import math
import random
import statistics
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from evonorm.files import key_text, number_problem, read_json, write_atomic
from evonorm.measure.ledger import LEDGER_VERSION, read_ledger, record_rows
from evonorm.proxy.config import ProxyTask, measured, with_task_settings
from evonorm.search.config import SearchConfig
from evonorm.stats import mean_std
from evonorm.proxy.training import search_dataset, train_stages
from evonorm.search.executors import OK, LocalExecutor, Outcome
from evonorm.search.objective import Reject
from evonorm.search.settings import norm_relu
from evonorm.proxy.objective import evaluate_candidate
from evonorm.measure.references import REFERENCES_BY_SPACE
from evonorm.proxy.rejection import quality, quality_threshold

RUNS_NAME = "runs.jsonl"
SETUP_NAME = "calibration.json"

def reference_graphs(space: str) -> dict[str, dict]:
    """The layers a preset must rank above random ones (`references.REFERENCES_BY_SPACE`; for
    the B space EvoNorm-B0 and the appendix's top B candidates, b_top1 being EvoNorm-B1):
    name -> graph JSON, BN-ReLU and GN-ReLU written as graphs, as a search would meet them."""
    from evonorm.graph.library import NAMED_GRAPHS

    textbook = {"bn_relu": norm_relu("batch"), "gn_relu": norm_relu("group")}
    return {name: textbook[name] if name in textbook else NAMED_GRAPHS[name].to_json()
            for name in REFERENCES_BY_SPACE[space]}


@dataclass(frozen=True)
class Job:
    """One calibration run: a reference at a training seed, or the i-th random graph."""

    kind: str  # "reference" | "random" | "panel"
    name: str
    seed: int
    graph: dict  # empty for a panel layer that is native only (built by its registry name)

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.kind, self.name, self.seed)


@dataclass
class RunRecord:
    """What one run measured (a line of runs.jsonl)."""

    kind: str
    name: str
    seed: int
    status: str  # "valid" | "rejected" | "failed"
    reason: str | None
    quality: dict[str, float] = field(default_factory=dict)  # quality-test accuracy per arch
    quality_pass: dict[str, bool] = field(default_factory=dict)
    accuracies: dict[str, float] = field(default_factory=dict)  # full training, held-out
    fitness: float | None = None  # mean of `accuracies` (references: also when rejected)
    seconds: float = 0.0
    # the job's own CPU time: its cost where other work shares the machine (wall seconds there
    # count the waits too, so settings measured at different loads could not be compared)
    cpu_seconds: float = 0.0
    graph: dict = field(default_factory=dict)
    # panel layers: what the fitness is made of, so that other ways to score the same runs (one
    # architecture, fewer runs, the first stage, the learning curve) are measured without training
    stage_scores: list[dict[str, float]] = field(default_factory=list)  # per arch, after each stage
    run_scores: dict[str, list[float]] = field(default_factory=dict)  # per arch, each run's last score
    arch_seconds: dict[str, float] = field(default_factory=dict)  # training seconds per arch
    version: int = LEDGER_VERSION

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.kind, self.name, self.seed)

    def problem(self) -> str | None:
        """What in the record cannot be true (None: nothing): an accuracy or fitness outside [0, 1]
        or not finite, a negative or infinite time."""
        accs = [("fitness", self.fitness)] + [(f"{what}: {a}", v) for what, d in
                                             (("quality", self.quality), ("accuracies", self.accuracies))
                                             for a, v in d.items()]
        accs += [(f"stage_scores: {a}", v) for stage in self.stage_scores for a, v in stage.items()]
        accs += [(f"run_scores: {a}", v) for a, runs in self.run_scores.items() for v in runs]
        times = [("seconds", self.seconds), ("cpu_seconds", self.cpu_seconds)]
        times += [(f"arch_seconds: {a}", v) for a, v in self.arch_seconds.items()]
        checks = [(n, number_problem(v, 0.0, 1.0)) for n, v in accs] + [(n, number_problem(v, 0.0)) for n, v in times]
        return next((f"{key_text(name)}: {p}" for name, p in checks if p), None)

    @property
    def cost(self) -> float:
        """Worker-seconds of the job: its CPU time (one thread: what it takes on a core of its
        own), its wall seconds for a record that has none (older runs, dead workers)."""
        return self.cpu_seconds or self.seconds


def calibration_jobs(cfg: SearchConfig, seeds: int, n_random: int,
                     panel: dict[str, dict | None] | None = None) -> list[Job]:
    """References x seeds 0..seeds-1 and `n_random` random graphs of the space (at cfg.seed), in
    rounds (every reference at one seed, then a share of the random graphs), so that a
    calibration stopped early has covered every layer. `panel` (name -> graph JSON or None) adds
    the reference panel's layers at each seed, for the rank fidelity."""
    from evonorm.graph import random_graph

    rng = random.Random(cfg.seed)
    randoms = [Job("random", f"random{i}", cfg.seed,
                   random_graph(rng, allow_batch=cfg.evolution.allow_batch,
                                max_nodes=cfg.evolution.max_nodes).to_json())
               for i in range(n_random)]
    refs = reference_graphs(cfg.evolution.space)
    jobs: list[Job] = []
    for s in range(seeds):
        jobs += [Job("reference", name, s, g) for name, g in refs.items()]
        jobs += [Job("panel", name, s, g or {}) for name, g in (panel or {}).items()]
        jobs += randoms[s * n_random // seeds:(s + 1) * n_random // seeds]
    return jobs


def measure(payload: dict) -> dict:
    """Run one job in a worker (picklable by name). payload: {"job": Job fields, "config": dict}.

    A panel layer trains as a search's candidate that reaches the end does (every stage, every
    run, no hurdle and no quality bar): its fitness is the search's, for every layer of the panel.
    A random graph runs the evaluator unchanged. A reference runs it with the quality test off
    (pre-checks, stability, full training), then the quality test alone on every architecture.
    In a staged config (`stage_steps`) the quality test is the first stage of the full run, so every
    layer, random ones too, is trained to the end past a failed bar (its fitness is kept, and
    the quality test is judged on the first stage's accuracies): the random layers' fitness is
    then known even where the search would reject them.
    """
    import time

    t0, c0 = time.perf_counter(), time.process_time()
    job = Job(**payload["job"])
    cfg = SearchConfig.from_dict(payload["config"]).replace(seed=job.seed)
    rec = RunRecord(job.kind, job.name, job.seed, "rejected", None, graph=job.graph)
    if job.kind == "panel":
        _panel_layer(job, ProxyTask.of_run(cfg), rec)
    elif cfg.hurdles.stage_steps:
        _staged(job, cfg, rec)
    elif job.kind == "random":
        _random_layer(job, cfg, rec)
    else:
        _reference(job, cfg, rec)
    rec.seconds, rec.cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
    return asdict(rec)


def _panel_layer(job: Job, task: ProxyTask, rec: RunRecord) -> None:
    try:
        res = train_stages(job.graph or job.name, search_dataset(task), task, screen=False)
    except Reject as rej:  # a non-finite run: what it scored before stays on record
        rec.reason, rec.accuracies = rej.reason, dict(rej.scores)
        return
    rec.status, rec.reason = res.status, res.reason
    rec.accuracies, rec.fitness = dict(res.scores), res.fitness
    rec.stage_scores = res.stage_scores or [dict(res.scores)]
    rec.run_scores, rec.arch_seconds = res.detail["runs"], res.detail["seconds"]


def _staged(job: Job, cfg: SearchConfig, rec: RunRecord) -> None:
    """The quality test is the first stage: trained past it at bar 0, judged on that stage."""
    task = ProxyTask.of_run(cfg)
    res = _evaluated(job, cfg, rec, quality_factor=0.0)
    if res.status == "valid":
        bar = quality_threshold(search_dataset(task).num_classes, task.settings.quality_factor)
        for arch, acc in res.stage_scores[0].items():
            rec.quality[arch], rec.quality_pass[arch] = acc, acc >= bar
            if acc < bar and rec.reason is None:
                rec.reason = f"quality:{arch}"
    rec.status = "valid" if rec.reason is None else "rejected"


def _evaluated(job: Job, cfg: SearchConfig, rec: RunRecord, **task_changes):
    """The search's evaluator on the job's layer with some task settings changed; its reason,
    scores and (valid) fitness recorded in `rec`."""
    res = evaluate_candidate({"graph": job.graph,
                              "config": with_task_settings(cfg, **task_changes).to_dict()})
    rec.reason, rec.accuracies = res.reason, dict(res.scores)
    if res.status == "valid":
        rec.fitness = res.fitness
    return res


def _random_layer(job: Job, cfg: SearchConfig, rec: RunRecord) -> None:
    res = evaluate_candidate({"graph": job.graph, "config": cfg.to_dict()})
    rec.status, rec.reason = res.status, res.reason
    rec.accuracies, rec.fitness = dict(res.scores), res.fitness
    if rec.status != "valid":
        rec.accuracies, rec.fitness = {}, None


def _reference(job: Job, cfg: SearchConfig, rec: RunRecord) -> None:
    """Trained with the quality test off, then the quality test alone on every architecture."""
    from evonorm.graph import Graph

    task = ProxyTask.of_run(cfg)
    _evaluated(job, cfg, rec, quality_steps=0)
    ds = search_dataset(task)
    graph = Graph.from_json(job.graph)
    for arch in task.archs:
        rej, accs = quality(graph, ds, [arch], task.quality_training,
                            factor=task.settings.quality_factor)
        if arch in accs:
            rec.quality[arch] = accs[arch]
        rec.quality_pass[arch] = rej is None
        if rej is not None and rec.reason is None:
            rec.reason = rej.reason
    rec.status = "valid" if rec.reason is None else "rejected"


# ----------------------------------------------------------------------------- resumable runs

def load_runs(out: Path) -> list[RunRecord]:
    """The finished runs in `out`, as the ledger reads them (`read_ledger`)."""
    return read_ledger(Path(out) / RUNS_NAME, RunRecord)


def calibration_setup(cfg: SearchConfig, seeds: int, n_random: int,
                      panel: dict[str, dict | None] | None = None) -> dict:
    """What a calibration's numbers depend on, as stored in OUT/calibration.json."""
    setup = {"config": cfg.to_dict(), "seeds": seeds, "random": n_random}
    return _measured({**setup, "panel": panel} if panel else setup)


def _measured(setup: dict) -> dict:
    """A setup with its config cut to the settings a calibration depends on (`measured`), so
    that a folder's runs are kept when only how the search proposes, runs or reranks changed."""
    config = setup.get("config")
    if not isinstance(config, dict):
        return setup
    return {**setup, "config": measured(config)}


def prepare_out(out: Path, setup: dict) -> list[RunRecord]:
    """Create `out` for this setup, or check that it holds a calibration of the same setup.

    Returns the runs already finished there; ValueError if `out` belongs to another setup.
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} exists and is not a folder")
    path = out / SETUP_NAME
    old = read_json(path)
    if old is not None:
        if _measured(old) != _measured(setup):
            raise ValueError(f"{out} holds a calibration with other settings; use another --out "
                             f"folder (or the same preset/space/seeds/random)")
        return load_runs(out)
    if out.is_dir() and any(out.iterdir()):
        raise ValueError(f"--out {out} is not empty and holds no calibration")
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(path, (json.dumps(setup, indent=1) + "\n").encode())
    return []


def run_jobs(jobs: Iterable[Job], cfg: SearchConfig, out: Path, *, workers: int,
             timeout: float, on_done: Callable[[RunRecord, int, int], None] | None = None,
             fn: Callable[[dict], dict] | None = None,
             threads: int | None = None) -> list[RunRecord]:
    """Run the jobs not yet in `out` on a local pool (`threads` torch threads per worker, default
    one), each record appended to the ledger `out/runs.jsonl` as it arrives. A dead or hung worker's
    job is recorded as failed, as the search records its failures."""
    done = {r.key for r in load_runs(out)}
    todo = [j for j in jobs if j.key not in done]
    if not todo:
        return []
    total, records = len(done) + len(todo), []
    payloads = {i: {"job": asdict(job), "config": cfg.to_dict()} for i, job in enumerate(todo)}

    def record(o: Outcome) -> RunRecord:
        job = todo[o.task_id]
        return (RunRecord(**o.result) if o.kind == OK else
                RunRecord(job.kind, job.name, job.seed, "failed", o.error, seconds=o.seconds, graph=job.graph))

    with LocalExecutor(fn or measure, min(workers, len(todo)), timeout=timeout, threads=threads) as pool:
        for _, rec in (pair for arrived in record_rows(Path(out) / RUNS_NAME, pool, payloads, record)
                       for pair in arrived):
            records.append(rec)
            if on_done is not None:
                on_done(rec, total - len(todo) + len(records), total)
    return records


# ----------------------------------------------------------------------------- summary

@dataclass
class Summary:
    """The numbers a calibration is judged by (fitness = mean held-out accuracy over archs)."""

    archs: list[str]
    references: dict[str, dict]  # name -> {seeds, quality_pass {arch: [bool]}, fitness list...}
    random_n: int
    random_valid: list[float]
    random_rejected: dict[str, int]
    random_trained: list[float]  # every random layer that trained to the end (staged configs)
    all_pass: bool  # every reference passes rejection in every seed
    worst_reference: float | None  # lowest mean fitness over references
    best_random: float | None
    margin: float | None  # worst_reference - best_random
    margin_trained: float | None  # worst_reference - best random layer trained, passed or not
    seed_std: float | None  # pooled std of a reference's fitness across seeds
    min_gap: float | None  # smallest gap between two references' mean fitness
    max_gap: float | None


def summarize(records: list[RunRecord], archs: list[str]) -> Summary:
    refs: dict[str, dict] = {}
    for r in sorted((r for r in records if r.kind == "reference"), key=lambda r: r.seed):
        d = refs.setdefault(r.name, {"seeds": [], "status": [], "quality": {a: [] for a in archs},
                                     "quality_pass": {a: [] for a in archs},
                                     "accuracies": {a: [] for a in archs}, "fitness": []})
        d["seeds"].append(r.seed)
        d["status"].append(r.status)
        for a in archs:
            d["quality"][a].append(r.quality.get(a))
            d["quality_pass"][a].append(r.quality_pass.get(a, False))
            if a in r.accuracies:
                d["accuracies"][a].append(r.accuracies[a])
        if r.fitness is not None:
            d["fitness"].append(r.fitness)
    randoms = [r for r in records if r.kind == "random"]
    valid = sorted((r.fitness for r in randoms if r.status == "valid" and r.fitness is not None),
                   reverse=True)
    rejected = Counter((r.reason or r.status).split(":", 1)[0] for r in randoms
                       if r.status != "valid")
    trained = sorted((r.fitness for r in randoms if r.fitness is not None), reverse=True)
    means = {n: statistics.fmean(d["fitness"]) for n, d in refs.items() if d["fitness"]}
    worst = min(means.values()) if means else None
    best = valid[0] if valid else None
    variances = [statistics.variance(d["fitness"]) for d in refs.values() if len(d["fitness"]) > 1]
    seed_std = math.sqrt(statistics.fmean(variances)) if variances else None
    ordered = sorted(means.values())
    gaps = [b - a for a, b in zip(ordered, ordered[1:])]
    all_pass = bool(refs) and all(s == "valid" for d in refs.values() for s in d["status"])
    return Summary(archs, refs, len(randoms), valid, dict(rejected), trained, all_pass, worst,
                   best, None if worst is None or best is None else worst - best,
                   None if worst is None or not trained else worst - trained[0], seed_std,
                   min(gaps) if gaps else None, (ordered[-1] - ordered[0]) if gaps else None)


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}"


def format_summary(s: Summary, bar: float, train_runs: int = 1, final_runs: int | None = None) -> str:
    """A markdown table per reference and architecture, then the random layers and the ratios."""
    final_runs = final_runs or train_runs
    last = (f" ({final_runs} at the last stage: final_train_runs)" if final_runs != train_runs
            else "")
    runs = (f"; each seed's accuracies are the mean of its {train_runs} training runs{last}, as a "
            f"candidate's in the search (train_runs)" if final_runs > 1 else "")
    lines = [f"quality bar {100 * bar:.1f}%; accuracies in %, held-out; P/F = quality test "
             f"passed/failed per seed (quality accuracy); references are fully trained even "
             f"where the quality test fails{runs}", "",
             "| reference | arch | quality per seed | full training, mean +- std | fitness, mean +- std |",
             "|---|---|---|---|---|"]
    for name, d in s.references.items():
        fit = d["fitness"]
        fit_text = (f"{_pct(mean_std(fit)[0])} +- {_pct(mean_std(fit)[1])} (n={len(fit)})"
                    if fit else "-")
        for i, a in enumerate(s.archs):
            q = " ".join(f"{'P' if p else 'F'}({_pct(acc)})"
                         for p, acc in zip(d["quality_pass"][a], d["quality"][a]))
            accs = d["accuracies"][a]
            acc_text = f"{_pct(mean_std(accs)[0])} +- {_pct(mean_std(accs)[1])}" if accs else "-"
            lines.append(f"| {name if i == 0 else ''} | {a} | {q} | {acc_text} | "
                         f"{fit_text if i == 0 else ''} |")
    rej = ", ".join(f"{k} {v}" for k, v in sorted(s.random_rejected.items())) or "none"
    if s.random_valid:
        dist = (f"fitness max {_pct(s.random_valid[0])}, median "
                f"{_pct(statistics.median(s.random_valid))}, min {_pct(s.random_valid[-1])}")
    else:
        dist = "no valid random layer"
    lines += ["", f"random layers: {s.random_n} drawn, {len(s.random_valid)} valid ({dist}); "
              f"rejected: {rej}",
              *([f"random layers trained to the end whether or not they passed the quality "
                 f"test: {len(s.random_trained)} (fitness max {_pct(s.random_trained[0])}, median "
                 f"{_pct(statistics.median(s.random_trained))}); margin, worst reference - best "
                 f"of them: {_pct(s.margin_trained)} points"] if s.random_trained else []),
              f"every reference passes rejection in every seed: {'yes' if s.all_pass else 'NO'}",
              f"margin, worst reference - best random layer: {_pct(s.margin)} points "
              f"(worst reference {_pct(s.worst_reference)}, best random {_pct(s.best_random)})",
              f"seed spread (pooled std of a reference's fitness): {_pct(s.seed_std)} points; "
              f"gaps between references: smallest {_pct(s.min_gap)}, largest {_pct(s.max_gap)}"]
    if s.seed_std is not None and s.min_gap:
        lines.append(f"ratio seed spread / smallest gap: {s.seed_std / s.min_gap:.2f}; "
                     f"/ largest gap: {s.seed_std / s.max_gap:.2f}"
                     + (f"; / margin to random: {s.seed_std / s.margin:.2f}"
                        if s.margin and s.margin > 0 else ""))
    return "\n".join(lines)


def progress_line(rec: RunRecord, finished: int, total: int) -> str:
    """One line per finished run (printed with or without a TTY)."""
    what = f"{rec.name} seed {rec.seed}" if rec.kind == "reference" else rec.name
    accs = " ".join(f"{a.split('_')[0]} {_pct(v)}" for a, v in rec.accuracies.items())
    q = " ".join(f"{a.split('_')[0]} {'P' if p else 'F'}" for a, p in rec.quality_pass.items())
    parts = [f"[{finished}/{total}] {what}: {rec.status}"]
    if rec.reason:
        parts.append(f"({rec.reason[:60]})")
    if q:
        parts.append(f"| quality {q}")
    if accs:
        parts.append(f"| held-out {accs} | fitness {_pct(rec.fitness)}")
    parts.append(f"| {rec.seconds:.0f}s")
    return " ".join(parts)


def proxy_scores(records: list[RunRecord], chance: float) -> dict[str, dict[int, float]]:
    """Each panel layer's fitness at this proxy, per search seed; a run that was not finite
    counts as chance (a layer that learns nothing). A failed job (its worker died, the layer did
    not build) measured nothing about the layer, so it is left out, not scored at chance."""
    scores: dict[str, dict[int, float]] = {}
    for r in records:
        if r.kind == "panel" and r.status != "failed":
            scores.setdefault(r.name, {})[r.seed] = r.fitness if r.fitness is not None else chance
    return scores


def panel_cost(records: list[RunRecord]) -> float | None:
    """Worker-seconds of one panel layer's evaluation, the cost of a candidate trained to the end:
    finished work only (a failed job's seconds are not a candidate's)."""
    secs = [r.cost for r in records if r.kind == "panel" and r.status != "failed" and r.cost > 0]
    return statistics.fmean(secs) if secs else None


def check_panel_layers(layers: list) -> None:
    """ValueError, one line naming the layer, unless every panel layer builds: a registry name
    or a valid graph. Found before any training, which would otherwise fail job by job."""
    from evonorm.graph import Graph
    from evonorm.models import resolve_norm_act

    for layer in layers:
        try:
            resolve_norm_act(layer.name) if layer.graph is None else Graph.from_json(layer.graph)
        except (ValueError, TypeError, KeyError) as err:
            raise ValueError(f"panel layer {layer.name!r} does not build: "
                             f"{(str(err).splitlines() or [''])[0][:200]}") from None
