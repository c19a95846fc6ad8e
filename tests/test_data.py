import gzip
import pickle
import struct

import numpy as np
import pytest
import torch

from evonorm.data import (Dataset, crop_size, default_dataset_name, eval_batches, holdout_split,
                          load_dataset, normalize, random_crop_flip, read_idx, subset,
                          synthetic_dataset, train_batches)
from evonorm.proxy.config import ProxyTask, configured


def write_cifar10(root, n_per_file=4, seed=0):
    """A miniature CIFAR-10 in the real python-pickle layout; returns (train_x, test_x) arrays."""
    rng = np.random.default_rng(seed)
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    arrays = {}
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        data = rng.integers(0, 256, size=(n_per_file, 3072), dtype=np.uint8)
        labels = [int(v) for v in rng.integers(0, 10, size=n_per_file)]
        with open(folder / name, "wb") as f:
            pickle.dump({b"batch_label": name.encode(), b"data": data, b"labels": labels,
                         b"filenames": [b"x.png"] * n_per_file}, f, protocol=2)
        arrays[name] = (data, labels)
    return folder, arrays


def test_cifar10_reader_parses_the_real_layout(tmp_path):
    folder, arrays = write_cifar10(tmp_path)
    ds = load_dataset("cifar10", tmp_path)
    assert ds.train_x.shape == (20, 3, 32, 32) and ds.train_x.dtype == torch.uint8
    assert ds.test_x.shape == (4, 3, 32, 32) and ds.train_y.dtype == torch.int64
    data, labels = arrays["data_batch_2"]
    # row-major 3072 = 3 planes of 32x32 (R, then G, then B)
    assert torch.equal(ds.train_x[4], torch.from_numpy(data[0].reshape(3, 32, 32)))
    assert ds.train_y[4:8].tolist() == labels
    assert ds.num_classes == 10 and len(ds.mean) == 3 and len(ds.std) == 3


def test_cifar100_reader_uses_fine_labels(tmp_path):
    folder = tmp_path / "cifar-100-python"
    folder.mkdir()
    for name, n in (("train", 6), ("test", 3)):
        with open(folder / name, "wb") as f:
            pickle.dump({b"data": np.zeros((n, 3072), np.uint8), b"fine_labels": [99] * n,
                         b"coarse_labels": [0] * n}, f)
    ds = load_dataset("cifar100", tmp_path)
    assert ds.num_classes == 100 and ds.train_y.tolist() == [99] * 6 and len(ds.test_y) == 3


def test_truncated_cifar_file_is_refused_naming_it(tmp_path):
    folder, _ = write_cifar10(tmp_path)
    path = folder / "data_batch_3"
    path.write_bytes(path.read_bytes()[:5000])
    with pytest.raises(ValueError, match="data_batch_3"):
        load_dataset("cifar10", tmp_path)


def test_cifar_file_with_wrong_shape_is_refused(tmp_path):
    folder, _ = write_cifar10(tmp_path)
    with open(folder / "test_batch", "wb") as f:
        pickle.dump({b"data": np.zeros((4, 100), np.uint8), b"labels": [0] * 4}, f)
    with pytest.raises(ValueError, match="test_batch"):
        load_dataset("cifar10", tmp_path)


def test_missing_cifar_names_the_expected_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="cifar-10-batches-py"):
        load_dataset("cifar10", tmp_path)


def write_idx(path, arr: np.ndarray, code: int = 0x08):
    header = bytes([0, 0, code, arr.ndim]) + struct.pack(f">{arr.ndim}I", *arr.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + arr.tobytes())


def write_fashion(root, n=5):
    rng = np.random.default_rng(0)
    for prefix in ("train", "t10k"):
        write_idx(root / f"{prefix}-images-idx3-ubyte.gz",
                  rng.integers(1, 256, size=(n, 28, 28), dtype=np.uint8))
        write_idx(root / f"{prefix}-labels-idx1-ubyte.gz",
                  rng.integers(0, 10, size=n, dtype=np.uint8))


def test_fashion_mnist_idx_is_read_and_padded_to_32(tmp_path):
    write_fashion(tmp_path)
    ds = load_dataset("fashion_mnist", tmp_path)
    assert ds.train_x.shape == (5, 1, 32, 32) and ds.channels == 1
    raw = read_idx(tmp_path / "train-images-idx3-ubyte.gz")
    assert torch.equal(ds.train_x[:, 0, 2:30, 2:30], raw)
    assert int(ds.train_x[:, :, :2].sum()) == 0 and int(ds.train_x[:, :, :, 30:].sum()) == 0


def test_truncated_idx_is_refused_naming_it(tmp_path):
    write_fashion(tmp_path)
    path = tmp_path / "t10k-images-idx3-ubyte.gz"
    raw = gzip.open(path).read()
    with gzip.open(path, "wb") as f:
        f.write(raw[:-100])
    with pytest.raises(ValueError, match="t10k-images-idx3-ubyte"):
        load_dataset("fashion_mnist", tmp_path)


