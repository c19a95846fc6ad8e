"""A user's own images in a .npz file (`--data FILE.npz`, `evonorm.data.load_npz`): the layout rule, the
held-out split, a run that reads the very file it started with, and every bad file refused in one line
(Python: a ValueError naming the file; command line: exit 2, one line, nothing written)."""

from __future__ import annotations

import io
import pickle
import zipfile

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from evonorm.data import NPZ_TEST_FRACTION, load_dataset, load_npz
from evonorm.proxy.presets import get_preset
from test_cli_fuzz import check_refused
from evonorm.proxy.config import ProxyTask, configured, stored_task


def _images(n=40, shape=(8, 8), classes=4, dtype=np.uint8, seed=0):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % classes
    x = rng.random((n, *shape)) * 100 + y.reshape(-1, *[1] * len(shape)) * 30
    return (x.astype(dtype) if dtype == np.uint8 else (x / 255).astype(dtype)), y


def _save(path, **arrays):
    np.savez(path, **arrays)
    return path


# ------------------------------------------------------------------------------ reading

@pytest.mark.parametrize("shape, channels", [((8, 8), 1), ((8, 8, 3), 3), ((3, 8, 8), 3),
                                             ((8, 8, 1), 1), ((1, 8, 8), 1), ((3, 8, 5), 3)])
def test_layouts(tmp_path, shape, channels):
    x, y = _images(shape=shape)
    ds = load_npz(_save(tmp_path / "d.npz", x=x, y=y))
    assert ds.train_x.shape[1:] == (channels, 8, 8 if shape != (3, 8, 5) else 5)
    assert ds.channels == channels and ds.num_classes == 4 and ds.train_x.dtype == torch.uint8
    if shape == (8, 8, 3):  # N x H x W x C is transposed, not reshaped
        kept = ds.train_y[0]
        first = int(np.flatnonzero(y == int(kept))[0])
        assert torch.equal(ds.train_x[0], torch.from_numpy(x[first]).permute(2, 0, 1))


def test_held_out_split_and_explicit_test_split(tmp_path):
    x, y = _images(n=50)
    ds = load_dataset(str(_save(tmp_path / "d.npz", x=x, y=y)))
    assert len(ds.test_y) == round(50 * NPZ_TEST_FRACTION) and len(ds.train_y) + len(ds.test_y) == 50
    again = load_npz(tmp_path / "d.npz")
    assert torch.equal(again.test_x, ds.test_x)  # seeded: every command sees the same split
    xt, yt = _images(n=12, seed=1)
    ds = load_npz(_save(tmp_path / "t.npz", x=x, y=y, x_test=xt, y_test=yt))
    assert len(ds.train_y) == 50 and len(ds.test_y) == 12 and ds.name == str(tmp_path / "t.npz")
    assert len(load_dataset(str(tmp_path / "t.npz"), n_train=20).train_y) == 20


def test_float_images_keep_their_scale(tmp_path):
    from evonorm.data import normalize

    x, y = _images(dtype=np.float64)
    ds = load_npz(_save(tmp_path / "f.npz", x=x * 7.0, y=y))
    assert ds.train_x.dtype == torch.float32
    z = normalize(ds.train_x, ds.mean, ds.std)
    assert abs(float(z.mean())) < 0.1 and abs(float(z.std()) - 1.0) < 0.1


def test_the_run_reads_the_file_it_started_with(tmp_path, monkeypatch):
    from evonorm.proxy.api import start
    from evonorm.proxy.training import search_dataset

    x, y = _images(n=60)
    path = _save(tmp_path / "d.npz", x=x, y=y)
    monkeypatch.chdir(tmp_path)
    cfg = start(configured(get_preset("tiny", dataset="d.npz"), n_train=None))[0]
    assert stored_task(cfg).dataset == str(path) and len(stored_task(cfg).data_sha256) == 64
    assert search_dataset(ProxyTask.of_run(cfg)).num_classes == 4
    x[0, 0, 0] ^= 1
    _save(path, x=x, y=y)
    with pytest.raises(ValueError, match="not the file the run started with"):
        load_dataset(stored_task(cfg).dataset, sha256=stored_task(cfg).data_sha256)
    path.unlink()
    with pytest.raises(ValueError, match="no such data file"):
        load_dataset(stored_task(cfg).dataset, sha256=stored_task(cfg).data_sha256)


# ------------------------------------------------------------------------------ bad files

