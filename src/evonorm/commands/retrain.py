"""`evonorm retrain RUN --seeds N --top K [--references [LAYER ...]]`: the evidence behind a run's
first sentence, trained into the run folder.

Re-training writes RUN/retrain.jsonl (and RUN/references.json with --references), so it holds the
run lock like `resume`: beside a live search it exits 2 at once. `evonorm report` then only reads.

The models module is imported where a reference layer is checked: it loads torch, which `--help`
does not need.
"""

from __future__ import annotations

from pathlib import Path

from evonorm.cli import ArgumentParser, CommandError
from evonorm.commands._common import (RUN_ARCH_HELP, check_run, check_run_archs, check_run_values, run_lock,
                                      write_errors)
from evonorm.proxy.config import anchor_archs
from evonorm.proxy.training import require_builtin
from evonorm.measure.references import DEFAULT_REFERENCES, train_references
from evonorm.measure.retrain import retrain
from evonorm.search.store import Store, run_folder


def build_parser() -> ArgumentParser:
    p = ArgumentParser(
        prog="evonorm retrain",
        description="Re-train the run's top found layers, the reference layers of its search space "
                    "and its seed layers with N fresh training seeds each, on the run's own data "
                    "split and training setting, into RUN/retrain.jsonl (resumable: finished "
                    "(layer, seed) pairs are kept). `evonorm report RUN` then says in its first "
                    "sentence whether a found layer beats them beyond noise. Exits 2 if a search, "
                    "resume or rerank holds RUN.")
    p.add_argument("run", type=Path, help="run folder of `evonorm search --out`")
    p.add_argument("--seeds", type=int, default=3, metavar="N",
                   help="fresh training seeds per layer (default 3; the test needs N >= 2; 0 with "
                        "--references: train the references only)")
    p.add_argument("--top", type=int, default=3, metavar="K",
                   help="how many distinct found layers to re-train (default 3)")
    p.add_argument("--references", nargs="*", default=None, metavar="LAYER",
                   help="also train reference layers once (default: bn_relu evonorm_b0 evonorm_s0) "
                        "with the run's own settings into RUN/references.json, which the report's "
                        "Pareto figure marks; about the cost of 3 candidates")
    p.add_argument("--arch", action="append", default=None, metavar="MODULE:FUNCTION",
                   help=RUN_ARCH_HELP)
    return p


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.seeds < 0 or args.top < 0:
        raise CommandError(f"--seeds and --top must be >= 0, got {args.seeds} and {args.top}")
    if args.seeds == 0 and args.references is None:
        raise CommandError("nothing to train: --seeds 0 without --references")
    check_run(args.run)
    check_run_values(args.run)

    try:
        with write_errors(f"run {args.run}"), Store(args.run, readonly=True) as store:
            cfg = store.search_config()
        require_builtin(cfg, "re-training")  # before the lock is taken
    except (ValueError, TypeError) as err:
        raise CommandError(str(err).splitlines()[0]) from None
    user_archs = check_run_archs(args.run, anchor_archs(cfg), args.arch)
    if args.references is not None:
        from evonorm.models import resolve_norm_act

        for name in args.references:  # all known before the first one is trained and saved
            try:
                resolve_norm_act(name)
            except (ValueError, TypeError) as err:
                raise CommandError(str(err).splitlines()[0]) from None

    log = lambda s: print(s, flush=True)  # noqa: E731  (a line per finished run, also without a TTY)
    if args.seeds == 1:  # said before the training, not after it
        log("retrain: one seed per layer cannot decide whether a layer beats another (the test "
            "needs >= 2 per layer); it adds to seeds trained before, or run --seeds 3")
    with run_lock(run_folder(args.run)), write_errors(f"re-training into {args.run}"):
        try:
            if args.references is not None:
                train_references(args.run, args.references or DEFAULT_REFERENCES, log=log,
                                 user_archs=user_archs)
            if args.seeds:
                rows = retrain(args.run, top=args.top, seeds=args.seeds, log=log,
                               user_archs=user_archs)
                print(f"retrain: {len(rows)} (layer, seed) runs in "
                      f"{run_folder(args.run) / 'retrain.jsonl'}")
        except (FileNotFoundError, ValueError) as err:
            raise CommandError(str(err).splitlines()[0]) from None
    print(f"`evonorm report {args.run}` reads them")
    return 0
