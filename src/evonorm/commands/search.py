"""`evonorm search`: run a layer search into a run folder (store, progress, top layers at the end).

Graph imports are made where a seed layer is checked: they load torch, which `--help` does not need.
"""

from __future__ import annotations

import sys
from pathlib import Path

from evonorm.cli import ArgumentParser, CommandError
from evonorm.commands._common import (ARCHS_HELP, DATA_HELP, check_archs, check_device,
                                      check_executor, check_workers, dataset_arg, probe_archs,
                                      report_result, run_lock, write_errors)
from evonorm.search.api import own_objective_config
from evonorm.search.config import EXECUTORS, SPACES
from evonorm.search.driver import (check_seed_layers, init_run, run_facts, run_search, stop_search,
                                   stopped_line, told_how_to_resume)
from evonorm.search.progress import budget_text
from evonorm.proxy.api import start
from evonorm.proxy.config import stored_task
from evonorm.proxy.presets import calibration_note, get_preset, list_presets
from evonorm.proxy.training import search_dataset
from evonorm.search.evolution import ALGORITHMS, CRITERIA
from evonorm.search.lock import LOCK_NAME
from evonorm.search.objective import load_objective
from evonorm.search.surrogate import require_sklearn


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="evonorm search", description=(
        "Search normalization-activation layers: regularized evolution (or random search) over "
        "several anchor architectures with quality and stability rejection. Every candidate is "
        "stored in OUT/store.sqlite; a stopped search continues with `evonorm resume OUT`."))
    p.add_argument("--preset", default="demo", choices=list_presets(), help="search preset: the engine's and the "
                   "task's settings, which every flag below changes one of (default demo; `evonorm "
                   "list search-presets`; what a candidate of each costs: docs/performance.md)")
    p.add_argument("--out", type=Path, required=True, help="run folder, created; it must be empty "
                   "unless --force (required)")
    p.add_argument("--force", action="store_true", help="start over in a non-empty run folder "
                   "(default: refuse, since `evonorm resume` continues it)")
    _proposal_flags(p)
    _task_flags(p)
    _execution_flags(p)
    _objective_flags(p)
    p.add_argument("--show", type=int, default=10, metavar="N",
                   help="layers listed in the final table (default 10)")
    p.add_argument("--quiet", action="store_true", help="no progress output (default: a bar on a terminal, "
                   "else a line per candidate)")
    return p


def _proposal_flags(p: ArgumentParser) -> None:
    """What the search proposes, how long, and how it picks parents."""
    p.add_argument("--space", choices=SPACES, default=None,
                   help="b: every op; s: no batch statistics (default: the preset's)")
    p.add_argument("--algorithm", choices=ALGORITHMS, default=None,
                   help="evolution (default) or random (the paper's random search; without "
                   "rejection: --algorithm random --rejection off --prechecks off)")
    p.add_argument("--budget", type=int, default=None, help="candidates to propose in all (default: "
                   "the preset's)")
    p.add_argument("--budget-seconds", type=float, default=None, metavar="S",
                   help="also stop proposing once the candidates took S worker-seconds in all, "
                   "for a budget of compute rather than of candidates (default: the preset's, "
                   "none for most)")
    p.add_argument("--stages", default=None, metavar="STEPS",
                   help="comma-separated steps where training is scored and hurdled "
                        "(multi-fidelity; the first stage is the quality test); 'none' for "
                        "one stage after a separate 50-step quality test, one training run "
                        "per candidate (default: the preset's)")
    p.add_argument("--window", type=int, default=None, help="population size: the sliding window of "
                   "latest candidates tournaments draw from (default: the preset's)")
    p.add_argument("--criterion", choices=CRITERIA, default=None, help="tournament winner rule: the Pareto front "
                   "over the architectures, or the best average (default: the preset's)")
    p.add_argument("--seed-layers", default=None, metavar="NAMES",
                   help="comma-separated named graphs (e.g. evonorm_s0) evaluated first, as seeds "
                        "of the population (default: the preset's)")
    p.add_argument("--seed", type=int, default=None,
                   help="seed of the proposals and the training runs (default 0)")