class _Marker:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def _bad_files(ws):
    """(name, writer, the problem's words) for each kind of bad file."""
    x, y = _images()
    xf, _ = _images(dtype=np.float32)
    nan = xf.copy()
    nan[3, 2, 2] = np.nan

    def pickled(p):  # an object array: loading it would unpickle (and run) code
        np.savez(p, x=np.array([_Marker(str(ws / "ran"))] * 40, dtype=object), y=y)

    def raw_pickle(p):
        p.write_bytes(pickle.dumps({"x": x, "y": y, "m": _Marker(str(ws / "ran"))}))

    def bomb(p):  # tiny on disk, huge unpacked
        with zipfile.ZipFile(p, "w", zipfile.ZIP_DEFLATED) as zf:
            zf.writestr("x.npy", b"\0" * (2 << 20))

    return [
        ("pickled", pickled, "Python objects"),
        ("raw_pickle", raw_pickle, "not a .npz archive"),
        ("text", lambda p: p.write_text("x,y\n1,2\n"), "not a .npz archive"),
        ("truncated", lambda p: p.write_bytes(_npz_bytes(ws, x=x, y=y)[:200]), "not a .npz archive"),
        ("no_y", lambda p: np.savez(p, x=x), "no array 'y'"),
        ("test_alone", lambda p: np.savez(p, x=x, y=y, x_test=x), "x_test and y_test"),
        ("lengths", lambda p: np.savez(p, x=x, y=y[:-1]), "40 images and y 39 labels"),
        ("gap", lambda p: np.savez(p, x=x, y=y * 2), "re-index"),
        ("negative", lambda p: np.savez(p, x=x, y=y - 1), "label -1"),
        ("float_labels", lambda p: np.savez(p, x=x, y=y.astype(float)), "labels must be integers"),
        ("one_class", lambda p: np.savez(p, x=x, y=y * 0), "one class"),
        ("test_label", lambda p: np.savez(p, x=x, y=y, x_test=x, y_test=y + 1), "y_test has label 4"),
        ("test_shape", lambda p: np.savez(p, x=x, y=y, x_test=x[:, :4], y_test=y), "must match"),
        ("nan", lambda p: np.savez(p, x=nan, y=y), "non-finite"),
        ("int_images", lambda p: np.savez(p, x=x.astype(np.int32), y=y), "uint8"),
        ("ambiguous", lambda p: np.savez(p, x=np.zeros((4, 3, 8, 3), np.uint8), y=np.arange(4) % 2),
         "ambiguous"),
        ("five_d", lambda p: np.savez(p, x=np.zeros((4, 1, 8, 8, 1), np.uint8), y=np.arange(4) % 2),
         "must be N x H x W"),
        ("no_images", lambda p: np.savez(p, x=np.zeros((0, 8, 8), np.uint8), y=np.zeros(0, int)),
         "no "),
        ("bomb", bomb, "2.0 MiB uncompressed"),
        ("too_few", lambda p: np.savez(p, x=x[:2], y=y[:2]), "too few to hold out"),
        ("huge_header", lambda p: _header_only(p, "|u1", (10**13, 8, 8), y), "declare"),
        ("raw_member", lambda p: _zip(p, {"x": b"\x00" * 64, "y.npy": _npy(y)}), "not a numpy array"),
        ("bytes_dtype", lambda p: np.savez(p, x=np.array([b"abc"] * 40), y=y), "integers or floats"),
        ("void_dtype", lambda p: np.savez(p, x=np.zeros(40, "V8"), y=y), "integers or floats"),
        ("huge_test_label", lambda p: np.savez(p, x=x, y=y, x_test=x, y_test=np.full(40, 2**64 - 1, np.uint64)),
         "label 18446744073709551615"),
        ("huge_label", lambda p: np.savez(p, x=x, y=np.full(40, 2**64 - 1, np.uint64)), "label 18446744073709551615"),
    ]


def _npy(array) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()


def _zip(path, members: dict) -> None:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)


