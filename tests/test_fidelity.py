"""Rank fidelity: correlations, the panel file, and `evonorm calibrate --panel`."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from evonorm.cli import main
from evonorm.measure.calibrate import load_runs
from evonorm.measure.fidelity import load_panel, rank_fidelity, seed_agreement
from evonorm.stats import bootstrap_ci, kendall, pearson, spearman

EVONORM = str(Path(sys.executable).parent / "evonorm")


def test_spearman_and_kendall_known_values():
    x = [1, 2, 3, 4, 5]
    assert spearman(x, [5, 6, 7, 8, 7]) == pytest.approx(0.8207826816681233)  # scipy's value
    assert kendall(x, [5, 6, 7, 8, 7]) == pytest.approx(0.7378647873726218)  # scipy's tau-b
    assert kendall(x, x[::-1]) == pytest.approx(-1.0)
    assert kendall([1, 1, 1], [1, 2, 3]) is None  # a constant sample has no order
    assert pearson(x, [5, 6, 7, 8, 7]) == pytest.approx(0.8320502943378437)
    assert pearson(x[:2], x[:2]) is None and spearman([1, 1, 1], [1, 2, 3]) is None


@given(st.lists(st.integers(-5, 5), min_size=3, max_size=12), st.randoms(use_true_random=False))
@settings(max_examples=60, deadline=None)
def test_kendall_is_symmetric_and_bounded(xs, rnd):
    ys = [rnd.randint(-5, 5) for _ in xs]
    tau = kendall(xs, ys)
    if tau is not None:
        assert -1.0 - 1e-12 <= tau <= 1.0 + 1e-12
        assert kendall(ys, xs) == pytest.approx(tau)
        assert kendall(xs, [-y for y in ys]) == pytest.approx(-tau)


def test_bootstrap_interval_brackets_the_statistic_and_narrows_with_agreement():
    xs = list(range(16))
    noisy = [x + (3 if x % 2 else -3) for x in xs]
    wide = bootstrap_ci(lambda i: spearman([xs[k] for k in i], [noisy[k] for k in i]), 16)
    tight = bootstrap_ci(lambda i: spearman([xs[k] for k in i], [xs[k] for k in i]), 16)
    assert wide[0] <= spearman(xs, noisy) <= wide[1]
    assert tight == pytest.approx((1.0, 1.0)) and wide[0] < 0.99
    assert bootstrap_ci(lambda i: None, 5) is None


def test_rank_fidelity_lists_the_pairs_the_proxy_orders_wrongly():
    ref = {"a": 0.80, "b": 0.75, "c": 0.70, "d": 0.69, "e": 0.5}
    proxy = {"a": {0: 0.40, 1: 0.40}, "b": {0: 0.45, 1: 0.45}, "c": {0: 0.30, 1: 0.33},
             "d": {0: 0.31, 1: 0.32}, "extra": {0: 0.9}}
    f = rank_fidelity(proxy, ref)
    assert f.layers == ["a", "b", "c", "d"] and f.seeds == 2  # only the layers both scored
    assert [(w["better"], w["worse"]) for w in f.wrong_pairs] == [("a", "b")]  # c-d: 1 point
    r = [0.80, 0.75, 0.70, 0.69]
    # one search's view: the correlation at each seed, averaged; and that of the seeds' mean
    assert f.spearman == pytest.approx((spearman([0.40, 0.45, 0.30, 0.31], r)
                                        + spearman([0.40, 0.45, 0.33, 0.32], r)) / 2)
    assert f.spearman_of_mean == pytest.approx(spearman([0.40, 0.45, 0.315, 0.315], r))
    assert f.spearman_ci95 is not None and f.kendall_ci95 is not None


def _panel(path, runs):
    path.write_text(json.dumps({"reference": {"runs": runs}, "proxies": {"old": {"x": 1}}}))
    return path


def test_seed_agreement_is_one_seed_against_the_others_mean_once_done_on_every_arch():
    def runs(acc_by_seed, archs=("a", "b")):
        return [{"layer": f"l{i}", "arch": arch, "seed": seed, "test_accuracy": acc}
                for seed, accs in acc_by_seed.items() for i, acc in enumerate(accs) for arch in archs]

    order = [0.9, 0.8, 0.7, 0.6]
    assert seed_agreement(runs({0: order})) is None  # one seed: nothing to agree with
    assert seed_agreement(runs({0: order, 1: order})) == pytest.approx(1.0)
    assert seed_agreement(runs({0: order, 1: order[::-1]})) == pytest.approx(-1.0)
    # seed 2 swaps two layers: each seed against the mean of the other two, then their mean
    swapped = [0.9, 0.8, 0.6, 0.7]
    expected = (spearman(order, [0.9, 0.8, 0.65, 0.65]) * 2 + spearman(swapped, order)) / 3
    assert seed_agreement(runs({0: order, 1: order, 2: swapped})) == pytest.approx(expected)
    half = runs({0: order, 1: order[::-1]})[:-1]  # the last layer's seed 1 lacks an architecture
    assert seed_agreement(half) == pytest.approx(-1.0)  # l3 drops out: 3 layers left, reversed


@pytest.mark.parametrize("content, message", [
    ("[1, 2]", "no list reference.runs"),
    ("{not json", "not valid JSON"),
    (json.dumps({"reference": {"runs": [{"layer": "a", "test_accuracy": "high"}]}}), "runs[0]"),
    (json.dumps({"reference": {"runs": [{"layer": "a", "test_accuracy": 1.5}]}}), "runs[0]"),
    (json.dumps({"reference": {"runs": [{"layer": "a", "test_accuracy": 0.5}]}}), "needs >= 3"),
])
def test_a_bad_panel_is_refused_naming_the_field(tmp_path, content, message):
    path = tmp_path / "panel.json"
    path.write_text(content)
    with pytest.raises(ValueError, match="panel") as err:
        load_panel(path)
    assert message in str(err.value)


def test_calibrate_with_a_panel_stores_the_rank_fidelity(tmp_path, capsys):
    s0 = {"nodes": [["mul", 3, 0], ["sigmoid", 4], ["mul", 0, 5], ["group_std", 0], ["div", 6, 7]]}
    panel = _panel(tmp_path / "panel.json", [
        {"layer": "bn_relu", "graph": None, "arch": "resnet50_cifar", "seed": 0, "test_accuracy": 0.8},
        {"layer": "evonorm_s0", "graph": s0, "arch": "resnet50_cifar", "seed": 0, "test_accuracy": 0.78},
        {"layer": "gn_relu", "graph": None, "arch": "resnet50_cifar", "seed": 0, "test_accuracy": 0.7},
    ])
    assert {layer.name: layer.graph for layer in load_panel(panel)[1]}["evonorm_s0"] == s0
    out = tmp_path / "cal"
    argv = ["calibrate", "--preset", "tiny", "--seeds", "2", "--random", "0", "--workers", "2",
            "--panel", str(panel), "--out", str(out)]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "rank fidelity of tiny against the reference panel (3 layers, " in text
    assert "mean over 2 search seed(s)): Spearman" in text
    runs = [r for r in load_runs(out) if r.kind == "panel"]
    assert sorted((r.name, r.seed) for r in runs) == sorted(
        (n, s) for n in ("bn_relu", "evonorm_s0", "gn_relu") for s in (0, 1))
    assert all(set(r.accuracies) == {"resnet50_cifar", "mobilenetv2_cifar"} for r in runs
               if r.status == "valid")
    for r in (r for r in runs if r.status == "valid"):  # what the fitness is made of, kept
        assert r.stage_scores[-1] == r.accuracies and set(r.arch_seconds) == set(r.accuracies)
        assert all(s > 0 for s in r.arch_seconds.values())
        assert 0 < r.cpu_seconds and r.cost == r.cpu_seconds  # one thread: its own CPU time
        assert r.fitness == pytest.approx(sum(sum(v) / len(v) for v in r.run_scores.values()) / 2)
    stored = json.loads(panel.read_text())["proxies"]
    assert stored["old"] == {"x": 1}  # other proxies kept
    entry = stored["tiny"]
    assert entry["worker_seconds_per_candidate"] > 0 and len(entry["runs"]) == 6
    assert entry["command"].startswith("evonorm calibrate --preset tiny")
    for key in ("spearman", "kendall", "spearman_ci95", "wrong_pairs"):
        assert key in entry
    assert json.loads((out / "fidelity.json").read_text())["runs"] == entry["runs"]


def test_calibrate_with_a_bad_panel_exits_2_in_one_line(tmp_path):
    bad = tmp_path / "panel.json"
    bad.write_text("[]")
    proc = subprocess.run([EVONORM, "calibrate", "--preset", "tiny", "--panel", str(bad), "--out",
                           str(tmp_path / "X")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "no list reference.runs" in proc.stderr and not (tmp_path / "X").exists()


def _write_proxies(path, who, barrier):
    from evonorm.measure.fidelity import write_proxy

    barrier.wait()
    for i in range(100):
        write_proxy(path, f"{who}{i}", {"i": i})


def test_proxies_written_by_two_processes_at_once_are_all_kept(tmp_path):
    """Each writer reads, changes and rewrites the panel file under its lock: without it the later
    rename erased the other's entries."""
    from multiprocessing import get_context

    ctx = get_context("spawn")
    panel = tmp_path / "panel.json"
    # a panel's size (its runs), so that a read-change-write takes a while
    panel.write_text(json.dumps({"reference": {"runs": [{"curve": list(range(50))}] * 200},
                                 "proxies": {}}))
    barrier = ctx.Barrier(2)
    procs = [ctx.Process(target=_write_proxies, args=(panel, who, barrier)) for who in "ab"]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=120)
        assert proc.exitcode == 0
    assert len(json.loads(panel.read_text())["proxies"]) == 200