def test_missing_fashion_mnist_names_the_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match=str(tmp_path)):
        load_dataset("fashion_mnist", tmp_path)


def test_unknown_dataset_name():
    with pytest.raises(ValueError, match="imagenet"):
        load_dataset("imagenet")


def test_default_dataset_name_is_usable():
    assert default_dataset_name() in ("fashion_mnist", "synthetic")


def test_crop_flip_is_a_batched_gather_matching_slices():
    x = torch.arange(2 * 3 * 8 * 8, dtype=torch.int32).view(2, 3, 8, 8).to(torch.uint8)
    gen = torch.Generator().manual_seed(1)
    out = random_crop_flip(x, 6, gen, flip=False)
    assert out.shape == (2, 3, 6, 6)
    for i in range(2):  # every crop is some contiguous 6x6 window of its own image
        found = any(torch.equal(out[i], x[i, :, a:a + 6, b:b + 6]) for a in range(3) for b in range(3))
        assert found
    flipped = random_crop_flip(x, 8, torch.Generator().manual_seed(3), flip=True)
    for i in range(2):
        assert torch.equal(flipped[i], x[i]) or torch.equal(flipped[i], x[i].flip(-1))
    many = random_crop_flip(x.repeat(32, 1, 1, 1), 8, torch.Generator().manual_seed(0))
    n_flipped = sum(not torch.equal(many[i], x[i % 2]) for i in range(64))
    assert 10 < n_flipped < 54


def test_train_batches_are_seeded_cropped_and_normalized():
    ds = synthetic_dataset(100, 20, seed=3)
    a = list(train_batches(ds, 32, 5, seed=7))
    b = list(train_batches(ds, 32, 5, seed=7))
    assert all(torch.equal(xa, xb) and torch.equal(ya, yb) for (xa, ya), (xb, yb) in zip(a, b))
    x, y = a[0]
    assert x.shape == (32, 3, 24, 24) and x.dtype == torch.float32 and crop_size(32) == 24
    assert abs(float(x.mean())) < 0.5 and 0.5 < float(x.std()) < 2
    # 5 batches of 32 from 100 images cross an epoch boundary and stay full
    assert all(len(yb) == 32 for _, yb in a)
    tiny = synthetic_dataset(10, 4, seed=0)  # fewer images than a batch: still full batches
    assert [len(yb) for _, yb in train_batches(tiny, 32, 3)] == [32, 32, 32]
    full = torch.cat([xb for xb, _ in eval_batches(ds, 8)])
    assert torch.allclose(full, normalize(ds.test_x, ds.mean, ds.std))


def test_holdout_split_is_seeded_and_disjoint():
    ds = synthetic_dataset(200, 10, seed=0)
    ds.train_x[:, 0, 0, 0] = torch.arange(200, dtype=torch.uint8)  # tag each image
    h = holdout_split(ds, 0.1, seed=5)
    assert len(h.train_y) == 180 and len(h.test_y) == 20
    kept = set(h.train_x[:, 0, 0, 0].tolist())
    held = set(h.test_x[:, 0, 0, 0].tolist())
    assert not kept & held and len(kept | held) == 200
    assert torch.equal(holdout_split(ds, 0.1, seed=5).test_x, h.test_x)
    assert not torch.equal(holdout_split(ds, 0.1, seed=6).test_x, h.test_x)
    with pytest.raises(ValueError):
        holdout_split(ds, 0.0)


def test_subset_and_synthetic():
    ds = load_dataset("synthetic", n_train=300, n_test=50, seed=1)
    assert isinstance(ds, Dataset) and len(ds.train_y) == 300 and len(ds.test_y) == 50
    small = subset(ds, 40, None, seed=2)
    assert len(small.train_y) == 40 and len(small.test_y) == 50
    assert len(set(ds.train_y.tolist())) == 10


def test_default_dataset_is_looked_for_in_the_given_data_root(tmp_path, monkeypatch):
    # a search given --data-root (and no dataset) finds Fashion-MNIST where it will read it, also on
    # a machine without the system package or the default folder
    import evonorm.datafiles
    from evonorm.proxy.training import with_dataset
    from evonorm.proxy.presets import get_preset

    monkeypatch.setattr(evonorm.datafiles, "FASHION_MNIST_SYSTEM_DIR", tmp_path / "absent")
    monkeypatch.setenv("EVONORM_DATA", str(tmp_path / "default"))
    root = tmp_path / "root"
    (root / "fashion-mnist").mkdir(parents=True)
    write_fashion(root / "fashion-mnist")
    assert default_dataset_name(fallback=True) == "synthetic"
    assert default_dataset_name(root, fallback=False) == "fashion_mnist"
    named = with_dataset(ProxyTask.of_run(configured(get_preset("demo"), data_root=str(root))))
    assert named.settings.dataset == "fashion_mnist"
    with pytest.raises(FileNotFoundError, match=f"not in --data-root {tmp_path / 'absent'}"):
        with_dataset(ProxyTask.of_run(configured(get_preset("demo"), data_root=str(tmp_path / "absent"))))
