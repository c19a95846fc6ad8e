"""Which path a layer ran is recorded, and a layer asked for a kernel that runs another path says so once, in
one line: the C++ kernel of graph layers (`impl="cpp"`), the Triton kernels of EvoNorm layers (`impl="triton"`).
A search's candidate records its layer's calls per path."""

import json

import pytest
import torch

import _objectives
from evonorm.graph.library import NAMED_GRAPHS, get_graph
from evonorm.layers import EvoNormS0, create_norm_act
from evonorm.runtime.paths import notice_once, recording
from evonorm.search.objective import run_trial
from evonorm.proxy.presets import get_preset


@pytest.fixture(autouse=True)
def fresh_process_notices():
    notice_once.cache_clear()  # as in a fresh process
    yield
    notice_once.cache_clear()


def test_a_cpp_layer_on_input_the_kernel_does_not_take_says_so_once(capsys):
    layer = get_graph("evonorm_s0").to_module(8, groups=4, impl="cpp")
    with recording() as calls:
        layer(torch.randn(2, 8, 3, 3))
        assert dict(calls) == {"cpp": 1} and capsys.readouterr().err == ""
        half = layer.bfloat16()
        for _ in range(3):
            half(torch.randn(2, 8, 3, 3, dtype=torch.bfloat16))
    err = capsys.readouterr().err.splitlines()
    assert calls["plain"] == 3
    assert len(err) == 1 and "impl='cpp' runs the plain path" in err[0] and "bfloat16" in err[0]


def test_auto_takes_another_path_in_silence_and_counts_it(capsys):
    layer = get_graph("evonorm_s0").to_module(8, groups=4)
    with recording() as calls:
        layer.bfloat16()(torch.randn(2, 8, 3, 3, dtype=torch.bfloat16))
    assert dict(calls) == {"plain": 1} and capsys.readouterr().err == ""


def test_a_traced_cpp_layer_says_it_runs_the_plain_path(capsys):
    layer = get_graph("evonorm_s0").to_module(8, groups=4, impl="cpp")
    torch.jit.trace(layer, torch.randn(2, 8, 3, 3))
    torch.jit.trace(layer, torch.randn(2, 8, 3, 3))
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "impl='cpp' runs the plain path" in err[0] and "traced" in err[0]


@pytest.mark.extras
def test_a_triton_layer_that_runs_the_plain_formulas_says_so_once(capsys):
    pytest.importorskip("triton", reason="triton is not installed (the `triton` extra)")
    layer = EvoNormS0(8, groups=4, impl="triton")
    with recording() as calls:
        torch.jit.trace(layer, torch.randn(2, 8, 3, 3))
        torch.jit.trace(layer, torch.randn(2, 8, 3, 3))
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "impl='triton' runs the plain path" in err[0]
    assert calls["plain"] >= 1


def test_an_evonorm_layer_records_its_kernel():
    with recording() as calls:
        EvoNormS0(8, groups=4)(torch.randn(2, 8, 3, 3))
        EvoNormS0(8, groups=4, impl="fast")(torch.randn(2, 8, 3, 3))
    assert dict(calls) == {"fast": 2}


@pytest.mark.parametrize("name", ["evonorm_s0", "evonorm_b0"])
def test_impl_plain_runs_the_plain_formula_with_the_fast_paths_values(name):
    x = torch.randn(2, 8, 3, 3)
    fast, plain = create_norm_act(name, 8, groups=4, impl="fast"), create_norm_act(name, 8, groups=4, impl="plain")
    with recording() as calls:
        y = plain(x)
    assert dict(calls) == {"plain": 1}
    torch.testing.assert_close(y, fast(x))


def test_one_impl_vocabulary_refuses_what_a_family_lacks_in_one_line():
    with pytest.raises(ValueError, match=r"EvoNorm layers take impl auto \| plain \| fast \| compile \| triton, got 'cpp'$"):
        EvoNormS0(8, groups=4, impl="cpp")
    with pytest.raises(ValueError, match=r"graph layers take impl auto \| plain \| fast \| cpp, got 'triton'$"):
        get_graph("evonorm_s0").to_module(8, groups=4, impl="triton")
    with pytest.raises(ValueError, match="not a path this package has"):
        get_graph("evonorm_s0").to_module(8, groups=4, impl="kernal")


def test_kernel_is_not_an_impl_name():
    with pytest.raises(ValueError, match=r"take impl auto \| plain \| fast \| compile \| triton, got 'kernel' "
                                         r"\(not a path this package has\)$"):
        EvoNormS0(8, groups=4, impl="kernel")


def test_nothing_is_counted_outside_a_recording():
    with recording() as calls:
        pass
    get_graph("evonorm_s0").to_module(8, groups=4)(torch.randn(2, 8, 3, 3))
    assert not calls


def test_a_candidate_records_the_path_its_layer_ran_on():
    payload = {"graph": NAMED_GRAPHS["evonorm_s0"].to_json(), "config": get_preset("tiny").to_dict()}
    evaluation = run_trial(_objectives.mixed, payload)
    assert evaluation.status == "valid" and evaluation.timings["calls:cpp"] == 1.0
    assert not any(k.startswith("calls:") and k != "calls:cpp" for k in evaluation.timings)


def test_a_training_record_says_which_path_the_layer_ran_on(tmp_path, capsys):
    from evonorm.cli import main

    out = tmp_path / "r.json"
    assert main(["train", "--layer", "s_top1", "--train-preset", "tiny", "--dataset", "synthetic", "--steps", "2",
                 "--out", str(out)]) == 0
    calls = json.loads(out.read_text())["layer_calls"]
    assert set(calls) == {"cpp"} and calls["cpp"] > 0