@pytest.mark.parametrize("layer, graph, says", [
    ("no_such_layer", None, "panel layer 'no_such_layer' does not build"),
    ("mine", {"nodes": "x"}, "panel layer 'mine' does not build"),
])
def test_a_panel_layer_that_does_not_build_is_refused_before_any_training(tmp_path, capsys,
                                                                         layer, graph, says):
    panel = _panel(tmp_path / "panel.json", [
        {"layer": n, "graph": g, "arch": "resnet50_cifar", "seed": 0, "test_accuracy": a}
        for n, g, a in (("bn_relu", None, 0.8), ("gn_relu", None, 0.7), (layer, graph, 0.5))])
    out = tmp_path / "cal"
    assert main(["calibrate", "--preset", "tiny", "--panel", str(panel), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and "\n" not in err and not out.exists()


def test_a_read_only_panel_is_found_before_any_training(tmp_path, capsys, monkeypatch):
    import errno
    import os

    panel = _panel(tmp_path / "panel.json", [
        {"layer": n, "graph": None, "arch": "resnet50_cifar", "seed": 0, "test_accuracy": a}
        for n, a in (("bn_relu", 0.8), ("gn_relu", 0.7), ("ln_relu", 0.6))])
    real = os.open

    def read_only_mount(path, flags, *a, **kw):  # as a read-only file system answers, even root
        if str(path).startswith(str(panel)) and flags & (os.O_RDWR | os.O_WRONLY):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real(path, flags, *a, **kw)

    monkeypatch.setattr(os, "open", read_only_mount)
    out = tmp_path / "cal"
    assert main(["calibrate", "--preset", "tiny", "--panel", str(panel), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "cannot be written (Read-only file system)" in err and "\n" not in err
    assert not out.exists()


def test_failed_panel_jobs_are_neither_scored_at_chance_nor_counted_in_the_cost():
    from evonorm.measure.calibrate import RunRecord, panel_cost, proxy_scores

    recs = [RunRecord("panel", "a", 0, "valid", None, fitness=0.6, cpu_seconds=10.0),
            RunRecord("panel", "a", 1, "rejected", "nonfinite", cpu_seconds=4.0),  # learned nothing
            RunRecord("panel", "b", 0, "failed", "error: no such layer", seconds=0.0)]
    assert proxy_scores(recs, 0.1) == {"a": {0: 0.6, 1: 0.1}}
    assert panel_cost(recs) == pytest.approx(7.0)
