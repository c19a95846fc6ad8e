"""Datasets for the proxy task, held in memory as uint8 tensors, augmented in whole batches.

Readers: CIFAR-10/100 (python-pickle layout, optional checksummed download), Fashion-MNIST (IDX
files, zero-padded 28 -> 32 so the CIFAR models and 24x24 crops apply unchanged), a user's own
images in a .npz file (`load_npz`), and a learnable synthetic set for tests. Every reader checks sizes and refuses a corrupt or truncated file with an
error that names it: a silently partial dataset would make every accuracy wrong.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import math
import os
import pickle
import shutil
import struct
import tarfile
import tempfile
import urllib.request
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterator

import numpy as np
import torch

from evonorm import datafiles
from evonorm.datafiles import (DATASETS, FASHION_FILES, default_dataset_name, default_root,
                               find_fashion_dir, idx_path)

SYNTHETIC_MAX = (50_000, 10_000)  # train, test: CIFAR's sizes; generated, so bounded by hand
NPZ_MAX_BYTES = 8 << 30  # a .npz file's arrays, uncompressed: past it a file is refused, not read
NPZ_TEST_FRACTION = 0.2  # held out (seed 0) as the test split of a .npz without x_test / y_test

_CIFAR = {
    "cifar10": dict(folder="cifar-10-batches-py", classes=10, label_key=b"labels",
                    train=[f"data_batch_{i}" for i in range(1, 6)], test=["test_batch"],
                    url="https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
                    md5="c58f30108f718f92721af3b95e74349a"),
    "cifar100": dict(folder="cifar-100-python", classes=100, label_key=b"fine_labels",
                     train=["train"], test=["test"],
                     url="https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz",
                     md5="eb9058c3a382ffc7106e4002c42a8d85"),
}


@dataclass
class Dataset:
    """An image classification set in memory: images (N, C, H, W), uint8 (0..255) or float32 (a
    user's own data, on its own scale; `mean` and `std` are then on that scale), int64 labels."""

    name: str
    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    num_classes: int
    mean: tuple[float, ...]  # per channel, on the [0, 1] scale
    std: tuple[float, ...]

    @property
    def channels(self) -> int:
        return int(self.train_x.shape[1])

    @property
    def image_size(self) -> int:
        """The shorter side (training crops are squares of 3/4 of it)."""
        return int(min(self.train_x.shape[-2:]))

    def __repr__(self) -> str:
        return (f"Dataset({self.name!r}, train={tuple(self.train_x.shape)}, "
                f"test={tuple(self.test_x.shape)}, classes={self.num_classes})")


def is_npz(name: str | None) -> bool:
    """Whether a dataset name is a file of the user's own images (`load_npz`): it ends in .npz."""
    return isinstance(name, str) and name.lower().endswith(".npz")


def load_dataset(name: str, root: str | Path | None = None, *, download: bool = False,
                 n_train: int | None = None, n_test: int | None = None, seed: int = 0,
                 sha256: str | None = None) -> Dataset:
    """Load a dataset by name; `n_train`/`n_test` keep a seeded random subset of each split.

    A name ending in .npz is a file of the user's own images (`load_npz`; `sha256`, when given,
    must be the file's, so a run reads the very file it started with). Asking for more images
    than a split holds is a ValueError (the synthetic set holds at most SYNTHETIC_MAX), so a typo
    cannot silently shrink the request or exhaust memory.
    """
    if is_npz(name):
        ds = load_npz(name, sha256=sha256)
    elif name == "synthetic":
        _check_sizes(name, n_train, n_test, *SYNTHETIC_MAX)
        return synthetic_dataset(n_train=n_train or 2048, n_test=n_test or 512, seed=seed)
    elif name == "cifar10" or name == "cifar100":
        ds = _load_cifar(name, Path(root) if root else default_root(), download)
    elif name == "fashion_mnist":
        ds = _load_fashion_mnist(root)
    else:
        raise ValueError(f"unknown dataset {name!r} (choose from {', '.join(DATASETS)}, or a "
                         f"file.npz of your own)")
    _check_sizes(name, n_train, n_test, len(ds.train_y), len(ds.test_y))
    return subset(ds, n_train, n_test, seed=seed)


def _check_sizes(name: str, n_train: int | None, n_test: int | None, max_train: int,
                 max_test: int) -> None:
    for n, limit, split in ((n_train, max_train, "training"), (n_test, max_test, "test")):
        if n is not None and not 1 <= n <= limit:
            raise ValueError(f"{name} has {limit} {split} images: asked for {n} (must be 1..{limit})")


def to_device(ds: Dataset, device: torch.device | str) -> Dataset:
    """The dataset with its tensors on `device` (itself when they are there already): moved once,
    then every batch is cut where the model runs, with no copy per step."""
    device = torch.device(device)
    if ds.train_x.device == device and ds.test_x.device == device:
        return ds
    return replace(ds, train_x=ds.train_x.to(device), train_y=ds.train_y.to(device),
                   test_x=ds.test_x.to(device), test_y=ds.test_y.to(device))


def subset_indices(n: int, size: int | None, generator: torch.Generator) -> torch.Tensor:
    """Sorted indices of a random `size` of `n` items drawn from `generator` (all of them for None
    or a size >= n); what `subset` keeps of a split."""
    if size is None or size >= n:
        return torch.arange(n)
    if size < 1:
        raise ValueError(f"subset size must be >= 1, got {size}")
    return torch.randperm(n, generator=generator)[:size].sort().values


def subset(ds: Dataset, n_train: int | None = None, n_test: int | None = None,
           seed: int = 0) -> Dataset:
    """A seeded random subset of each split (None or a size >= the split keeps it whole)."""
    gen = torch.Generator().manual_seed(seed)

    def pick(x: torch.Tensor, y: torch.Tensor, n: int | None):
        if n is None or n >= len(y):
            return x, y
        idx = subset_indices(len(y), n, gen).to(x.device)
        return x[idx], y[idx]

    train_x, train_y = pick(ds.train_x, ds.train_y, n_train)
    test_x, test_y = pick(ds.test_x, ds.test_y, n_test)
    return replace(ds, train_x=train_x, train_y=train_y, test_x=test_x, test_y=test_y)


def holdout_indices(n: int, frac: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(kept, held): sorted indices of a seeded split of `n` training images, `frac` held out."""
    if not 0.0 < frac < 1.0:  # also refuses nan
        raise ValueError(f"holdout fraction must be in (0, 1), got {frac}")
    n_held = int(round(n * frac))
    if not 0 < n_held < n:
        raise ValueError(f"holdout fraction {frac} leaves an empty split of {n} training images")
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    return perm[n_held:].sort().values, perm[:n_held].sort().values


def holdout_split(ds: Dataset, frac: float = 0.1, seed: int = 0) -> Dataset:
    """Train on a seeded (1 - frac) of the training set, test on the held-out rest (the search's
    fitness; it never sees the test split)."""
    kept, held = (i.to(ds.train_x.device) for i in holdout_indices(len(ds.train_y), frac, seed))
    return replace(ds, name=f"{ds.name}-holdout", train_x=ds.train_x[kept],
                   train_y=ds.train_y[kept], test_x=ds.train_x[held], test_y=ds.train_y[held])


# ----------------------------------------------------------------------------- batches

def crop_size(image_size: int) -> int:
    """Training crop: 24 for 32x32 images (the paper's), the same 3/4 ratio otherwise."""
    return max(1, (image_size * 3) // 4)


def normalize(x: torch.Tensor, mean, std) -> torch.Tensor:
    """(B, C, H, W) -> float32, per-channel standardized (on x's device): uint8 images on the
    [0, 1] scale, float images on their own."""
    m = torch.tensor(mean, dtype=torch.float32, device=x.device).view(1, -1, 1, 1)
    s = torch.tensor(std, dtype=torch.float32, device=x.device).view(1, -1, 1, 1)
    x = x.float().div_(255.0) if x.dtype == torch.uint8 else x.float()
    return (x - m) / s


def random_crop_flip(x: torch.Tensor, size: int, generator: torch.Generator,
                     flip: bool = True) -> torch.Tensor:
    """Random `size`x`size` crops and horizontal flips of a whole batch, by one gather.

    The offsets come from `generator` on the CPU (the same crops on every device); the gather
    runs where `x` is.
    """
    b, c, h, w = x.shape
    if size > h or size > w:
        raise ValueError(f"crop {size} larger than images {h}x{w}")
    oy = torch.randint(0, h - size + 1, (b, 1), generator=generator)
    ox = torch.randint(0, w - size + 1, (b, 1), generator=generator)
    ar = torch.arange(size).view(1, size)
    rows = oy + ar  # (B, size)
    cols = ox + ar
    if flip:
        flipped = torch.rand(b, generator=generator) < 0.5
        cols = torch.where(flipped.view(b, 1), cols.flip(1), cols)
    bi = torch.arange(b, device=x.device).view(b, 1, 1, 1)
    ci = torch.arange(c, device=x.device).view(1, c, 1, 1)
    rows, cols = rows.to(x.device), cols.to(x.device)
    return x[bi, ci, rows.view(b, 1, size, 1), cols.view(b, 1, 1, size)]


def train_batches(ds: Dataset, batch_size: int, steps: int, *, seed: int = 0,
                  crop: int | None = None, flip: bool = True) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """`steps` augmented, normalized training batches; seeded epochs of shuffled images.

    Batches are cut on the device the dataset's tensors are on (`to_device`); the order and the
    augmentation come from a CPU generator, so they are the same on every device.
    """
    n = len(ds.train_y)
    if n == 0:
        raise ValueError(f"dataset {ds.name!r} has no training images")
    size = crop or crop_size(ds.image_size)
    gen = torch.Generator().manual_seed(seed)
    order = torch.randperm(n, generator=gen)
    pos = 0
    for _ in range(steps):
        if pos + batch_size > len(order):  # new epoch(s); keep the tail so batches stay full
            parts = [order[pos:]]
            while sum(len(p) for p in parts) < batch_size:
                parts.append(torch.randperm(n, generator=gen))
            order, pos = torch.cat(parts), 0
        idx = order[pos:pos + batch_size].to(ds.train_x.device)
        pos += batch_size
        x = random_crop_flip(ds.train_x[idx], size, gen, flip=flip)
        yield normalize(x, ds.mean, ds.std), ds.train_y[idx]


def eval_batches(ds: Dataset, batch_size: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The full-size test images, normalized, in order."""
    for i in range(0, len(ds.test_y), batch_size):
        yield normalize(ds.test_x[i:i + batch_size], ds.mean, ds.std), ds.test_y[i:i + batch_size]


# ----------------------------------------------------------------------------- CIFAR

def _load_cifar(name: str, root: Path, download: bool) -> Dataset:
    info = _CIFAR[name]
    folder = root / info["folder"]
    if not folder.is_dir():
        if download:
            _download_cifar(info, root)
        else:
            raise FileNotFoundError(
                f"{name}: expected the python version of the dataset in {folder} "
                f"(extract {info['url'].rsplit('/', 1)[1]} into {root}, or pass download=True / "
                f"--download when online)")
    train = [_read_cifar_file(folder / f, info["label_key"], info["classes"]) for f in info["train"]]
    test = [_read_cifar_file(folder / f, info["label_key"], info["classes"]) for f in info["test"]]
    train_x = torch.cat([x for x, _ in train])
    test_x = torch.cat([x for x, _ in test])
    mean, std = _channel_stats(train_x)
    return Dataset(name, train_x, torch.cat([y for _, y in train]), test_x,
                   torch.cat([y for _, y in test]), info["classes"], mean, std)


class _CifarUnpickler(pickle.Unpickler):
    """Unpickles what a CIFAR batch holds (dicts, lists, str/bytes, ints, numpy arrays) and
    refuses every other global, so a planted file cannot run code."""

    def find_class(self, module: str, name: str):
        allowed = _cifar_globals()
        if (module, name) not in allowed:
            raise pickle.UnpicklingError(f"refused global {module}.{name} (not part of a CIFAR file)")
        return allowed[(module, name)]


def _cifar_globals() -> dict[tuple[str, str], object]:
    """The globals numpy's array pickles name (old and new module paths), as this numpy's objects."""
    reconstruct = np.zeros(1).__reduce_ex__(2)[0]  # numpy.(_)core.multiarray._reconstruct
    frombuffer = np.zeros(1).__reduce_ex__(5)[0]  # numpy.(_)core.numeric._frombuffer
    out: dict[tuple[str, str], object] = {("numpy", "ndarray"): np.ndarray,
                                          ("numpy", "dtype"): np.dtype,
                                          ("_codecs", "encode"): _latin1_encode}
    for core in ("numpy.core", "numpy._core"):
        out[(f"{core}.multiarray", "_reconstruct")] = reconstruct
        out[(f"{core}.numeric", "_frombuffer")] = frombuffer
    return out


def _latin1_encode(text: str, encoding: str = "utf-8") -> bytes:
    """What protocol-2 pickles of bytes call (`_codecs.encode(text, "latin1")`), latin-1 only."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise pickle.UnpicklingError(f"refused _codecs.encode with encoding {encoding!r}")
    return text.encode("latin1")


def _read_cifar_file(path: Path, label_key: bytes, classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One pickled CIFAR batch -> (uint8 N x 3 x 32 x 32, int64 N); any damage names the file."""
    if not path.is_file():
        raise FileNotFoundError(f"missing CIFAR file {path}")
    try:
        with open(path, "rb") as f:
            d = _CifarUnpickler(f, encoding="bytes").load()
        data = np.asarray(d[b"data"], dtype=np.uint8)
        labels = np.asarray(d[label_key], dtype=np.int64)
    except Exception as err:  # truncated pickle, wrong content, missing key
        raise ValueError(f"corrupt CIFAR file {path}: {type(err).__name__}: {err}") from None
    if data.ndim != 2 or data.shape[1] != 3 * 32 * 32 or data.shape[0] != labels.shape[0]:
        raise ValueError(f"corrupt CIFAR file {path}: data {data.shape} and "
                         f"{labels.shape[0]} labels do not describe N x 3072 images")
    if labels.size and (labels.min() < 0 or labels.max() >= classes):
        raise ValueError(f"corrupt CIFAR file {path}: labels outside 0..{classes - 1}")
    x = torch.from_numpy(data.reshape(-1, 3, 32, 32).copy())
    return x, torch.from_numpy(labels)


def _download_cifar(info: dict, root: Path) -> None:
    """Download the archive, verify its md5, extract; nothing is left half-written on failure."""
    root.mkdir(parents=True, exist_ok=True)
    url, md5 = info["url"], info["md5"]
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        archive = Path(tmp) / url.rsplit("/", 1)[1]
        try:
            with urllib.request.urlopen(url, timeout=60) as resp, open(archive, "wb") as out:
                shutil.copyfileobj(resp, out)
        except OSError as err:
            raise FileNotFoundError(f"could not download {url} ({err}); place the extracted "
                                    f"{info['folder']} folder in {root}") from None
        digest = hashlib.md5(archive.read_bytes()).hexdigest()
        if digest != md5:
            raise ValueError(f"checksum mismatch for {url}: md5 {digest}, expected {md5}")
        with tarfile.open(archive) as tar:
            tar.extractall(tmp, filter="data")
        os.replace(Path(tmp) / info["folder"], root / info["folder"])


# ----------------------------------------------------------------------------- Fashion-MNIST

def _load_fashion_mnist(root: str | Path | None) -> Dataset:
    folder = find_fashion_dir(root)
    if folder is None:
        where = root if root else f"{default_root() / 'fashion-mnist'} or {datafiles.FASHION_MNIST_SYSTEM_DIR}"
        raise FileNotFoundError(
            f"fashion_mnist: expected train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz], "
            f"t10k-images-idx3-ubyte[.gz] and t10k-labels-idx1-ubyte[.gz] in {where} "
            f"(Debian/Ubuntu: apt install dataset-fashion-mnist)")
    splits = {}
    for split, (img_stem, lbl_stem) in FASHION_FILES.items():
        x = read_idx(idx_path(folder, img_stem))
        y = read_idx(idx_path(folder, lbl_stem))
        if x.ndim != 3 or y.ndim != 1 or len(x) != len(y):
            raise ValueError(f"corrupt Fashion-MNIST files in {folder}: images {tuple(x.shape)} "
                             f"and labels {tuple(y.shape)} do not match")
        if y.numel() and int(y.max()) > 9:
            raise ValueError(f"corrupt Fashion-MNIST labels in {folder}: values above 9")
        h, w = x.shape[1:]
        # zero-pad to 32x32 (28 -> 2 pixels each side): the CIFAR models and 24x24 crops apply as-is
        ph, pw = max(0, 32 - h), max(0, 32 - w)
        x = torch.nn.functional.pad(x.unsqueeze(1), (pw // 2, pw - pw // 2, ph // 2, ph - ph // 2))
        splits[split] = (x, y.long())
    mean, std = _channel_stats(splits["train"][0])
    return Dataset("fashion_mnist", *splits["train"], *splits["test"], 10, mean, std)


_IDX_TYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: np.dtype(">i2"), 0x0C: np.dtype(">i4"),
              0x0D: np.dtype(">f4"), 0x0E: np.dtype(">f8")}


def read_idx(path: Path) -> torch.Tensor:
    """An IDX file (optionally gzipped) as a tensor; a bad header or wrong length names the file."""
    try:
        raw = gzip.open(path).read() if str(path).endswith(".gz") else Path(path).read_bytes()
    except (OSError, EOFError) as err:
        raise ValueError(f"corrupt IDX file {path}: {err}") from None
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_TYPES:
        raise ValueError(f"corrupt IDX file {path}: bad magic number")
    ndim = raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ValueError(f"corrupt IDX file {path}: truncated header")
    dims = struct.unpack(f">{ndim}I", raw[4:header])
    dtype = np.dtype(_IDX_TYPES[raw[2]])
    expected = int(np.prod(dims)) * dtype.itemsize
    if len(raw) - header != expected:
        raise ValueError(f"corrupt IDX file {path}: {len(raw) - header} data bytes, "
                         f"expected {expected} for shape {dims}")
    arr = np.frombuffer(raw, dtype=dtype, offset=header).reshape(dims)
    return torch.from_numpy(arr.astype(arr.dtype.newbyteorder("="), copy=True))


# ----------------------------------------------------------------------------- synthetic

def synthetic_dataset(n_train: int = 2048, n_test: int = 512, *, num_classes: int = 10,
                      channels: int = 3, size: int = 32, seed: int = 0) -> Dataset:
    """A learnable stand-in for CIFAR: each class is a smooth random template plus noise.

    Templates are low-frequency (upsampled 4x4 patterns) so 24x24 crops and flips keep the class
    recognisable; the noise keeps it from being solved in a single step.
    """
    gen = torch.Generator().manual_seed(seed)
    coarse = torch.rand(num_classes, channels, 4, 4, generator=gen)
    templates = torch.nn.functional.interpolate(coarse, size=(size, size), mode="bilinear",
                                                align_corners=False)

    def draw(n: int):
        y = torch.randint(0, num_classes, (n,), generator=gen)
        x = templates[y] * 160 + 48 + torch.randn(n, channels, size, size, generator=gen) * 40
        return x.clamp_(0, 255).to(torch.uint8), y

    train_x, train_y = draw(n_train)
    test_x, test_y = draw(n_test)
    mean, std = _channel_stats(train_x)
    return Dataset("synthetic", train_x, train_y, test_x, test_y, num_classes, mean, std)


def _channel_stats(x: torch.Tensor) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel mean and std, from (a sample of) the training images: on the [0, 1] scale for
    uint8 images, on their own for float ones (as `normalize` reads them)."""
    sample = x[:: max(1, len(x) // 10000)].double()
    if x.dtype == torch.uint8:
        sample = sample.div(255.0)
    mean = sample.mean(dim=(0, 2, 3))
    std = sample.std(dim=(0, 2, 3)).clamp_min(1e-3)
    return tuple(float(v) for v in mean), tuple(float(v) for v in std)


# ----------------------------------------------------------------------------- a user's .npz

def file_sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _size(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def read_npz_bytes(path: str | Path, *, max_bytes: int = NPZ_MAX_BYTES) -> bytes:
    """The file's bytes, or a one-line error: missing, not a file, or over `max_bytes`."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if not path.is_file():
            raise ValueError(f"{path} is not a file")
        if size > max_bytes:
            raise ValueError(f"{path} is {_size(size)}, more than the {_size(max_bytes)} a "
                             f"dataset may take")
        return path.read_bytes()
    except FileNotFoundError:  # a ValueError like every other problem with the file (an
        # OSError would read as the caller's own I/O failure)
        raise ValueError(f"no such data file {path}") from None
    except OSError as err:
        raise ValueError(f"cannot read data file {path}: {err.strerror or err}") from None


def load_npz(path: str | Path, *, sha256: str | None = None,
             max_bytes: int = NPZ_MAX_BYTES) -> Dataset:
    """A user's own images from a .npz file (numpy.savez), checked whole before anything trains.

    Arrays: `x`, the images, and `y`, integer labels 0..K-1 (every class present in `y`);
    optionally `x_test` / `y_test` (both or neither), else a seeded NPZ_TEST_FRACTION of the
    images is held out as the test split. `x` is uint8 (0..255) or float (finite, used on its own
    scale) in one of these layouts:

    - N x H x W: one channel;
    - N x H x W x C when the last axis is 1 or 3 and the second is not;
    - N x C x H x W when the second axis is 1 or 3 and the last is not;

    anything else (both or neither of those axes 1 or 3) is refused as ambiguous. Read with
    `allow_pickle=False` (an array of Python objects is refused, never unpickled); the file and
    its arrays, uncompressed, may take at most `max_bytes`. With `sha256` the file must be that
    one (a run reads the file it started with). Every problem, a missing file included, is a
    ValueError naming the file and the problem, in one line.
    """
    path = Path(path)
    raw = read_npz_bytes(path, max_bytes=max_bytes)
    if sha256 is not None and file_sha256(raw) != sha256:
        raise ValueError(f"data file {path} is not the file the run started with: changed or "
                         f"replaced (its sha256 is {file_sha256(raw)[:12]}..., the run's "
                         f"{sha256[:12]}...)")

    def bad(problem: str) -> ValueError:
        return ValueError(f"data file {path}: {problem}")

    _check_npz_size(raw, max_bytes, bad)
    arrays = _npz_arrays(raw, path, bad)
    x, y = _npz_images(arrays["x"], "x", bad), _npz_labels(arrays["y"], "y", bad)
    if len(x) != len(y):
        raise bad(f"x holds {len(x)} images and y {len(y)} labels")
    classes = _npz_classes(y, bad)
    if "x_test" in arrays:
        x_test, y_test = _npz_test_split(arrays, x, classes, bad)
    else:
        try:
            kept, held = holdout_indices(len(x), NPZ_TEST_FRACTION, seed=0)
        except ValueError:
            raise bad(f"{len(x)} images are too few to hold out a test split: add more, or "
                      f"x_test / y_test") from None
        x, y, x_test, y_test = x[kept.numpy()], y[kept.numpy()], x[held.numpy()], y[held.numpy()]
    train_x, test_x = torch.from_numpy(np.ascontiguousarray(x)), torch.from_numpy(np.ascontiguousarray(x_test))
    mean, std = _channel_stats(train_x)
    return Dataset(str(path), train_x, torch.from_numpy(y), test_x, torch.from_numpy(y_test),
                   classes, mean, std)


def _check_npz_size(raw: bytes, max_bytes: int, bad) -> None:
    """The archive's arrays take at most `max_bytes` uncompressed, as stored and as their headers
    declare (a header may declare more than its member holds): checked before any allocation."""
    try:
        with zipfile.ZipFile(io.BytesIO(raw)) as zf:
            unpacked = sum(info.file_size for info in zf.infolist())
            if unpacked <= max_bytes:
                declared = sum(_npy_bytes(zf, key, bad) for key in NPZ_ARRAYS
                               if key in zf.namelist() or f"{key}.npy" in zf.namelist())
    except (zipfile.BadZipFile, OSError, EOFError):
        raise bad("not a .npz archive (save one with numpy.savez(path, x=images, y=labels))") from None
    if unpacked > max_bytes:
        raise bad(f"its arrays take {_size(unpacked)} uncompressed, more than the "
                  f"{_size(max_bytes)} a dataset may take")
    if declared > max_bytes:
        raise bad(f"its arrays declare {_size(declared)} in their headers, more than the "
                  f"{_size(max_bytes)} a dataset may take")


def _npz_arrays(raw: bytes, path: Path, bad) -> dict[str, np.ndarray]:
    """The archive's x and y, and x_test and y_test where it has both, never unpickled."""
    try:
        with np.load(io.BytesIO(raw), allow_pickle=False) as npz:
            names = set(npz.files)
            missing = [k for k in ("x", "y") if k not in names]
            if missing:
                raise bad(f"no array {' or '.join(map(repr, missing))} (it holds "
                          f"{', '.join(sorted(names)) or 'nothing'}; need x: images, y: labels)")
            if ("x_test" in names) != ("y_test" in names):
                raise bad("x_test and y_test come together (or neither: a held-out split is "
                          "the test set)")
            return {k: npz[k] for k in NPZ_ARRAYS if k in names}
    except ValueError as err:
        if "allow_pickle" in str(err) or "Object arrays" in str(err):
            raise bad("an array holds Python objects (a pickle), which is never loaded: save "
                      "plain numeric arrays") from None
        if str(err).startswith(f"data file {path}"):
            raise
        raise bad(f"unreadable ({type(err).__name__}: {str(err).splitlines()[0][:200]})") from None
    except (OSError, EOFError, zipfile.BadZipFile, KeyError) as err:
        raise bad(f"unreadable ({type(err).__name__}: {str(err).splitlines()[0][:200]})") from None


def _npz_classes(y: np.ndarray, bad) -> int:
    """The number of classes K: the labels are 0..K-1, each present, at least two."""
    present = np.unique(y)
    classes = int(present[-1]) + 1
    if len(present) < 2:
        raise bad("y holds one class: a classifier needs at least two")
    if len(present) != classes:
        gap = int(np.argmax(present != np.arange(len(present))))
        raise bad(f"labels must be 0..K-1 with every class in y: {classes - len(present)} of "
                  f"0..{classes - 1} never occur (e.g. {gap}); re-index them")
    return classes


def _npz_test_split(arrays: dict[str, np.ndarray], x: np.ndarray, classes: int,
                    bad) -> tuple[np.ndarray, np.ndarray]:
    """The file's own test split: images like x's, labels among y's classes."""
    x_test, y_test = _npz_images(arrays["x_test"], "x_test", bad), _npz_labels(arrays["y_test"], "y_test", bad)
    if len(x_test) != len(y_test):
        raise bad(f"x_test holds {len(x_test)} images and y_test {len(y_test)} labels")
    if x_test.shape[1:] != x.shape[1:] or x_test.dtype != x.dtype:
        raise bad(f"x_test's images are {x_test.dtype} {'x'.join(map(str, x_test.shape[1:]))} "
                  f"(C x H x W), x's {x.dtype} {'x'.join(map(str, x.shape[1:]))}: they must match")
    if y_test.max() >= classes:
        raise bad(f"y_test has label {int(y_test.max())}, but y's classes are 0..{classes - 1}")
    return x_test, y_test


NPZ_ARRAYS = ("x", "y", "x_test", "y_test")


def _npy_bytes(zf: zipfile.ZipFile, key: str, bad) -> int:
    """The bytes a member's .npy header declares (shape x item size), read without loading the array: it
    must be a .npy array (not raw bytes) of integers or floats."""
    if f"{key}.npy" not in zf.namelist():
        raise bad(f"{key} is not a numpy array (a raw file in the archive): save arrays with numpy.savez")
    readers = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
    with zf.open(f"{key}.npy") as f:
        try:
            version = np.lib.format.read_magic(f)
            if version not in readers:
                raise ValueError(f"npy format version {version}")
            shape, _, dtype = readers[version](f)
        except ValueError as err:
            raise bad(f"{key} is not a plain numpy array ({str(err).splitlines()[0][:120]})") from None
    if dtype.hasobject:
        raise bad("an array holds Python objects (a pickle), which is never loaded: save plain numeric arrays")
    if dtype.kind not in "iuf" or dtype.fields is not None:
        raise bad(f"{key} is {dtype}: arrays must hold integers or floats")
    return math.prod(shape) * dtype.itemsize


def _npz_images(x: np.ndarray, key: str, bad) -> np.ndarray:
    """Images as N x C x H x W, uint8 or float32 (the layout rule: `load_npz`)."""
    if x.dtype != np.uint8 and x.dtype.kind != "f":
        raise bad(f"{key} is {x.dtype}: images must be uint8 (0..255) or float")
    if x.ndim == 3:
        x = x[:, None]
    elif x.ndim == 4:
        last, second = x.shape[3] in (1, 3), x.shape[1] in (1, 3)
        if last and not second:
            x = x.transpose(0, 3, 1, 2)
        elif not (second and not last):
            raise bad(f"{key} has shape {x.shape}: its layout is ambiguous (N x H x W x C needs the "
                      f"last axis 1 or 3 and the second not; N x C x H x W the second 1 or 3 and "
                      f"the last not)")
    else:
        raise bad(f"{key} has shape {x.shape}: images must be N x H x W, N x H x W x C or "
                  f"N x C x H x W")
    if 0 in x.shape:
        raise bad(f"{key} has shape {x.shape}: no images")
    if x.dtype.kind == "f":
        finite = np.isfinite(x)
        if not finite.all():
            raise bad(f"{key} holds {int(x.size - finite.sum())} non-finite values (NaN or inf)")
        x = x.astype(np.float32)
        if not np.isfinite(x).all():
            raise bad(f"{key} holds values too large for float32")
    return x


def _npz_labels(y: np.ndarray, key: str, bad) -> np.ndarray:
    """Labels as int64, 1-D, >= 0 (checked after the cast, and before it for what int64 cannot hold: a uint64
    2**64 - 1 would become -1)."""
    if y.dtype.kind not in "iu":
        raise bad(f"{key} is {y.dtype}: labels must be integers 0..K-1")
    if y.ndim != 1:
        raise bad(f"{key} has shape {y.shape}: labels must be one integer per image")
    if y.size == 0:
        raise bad(f"{key} holds no labels")
    if int(y.max()) > np.iinfo(np.int64).max:
        raise bad(f"{key} has label {int(y.max())}: labels must be 0..K-1")
    labels = y.astype(np.int64)
    if labels.min() < 0:
        raise bad(f"{key} has label {int(y.min())}: labels must be 0..K-1")
    return labels
