"""`--device cpu|cuda|auto`: resolved once and stored with the run, carried to every training run,
to the data and to the executor (Ray GPU shares); a device that cannot run exits 2 in one line."""

import sys

import pytest
import torch

from evonorm.cli import main
from evonorm.commands._common import check_device
from evonorm.data import synthetic_dataset, to_device, train_batches
from evonorm.proxy.config import ProxyTask, stored_task
from evonorm.search.config import SearchConfig
from evonorm.proxy.training import search_dataset
from evonorm.search.executors import make_executor
from evonorm.proxy.presets import get_preset
from evonorm.search.store import Store

HERE = "cuda" if torch.cuda.is_available() else "cpu"


def test_auto_is_cuda_where_available_else_cpu():
    assert check_device("auto") == HERE
    assert check_device("cpu") == "cpu" and check_device(None) is None


def _refused(argv, capsys, message):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("command", [
    ["search", "--preset", "tiny", "--out", "{tmp}/run"],
    ["train", "--layer", "evonorm_s0", "--train-preset", "tiny", "--dataset", "synthetic"],
    ["rerank", "{tmp}/done"],
    ["resume", "{tmp}/done"],
])
def test_an_unknown_or_missing_device_exits_2_in_one_line(command, tmp_path, capsys):
    init_done(tmp_path / "done")
    argv = [a.format(tmp=tmp_path) for a in command]
    _refused([*argv, "--device", "tpu"], capsys, "unknown --device 'tpu' (cpu, cuda or auto)")
    _refused([*argv, "--device", "meta"], capsys, "--device 'meta' is not supported")
    if not torch.cuda.is_available():  # this machine: no CUDA
        _refused([*argv, "--device", "cuda"], capsys, "no CUDA device is available here")
    assert not (tmp_path / "run").exists()  # nothing written


def test_a_gpu_share_without_ray_and_cuda_exits_2(tmp_path, capsys):
    argv = ["search", "--preset", "tiny", "--out", str(tmp_path / "run"), "--gpus-per-worker", "0.5"]
    _refused(argv, capsys, "--gpus-per-worker applies to --executor ray with --device cuda only")
    _refused([*argv, "--gpus-per-worker", "2"], capsys, "gpus_per_worker must be in (0, 1]")
    assert not (tmp_path / "run").exists()


def init_done(run):
    from evonorm.search.driver import init_run

    init_run(run, get_preset("tiny", budget=1))


def test_search_stores_the_resolved_device(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["search", "--preset", "tiny", "--budget", "1", "--workers", "1", "--device", "auto",
                 "--out", str(run)]) == 0
    assert f"device {HERE}" in capsys.readouterr().err  # the start line
    with Store(run, readonly=True) as store:
        assert store.search_config().execution.device == HERE
        assert store.get_meta("device")["type"] == HERE


def test_device_round_trips_through_the_store_and_old_configs_load_as_cpu(tmp_path):
    cfg = get_preset("tiny", device="cuda:1", gpus_per_worker=0.25)
    with Store(tmp_path) as store:
        store.set_config(cfg.to_dict())
    with Store(tmp_path, readonly=True) as store:
        assert store.search_config() == cfg
    old = cfg.to_dict()  # a config stored before the devices were settings
    for name in ("device", "gpus_per_worker"):
        del old["execution"][name]
    assert SearchConfig.from_dict(old).execution.device == "cpu"
    assert SearchConfig.from_dict(old).execution.gpus_per_worker is None
    for bad in (dict(device="tpu"), dict(device="auto"), dict(gpus_per_worker=0.0),
                dict(gpus_per_worker=2.0)):
        with pytest.raises(ValueError):
            get_preset("tiny", **bad)


def test_every_training_run_goes_to_the_configs_device():
    cfg = get_preset("tiny", device="cuda:1")  # only the settings: nothing runs here
    arch = stored_task(cfg).archs[0]
    task = ProxyTask.of_run(cfg)
    assert task.training[arch].device == "cuda:1"
    assert task.rerank_training[arch].device == "cuda:1"
    assert task.quality_training(arch).device == "cuda:1"


def test_a_dataset_already_on_the_device_is_not_copied():
    ds = synthetic_dataset(64, 16)
    assert to_device(ds, "cpu") is ds
    cfg = get_preset("tiny")
    assert search_dataset(ProxyTask.of_run(cfg)).train_x.device.type == "cpu"


class FakeRay:
    """What RayExecutor asks of `ray`, answering for a cluster with `gpus` GPUs."""

    def __init__(self, gpus: float):
        self.gpus, self.options = gpus, None

    def is_initialized(self):
        return True  # the caller's Ray: not started, not shut down

    def cluster_resources(self):
        return {"CPU": 8.0, "GPU": self.gpus}

    def remote(self, **options):
        self.options = options
        return lambda fn: fn

    def put(self, obj):
        return obj