def _task_flags(p: ArgumentParser) -> None:
    """The built-in task's data and training."""
    p.add_argument("--dataset", default=None, help="cifar10, cifar100, fashion_mnist, synthetic "
                   "(default: the preset's, else fashion_mnist, which must be installed; the "
                   "synthetic set only when named)")
    p.add_argument("--data", default=None, metavar="FILE.npz", help=DATA_HELP)
    p.add_argument("--data-root", default=None, help="folder holding the dataset files "
                   "(default: $EVONORM_DATA, else ~/.cache/evonorm/data)")
    p.add_argument("--n-train", type=int, default=None, help="training images used, a subset "
                   "drawn with the data seed (default: the preset's)")
    p.add_argument("--archs", default=None, help=ARCHS_HELP)
    p.add_argument("--final-train-runs", type=int, default=None, metavar="N",
                   help="training runs per architecture for a layer that clears every earlier stage "
                        "(default: the preset's train_runs); its fitness is their mean")
    p.add_argument("--data-seed", type=int, default=None,
                   help="seed of the training subset and held-out split (default: the preset's, "
                   "else --seed), so that several search seeds can share one task")


def _execution_flags(p: ArgumentParser) -> None:
    """Where and how candidates train."""
    p.add_argument("--workers", type=int, default=None, help="parallel evaluations, 0 for one per core "
                   "(default: the preset's)")
    p.add_argument("--threads", type=int, default=None, help="torch threads per local worker "
                   "(default 0: 1, with a worker per core, since a worker of several threads slows "
                   "badly beside any other busy process; the measurements are in "
                   "docs/performance.md); the start line says it")
    p.add_argument("--executor", choices=EXECUTORS, default=None, help="where candidates train: local processes "
                   "(default) or a Ray cluster")
    p.add_argument("--address", default=None, help="Ray cluster address, with --executor ray "
                   "(default: a Ray started on this machine)")
    p.add_argument("--device", default=None, help="where every candidate trains: cpu (default), "
                   "cuda, or auto (cuda where available, else cpu; stored as resolved). With cuda, "
                   "--workers N local workers share the GPU")
    p.add_argument("--gpus-per-worker", type=float, default=None, metavar="SHARE",
                   help="with --executor ray and cuda: each task's GPU share, e.g. 0.25 for four "
                   "workers per GPU (default: the cluster's GPUs divided among the workers)")
    p.add_argument("--timeout", type=float, default=None, help="seconds per candidate before its "
                   "worker is killed and the candidate retried once, then recorded as failed (default: "
                   "the preset's)")


def _objective_flags(p: ArgumentParser) -> None:
    """What scores a candidate, and the checks and screens before it trains."""
    p.add_argument("--objective", default=None, metavar="MODULE:FUNCTION",
                   help="score candidates with your own objective(norm_act, trial) instead of the "
                   "built-in proxy task (the current folder is importable); the run records the "
                   "name, and `evonorm resume` needs the same --objective")
    p.add_argument("--ship", action="append", default=None, metavar="PATH",
                   help="with --executor ray: a package folder or module file the workers need "
                   "to import the objective (default: its top-level package or module file; "
                   "repeatable)")
    p.add_argument("--prechecks", choices=("on", "off"), default=None,
                   help="the checks of the layer alone (constant output, output independent of x, "
                   "non-finite at initialisation) before the objective trains it (default on)")
    p.add_argument("--rejection", choices=("on", "off"), default=None,
                   help="the built-in task's stability and quality tests and its staged training's "
                   "quality bar (default on; off: every candidate trained fully)")
    p.add_argument("--prescreen", choices=("on", "off"), default=None,
                   help="rank several children per slot with a surrogate learned as the search "
                        "goes, and train the best; reject the hopeless untrained (default off: "
                        "not yet measured to pay for itself; needs scikit-learn, the prescreen "
                        "extra)")
    p.add_argument("--prescreen-prior", choices=("on", "off"), default=None,
                   help="with --prescreen on: start the surrogate from labelled candidates of "
                        "earlier runs where the task has them for this setting (default on)")


