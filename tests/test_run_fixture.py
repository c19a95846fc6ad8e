"""A run folder written before the search config had parts: today's main job (`scripts/main.sh`, a
`demo` search on Fashion-MNIST) as it left its folder. It still opens, resumes, re-trains and
reports; its flat config is read as is, and nested in place once the run is opened for writing."""

import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from evonorm import proxy
from evonorm.cli import main as cli
from evonorm.proxy.config import proxy_config
from evonorm.proxy.retrain import SEED_OFFSET, retrain
from evonorm.search import load
from evonorm.search.store import SCHEMA_VERSION, Store

FIXTURE = Path(__file__).parent / "fixtures" / "run_2026_11_27"
ARCHS = ("resnet50_cifar", "mobilenetv2_cifar")


@pytest.fixture
def run(tmp_path) -> Path:
    """A copy of the fixture: what the tests open for writing changes the copy only."""
    return Path(shutil.copytree(FIXTURE, tmp_path / "run"))


def test_load_reads_the_flat_config_as_is(run):
    with Store(run, readonly=True) as store:
        raw, version = store.config(), store.get_meta("schema_version")
        cfg = store.search_config()
    assert version == 4 and "evolution" not in raw and raw["archs"] == list(ARCHS)  # as written
    assert (cfg.preset, cfg.budget, cfg.stages, cfg.scores) == ("demo", 75, (75,), ARCHS)
    task = proxy_config(cfg)
    assert task.dataset == "fashion_mnist" and task.train_seeds == 2 and task.final_runs == 4
    result = load(run)
    assert result.complete and result.done == result.budget == 75
    top = result.top(3)
    assert top and all(c.status == "valid" and set(c.scores) == set(ARCHS) for c in top)
    with Store(run, readonly=True) as store:
        assert store.get_meta("schema_version") == 4  # reading wrote nothing


def test_resume_with_the_budget_spent_opens_finishes_and_nests_the_config(run, capsys):
    with Store(run, readonly=True) as store:
        before = store.candidates()
    assert cli(["resume", str(run), "--quiet"]) == 0  # the command: nothing to do
    assert "already complete (75/75 candidates)" in capsys.readouterr().out
    result = proxy.resume(run, progress=False)  # opens the store for writing, trains nothing
    assert result.complete and result.done == 75
    with Store(run, readonly=True) as store:
        assert store.get_meta("schema_version") == SCHEMA_VERSION
        nested = store.config()
        assert nested["evolution"]["budget"] == 75 and nested["task"]["dataset"] == "fashion_mnist"
        assert store.candidates() == before and store.get_meta("status") == "complete"
    assert load(run).top(3) == load(run).top(3) and load(run).done == 75


def test_report_reads_the_old_run(run, tmp_path, capsys):
    assert cli(["report", str(run), "--out", str(tmp_path / "page")]) == 0
    page = (tmp_path / "page" / "report.html").read_text()
    assert "preset demo" in page and "fashion_mnist" in page
    assert "resnet50_cifar" in page and "mobilenetv2_cifar" in page


def test_retrain_trains_each_layer_in_the_stored_setting(run, monkeypatch):
    """Re-training reads the run's own settings: the trainer is replaced by a recorder (nothing
    trains), the data by a stand-in (the run's Fashion-MNIST need not be installed)."""
    import evonorm.proxy.retrain as retrain_module
    import evonorm.train

    calls = []

    def fake_train(layer, data, tcfg):
        calls.append(tcfg)
        return SimpleNamespace(status="ok", accuracy=0.5, failed_step=None, seconds=0.0)

    monkeypatch.setattr(evonorm.train, "train", fake_train)
    monkeypatch.setattr(retrain_module, "search_dataset", lambda cfg: "the run's data")
    rows = retrain(run, top=1, seeds=1, log=lambda line: None)
    kinds = {r.kind for r in rows}
    assert kinds == {"found", "reference", "seed"} and all(r.fitness == 0.5 for r in rows)
    assert len(calls) == len(rows) * len(ARCHS)
    by_arch = {c.arch: c for c in calls}
    assert set(by_arch) == set(ARCHS)
    for c in calls:  # demo's full training, from the stored flat config
        assert (c.steps, c.batch_size, c.width, c.lr_warmup) == (150, 32, 0.0625, 10)
        assert c.restarts == (75,) and c.seed == SEED_OFFSET and c.device == "cpu"
    assert by_arch["resnet50_cifar"].lr == 0.1 and by_arch["mobilenetv2_cifar"].lr == 0.03
