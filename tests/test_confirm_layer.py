"""The confirmatory experiment: every layer on the same (split, seed) pairs, the paired tests, resuming."""

import json
from pathlib import Path

import pytest

from _scripts import load_script

from evonorm.measure.retrain import pending
from evonorm.stats import paired_sign_flip_greater
from evonorm.proxy.config import ProxyTask, configured, stored_task

cl = load_script("confirm_layer")
analyze, main = cl.analyze, cl.main


def _rows(path: Path, label: str, fits: dict[int, float | None]) -> None:
    with path.open("w") as f:
        for seed, fit in fits.items():
            f.write(json.dumps({"layer": label, "kind": "x", "seed": seed, "setting": "full", "split": "s", "scores": {},
                                "fitness": fit, "status": "ok" if fit is not None else "failed", "version": 1}) + "\n")


def test_paired_differences_over_splits_and_seeds(tmp_path):
    layer = {1: {10: 0.50, 11: 0.40}, 2: {10: 0.45, 11: None}}  # a failed run counts as chance
    rival = {1: {10: 0.30, 11: 0.35}, 2: {10: 0.40, 11: 0.20}}
    for ds in (1, 2):
        _rows(tmp_path / f"split{ds}_layer.jsonl", "layer", layer[ds])
        _rows(tmp_path / f"split{ds}_gn_relu.jsonl", "gn_relu", rival[ds])
    out = analyze(tmp_path, ["layer", "gn_relu"], [1, 2], [10, 11], 0.1, "gn_relu")
    a, b = [0.50, 0.40, 0.45, 0.1], [0.30, 0.35, 0.40, 0.20]
    t = out["tests"]["gn_relu"]
    assert t["pairs"] == 4 and t["mean_difference"] == pytest.approx(sum(a) / 4 - sum(b) / 4)
    assert t["p_above"] == paired_sign_flip_greater(a, b) and t["p_below"] == paired_sign_flip_greater(b, a)
    assert out["layers"]["layer"]["per_split"] == {"1": pytest.approx(0.45), "2": pytest.approx(0.275)}
    assert out["complete"] and "cannot be told above gn_relu" in out["verdict"]
    (tmp_path / "split2_gn_relu.jsonl").unlink()  # a missing split: no verdict, pairs only where both ran
    out = analyze(tmp_path, ["layer", "gn_relu"], [1, 2], [10, 11], 0.1, "gn_relu")
    assert not out["complete"] and out["verdict"] is None and out["tests"]["gn_relu"]["pairs"] == 2


def test_bad_input_exits_2_in_one_line(tmp_path, capsys):
    bad = tmp_path / "g.json"
    bad.write_text('{"nodes": [["no_such_op", 0]]}')
    assert main(["--graph", str(bad), "--out", str(tmp_path / "o")]) == 2
    assert main(["--graph", str(tmp_path / "absent.json"), "--out", str(tmp_path / "o")]) == 2
    good = tmp_path / "ok.json"
    good.write_text('{"nodes": [["group_std", 0], ["div", 0, 4]]}')
    assert main(["--graph", str(good), "--against", "no_layer", "--out", str(tmp_path / "o")]) == 2
    assert main(["--graph", str(good), "--primary", "bn_relu", "--against", "gn_relu",
                 "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 4 and all(line.startswith("confirm_layer: ") for line in err)


@pytest.mark.slow
def test_trains_every_layer_on_the_same_pairs_and_resumes(tmp_path):
    args = ["--graph", "tanh_group_rms", "--preset", "tiny", "--data-seeds", "1", "2", "--seeds", "1",
            "--against", "gn_relu", "--workers", "1", "--out", str(tmp_path / "o")]
    assert main(args) == 0
    out = json.loads((tmp_path / "o" / "confirm.json").read_text())
    assert out["complete"] and out["tests"]["gn_relu"]["pairs"] == 2
    assert set(out["layers"]["layer"]["values"]) == set(out["layers"]["gn_relu"]["values"]) == {"1/2000", "2/2000"}
    rows = (tmp_path / "o" / "split1_layer.jsonl").read_text()
    assert pending(tmp_path / "o" / "split1_layer.jsonl", "layer", [2000, 2001]) == [2001]
    assert main(args) == 0  # resumes: nothing trained again, no pool started
    assert (tmp_path / "o" / "split1_layer.jsonl").read_text() == rows
    assert "Verdict: the layer" in (tmp_path / "o" / "confirm.md").read_text()
    assert out["graph"] == {"nodes": [["group_rms", 0], ["div", 0, 4], ["tanh", 5]]}  # the named graph


def test_train_layers_in_the_rerank_setting_uses_its_data_and_steps(tmp_path, monkeypatch):
    # the rerank setting: its own steps, the training split less the search's held-out images, the whole
    # test split; the search setting: the search's split (what `evonorm retrain` trains on)
    from _ledger_fakes import calls, fake_train

    from evonorm.measure.ledger import DataSplit, load_split
    from evonorm.proxy.api import start
    from evonorm.proxy.training import search_dataset
    from evonorm.proxy.presets import get_preset
    from evonorm.measure.rerank import rerank_dataset
    from evonorm.measure.retrain import train_layers

    monkeypatch.setenv("EVONORM_TEST_CALLS", str(tmp_path / "calls"))

    def seen(i):  # what job i would train on, as its worker loads it
        job = calls(tmp_path / "calls")[i]
        data = load_split(DataSplit(**job["data"]))
        return [(len(data.train_y), len(data.test_y), t["steps"], t["seed"]) for t in job["train"]]

    cfg = start(configured(get_preset("tiny"), archs=("resnet50_cifar",), data_seed=3))[0]
    rows = train_layers(cfg, [("x", "reference", "gn_relu", None)], [7], tmp_path / "r.jsonl", log=lambda s: None,
                        rerank=True, fn=fake_train)
    rd, sd = rerank_dataset(ProxyTask.of_run(cfg)), search_dataset(ProxyTask.of_run(cfg))
    assert seen(0) == [(len(rd.train_y), len(rd.test_y), stored_task(cfg).rerank_train["steps"], 7)]
    assert rows[0].fitness == 0.5
    assert len(rd.test_y) > len(sd.test_y) and stored_task(cfg).rerank_train["steps"] != stored_task(cfg).train["steps"]
    train_layers(cfg, [("x", "reference", "gn_relu", None)], [7], tmp_path / "s.jsonl", log=lambda s: None, fn=fake_train)
    assert seen(1) == [(len(sd.train_y), len(sd.test_y), stored_task(cfg).train["steps"], 7)]