def config_from_args(args):
    archs = tuple(a.strip() for a in args.archs.split(",") if a.strip()) if args.archs else None
    seed_layers = (tuple(a.strip() for a in args.seed_layers.split(",") if a.strip())
             if args.seed_layers else None)
    device = check_device(args.device)
    staged = {}
    if args.stages is not None:
        try:
            stages = () if args.stages.strip() == "none" else tuple(
                int(s) for s in args.stages.split(",") if s.strip())
        except ValueError:
            raise CommandError(f"--stages must be comma-separated step counts or 'none', got "
                               f"{args.stages!r}") from None
        # none: the unstaged proxy, a separate 50-step quality test and one training run each
        staged = ({"stage_steps": stages, "quality_steps": 0} if stages
                  else {"stage_steps": (), "quality_steps": 50, "train_runs": 1})
    try:
        return get_preset(args.preset, space=args.space, algorithm=args.algorithm,
                          budget=args.budget, budget_seconds=args.budget_seconds, **staged,
                          dataset=dataset_arg(args.dataset, args.data), data_root=args.data_root,
                          n_train=args.n_train, data_seed=args.data_seed, archs=archs, workers=args.workers, threads=args.threads,
                          final_train_runs=args.final_train_runs,
                          executor=args.executor, address=args.address, timeout=args.timeout,
                          window=args.window, criterion=args.criterion, seed=args.seed,
                          seed_layers=seed_layers, device=device, gpus_per_worker=args.gpus_per_worker,
                          prescreen=None if args.prescreen is None else args.prescreen == "on",
                          prechecks=None if args.prechecks is None else args.prechecks == "on",
                          rejection=None if args.rejection is None else args.rejection == "on",
                          prescreen_prior=(None if args.prescreen_prior is None
                                           else args.prescreen_prior == "on"))
    except (ValueError, TypeError) as err:
        raise CommandError(str(err)) from None


def load_objective_arg(spec: str | None, ship: list[str] | None):
    """The --objective function (None without one) and the --ship paths, checked: one line, exit
    2, before any worker starts."""
    if ship:
        missing = [p for p in ship if not Path(p).exists()]
        if missing:
            raise CommandError(f"--ship {missing[0]}: no such file or folder")
    if spec is None:
        if ship:
            raise CommandError("--ship applies to --objective only (the built-in objective is "
                               "shipped with evonorm)")
        return None

    try:
        return load_objective(spec)
    except ValueError as err:
        raise CommandError(str(err).splitlines()[0]) from None


def check_setup(cfg, objective=None) -> tuple:
    """(the run's settings, its objective), validated before its folder is written: archs,
    trainer preset, data (the built-in objective's, resolved here; an own objective, given,
    brings its own)."""
    if cfg.objective:
        try:
            check_seed_layers(cfg)
        except ValueError as err:
            raise CommandError(str(err).splitlines()[0]) from None
        return cfg, objective

    check_archs(stored_task(cfg).archs)
    try:
        check_seed_layers(cfg)
        cfg, objective = start(cfg)  # never a silent fall-back to the synthetic set
        probe_archs(objective.task, search_dataset(objective.task))
    except (ValueError, FileNotFoundError, TypeError) as err:
        raise CommandError(str(err).splitlines()[0]) from None
    return cfg, objective


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)

    if args.show < 0:
        raise CommandError("--show must be >= 0")
    try:
        cfg, scorer = _prepare(args)
    except KeyboardInterrupt:  # checking the data and the networks can take a while
        stop_search("search interrupted before its run was stored: run the same command again")
    run = args.out
    with write_errors("the run folder"):
        run.mkdir(parents=True, exist_ok=True)
    with run_lock(run):
        with write_errors(f"run folder {run}"):
            try:
                init_run(run, cfg, scorer, force=args.force)
            except FileExistsError as err:
                raise CommandError(str(err)) from None
            facts = run_facts(cfg, scorer)
        try:  # the run is stored: every stop from here says how to continue it
            if not args.quiet:
                for line in start_lines(cfg, facts, run):
                    print(line, file=sys.stderr)
            with write_errors(f"run folder {run}"):  # a disk that fills during the search: one line
                result = run_search(run, objective=scorer, progress=not args.quiet, ship=args.ship)
        except KeyboardInterrupt as err:
            if told_how_to_resume(err):
                raise
            stop_search(stopped_line(run, cfg.objective))
        report_result(result, run, args.show)
    return 0


