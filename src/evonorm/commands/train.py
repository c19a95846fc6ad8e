"""`evonorm train`: train one layer on one architecture, print its accuracy, write a JSON result.

The trainer, models, data and graph modules are imported when training starts: they load torch,
which `--help` does not need.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from evonorm.cli import ArgumentParser, CommandError
from evonorm.files import write_atomic
from evonorm.search.executors import THREADS_PER_WORKER
from evonorm.commands._common import (ARCH_HELP, DATA_HELP, check_device, check_writable,
                                      dataset_arg, probe_batch, write_errors)


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="evonorm train", description=(
        "Train one normalization-activation layer on one architecture (the proxy task) and "
        "report its test accuracy."))
    p.add_argument("--layer", required=True,
                   help="the layer to train: a registry name or named graph (`evonorm list`), or a graph "
                   "as JSON or @file.json (required)")
    p.add_argument("--arch", default="resnet50_cifar", help=ARCH_HELP)
    p.add_argument("--train-preset", default="small",
                   help="training preset, the recipe every flag below changes one field of: tiny, small, "
                   "paper-b, paper-s (`evonorm list presets`; default small)")
    p.add_argument("--dataset", default=None, help="cifar10, cifar100, fashion_mnist, synthetic "
                   "(default: fashion_mnist when installed, else synthetic)")
    p.add_argument("--data", default=None, metavar="FILE.npz", help=DATA_HELP)
    p.add_argument("--data-root", default=None, help="folder holding the dataset files "
                   "(default: $EVONORM_DATA, else ~/.cache/evonorm/data)")
    p.add_argument("--download", action="store_true", help="download CIFAR (checksummed) if absent (default: off, a "
                   "missing dataset is an error naming how to get it)")
    p.add_argument("--holdout", type=float, default=None, metavar="FRAC",
                   help="evaluate on a held-out FRAC of the training set instead of the test set, as a "
                   "search does so that the test set stays unseen (default: the test set)")
    p.add_argument("--batch-size", type=int, default=None,
                   help="images per training step (default: the training preset's)")
    p.add_argument("--steps", type=int, default=None,
                   help="training steps (default: the training preset's)")
    p.add_argument("--lr", type=float, default=None,
                   help="SGD's learning rate, before --schedule scales it (default: the training "
                   "preset's)")
    p.add_argument("--schedule", choices=("constant", "cosine"), default=None,
                   help="learning-rate schedule (default: the training preset's)")
    p.add_argument("--width", type=float, default=None, help="channel multiplier of a built-in architecture, absolute "
                   "(default: the training preset's)")
    p.add_argument("--n-train", type=int, default=None, help="training images, a subset drawn with --seed (default: "
                   "the training preset's, else all)")
    p.add_argument("--n-test", type=int, default=None, help="test images, a subset drawn with --seed (default: all)")
    p.add_argument("--groups", type=int, default=None, help="groups of the layer's group statistics (default 32, the "
                   "paper's)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the initialisation, the data order and the subsets (default 0)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads (default 1: more threads help little on an idle machine and "
                   "slow badly beside any other busy process; docs/performance.md has the "
                   "measurements)")
    p.add_argument("--channels-last", action=argparse.BooleanOptionalAction, default=None,
                   help="channels_last memory format, faster on some GPUs (default: off)")
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None, help="torch.compile the model: a "
                   "slower start for faster steps on a long run (default: off)")
    p.add_argument("--device", default=None, help="cpu (default), cuda, or auto (cuda where "
                   "available, else cpu)")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress bar (default: when stderr is a terminal)")
    p.add_argument("--out", type=Path, default=None, help="also write the result as JSON to this file (default: "
                   "printed only)")
    return p


def width_note(cfg) -> str:
    """' (width 0.25)' for a built-in architecture; nothing for an external one (as built)."""
    width = cfg.resolved_width()
    return "" if width is None else f" (width {width:g})"


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    import torch

    from evonorm.train import train

    for flag, value in (("--threads", args.threads), ("--groups", args.groups)):
        if value is not None and value < 1:
            raise CommandError(f"{flag} must be >= 1, got {value}")
    device = check_device(args.device)
    dataset = dataset_arg(args.dataset, args.data)
    if args.out is not None:
        check_writable(args.out)
    torch.set_num_threads(args.threads or THREADS_PER_WORKER)
    cfg, factory, ds = _setting(args, device, dataset)

    progress = sys.stderr.isatty() if args.progress is None else args.progress
    print(f"training {args.layer if len(args.layer) < 60 else args.layer[:57] + '...'} on "
          f"{cfg.arch}{width_note(cfg)}, {ds.name}, preset {args.train_preset}: "
          f"{cfg.steps} steps of {cfg.batch_size} on {cfg.device}", flush=True)
    log = None if progress or args.progress is False else (lambda s: print(s, file=sys.stderr, flush=True))
    from evonorm.runtime.paths import recording

    with recording() as calls:  # which implementation the layer ran on, for the record
        result = train(factory, ds, cfg, progress=progress, log=log)
    if result.status == "ok":
        print(f"accuracy {result.accuracy:.4f}  loss {result.final_loss:.4f}  "
              f"{result.seconds:.1f}s ({result.seconds / max(1, result.steps_done):.3f} s/step)")
    else:
        print(f"{result.status}: {result.reason} at step {result.failed_step} "
              f"after {result.seconds:.1f}s")
    if args.out is not None:
        _write_record(args, ds.name, result, calls)
    return 0 if result.status == "ok" else 1


def _setting(args: argparse.Namespace, device: str, dataset: str | None):
    """The training config, the layer's factory and the dataset the flags name, each checked before
    anything trains (a user's architecture by building it once): CommandError, one line."""
    from evonorm.data import default_dataset_name, holdout_split, load_dataset
    from evonorm.graph.library import read_layer
    from evonorm.models import is_builtin, probe_arch, resolve_norm_act
    from evonorm.train import get_train_preset

    preset = args.train_preset
    try:
        cfg = get_train_preset(preset, arch=args.arch, batch_size=args.batch_size, steps=args.steps,
                         lr=args.lr, schedule=args.schedule, width=args.width,
                         n_train=args.n_train, n_test=args.n_test, seed=args.seed,
                         channels_last=args.channels_last, compile=args.compile,
                         device=device)
        layer_kw = {} if args.groups is None else {"groups": args.groups}
        factory = resolve_norm_act(read_layer(args.layer), **layer_kw)
        name = dataset or default_dataset_name(args.data_root)
        ds = load_dataset(name, args.data_root, download=args.download, seed=args.seed)
        if args.holdout is not None:
            ds = holdout_split(ds, args.holdout, seed=args.seed)
        for flag, n, have in (("--n-train", args.n_train, len(ds.train_y)),
                              ("--n-test", args.n_test, len(ds.test_y))):
            if n is not None and n > have:
                raise ValueError(f"{flag} {n} is more than the {have} images {ds.name} has")
        if not is_builtin(cfg.arch):  # the user's builder or timm: checked by building it once
            probe_arch(cfg.arch, num_classes=ds.num_classes, in_chans=ds.channels, batch=probe_batch(ds, cfg),
                       **cfg.layer_kwargs())
    except (ValueError, FileNotFoundError, TypeError) as err:
        raise CommandError(str(err)) from None
    return cfg, factory, ds


def _write_record(args: argparse.Namespace, dataset: str, result, calls: dict) -> None:
    """The run's record as JSON in `--out`, written whole: the layer, data, preset, the result and
    which implementation each layer call ran."""
    record = {"layer": args.layer, "dataset": dataset, "preset": args.train_preset,
              **result.to_dict(), "layer_calls": dict(sorted(calls.items()))}
    with write_errors("the result"):
        args.out.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(args.out, (json.dumps(record, indent=2) + "\n").encode())
    print(f"wrote {args.out}")
