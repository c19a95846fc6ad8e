"""Reranking: data disjoint from what chose the layers, a setting larger than the search's, layers
trained in parallel on the executor, each row saved as it arrives, resumed after a kill."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from _processes import env_with_path
from _rerank_fakes import fake_train
from evonorm.data import Dataset, holdout_split, load_dataset, subset
from evonorm.search.config import SearchConfig
from evonorm.search.evaluation import Evaluation
from evonorm.proxy.training import search_dataset
from evonorm.search.objective import layer_identity
from evonorm.proxy.presets import get_preset
from evonorm.measure.ledger import Row, add_row, outside_holdout
from evonorm.measure.rerank import RERANK_FILE, prepare, read_reranks, rerank, rerank_dataset, reranked_ids
from evonorm.search.store import Store
from evonorm.proxy.config import ProxyTask, configured, stored_task

TESTS = Path(__file__).parent


def rerank_row(cid, setting, split, scores, mean, status, reason, search_fitness, seconds, created_at) -> Row:
    """A rerank's ledger row: candidate `cid` at the run's seed 0."""
    return Row(f"id {cid}", "found", 0, setting, split, scores, mean, status, reason, cid, None, search_fitness,
               seconds, created_at)


def add_rerank(run: Path, row: Row) -> None:
    add_row(Path(run) / RERANK_FILE, row)

# three distinct valid layers: x * sigmoid(x), x * sigmoid(x) * x, tanh(x)
LAYERS = [{"nodes": [["sigmoid", 0], ["mul", 0, 4]]},
          {"nodes": [["sigmoid", 0], ["mul", 0, 4], ["mul", 5, 0]]},
          {"nodes": [["tanh", 0]]}]


def numbered(n_train: int, n_test: int) -> Dataset:
    """Images whose first two pixels spell their index: which image is where can be read back."""
    def images(n, offset):
        x = torch.zeros(n, 1, 4, 4, dtype=torch.uint8)
        idx = torch.arange(offset, offset + n)
        x[:, 0, 0, 0], x[:, 0, 0, 1] = idx // 256, idx % 256
        return x, idx % 10

    train_x, train_y = images(n_train, 0)
    test_x, test_y = images(n_test, n_train)
    return Dataset("numbered", train_x, train_y, test_x, test_y, 10, (0.5,), (0.25,))


def ids(x: torch.Tensor) -> set[int]:
    return set((x[:, 0, 0, 0].long() * 256 + x[:, 0, 0, 1].long()).tolist())


@pytest.mark.parametrize("n_train, holdout, seed", [(300, 0.25, 3), (None, 0.1, 0), (999, 0.5, 7)])
def test_rerank_trains_on_everything_but_the_searchs_held_out_images(n_train, holdout, seed):
    full = numbered(1000, 200)
    # what the search trains and scores on (`search_dataset`: load_dataset's subset, then the split)
    searched = holdout_split(subset(full, n_train, seed=seed), holdout, seed=seed)
    data = outside_holdout(full, n_train, holdout, seed)
    held = ids(searched.test_x)
    assert held and not held & ids(data.train_x)  # disjoint from what chose the layers
    assert ids(data.train_x) | held == set(range(1000))  # and nothing else is left out
    assert ids(searched.train_x) <= ids(data.train_x)
    assert torch.equal(data.test_x, full.test_x)  # scored on the whole official test split


def test_rerank_dataset_against_the_real_search_dataset():
    cfg = configured(get_preset("tiny", holdout=0.2, seed=1), n_train=None)  # synthetic, generated whole
    held = {bytes(x.flatten().tolist()) for x in search_dataset(ProxyTask.of_run(cfg)).test_x}
    data = rerank_dataset(ProxyTask.of_run(cfg))
    trained = {bytes(x.flatten().tolist()) for x in data.train_x}
    assert len(held) == len(search_dataset(ProxyTask.of_run(cfg)).test_y) and not held & trained
    assert len(data.train_y) == len(search_dataset(ProxyTask.of_run(cfg)).train_y)  # the search's train part only
    assert torch.equal(data.test_x, load_dataset("synthetic", seed=1).test_x)


def test_data_seed_fixes_the_split_across_search_seeds():
    def held(cfg):
        return {bytes(x.flatten().tolist()) for x in search_dataset(ProxyTask.of_run(cfg)).test_x}

    base = configured(get_preset("tiny", holdout=0.2), n_train=None)
    assert held(base.replace(seed=1)) != held(base.replace(seed=2))  # None: the split follows seed
    fixed = configured(base, data_seed=5)
    assert held(fixed.replace(seed=1)) == held(fixed.replace(seed=2)) == held(base.replace(seed=5))
    assert torch.equal(rerank_dataset(ProxyTask.of_run(fixed.replace(seed=1))).train_x,
                       rerank_dataset(ProxyTask.of_run(base.replace(seed=5))).train_x)
    stored = base.to_dict()
    del stored["task"]["data_seed"]  # runs stored before it
    assert stored_task(SearchConfig.from_dict(stored)).data_seed is None


def test_a_setting_not_larger_than_the_searchs_is_refused_unless_allowed():
    cfg = get_preset("tiny")  # search: 4 steps of 16 on 288 images; rerank: 6 steps, 1024 images
    plan = prepare(cfg)
    assert plan.search["resnet50_cifar"].text() == "4 steps of 16, 288 training images, width 0.0625"
    assert plan.rerank["resnet50_cifar"].text() == "6 steps of 16, 1024 training images, width 0.0625"
    assert plan.split == "synthetic test split (256 of 512 images)" and plan.available == 2016
    assert any("never seen by the search" in line for line in plan.describe())
    with pytest.raises(ValueError, match="resnet50_cifar trains 4 steps, not more than the search's 4"):
        prepare(cfg, overrides={"steps": 4})
    with pytest.raises(ValueError, match="trains on 200 images, not more than the search's 288"):
        prepare(cfg, overrides={"n_train": 200})
    with pytest.raises(ValueError, match="width 0.03125, narrower"):
        prepare(cfg, overrides={"width": 0.03125})
    assert prepare(cfg, overrides={"steps": 2}, allow_smaller=True).rerank["mobilenetv2_cifar"].steps == 2


def test_equal_images_pass_only_when_the_search_used_every_image_the_rerank_may():
    cfg = configured(get_preset("tiny"), n_train=None)  # the search trains on all 1843 images it does not score
    plan = prepare(cfg, overrides={"n_train": None})
    assert plan.search["resnet50_cifar"].images == plan.rerank["resnet50_cifar"].images == 1843
    assert not plan.smaller()


def make_run(run: Path, cfg: SearchConfig) -> list[int]:
    """A run store holding LAYERS as valid candidates (best first); returns their ids."""
    ids_ = []
    with Store(run) as store:
        store.set_config(cfg.to_dict())
        for i, g in enumerate(LAYERS):
            store.add_proposal(g, None, "random", [3, [i], None])
            prop = store.pending_proposals()[0]
            key, fp = layer_identity(g)
            accs = {a: 0.4 - 0.1 * i for a in stored_task(cfg).archs}
            ids_.append(store.add_candidate(prop, Evaluation.valid(accs), key=key,
                                            fingerprint=fp).id)
    return ids_


def test_layers_train_in_parallel_each_row_saved_with_its_split_and_a_line_each(tmp_path, monkeypatch):
    calls = tmp_path / "calls"
    monkeypatch.setenv("EVONORM_TEST_CALLS", str(calls))
    cfg = get_preset("tiny", workers=1)
    cids = make_run(tmp_path / "run", cfg)
    lines = []
    rows = rerank(tmp_path / "run", workers=2, fn=fake_train, log=lines.append)
    assert [r.candidate_id for r in rows] == [cids[1], cids[0], cids[2]]  # 3 nodes, 2, 1
    assert all(r.split == "synthetic test split (256 of 512 images)" for r in rows)
    assert rows[0].fitness == pytest.approx(0.53) and rows[0].status == "ok"
    pids = {line.split()[0] for line in calls.read_text().splitlines()}
    assert len(pids) == 2  # two worker processes, not the driver
    done = [line for line in lines if line.startswith("rerank [")]
    assert [line.split("]")[0] for line in done] == ["rerank [1/3", "rerank [2/3", "rerank [3/3"]
    assert any("2 local worker(s), device cpu" in line for line in lines)


def test_rows_already_saved_are_skipped(tmp_path, monkeypatch):
    calls = tmp_path / "calls"
    monkeypatch.setenv("EVONORM_TEST_CALLS", str(calls))
    cfg = get_preset("tiny", workers=1)
    cids = make_run(tmp_path / "run", cfg)
    plan = prepare(cfg)
    add_rerank(tmp_path / "run", rerank_row(cids[0], plan.label, plan.split, {"a": 0.99}, 0.99, "ok", None,
                                           0.4, 1.0, 1.0))
    # in another setting, or scored on other data: does not count
    add_rerank(tmp_path / "run", rerank_row(cids[1], "other", plan.split, {}, 0.1, "ok", None, 0.3, 1.0, 1.0))
    add_rerank(tmp_path / "run", rerank_row(cids[1], plan.label, "other", {}, 0.1, "ok", None, 0.3, 1.0, 1.0))
    lines = []
    rows = rerank(tmp_path / "run", fn=fake_train, log=lines.append)
    assert len(calls.read_text().splitlines()) == 2  # only the two layers not done yet
    assert {r.candidate_id: r.fitness for r in rows}[cids[0]] == 0.99  # kept, not retrained
    assert [line.split(":")[0] for line in lines if line.startswith("rerank [")] == [
        "rerank [2/3] candidate 2", "rerank [3/3] candidate 3"]


KILLED_DRIVER = """
import sys
from _rerank_fakes import kill_driver_on_second
from evonorm.measure.rerank import rerank
rerank(sys.argv[1], workers=1, fn=kill_driver_on_second)
"""


def test_a_killed_rerank_continues_where_it_stopped(tmp_path, monkeypatch):
    calls = tmp_path / "calls"
    monkeypatch.setenv("EVONORM_TEST_CALLS", str(calls))
    cfg = get_preset("tiny", workers=1)
    cids = make_run(tmp_path / "run", cfg)
    proc = subprocess.run([sys.executable, "-c", KILLED_DRIVER, str(tmp_path / "run")],
                          capture_output=True, text=True, timeout=300, env=env_with_path(TESTS))
    assert proc.returncode == -9, proc.stderr  # SIGKILLed while the second layer trained
    (first,) = read_reranks(tmp_path / "run")
    assert first.candidate_id == cids[0] and first.fitness == pytest.approx(0.7)
    calls.unlink()
    rows = rerank(tmp_path / "run", workers=1, fn=fake_train, log=lambda s: None)
    assert {r.candidate_id for r in rows} == set(cids)
    assert len(calls.read_text().splitlines()) == 2  # the first layer was not trained again
    assert next(r for r in rows if r.candidate_id == cids[0]).created_at == first.created_at


def test_rows_read_best_first_the_latest_of_a_layer_counting_and_a_lost_one_trained_again(tmp_path):
    def row(cid, mean, status="ok", split="s", setting="p"):
        return rerank_row(cid, setting, split, {} if mean is None else {"a": mean}, mean, status,
                         None if status == "ok" else "why", 0.5, 1.0, 1.0)

    for r in (row(3, 0.4), row(5, 0.7), row(3, 0.45), row(7, None, "lost", "t"), row(8, None, "failed", "t"),
              row(5, 0.2, setting="q")):
        add_rerank(tmp_path, r)
    rows = read_reranks(tmp_path)
    assert [(r.candidate_id, r.setting, r.fitness) for r in rows] == [
        (5, "p", 0.7), (3, "p", 0.45), (5, "q", 0.2), (7, "p", None), (8, "p", None)]  # 3 again: replaced
    assert reranked_ids(tmp_path, "p", "s") == {3, 5} and reranked_ids(tmp_path, "q", "s") == {5}
    assert reranked_ids(tmp_path, "p", "t") == {8}  # a lost worker's layer is trained again; a failure is final
    assert len((tmp_path / RERANK_FILE).read_text().splitlines()) == 6  # appended, one line a row
    assert not (tmp_path / "store.sqlite").exists()  # the engine's store is not where they live


def test_a_search_started_over_drops_the_records_of_the_one_it_replaces(tmp_path):
    from evonorm.proxy.objective import ProxyObjective
    from evonorm.measure.retrain import RETRAIN_FILE
    from evonorm.search.driver import init_run

    cfg = get_preset("tiny", workers=1)
    cids = make_run(tmp_path / "run", cfg)
    add_rerank(tmp_path / "run", rerank_row(cids[0], "p", "s", {"a": 0.5}, 0.5, "ok", None, 0.4, 1.0, 1.0))
    (tmp_path / "run" / RETRAIN_FILE).write_text("{}\n")
    (tmp_path / "run" / "notes.txt").write_text("mine")
    init_run(tmp_path / "run", cfg, ProxyObjective.for_run(cfg), force=True)  # they named the old search's candidates
    assert read_reranks(tmp_path / "run") == [] and not (tmp_path / "run" / RETRAIN_FILE).exists()
    assert (tmp_path / "run" / "notes.txt").read_text() == "mine"
    with Store(tmp_path / "run", readonly=True) as store:
        assert store.candidates() == []


def test_the_report_reads_the_rows_from_the_runs_rerank_file(tmp_path):
    from evonorm.report.data import load_run
    from evonorm.report.html import rerank_table

    cids = make_run(tmp_path / "run", get_preset("tiny", workers=1))
    for cid, mean in ((cids[0], 0.25), (cids[1], 0.75)):
        add_rerank(tmp_path / "run", rerank_row(cid, "tiny[steps=6]", "s", {"a": mean}, mean, "ok", None, 0.4, 1.0, 1.0))
    run = load_run(tmp_path / "run")
    assert [r.candidate_id for r in run.reranks] == [cids[1], cids[0]]  # best first
    page = rerank_table(run)
    assert "tiny[steps=6]" in page and "a: 0.7500" in page and page.index("0.7500") < page.index("0.2500")
