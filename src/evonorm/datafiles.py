"""The datasets by name and where their files are found: no torch or numpy here, so that `evonorm list`
names them (and the default) without loading either; `evonorm.data` loads them."""

from __future__ import annotations

import os
from pathlib import Path

DATASETS = ("cifar10", "cifar100", "fashion_mnist", "synthetic")
FASHION_MNIST_SYSTEM_DIR = Path("/usr/share/datasets/fashion-mnist")
FASHION_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}


def default_root() -> Path:
    """Where datasets live unless a root is given: $EVONORM_DATA or ~/.cache/evonorm/data."""
    return Path(os.environ.get("EVONORM_DATA", Path.home() / ".cache" / "evonorm" / "data"))


def default_dataset_name(root: str | Path | None = None, *, fallback: bool = True) -> str:
    """"fashion_mnist" where its files are installed (works offline), else "synthetic".

    `root` is the data folder the caller will load from (`--data-root`): the files are looked for
    where they will be read. With `fallback=False` a missing Fashion-MNIST raises FileNotFoundError
    saying how to install it, so a search never trains on the synthetic set unless asked to.
    """
    if find_fashion_dir(root) is not None:
        return "fashion_mnist"
    if fallback:
        return "synthetic"
    if root:
        raise FileNotFoundError(f"Fashion-MNIST, the default data, is not in --data-root {root}: expected "
                                f"its four IDX files there or in {Path(root) / 'fashion-mnist'}; or pass "
                                f"--dataset synthetic for the built-in synthetic task")
    raise FileNotFoundError(
        f"Fashion-MNIST, the default data, is not installed: run `apt-get install "
        f"dataset-fashion-mnist` as root (-> {FASHION_MNIST_SYSTEM_DIR}) or put its four IDX files "
        f"in {default_root() / 'fashion-mnist'}; or pass --dataset synthetic for the built-in "
        f"synthetic task")


def find_fashion_dir(root: str | Path | None) -> Path | None:
    """The folder holding the four Fashion-MNIST IDX files under `root` (default: the usual places)."""
    candidates = [Path(root), Path(root) / "fashion-mnist", Path(root) / "fashion_mnist"] if root \
        else [default_root() / "fashion-mnist", FASHION_MNIST_SYSTEM_DIR]
    for folder in candidates:
        if all(idx_path(folder, f) is not None for pair in FASHION_FILES.values() for f in pair):
            return folder
    return None


def idx_path(folder: Path, stem: str) -> Path | None:
    """`stem` in `folder`, gzipped or not."""
    for p in (folder / f"{stem}.gz", folder / stem):
        if p.is_file():
            return p
    return None
