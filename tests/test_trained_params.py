"""A layer's trained parameters: counted and ranged per layer and overall; a parameter the layer
does not have is refused before any training."""

import json

import pytest
import torch

from _scripts import load_script

tp = load_script("trained_params")

X_OVER_V1 = json.dumps({"nodes": [["div", 0, 3], ["group_std", 0], ["div", 4, 5],
                                  ["max", 6, 1]]})


def test_the_summary_counts_negatives_per_layer_and_overall():
    weights = {"a.v1": torch.tensor([1.0, -0.5, 2.0]), "a.weight": torch.tensor([-9.0]),
               "b.block.v1": torch.tensor([[0.25], [-1.0]]), "b.block.v10": torch.tensor([-7.0])}
    got = tp.summarise(weights, "v1")
    assert (got["n"], got["negative"], got["min"], got["max"]) == (5, 2, -1.0, 2.0)
    assert got["median"] == 0.25
    assert got["per_layer"]["a.v1"]["negative"] == 1 and got["per_layer"]["b.block.v1"]["n"] == 2
    assert set(got["per_layer"]) == {"a.v1", "b.block.v1"}


def test_a_parameter_the_layer_lacks_is_refused_in_one_line(tmp_path, capsys):
    assert "v1" in tp.layer_params(X_OVER_V1)
    with pytest.raises(SystemExit) as stop:
        tp.main(["--layer", "w=gn_relu", "--arch", "resnet50_cifar", "--param", "v1",
                 "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.splitlines()
    assert stop.value.code == 2 and len(err) == 1 and "has no parameter 'v1'" in err[0]
    assert not (tmp_path / "out").exists()


@pytest.mark.fashion_mnist
def test_a_short_run_writes_its_parameters_summary(tmp_path):
    tp.main(["--layer", "w=" + X_OVER_V1, "--arch", "resnet50_cifar", "--dry-run",
             "--out", str(tmp_path)])
    got = json.loads((tmp_path / "w__resnet50_cifar__s0__v1.json").read_text())
    assert got["setting"]["steps"] == 10 and got["n"] == sum(
        r["n"] for r in got["per_layer"].values()) > 0
    assert got["min"] <= got["median"] <= got["max"] and got["status"] == "ok"
    assert got["min"] != got["max"]  # trained: the values moved from their common start