@pytest.mark.parametrize("device, share, cluster_gpus, asked", [
    ("cuda", 0.25, 1, 0.25),  # four workers per GPU
    ("cuda:0", 1.0, 1, 1.0),
    ("cuda", None, 2, 0.5),  # the cluster's 2 GPUs among 4 workers
    ("cpu", 0.25, 1, 0.0),
])
def test_ray_tasks_ask_for_the_gpu_share(monkeypatch, device, share, cluster_gpus, asked):
    fake = FakeRay(cluster_gpus)
    monkeypatch.setitem(sys.modules, "ray", fake)
    ex = make_executor("ray", len, 4, timeout=10.0, device=device, gpus_per_worker=share)
    ex.close()
    assert fake.options == {"num_cpus": 1, "num_gpus": asked, "max_retries": 0}


class Captured(Exception):
    pass


def capture(kw: dict):
    def fake_make_executor(kind, fn, workers, **rest):
        kw.update(kind=kind, workers=workers, **rest)
        raise Captured
    return fake_make_executor


def test_search_and_rerank_hand_the_device_and_share_to_the_executor(tmp_path, monkeypatch):
    from evonorm.search import driver
    from evonorm.measure import ledger
    from evonorm.search.driver import init_run, run_search
    from evonorm.search.evaluation import Evaluation
    from evonorm.search.objective import layer_identity
    from evonorm.measure.rerank import rerank

    cfg = get_preset("tiny", executor="ray", workers=3, device="cuda", gpus_per_worker=0.5)
    init_run(tmp_path, cfg)
    got: dict = {}
    monkeypatch.setattr(driver, "make_executor", capture(got))
    with pytest.raises(Captured):
        run_search(tmp_path, objective=len, progress=False)
    assert (got["kind"], got["workers"], got["device"], got["gpus_per_worker"]) == ("ray", 3, "cuda", 0.5)

    g = {"nodes": [["tanh", 0]]}
    with Store(tmp_path) as store:  # one valid layer to rerank
        store.add_proposal(g, None, "random", [3, [0], None])
        key, fp = layer_identity(g)
        store.add_candidate(store.pending_proposals()[0], Evaluation.valid({"a": 0.3}), key=key,
                            fingerprint=fp)
    got.clear()
    monkeypatch.setattr(ledger, "make_executor", capture(got))
    with pytest.raises(Captured):  # the run's executor kind; the rerank's device and workers
        rerank(tmp_path, device="cpu", workers=2, log=lambda s: None)
    assert (got["kind"], got["workers"], got["device"], got["gpus_per_worker"]) == ("ray", 1, "cpu", 0.5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_batches_and_training_on_data_already_on_the_gpu():
    from evonorm.proxy.rejection import stability
    from evonorm.train import get_train_preset as train_preset, train

    ds = synthetic_dataset(256, 64)
    gpu = to_device(ds, "cuda")
    for (x, y), (xg, yg) in zip(train_batches(ds, 16, 5, seed=1), train_batches(gpu, 16, 5, seed=1)):
        # the same images, crops and flips; the normalizing division may round differently on the GPU
        assert xg.device.type == "cuda" and torch.equal(y, yg.cpu())
        torch.testing.assert_close(xg.cpu(), x)
    res = train("evonorm_s0", gpu, train_preset("tiny", steps=3, width=0.0625, device="cuda"))
    assert res.status == "ok" and 0.0 <= res.accuracy <= 1.0
    assert stability("evonorm_s0", gpu, arch="resnet50_cifar", width=0.0625, steps=2) is None
    assert search_dataset(ProxyTask.of_run(get_preset("tiny", device="cuda"))).train_x.device.type == "cuda"


def test_resume_keeps_the_stored_device_unless_told(tmp_path, capsys):
    from evonorm.search.driver import init_run

    init_run(tmp_path, get_preset("tiny", budget=1, workers=1, device="cuda:3"))  # stored, not run
    assert main(["resume", str(tmp_path), "--device", "cpu"]) == 0
    assert "1 local worker(s) on cpu" in capsys.readouterr().err
    with Store(tmp_path, readonly=True) as store:
        assert store.search_config().execution.device == "cpu" and store.get_meta("device")["type"] == "cpu"
        assert store.num_candidates() == 1
    assert main(["resume", str(tmp_path), "--budget", "2", "--quiet"]) == 0  # the stored device
    with Store(tmp_path, readonly=True) as store:
        assert store.search_config().execution.device == "cpu" and store.num_candidates() == 2
