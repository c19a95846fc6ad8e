"""`evonorm rerank`: retrain a search's top layers in a larger setting and rank them (Sec. 5.2)."""

from __future__ import annotations

from pathlib import Path

from evonorm.cli import ArgumentParser, CommandError


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="evonorm rerank", description=(
        "Retrain the top layers of a search in a larger setting (the search's rerank preset, or "
        "--preset) on 90%% of the training set, score them on the held-out 10%%, rank by mean "
        "accuracy over the anchor architectures; results go into RUN/store.sqlite."))
    p.add_argument("run", type=Path, help="run folder of `evonorm search --out`")
    p.add_argument("--top", type=int, default=None, help="layers to rerank (default: the preset's, 10 "
                   "for the paper presets)")
    p.add_argument("--preset", default=None, help="training preset for the rerank (tiny, small, "
                   "paper-b, paper-s; default: the search preset's rerank setting)")
    p.add_argument("--steps", type=int, default=None, help="override the training steps")
    p.add_argument("--width", type=float, default=None, help="override the channel multiplier")
    p.add_argument("--n-train", type=int, default=None, help="override the training images")
    return p


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.top is not None and args.top < 1:
        raise CommandError("--top must be >= 1")
    from evonorm.commands._common import check_store, run_lock, write_errors
    from evonorm.report.text import rerank_table
    from evonorm.search.rerank import rerank, rerank_config
    from evonorm.search.store import Store
    from evonorm.train import PRESETS

    check_store(args.run)
    if args.preset is not None and args.preset not in PRESETS:
        raise CommandError(f"unknown training preset {args.preset!r} "
                           f"(choose from {', '.join(PRESETS)})")
    overrides = {k: v for k, v in dict(steps=args.steps, width=args.width,
                                       n_train=args.n_train).items() if v is not None}
    try:  # the setting must be valid before anything is trained or written
        with write_errors(f"run {args.run}"), Store(args.run, readonly=True) as store:
            rerank_config(store.search_config(), args.preset, overrides)
    except (ValueError, TypeError, FileNotFoundError) as err:
        raise CommandError(str(err).splitlines()[0]) from None
    with run_lock(args.run), write_errors(f"run {args.run}"):
        try:
            rows = rerank(args.run, top=args.top, preset=args.preset, overrides=overrides)
        except (ValueError, FileNotFoundError) as err:
            raise CommandError(str(err).splitlines()[0]) from None
    with Store(args.run, readonly=True) as store:
        graphs = {c.id: c.graph for c in store.candidates()}
    print(rerank_table(rows, graphs))
    return 0
