"""Real data by default: a search without Fashion-MNIST stops before it starts (unless asked for the
synthetic set), and a run's start line and store name its dataset, sizes, preset and device."""


import pytest

import evonorm.commands.search
import evonorm.data
import evonorm.datafiles
from evonorm.cli import main
from evonorm.proxy import presets
from evonorm.search.store import Store
from evonorm.proxy.config import configured, stored_task


@pytest.fixture
def no_fashion(tmp_path, monkeypatch):
    monkeypatch.setattr(evonorm.datafiles, "FASHION_MNIST_SYSTEM_DIR", tmp_path / "absent")
    monkeypatch.setenv("EVONORM_DATA", str(tmp_path / "data"))


@pytest.mark.parametrize("command", [["search"], ["calibrate", "--seeds", "1"]])
def test_missing_fashion_mnist_stops_with_one_line(tmp_path, capsys, no_fashion, command):
    out = tmp_path / "run"
    assert main([*command, "--preset", "demo", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "Fashion-MNIST, the default data, is not installed" in err
    assert "apt-get install dataset-fashion-mnist" in err and "--dataset synthetic" in err
    assert not out.exists()  # nothing half-written


def test_default_dataset_falls_back_only_when_allowed(no_fashion):
    assert evonorm.data.default_dataset_name() == "synthetic"  # `evonorm train` keeps its default
    with pytest.raises(FileNotFoundError, match="apt-get install dataset-fashion-mnist"):
        evonorm.data.default_dataset_name(fallback=False)


def test_start_line_and_store_name_dataset_preset_device(tmp_path, capsys, monkeypatch,
                                                         no_fashion):
    # the demo preset (holdout 0.25) cut to a few steps; an explicit --dataset synthetic runs
    # without Fashion-MNIST
    def cut(name, **settings):
        return configured(presets.get_preset(name, **settings),
                          train={"steps": 2, "batch_size": 8, "width": 0.0625}, arch_train={},
                          quality_steps=0, stage_steps=(1,), stability_steps=1)
    monkeypatch.setattr(evonorm.commands.search, "get_preset", cut)
    run = tmp_path / "run"
    assert main(["search", "--preset", "demo", "--dataset", "synthetic", "--n-train", "200",
                 "--budget", "1", "--workers", "1", "--archs", "resnet50_cifar",
                 "--out", str(run)]) == 0
    out, err = capsys.readouterr()
    start = next(line for line in err.splitlines() if line.startswith("search: "))
    assert "preset demo" in start and "device cpu" in start
    assert "dataset synthetic (150 train / 50 held-out images)" in start
    with Store(run, readonly=True) as s:
        assert s.get_meta("preset") == "demo"
        assert s.get_meta("dataset") == {"name": "synthetic", "train": 150, "held_out": 50,
                                         "classes": 10, "image_size": 32}
        assert s.get_meta("device") == {"type": "cpu", "workers": 1, "executor": "local"}
        assert stored_task(s.search_config()).dataset == "synthetic"
    # the end-of-search table and the report page name them under their first sentence
    setup = "preset demo, dataset synthetic (150 train / 50 held-out images), device cpu, 1 local worker(s)"
    # after the verdict and the proxy's rank fidelity
    assert out.splitlines()[3] == setup and out.splitlines()[2].startswith("rank fidelity of demo"), out
    from evonorm.report import write_report

    assert f"run: {setup}" in write_report([run]).read_text()