def _header_only(path, descr: str, shape: tuple, y) -> None:
    """An x.npy whose header declares `shape` of `descr` and holds no data: its size is only in the header."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": descr, "fortran_order": False, "shape": shape})
    _zip(path, {"x.npy": buf.getvalue(), "y.npy": _npy(y)})


def _npz_bytes(ws, **arrays):
    tmp = ws / "_whole.npz"
    np.savez(tmp, **arrays)
    data = tmp.read_bytes()
    tmp.unlink()
    return data


def test_every_bad_file_is_one_line_naming_it(tmp_path):
    for name, write, words in _bad_files(tmp_path):
        path = tmp_path / f"{name}.npz"
        write(path)
        limit = 1 << 20 if name == "bomb" else None
        with pytest.raises(ValueError) as err:
            load_npz(path, **({"max_bytes": limit} if limit else {}))
        message = str(err.value)
        assert str(path) in message and words in message and "\n" not in message, (name, message)
    assert not (tmp_path / "ran").exists()  # nothing was unpickled


def test_size_limit_is_checked_before_reading(tmp_path):
    x, y = _images()
    path = _save(tmp_path / "d.npz", x=x, y=y)
    with pytest.raises(ValueError, match="a dataset may take"):
        load_npz(path, max_bytes=100)


@pytest.mark.parametrize("command", ["train", "search", "calibrate"])
def test_bad_files_exit_2_in_one_line_writing_nothing(command):
    def case(index):
        def build(ws):
            name, write, _ = _bad_files(ws)[index]
            path = ws / f"{name}.npz"
            write(path)
            tail = {"train": ["--layer", "bn_relu", "--train-preset", "tiny", "--steps", "2"],
                    "search": ["--preset", "tiny", "--out", str(ws / "new")],
                    "calibrate": ["--preset", "tiny", "--out", str(ws / "cal")]}[command]
            return [command, "--data", str(path), *tail]
        return build

    from pathlib import Path

    for index, (name, _, _) in enumerate(_bad_files(Path("unused"))):
        if name != "bomb":  # (its limit is the default 8 GiB here)
            check_refused(case(index))
    tail = ["--layer", "bn_relu"] if command == "train" else ["--out", "o"]
    for argv in (["--data", "missing.npz"], ["--data", "d.csv"],
                 ["--data", "d.npz", "--dataset", "synthetic"]):
        check_refused(lambda ws, argv=argv: [command, *argv, *tail])


def test_train_on_a_npz_runs_and_names_the_file(tmp_path, capsys):
    from evonorm.cli import main

    x, y = _images(n=48, shape=(8, 8, 3))
    path = _save(tmp_path / "mine.npz", x=x, y=y)
    out = tmp_path / "r.json"
    assert main(["train", "--layer", "evonorm_s0", "--data", str(path), "--train-preset", "tiny",
                 "--steps", "3", "--width", "0.0625", "--out", str(out)]) == 0
    assert str(path) in capsys.readouterr().out
    import json
    assert json.loads(out.read_text())["dataset"] == str(path)


def test_the_report_takes_the_class_count_the_run_stored():
    from evonorm.report.data import RunData

    assert RunData("r", config={"task": {"dataset": "/data/mine.npz"}}, classes=4).num_classes == 4
    assert RunData("r", config={"task": {"dataset": "cifar100"}}).num_classes == 100  # by name


def test_resume_and_rerank_read_the_runs_file_or_stop_in_one_line(tmp_path, monkeypatch, capsys):
    from evonorm.cli import main
    from evonorm.proxy.config import with_task
    from evonorm.proxy.training import with_dataset
    from evonorm.search.driver import init_run
    from evonorm.search.store import Store

    monkeypatch.chdir(tmp_path)
    x, y = _images(n=500)
    _save(tmp_path / "mine.npz", x=x, y=y)
    run = tmp_path / "run"
    tiny = get_preset("tiny", dataset="mine.npz")  # named as a run starts, its data not loaded
    init_run(run, with_task(tiny, with_dataset(ProxyTask.of_run(tiny)).settings))
    with Store(run, readonly=True) as store:
        cfg = store.search_config()
    assert stored_task(cfg).dataset == str(tmp_path / "mine.npz") and stored_task(cfg).data_sha256

    def refused(argv, words):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and words in err, err

    (tmp_path / "mine.npz").rename(tmp_path / "moved.npz")
    refused(["rerank", str(run)], "no such data file")
    refused(["resume", str(run)], "no such data file")
    _save(tmp_path / "other.npz", x=x[::-1].copy(), y=y[::-1].copy())
    refused(["rerank", str(run), "--data", "other.npz"], "not the file the run started with")
    refused(["resume", str(run), "--data", "other.npz"], "not the file the run started with")
    assert main(["rerank", str(run), "--data", "moved.npz"]) == 0  # the same file, moved
    assert "no valid candidate" in capsys.readouterr().err
    assert main(["resume", str(run), "--data", "moved.npz", "--workers", "1", "--quiet"]) == 0
    with Store(run, readonly=True) as store:  # the run now names the file where it is
        assert stored_task(store.search_config()).dataset == str(tmp_path / "moved.npz")
        assert store.get_meta("dataset")["name"] == str(tmp_path / "moved.npz")
        assert store.num_candidates() == 6
    capsys.readouterr()
    synthetic = tmp_path / "synth"
    init_run(synthetic, get_preset("tiny"))
    refused(["rerank", str(synthetic), "--data", "moved.npz"], "not a file of its own")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(descr=st.sampled_from(["|u1", "<f4", "<f8", "<i8", "<u8", "|b1", "<c8", "|V8", "|S3", "<U2", "<M8[s]", ">i4",
                              "<f2"]),
       shape=st.lists(st.integers(0, 10**9), min_size=0, max_size=5).map(tuple), key=st.sampled_from(["x", "y"]))
def test_any_declared_array_loads_or_is_refused_in_one_line(tmp_path_factory, descr, shape, key):
    """Fuzz: whatever dtype and shape a member's header declares (and however little it holds), the file loads or
    is a ValueError naming it in one line; no allocation of the declared size, no other exception."""
    path = tmp_path_factory.mktemp("npz") / "d.npz"
    x, y = _images()
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": descr, "fortran_order": False, "shape": shape})
    members = {"x.npy": _npy(x), "y.npy": _npy(y), f"{key}.npy": buf.getvalue()}
    _zip(path, members)
    try:
        load_npz(path, max_bytes=1 << 20)
    except ValueError as err:
        assert str(path) in str(err) and "\n" not in str(err)
