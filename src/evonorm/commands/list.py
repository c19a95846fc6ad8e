"""`evonorm list`: the registered layers, named graphs, architectures, presets and datasets.

Each section comes from its own module; a section whose module is not importable is reported as
such instead of failing the whole listing.

Each section imports its module when listed; each reads plain data (`evonorm.catalog`,
`evonorm.train_config`, `evonorm.datafiles`, the search presets), so listing loads no torch.
"""

from __future__ import annotations

import json
from typing import Callable

from evonorm.cli import ArgumentParser

SECTIONS = ("layers", "graphs", "archs", "presets", "search-presets", "datasets")


def _layers() -> list[str]:
    from evonorm.catalog import LAYERS
    return list(LAYERS)


def _graphs() -> list[str]:
    from evonorm.catalog import GRAPH_SPECS
    return list(GRAPH_SPECS)


def _archs() -> list[str]:
    from evonorm.catalog import ARCHS
    return [f"{name} (width {width:g}{', CIFAR strides' if cifar else ''})"
            for name, (_, width, cifar) in ARCHS.items()] + [
        "timm:NAME (a timm model, the layer at every BatchNorm-activation pair)",
        "MODULE:FUNCTION (your builder fn(norm_act, num_classes, in_chans) -> nn.Module)"]


def _presets() -> list[str]:
    from evonorm.train_config import TRAIN_PRESETS
    return [f"{name}: {c.steps} steps x {c.batch_size}, lr {c.lr:g} {c.schedule}, "
            f"width x{c.width_scale:g}"
            + (f", {c.n_train} train images" if c.n_train else "") for name, c in TRAIN_PRESETS.items()]


def _search_presets() -> list[str]:
    from evonorm.preset_table import preset_names
    return preset_names()


def _datasets() -> list[str]:
    from evonorm.datafiles import DATASETS, default_dataset_name
    default = default_dataset_name()
    return [f"{name}{' (default)' if name == default else ''}" for name in DATASETS] + [
        "FILE.npz (--data: your own images x and labels y, optionally x_test / y_test)"]


LISTERS: dict[str, Callable[[], list[str]]] = {
    "layers": _layers, "graphs": _graphs, "archs": _archs, "presets": _presets,
    "search-presets": _search_presets, "datasets": _datasets}


def main(argv: list[str]) -> int:
    p = ArgumentParser(prog="evonorm list", description=__doc__.splitlines()[0])
    p.add_argument("section", nargs="?", choices=SECTIONS, help="list only this section (default: all)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text, "
                   "for scripts (default: text)")
    args = p.parse_args(argv)
    out: dict[str, list[str] | str] = {}
    for section in ([args.section] if args.section else SECTIONS):
        try:
            out[section] = LISTERS[section]()
        except ImportError as err:
            out[section] = f"unavailable ({err})"
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    for section, items in out.items():
        print(f"{section}:")
        if isinstance(items, str):
            print(f"  {items}")
        else:
            print("\n".join(f"  {item}" for item in items))
    return 0