def _prepare(args) -> tuple:
    """(the run's settings, its objective: one's own or the built-in task's) from the arguments,
    every check made before the run folder is touched; CommandError on anything wrong."""
    cfg = config_from_args(args)
    objective = load_objective_arg(args.objective, args.ship)
    if objective is not None:
        given = [f for f, v in (("--dataset", args.dataset), ("--data", args.data),
                                ("--data-root", args.data_root), ("--n-train", args.n_train),
                                ("--archs", args.archs), ("--rejection", args.rejection))
                 if v]
        if given:
            raise CommandError(f"{given[0]} applies to the built-in objective only (your "
                               "--objective brings its own data and models)")

        cfg = own_objective_config(cfg, objective)
    check_executor(cfg)
    if cfg.evolution.prescreen:
        try:
            require_sklearn()
        except ValueError as err:
            raise CommandError(str(err)) from None
    if args.gpus_per_worker is not None and (cfg.execution.executor != "ray"
                                             or cfg.execution.device == "cpu"):
        raise CommandError("--gpus-per-worker applies to --executor ray with --device cuda only "
                           "(local workers all share the machine's GPU)")
    check_workers(cfg)
    check_run_folder(args.out, args.force)
    return check_setup(cfg, objective)


def check_run_folder(run: Path, force: bool) -> None:
    """CommandError unless `run` can hold a new run: a folder (or nothing yet), empty unless
    `force` starts over in it."""
    with write_errors("the run folder"):
        if run.is_symlink() or (run.exists() and not run.is_dir()):  # --force would not help
            raise CommandError(f"--out {run} is a {'link' if run.is_symlink() else 'file'}, not "
                               "a folder: name a folder for the run")
        used = run.exists() and any(p.name != LOCK_NAME for p in run.iterdir())
    if used and not force:
        raise CommandError(f"run folder {run} exists and is not empty (use --force to start over,"
                           f" or `evonorm resume {run}`)")


def start_lines(cfg, facts: dict, run: Path) -> list[str]:
    """What a search says as it starts: its settings, what it trains on and where it writes; for
    the built-in task also a note on synthetic data and how far the preset is calibrated."""
    evo, ex, device = cfg.evolution, cfg.execution, facts["device"]
    if cfg.objective:
        return [f"search: preset {cfg.preset}, space {evo.space}, {evo.algorithm}, objective "
                f"{cfg.objective}, device {device['type']}, {budget_text(cfg)}, "
                f"{_workers(ex)} -> {run}"]
    data, task = facts["dataset"], stored_task(cfg)
    runs = ""
    if task.final_runs > 1:  # e.g. " (2 training runs each, 4 at the last stage, scored by their mean)"
        last = f", {task.final_runs} at the last stage" if task.final_runs != task.train_runs else ""
        runs = (f" ({task.train_runs} training run{'s' if task.train_runs > 1 else ''} each{last}, "
                "scored by their mean)")
    lines = [f"search: preset {cfg.preset}, space {evo.space}, {evo.algorithm}, dataset "
             f"{data['name']} ({data['train']} train / {data['held_out']} held-out images), "
             f"device {device['type']}, archs {', '.join(task.archs)}{runs}, {budget_text(cfg)}, "
             f"{_workers(ex)} -> {run}"]
    if data["name"] == "synthetic":  # `tiny` trains on it whatever is installed
        lines.append("dataset synthetic: generated images for tests, whose fitness says nothing "
                     "of a layer; --dataset fashion_mnist (or --data FILE.npz) for real ones")
    return lines + [calibration_note(cfg.preset, evo.space, cfg.to_dict())]


def _workers(ex) -> str:
    """'2 local worker(s) of 1 torch thread': what each candidate trains on."""
    if ex.executor != "local":
        return f"{ex.num_workers} {ex.executor} worker(s)"
    from evonorm.search.executors import THREADS_PER_WORKER

    threads = ex.threads or THREADS_PER_WORKER
    return f"{ex.num_workers} local worker(s) of {threads} torch thread{'s' if threads > 1 else ''}"
