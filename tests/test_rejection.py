"""Rejection: pre-checks, the stability stress test (double backprop), the quality test."""

import pytest
import torch

from evonorm.data import holdout_split, load_dataset
from evonorm.graph import Graph
from evonorm.graph.library import get_graph
from evonorm.proxy.rejection import quality, quality_threshold, stability
from evonorm.search.checks import layer_checks
from evonorm.train import get_train_preset


@pytest.fixture(autouse=True)
def _one_thread():
    # double backprop on a shared 2-core machine: two threads contend badly under load
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def data():
    return holdout_split(load_dataset("synthetic", n_train=400, n_test=100), 0.25)


STAB = dict(arch="resnet50_cifar", width=0.0625, steps=8, batch=4)


def test_prechecks():
    assert layer_checks(get_graph("zero")).reason == "precheck:constant"
    assert layer_checks(Graph.from_json({"nodes": [["add", 2, 3]]})).reason == "precheck:x_independent"
    assert layer_checks(Graph.from_json({"nodes": [["div", 3, 1], ["exp", 4], ["exp", 5], ["exp", 6],
                                               ["mul", 7, 0]]})).reason == "precheck:nonfinite"
    # v0 * x is constant at init (v0 = 0) but learnable: the trainable vectors are randomized
    assert layer_checks(Graph.from_json({"nodes": [["mul", 2, 0]]})) is None
    for name in ("evonorm_b0", "evonorm_s0", "exp_exp", "tanh_minus_batch_mean_relu"):
        assert layer_checks(get_graph(name)) is None, name


@pytest.mark.parametrize("layer", ["exp_exp", "tanh_minus_batch_mean_relu"])
def test_stability_rejects_exploding_layers(data, layer):
    trace = []
    rej = stability(get_graph(layer), data, trace=trace, **STAB)
    assert rej is not None and rej.reason == "stability" and rej.step is not None
    assert rej.step <= STAB["steps"] and len(trace) <= rej.step + 1  # stopped early


def test_stability_passes_zero_layer(data):
    # "a trivial zero layer will be perfectly stable" (paper Sec. 4.4)
    assert stability(get_graph("zero"), data, **STAB) is None


@pytest.mark.parametrize("layer", ["bn_relu", "evonorm_b0", "evonorm_s0"])
def test_stability_passes_normalized_layers(data, layer):
    norm_act = layer if layer == "bn_relu" else get_graph(layer)
    assert stability(norm_act, data, **STAB) is None


def test_quality_rejects_zero_layer_at_first_arch(data):
    cfg = get_train_preset("tiny", steps=5, batch_size=16, width=0.0625, n_train=None, n_test=None)
    seen = []

    def make(arch):
        seen.append(arch)
        return cfg.replace(arch=arch)

    rej, accs = quality(get_graph("zero"), data, ["resnet50_cifar", "mobilenetv2_cifar"], make)
    assert rej.reason == "quality:resnet50_cifar" and rej.step == 5
    assert seen == ["resnet50_cifar"]  # stops at the first failing architecture
    assert accs["resnet50_cifar"] < quality_threshold(10)


def test_quality_threshold_is_twice_chance():
    assert quality_threshold(10) == pytest.approx(0.2)
    assert quality_threshold(100) == pytest.approx(0.02)
    assert quality_threshold(10, factor=3) == pytest.approx(0.3)


def test_a_stability_rejection_at_an_infinite_gradient_norm_is_stored_as_a_rejection():
    """The test's detail names a non-finite measurement rather than holding it (the store holds
    finite values only), so the layer is rejected, not failed."""
    from evonorm.proxy.rejection import _measured
    from evonorm.search.evaluation import Evaluation
    from evonorm.search.objective import Reject
    from evonorm.search.outcome import storable

    assert _measured(float("inf")) == "inf" and _measured(float("nan")) == "nan"
    assert _measured(3.5) == 3.5
    e = storable(Evaluation.rejected(Reject("stability", step=4,
                                            detail={"grad_norm": _measured(float("inf"))})))
    assert (e.status, e.reason, e.detail) == ("rejected", "stability", {"grad_norm": "inf"})
