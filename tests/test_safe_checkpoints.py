"""A run folder is data, never code: stage checkpoints hold tensors and plain data, are read with
`weights_only=True`, and one that does not load (corrupt, a planted pickle, another candidate's) is
dropped with a one-line warning and the candidate trains again from its first stage."""

import os
import pickle

import pytest
import torch

from evonorm.graph.library import NAMED_GRAPHS
from evonorm.proxy.training import search_dataset, train_stages
from evonorm.proxy.presets import get_preset
from evonorm.train import Run
from evonorm.proxy.config import ProxyTask, stored_task


def _staged_cfg(**kw):
    base = dict(dataset="synthetic", n_train=96, quality_steps=0, stage_steps=(3,), quality_factor=0.0,
                train={"steps": 6, "batch_size": 8, "width": 0.0625, "eval_batch_size": 64})
    base.update(kw)
    return get_preset("tiny", **base)


class _Planted:
    """Unpickling this writes a marker file: what a planted checkpoint would do if it were run."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (_touch, (self.marker,))


def _touch(path: str) -> None:
    with open(path, "w") as f:
        f.write("code from the run folder ran")


def _count_advances(monkeypatch) -> list:
    real, calls = Run.advance, []

    def counting(self, to_step=None, **kw):
        calls.append(to_step)
        return real(self, to_step, **kw)

    monkeypatch.setattr(Run, "advance", counting)
    return calls


def test_a_stage_checkpoint_loads_with_weights_only(tmp_path, monkeypatch):
    cfg = _staged_cfg()
    ds = search_dataset(ProxyTask.of_run(cfg))
    ckpt = tmp_path / "stages" / "3.pt"

    def stop_in_stage_two(self, to_step=None, **kw):
        if to_step is not None and to_step > 3:
            raise KeyboardInterrupt  # as if the worker were killed after the first stage
        return real(self, to_step, **kw)

    real = Run.advance
    monkeypatch.setattr(Run, "advance", stop_in_stage_two)
    try:
        train_stages(NAMED_GRAPHS["evonorm_s0"], ds, ProxyTask.of_run(cfg), checkpoint=str(ckpt))
    except KeyboardInterrupt:
        pass
    saved = torch.load(ckpt, weights_only=True)  # raises on anything but tensors and plain data
    assert len(saved["stages"]) == 1 and set(saved["runs"]) == set(stored_task(cfg).archs)


def test_a_planted_pickle_is_not_run_and_the_candidate_trains_again(tmp_path, monkeypatch, capfd):
    cfg = _staged_cfg()
    ds = search_dataset(ProxyTask.of_run(cfg))
    g = NAMED_GRAPHS["evonorm_s0"]
    whole = train_stages(g, ds, ProxyTask.of_run(cfg))
    marker = tmp_path / "marker"
    ckpt = tmp_path / "stages" / "5.pt"
    ckpt.parent.mkdir()
    # a pickle that would run code, in the layout torch.save writes (and as a bare pickle)
    torch.save({"stages": [_Planted(str(marker))], "runs": {}}, ckpt)
    calls = _count_advances(monkeypatch)
    again = train_stages(g, ds, ProxyTask.of_run(cfg), checkpoint=str(ckpt))
    assert not marker.exists()
    assert calls[:len(stored_task(cfg).archs)] == [3] * len(stored_task(cfg).archs)  # from the first stage
    assert again.stage_scores == whole.stage_scores and not ckpt.exists()
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "dropped stage checkpoint" in err[0] and str(ckpt) in err[0]

    ckpt.write_bytes(pickle.dumps(_Planted(str(marker))))
    calls.clear()
    assert train_stages(g, ds, ProxyTask.of_run(cfg), checkpoint=str(ckpt)).stage_scores == whole.stage_scores
    assert not marker.exists() and calls[0] == 3
    ckpt.write_bytes(pickle.dumps(_Planted(str(marker))))
    pickle.loads(ckpt.read_bytes())  # the file is a real threat: unpickled, it runs
    assert marker.exists()


def test_corrupt_or_foreign_checkpoints_are_dropped(tmp_path, monkeypatch, capfd):
    cfg = _staged_cfg()
    ds = search_dataset(ProxyTask.of_run(cfg))
    g = NAMED_GRAPHS["evonorm_s0"]
    whole = train_stages(g, ds, ProxyTask.of_run(cfg))
    ckpt = tmp_path / "7.pt"
    for content in (b"", b"\x80\x04garbage", os.urandom(256)):
        ckpt.write_bytes(content)
        assert train_stages(g, ds, ProxyTask.of_run(cfg), checkpoint=str(ckpt)).stage_scores == whole.stage_scores
        assert len(capfd.readouterr().err.strip().splitlines()) == 1
    # plain data, but not this candidate's: stages of other architectures, or no runs
    for saved in ({"stages": [{"other_arch": 0.5}], "runs": {}},
                  {"stages": [{a: 0.5 for a in stored_task(cfg).archs}], "runs": {}},
                  {"stages": [], "runs": {}}, [1, 2, 3]):
        torch.save(saved, ckpt)
        calls = _count_advances(monkeypatch)
        assert train_stages(g, ds, ProxyTask.of_run(cfg), checkpoint=str(ckpt)).stage_scores == whole.stage_scores
        assert calls[0] == 3 and not ckpt.exists()
        assert "dropped stage checkpoint" in capfd.readouterr().err
        monkeypatch.undo()


class _Exec:
    """Unpickled anywhere (a search's worker process too), this runs code: it writes `marker`."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (exec, (f"open({self.marker!r}, 'w').write('ran')",))


def test_a_search_never_runs_a_checkpoint_planted_in_its_run_folder(tmp_path, capfd):
    from evonorm.search.driver import init_run, run_search
    from evonorm.proxy.objective import ProxyObjective
    from evonorm.search.store import Store

    run = tmp_path / "run"
    cfg = _staged_cfg(budget=2, workers=1, seed_layers=("evonorm_s0",), stability_steps=0)
    init_run(run, cfg)
    marker = tmp_path / "ran"
    (run / "stages").mkdir()
    for idx in range(4):  # whatever numbers the proposals get
        torch.save({"stages": [_Exec(str(marker))], "runs": {}}, run / "stages" / f"{idx}.pt")
    pickle.loads(pickle.dumps(_Exec(str(tmp_path / "probe"))))
    assert (tmp_path / "probe").exists()  # the planted content is a real threat
    result = run_search(run, objective=ProxyObjective.for_run(cfg), progress=False)
    assert result.complete and not marker.exists()
    with Store(run, readonly=True) as store:
        seed = next(c for c in store.candidates() if c.origin == "seed")
    assert seed.status == "valid" and len(seed.stage_scores) == 2  # trained again from its first stage
    assert "dropped stage checkpoint" in capfd.readouterr().err


def _real_checkpoint(cfg, ds, g, ckpt, monkeypatch):
    """The stage checkpoint a worker killed in the second stage leaves (as `torch.load` reads it)."""
    real = Run.advance

    def stop_in_stage_two(self, to_step=None, **kw):
        if to_step is not None and to_step > 3:
            raise KeyboardInterrupt
        return real(self, to_step, **kw)

    monkeypatch.setattr(Run, "advance", stop_in_stage_two)
    try:
        train_stages(g, ds, ProxyTask.of_run(cfg), checkpoint=str(ckpt))
    except KeyboardInterrupt:
        pass
    monkeypatch.undo()
    return torch.load(ckpt, weights_only=True)


def _forge(saved, how):
    arch = next(iter(saved["runs"]))
    if how == "steps_done":
        saved["runs"][arch]["result"]["steps_done"] = -50
    elif how == "nan_weights":
        w = next(t for t in saved["runs"][arch]["model"].values() if t.is_floating_point())
        w.fill_(float("nan"))
    elif how == "stage_score":
        saved["stages"][0][arch] = 0.99 if saved["stages"][0][arch] < 0.5 else 0.01
    elif how == "nan_score":
        saved["stages"][0][arch] = float("nan")
    return saved


def test_a_well_formed_checkpoint_that_is_not_true_is_dropped(tmp_path, monkeypatch, capfd):
    cfg = _staged_cfg()
    ds = search_dataset(ProxyTask.of_run(cfg))
    g = NAMED_GRAPHS["evonorm_s0"]
    whole = train_stages(g, ds, ProxyTask.of_run(cfg))
    ckpt = tmp_path / "stages" / "3.pt"
    saved = _real_checkpoint(cfg, ds, g, ckpt, monkeypatch)
    capfd.readouterr()
    resumed = train_stages(g, ds, ProxyTask.of_run(cfg), checkpoint=str(ckpt))  # the true one is believed: nothing said
    assert resumed.stage_scores == whole.stage_scores and capfd.readouterr().err == ""
    for how in ("steps_done", "nan_weights", "stage_score", "nan_score"):
        torch.save(_forge(_real_checkpoint(cfg, ds, g, ckpt, monkeypatch), how), ckpt)
        capfd.readouterr()
        calls = _count_advances(monkeypatch)
        assert train_stages(g, ds, ProxyTask.of_run(cfg), checkpoint=str(ckpt)).stage_scores == whole.stage_scores, how
        assert calls[0] == 3 and not ckpt.exists(), how  # trained again from its first stage
        err = capfd.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "dropped stage checkpoint" in err[0], (how, err)
        monkeypatch.undo()


def test_a_sparse_checkpoint_of_gigabytes_is_refused_before_it_is_read(tmp_path, monkeypatch, capfd):
    cfg = _staged_cfg()
    ds = search_dataset(ProxyTask.of_run(cfg))
    g = NAMED_GRAPHS["evonorm_s0"]
    ckpt = tmp_path / "3.pt"
    with open(ckpt, "wb") as f:
        f.truncate(2 << 30)  # takes no disk; read whole it would take 2 GB of memory
    monkeypatch.setattr("torch.load", lambda *a, **k: pytest.fail("read"))
    train_stages(g, ds, ProxyTask.of_run(cfg), checkpoint=str(ckpt))
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bytes, more than" in err[0] and not ckpt.exists(), err


def test_a_folder_at_the_checkpoint_path_is_not_the_layers_outcome(tmp_path, capfd):
    cfg = _staged_cfg()
    ds = search_dataset(ProxyTask.of_run(cfg))
    g = NAMED_GRAPHS["evonorm_s0"]
    whole = train_stages(g, ds, ProxyTask.of_run(cfg))
    ckpt = tmp_path / "3.pt"
    ckpt.mkdir()
    got = train_stages(g, ds, ProxyTask.of_run(cfg), checkpoint=str(ckpt))
    assert got.status == "valid" and got.stage_scores == whole.stage_scores and ckpt.is_dir()
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a regular file" in err[0], err
