"""Search costs on this machine: per screened candidate and per full evaluation, the share of
compute spent on rejected candidates, the cache hit rate, and throughput with 1 vs 2 local workers.

  python benchmarks/bench_search.py costs RUN                # from a finished run's store
  python benchmarks/bench_search.py throughput --preset demo --budget 12
  python benchmarks/bench_search.py extrapolate --preset demo paper-b paper-s
  python benchmarks/bench_search.py staged --preset demo --budget 60   # before/after hurdles
  python benchmarks/bench_search.py fidelity --preset demo --workers 1
  python benchmarks/bench_search.py early --preset demo       # a cut inside the first stage?
  python benchmarks/bench_search.py objective --preset demo --candidates 6 --rounds 3

`extrapolate` times a few SGD / stability steps per anchor architecture (after a warm-up step)
at the preset's widths and batch sizes and multiplies out the preset's step counts; datasets the
machine lacks (CIFAR-10 offline) are replaced by synthetic data of the same shape.
`staged` runs the preset twice side by side, one worker of one thread each, same seed and
budget: as shipped (staged training with hurdles) and as before multi-fidelity (a separate
50-step quality test, then full training from scratch), and prints worker-seconds per candidate
and per valid layer. `fidelity` trains the library's named graphs and the textbook norm-ReLU
layers (36) through the preset's stages without hurdles: Spearman between the first stage's
fitness and the full fitness, and how many of the full top 5 clear a hurdle at the mean.
`objective` times the built-in proxy task through the objective protocol (`proxy.evaluate_candidate`: the
search's one evaluation path) against a copy of the evaluator as it was before that protocol, on
the same candidates in one process, alternating which goes first; by default at shortened
training settings (`--full` for the preset's own), since the ratio is what counts.
`throughput` runs the same random search (its proposals do not depend on results, so both runs do
identical work) with 1 and 2 workers side by side and prints the ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from evonorm.proxy.config import ProxyTask, configured, stored_task


def costs(run: Path) -> None:
    from evonorm.search.candidates import reason_group
    from evonorm.search.store import Store

    with Store(run, readonly=True) as s:
        cands = s.candidates()
        cfg = s.config()
    fresh = [c for c in cands if not c.cache_hit]
    total = sum(c.seconds for c in fresh) or float("nan")
    print(f"run {run}: preset {cfg.get('preset')}, {len(cands)} candidates, "
          f"{len(cands) - len(fresh)} cache hits ({(len(cands) - len(fresh)) / len(cands):.0%})")
    groups: dict[str, list] = {}
    for c in fresh:
        key = "valid" if c.status == "valid" else (
            "failed" if c.status == "failed" else reason_group(c.reason))
        groups.setdefault(key, []).append(c)
    print(f"{'outcome':<12}{'n':>4}{'mean s':>9}{'share of compute':>18}")
    for key, cs in sorted(groups.items(), key=lambda kv: -sum(c.seconds for c in kv[1])):
        sec = sum(c.seconds for c in cs)
        print(f"{key:<12}{len(cs):>4}{sec / len(cs):>9.1f}{sec / total:>18.1%}")
    rejected = sum(c.seconds for c in fresh if c.status != "valid")
    print(f"compute on rejected/failed candidates: {rejected / total:.1%} of {total:.0f} worker-s")
    screen = [sum(v for k, v in c.timings.items() if k in ("precheck", "stability", "quality"))
              for c in fresh if c.status == "valid"]
    full = [c.timings.get("train", 0.0) for c in fresh if c.status == "valid"]
    if screen:
        print(f"valid candidates: screening {statistics.mean(screen):.1f} s + full training "
              f"{statistics.mean(full):.1f} s (mean of {len(screen)})")


def _time_steps(norm_act, ds, tcfg, n: int, warm: int = 1) -> float:
    """Seconds per SGD step of `tcfg.arch` at its width, batch and crop (after `warm` steps)."""
    import torch

    from evonorm.data import train_batches
    from evonorm.models import build_model

    model = build_model(tcfg.arch, norm_act, num_classes=ds.num_classes,
                        width=tcfg.resolved_width(), in_chans=ds.train_x.shape[1],
                        **tcfg.layer_kwargs())
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    batches = list(train_batches(ds, tcfg.batch_size, warm + n, seed=0))
    for i, (x, y) in enumerate(batches):
        if i == warm:
            t0 = time.perf_counter()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return (time.perf_counter() - t0) / n


def extrapolate(presets: list[str], steps: int) -> None:
    import torch

    from evonorm.data import holdout_split, load_dataset, synthetic_dataset
    from evonorm.graph.library import get_graph
    from evonorm.proxy.presets import get_preset
    from evonorm.proxy.rejection import stability

    torch.set_num_threads(min(2, os.cpu_count() or 1))
    layer = get_graph("evonorm_s0")
    print(f"torch threads {torch.get_num_threads()}; layer evonorm_s0; {steps} timed steps each")
    for name in presets:
        cfg = get_preset(name)
        try:
            ds = load_dataset(stored_task(cfg).dataset or "fashion_mnist", stored_task(cfg).data_root, n_train=stored_task(cfg).n_train)
            dname = ds.name
        except (FileNotFoundError, ValueError):
            ds = synthetic_dataset(n_train=stored_task(cfg).n_train or 4096, n_test=512)
            dname = f"synthetic stand-in for {stored_task(cfg).dataset}"
        ds = holdout_split(ds, stored_task(cfg).holdout)
        screen = full = 0.0
        parts = []
        for i, arch in enumerate(stored_task(cfg).archs):
            tcfg = ProxyTask.of_run(cfg).training[arch]
            t_step = _time_steps(layer, ds, tcfg, steps)
            full += t_step * tcfg.steps * stored_task(cfg).train_runs
            screen += t_step * stored_task(cfg).quality_steps
            if i < stored_task(cfg).stability_archs and stored_task(cfg).stability_steps:
                t0 = time.perf_counter()
                stability(layer, ds, arch=arch, width=tcfg.resolved_width(), steps=steps,
                          batch=stored_task(cfg).stability_batch)
                t_stab = (time.perf_counter() - t0) / (steps + 1)
                screen += t_stab * (stored_task(cfg).stability_steps + 1)
            parts.append(f"{arch} {t_step:.3f} s/step x {tcfg.steps}"
                         + (f" x {stored_task(cfg).train_runs} seeds" if stored_task(cfg).train_runs > 1 else ""))
        print(f"{name} ({dname}): screened candidate ~{screen:.0f} s, full evaluation "
              f"~{full:.0f} s (+ screening) | " + "; ".join(parts), flush=True)


def throughput(preset: str, budget: int, order: list[int]) -> None:
    from evonorm.proxy.objective import ProxyObjective
    from evonorm.proxy.api import start
    from evonorm.search.driver import init_run, run_search
    from evonorm.proxy.presets import get_preset

    rates = {}
    for workers in order:
        cfg = start(get_preset(preset, algorithm="random", budget=budget, workers=workers,
                                      seed_layers=()))[0]
        with tempfile.TemporaryDirectory() as tmp:
            init_run(Path(tmp) / "run", cfg)
            t0 = time.perf_counter()
            res = run_search(Path(tmp) / "run", objective=ProxyObjective.for_run(cfg), progress=False)
            dt = time.perf_counter() - t0
        rates[workers] = res.done / dt * 60
        print(f"{workers} worker(s): {res.done} candidates in {dt:.1f} s = "
              f"{rates[workers]:.2f} candidates/min | {res.tally.line()}", flush=True)
    a, b = sorted(rates)
    print(f"{b} workers / {a} worker(s) throughput: {rates[b] / rates[a]:.2f}x")


def _search_alone(run: str, cfg_dict: dict, walls) -> None:
    """One search (in its own process); its wall time into `walls` (a multiprocessing dict)."""
    from evonorm.proxy.objective import ProxyObjective
    from evonorm.search.config import SearchConfig
    from evonorm.search.driver import init_run, run_search

    cfg = SearchConfig.from_dict(cfg_dict)
    init_run(run, cfg, force=True)
    t0 = time.perf_counter()
    run_search(run, objective=ProxyObjective.for_run(cfg), progress=False)
    walls[run] = time.perf_counter() - t0


def staged(preset: str, budget: int, out: Path) -> None:
    from multiprocessing import get_context

    from evonorm.proxy.api import start
    from evonorm.proxy.presets import get_preset
    from evonorm.search.store import Store

    # staging alone: one training run per candidate in both (unstaged takes no train_runs)
    after = start(get_preset(preset, budget=budget, workers=1, threads=1, timeout=3600.0,
                                    train_runs=1))[0]
    before = configured(after, stages=(), quality_steps=50)
    jobs = [(str(out / name), cfg.to_dict()) for name, cfg in (("before", before), ("after", after))]
    ctx = get_context("spawn")  # plain processes: each search has its own worker pool
    with ctx.Manager() as manager:
        shared = manager.dict()
        procs = [ctx.Process(target=_search_alone, args=(*job, shared)) for job in jobs]
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join()
        walls = dict(shared)
    for run, _ in jobs:
        with Store(run, readonly=True) as s:
            cands = s.candidates()
        secs = sum(c.seconds for c in cands)
        valid = [c for c in cands if c.status == "valid"]
        fresh_valid = [c for c in valid if not c.cache_hit]
        print(f"{Path(run).name}: {len(cands)} candidates, {len(valid)} valid "
              f"({len(fresh_valid)} not from the cache), {secs:.0f} worker-s "
              f"(wall {walls[run]:.0f} s): {secs / len(cands):.1f} worker-s per candidate, "
              f"{secs / max(1, len(valid)):.1f} per valid layer, "
              f"{3600 * len(cands) / secs:.0f} candidates per core-hour", flush=True)


def fidelity(preset: str, out: Path, workers: int, top: int = 5) -> None:
    """Rank fidelity of the first stage: every named graph of the library and the textbook
    norm-ReLU layers, trained through the preset's stages without hurdles (the calibration's
    resumable runner, one training seed); Spearman between first-stage and full fitness."""
    from evonorm.graph.library import NAMED_GRAPHS
    from evonorm.stats import spearman
    from evonorm.measure.calibrate import Job, load_runs, prepare_out, run_jobs
    from evonorm.proxy.api import start
    from evonorm.proxy.presets import get_preset
    from evonorm.search.settings import norm_relu

    cfg = start(get_preset(preset, workers=workers))[0]
    if not cfg.hurdles.stage_steps:
        raise SystemExit(f"preset {preset} has no stages")
    graphs = {f"{axes}_norm_relu": norm_relu(axes)
              for axes in ("batch", "group", "layer", "instance")}
    graphs.update({name: g.to_json() for name, g in sorted(NAMED_GRAPHS.items())})
    jobs = [Job("reference", name, cfg.seed, g) for name, g in graphs.items()]
    prepare_out(out, {"fidelity": preset, "layers": sorted(graphs)})
    run_jobs(jobs, cfg, out, workers=cfg.execution.num_workers, timeout=3 * cfg.execution.timeout, threads=1,
             on_done=lambda r, i, n: print(f"[{i}/{n}] {r.name}: first stage "
                                           f"{r.quality} full {r.fitness}", flush=True))
    recs = [r for r in load_runs(out) if r.fitness is not None and len(r.quality) == len(stored_task(cfg).archs)]
    first = [sum(r.quality.values()) / len(r.quality) for r in recs]
    full = [r.fitness for r in recs]
    rho = spearman(first, full)
    hurdle = sum(first) / len(first)
    best = sorted(range(len(recs)), key=lambda i: -full[i])[:top]
    by_first = set(sorted(range(len(recs)), key=lambda i: -first[i])[:top])
    print(f"{len(recs)} layers trained to the end on {', '.join(stored_task(cfg).archs)} ({preset}, stage "
          f"ends {list(cfg.hurdles.stage_steps)} and {stored_task(cfg).train.get('steps')})")
    print(f"Spearman(first-stage fitness, full fitness) = {rho:.3f}" if rho is not None
          else "Spearman: fewer than 3 layers")
    print(f"full top {top}: {sum(first[i] >= hurdle for i in best)} clear a hurdle at the mean "
          f"first-stage fitness ({hurdle:.3f}), {len(by_first & set(best))} are in the first "
          f"stage's top {top}; that hurdle stops {sum(f < hurdle for f in first)} of {len(recs)}")


def early(preset: str, seeds: int, checks: list[int]) -> None:
    """Could a cheap cut inside the first stage reject hopeless layers sooner? The preset's
    S references on its first architecture (where most quality rejections happen), trained
    through the first stage as a search trains them: the mean training loss of the ten steps
    before each check step and the held-out accuracy there, against the annealed accuracy at the
    stage end that the quality test uses. A reference at chance at a check step would be lost."""
    import math

    from evonorm.proxy.api import start
    from evonorm.proxy.training import search_dataset
    from evonorm.proxy.presets import get_preset
    from evonorm.measure.references import REFERENCES_BY_SPACE
    from evonorm.proxy.rejection import quality_threshold
    from evonorm.train import Run

    cfg = start(get_preset(preset))[0]
    if not cfg.hurdles.stage_steps:
        raise SystemExit(f"preset {preset} has no stages")
    ds = search_dataset(ProxyTask.of_run(cfg))
    arch, end = stored_task(cfg).archs[0], cfg.hurdles.stage_steps[0]
    bar = quality_threshold(ds.num_classes, stored_task(cfg).quality_factor)
    print(f"{preset}, {arch}, first stage {end} steps; chance loss ln({ds.num_classes}) = "
          f"{math.log(ds.num_classes):.3f}, quality bar {bar:.1%} at step {end}")
    print("| layer | seed | " + " | ".join(f"step {k}: loss / acc" for k in checks)
          + f" | step {end} acc |")
    print("|---|---|" + "---|" * (len(checks) + 1))
    for name in REFERENCES_BY_SPACE["s"]:
        for seed in range(seeds):
            run = Run(name, ds, ProxyTask.of_run(cfg.replace(seed=seed)).training[arch])
            losses, cells = [], []
            for k in range(1, end + 1):
                run.advance(k)
                losses.append(run.result.final_loss)
                if k in checks:
                    cells.append(f"{sum(losses[-10:]) / len(losses[-10:]):.2f} / "
                                 f"{run.score():.1%}")
            print(f"| {name} | {seed} | " + " | ".join(cells) + f" | {run.score():.1%} |",
                  flush=True)


def _evaluate_before_objectives(payload: dict):
    """The evaluator as it was before the objective protocol (a copy, for `objective`)."""
    import dataclasses

    from evonorm.graph import Graph
    from evonorm.search.config import SearchConfig
    from evonorm.search.evaluation import Evaluation
    from evonorm.proxy.training import search_dataset, train_stages
    from evonorm.proxy.rejection import quality, stability
    from evonorm.search.checks import layer_checks
    from evonorm.search.objective import Reject

    cfg = SearchConfig.from_dict(payload["config"])
    timings: dict[str, float] = {}
    t = time.perf_counter()

    def lap(phase: str) -> None:
        nonlocal t
        now = time.perf_counter()
        timings[phase] = timings.get(phase, 0.0) + now - t
        t = now

    ds = search_dataset(ProxyTask.of_run(cfg))
    lap("data")
    try:
        graph = Graph.from_json(payload["graph"])
        screen = stored_task(cfg).rejection
        if cfg.evolution.prechecks:
            rej = layer_checks(graph, seed=cfg.seed)
            lap("precheck")
            if rej:
                return Evaluation.rejected(rej, timings=timings)
        if screen and stored_task(cfg).stability_steps > 0:
            for arch in stored_task(cfg).archs[:stored_task(cfg).stability_archs]:
                tcfg = ProxyTask.of_run(cfg).training[arch]
                rej = stability(graph, ds, arch=arch, width=tcfg.resolved_width(),
                                steps=stored_task(cfg).stability_steps, threshold=stored_task(cfg).stability_threshold,
                                batch=stored_task(cfg).stability_batch, lr=stored_task(cfg).stability_lr, seed=cfg.seed,
                                model_kwargs=tcfg.layer_kwargs())
                if rej:
                    lap("stability")
                    return Evaluation.rejected(rej, timings=timings)
            lap("stability")
        if screen and stored_task(cfg).quality_steps > 0:
            rej, accs = quality(graph, ds, stored_task(cfg).archs, ProxyTask.of_run(cfg).quality_training,
                                factor=stored_task(cfg).quality_factor)
            lap("quality")
            if rej:
                return Evaluation.rejected(rej, accs, timings)
        result = train_stages(graph, ds, ProxyTask.of_run(cfg), hurdles=payload.get("hurdles") or [],
                              checkpoint=payload.get("checkpoint"), screen=screen)
        lap("train")
        return dataclasses.replace(result, timings={**timings, **result.timings})
    except Exception as err:
        msg = str(err).splitlines()[0] if str(err) else ""
        return Evaluation.rejected(Reject(f"error: {type(err).__name__}: {msg}"[:300]),
                                   timings=timings)


def objective_overhead(preset: str, candidates: int, rounds: int, full: bool) -> None:
    """The old evaluator vs the proxy objective through `run_trial`, side by side (docstring)."""
    import random

    import torch

    from evonorm.graph import random_graph
    from evonorm.graph.library import resolve_graph
    from evonorm.proxy.api import start
    from evonorm.proxy.training import search_dataset
    from evonorm.proxy.presets import get_preset
    from evonorm.proxy.objective import evaluate_candidate

    torch.set_num_threads(1)
    cfg = start(get_preset(preset))[0]
    if not full:  # the same pipeline (pre-checks, stability, staged training), shortened; no
        # quality bar, so that every layer the pre-checks pass trains to the end
        cfg = configured(cfg, n_train=500, stability_steps=3, quality_factor=0.0,
                          train={**stored_task(cfg).train, "steps": 8, "lr_warmup": 2},
                          stages=tuple(s for s in (4,) if cfg.hurdles.stage_steps))
    rng = random.Random(0)
    graphs = [resolve_graph(g).to_json() for g in cfg.evolution.seed_layers][:candidates]
    while len(graphs) < candidates:
        g = random_graph(rng, allow_batch=cfg.evolution.allow_batch, max_nodes=cfg.evolution.max_nodes)
        graphs.append(g.to_json())
    payloads = [{"graph": g, "config": cfg.to_dict(), "hurdles": [None] * len(cfg.hurdles.stage_steps)}
                for g in graphs]
    search_dataset(ProxyTask.of_run(cfg))  # loaded once, outside the timings (cached per process)
    paths = {"before": _evaluate_before_objectives, "objective": evaluate_candidate}
    spent = {name: 0.0 for name in paths}
    pair_ratios = []  # per candidate and round: before's seconds / objective's (load drifts)
    same = True
    for r in range(rounds):
        for i, payload in enumerate(payloads):
            order = list(paths) if (r + i) % 2 == 0 else list(paths)[::-1]
            got, took = {}, {}
            for name in order:
                t0 = time.perf_counter()
                got[name] = paths[name](payload)
                took[name] = time.perf_counter() - t0
                spent[name] += took[name]
            pair_ratios.append(took["before"] / took["objective"])
            a, b = got["before"], got["objective"]
            same &= (a.status, a.reason, a.scores, a.stage_scores) == (b.status, b.reason, b.scores,
                                                                 b.stage_scores)
            print(f"round {r + 1} candidate {i + 1}: {a.status} {a.reason or ''} | "
                  + " ".join(f"{n} {got[n].status}" for n in paths), flush=True)
    n = rounds * len(payloads)
    rate = {name: 3600 * n / s for name, s in spent.items()}
    from evonorm.search.objective import run_trial

    def noop(norm_act, trial):
        return 0.5

    reps = 200  # the protocol's own cost, load-proof: run_trial around a do-nothing objective
    t0 = time.perf_counter()
    for _ in range(reps):
        run_trial(noop, payloads[0])
    per = (time.perf_counter() - t0) / reps
    print(f"run_trial around a no-op objective: {per * 1e6:.0f} us per candidate, "
          f"{per / (spent['objective'] / n):.2e} of a candidate's mean time here")
    short = "" if full else " (shortened)"
    print(f"{preset}{short}, {len(payloads)} candidates x {rounds} rounds, "
          f"1 thread: before {spent['before']:.1f} s ({rate['before']:.0f} candidates per "
          f"core-hour), objective {spent['objective']:.1f} s ({rate['objective']:.0f}); "
          f"objective / before = {rate['objective'] / rate['before']:.3f} (median of the "
          f"{n} side-by-side pairs {statistics.median(pair_ratios):.3f}); same results: {same}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="what", required=True)
    c = sub.add_parser("costs")
    c.add_argument("run", type=Path)
    e = sub.add_parser("extrapolate")
    e.add_argument("--preset", nargs="+", default=["demo", "paper-b", "paper-s"])
    e.add_argument("--steps", type=int, default=3)
    t = sub.add_parser("throughput")
    t.add_argument("--preset", default="demo")
    t.add_argument("--budget", type=int, default=12)
    t.add_argument("--workers", type=int, nargs=2, default=[1, 2], metavar=("FIRST", "SECOND"),
                   help="worker counts in the order run (swap them to check for load drift)")
    st = sub.add_parser("staged")
    st.add_argument("--preset", default="demo")
    st.add_argument("--budget", type=int, default=60)
    st.add_argument("--out", type=Path, default=Path("runs/bench-staged"))
    f = sub.add_parser("fidelity")
    f.add_argument("--preset", default="demo")
    f.add_argument("--out", type=Path, default=Path("runs/bench-fidelity"))
    f.add_argument("--workers", type=int, default=1)
    f.add_argument("--top", type=int, default=5)
    ea = sub.add_parser("early")
    ea.add_argument("--preset", default="demo")
    ea.add_argument("--seeds", type=int, default=3)
    ea.add_argument("--checks", type=int, nargs="+", default=[15, 25, 40])
    ob = sub.add_parser("objective")
    ob.add_argument("--preset", default="demo")
    ob.add_argument("--candidates", type=int, default=6)
    ob.add_argument("--rounds", type=int, default=3)
    ob.add_argument("--full", action="store_true", help="the preset's own training settings")
    args = p.parse_args(argv)
    if args.what == "objective":
        objective_overhead(args.preset, args.candidates, args.rounds, args.full)
    elif args.what == "early":
        early(args.preset, args.seeds, args.checks)
    elif args.what == "staged":
        staged(args.preset, args.budget, args.out)
    elif args.what == "fidelity":
        fidelity(args.preset, args.out, args.workers, args.top)
    elif args.what == "costs":
        costs(args.run)
    elif args.what == "extrapolate":
        extrapolate(args.preset, args.steps)
    else:
        throughput(args.preset, args.budget, args.workers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
