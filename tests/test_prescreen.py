"""The prescreen: features at birth, the surrogate, and a search that uses them."""

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from evonorm.graph.library import resolve_graph
from evonorm.search import search
from evonorm.search.config import Evolution, SearchConfig
from evonorm.search.evolution import Proposal
from evonorm.search.features import layer_features
from evonorm.proxy.presets import get_preset
from evonorm.proxy.config import ProxyTask, configured, stored_task
from evonorm.search.store import SCHEMA_VERSION, Store
from evonorm.search.surrogate import Prediction, Prescreen, Surrogate
import _objectives

CONSTANT = {"nodes": [["add", 1, 1]]}  # zero + zero


def _prior_for(cfg, folder=None):
    """The prior that applies to a run of `cfg` (`prior_for` takes its task and engine facts)."""
    from evonorm.proxy.prior import prior_for

    return prior_for(ProxyTask.of_run(cfg), cfg.evolution.space, cfg.preset, folder)


def test_engine_features_are_deterministic_and_none_for_a_degenerate_layer():
    g = resolve_graph("evonorm_s0").to_json()
    a, b = layer_features(g), layer_features(g)
    assert a == b and a["graph_op_sigmoid"] == 1 and a["graph_axes_group"] >= 1
    assert json.loads(json.dumps(a)) == a  # stored as JSON, read back the same
    relu = layer_features(get_preset("demo").evolution.seed_layers[0])  # GroupNorm-ReLU as a graph
    # GroupNorm-ReLU ignores a shift of its input; EvoNorm-S0 (x * sigmoid(v1 x) / std) does not
    assert relu["probe_sens_shift"] < -6 < a["probe_sens_shift"]
    assert layer_features(CONSTANT) is None


def test_computing_engine_features_loads_neither_trainer_models_data_nor_sklearn():
    # what the engine imports is pyproject.toml's import contract; this is what it loads at run time
    code = ("import sys, evonorm.search.features as f;"
            "f.layer_features({'nodes': [['layer_std', 0], ['div', 0, 4]]});"
            "bad = [m for m in ('evonorm.train', 'evonorm.models', 'evonorm.data', 'sklearn') "
            "if m in sys.modules]; print(bad); sys.exit(bool(bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_task_features_are_the_proxy_objectives_and_deterministic():
    from evonorm.proxy.features import task_features
    from evonorm.proxy.objective import ProxyObjective

    cfg = get_preset("tiny")
    g = resolve_graph("evonorm_s0")
    # handed over by the task's objective, never looked up by the engine
    a = ProxyObjective.for_run(cfg).prescreen_features(g)
    assert a == task_features(g, ProxyTask.of_run(cfg))
    assert a == task_features(g, ProxyTask.of_run(cfg))
    for arch in stored_task(cfg).archs:
        assert a[f"{arch}_error"] == 0.0 and a[f"{arch}_fisher_trace"] is not None
        assert a[f"{arch}_grad_first"] is not None
        # EvoNorm-S0 lets a few optimiser steps bring one batch's loss down
        assert a[f"{arch}_fit_finite"] == 1.0 and a[f"{arch}_fit_ratio"] < 0


def test_signal_features_read_the_network_at_initialisation():
    """The ladder's network rung: one forward and backward pass. A normalizing layer keeps the
    signal's scale through depth and the images apart; a layer that squares its input each slot
    blows the signal up (or to inf) on its way to the logits."""
    from evonorm.graph import Graph
    from evonorm.proxy.features import signal_features

    cfg = get_preset("tiny")
    s0 = signal_features(resolve_graph("evonorm_s0"), ProxyTask.of_run(cfg))
    assert s0 == signal_features(resolve_graph("evonorm_s0"), ProxyTask.of_run(cfg))  # deterministic
    assert s0["error"] == 0.0 and s0["finite"] == 1.0 and s0["loss"] is not None
    assert s0["logit_spread"] > 0.05 and abs(s0["scale_slope"]) < 1
    square = signal_features(Graph.from_json({"nodes": [["square", 0], ["square", 4]]}), ProxyTask.of_run(cfg))
    assert square["finite"] == 0.0 or square["scale_slope"] > 5 + abs(s0["scale_slope"])


def _rows(n):
    """Features where valid layers have a live max: the rule the surrogate should find."""
    rng = random.Random(0)
    rows = []
    for i in range(n):
        has_max = i % 2 == 0
        rows.append(({"graph_op_max": float(has_max), "noise": rng.random()}, has_max,
                     0.5 + 0.1 * rng.random() if has_max else None))
    return rows


@pytest.mark.extras
def test_the_surrogate_predicts_nothing_at_cold_start_then_learns_the_rule():
    pytest.importorskip("sklearn", reason="scikit-learn is not installed (the `prescreen` extra)")
    s = Surrogate(min_each=3)
    for f, v, t in _rows(4):  # 2 valid, 2 rejected: still cold
        s.add(f, v, t)
    assert not s.ready and s.predict({"graph_op_max": 1.0, "noise": 0.3}) is None
    for f, v, t in _rows(20)[4:]:
        s.add(f, v, t)
    good, bad = s.predict({"graph_op_max": 1.0, "noise": 0.3}), s.predict({"graph_op_max": 0.0})
    assert good.p_valid > 0.8 > 0.2 > bad.p_valid
    assert 0.45 < good.fitness < 0.65 and good.learned_from == 20
    assert s.predict(None) is None


class _Oracle:
    """A surrogate that is ready and says p_valid 0.9 for layers with a live max, else 0.01."""

    ready = True

    def predict(self, feats):
        return None if feats is None else Prediction(0.9 if feats["graph_op_max"] else 0.01, 0.6)


def _draws():
    graphs = [{"nodes": [["layer_std", 0], ["div", 0, 4]]},  # no max: hopeless to the oracle
              {"nodes": [["group_std", 0], ["div", 0, 4], ["max", 5, 1]]},
              {"nodes": [["instance_std", 0], ["div", 0, 4], ["tanh", 5]]},
              {"nodes": [["layer_rms", 0], ["div", 0, 4], ["max", 5, 1]]}]
    it = iter(graphs * 10)
    return lambda: Proposal(next(it), "mutation", 1)


def test_a_pool_rejects_the_hopeless_and_trains_the_best_and_explore_trains_regardless():
    cfg = SearchConfig(evolution=Evolution(prescreen=True, prescreen_pool=4, prescreen_explore=0.0))
    screen = Prescreen(cfg, surrogate=_Oracle())
    out = screen.choose(_draws(), random.Random(0))
    trained = [s for s in out if s.train]
    rejected = [s for s in out if not s.train]
    assert len(rejected) == 2 and all(s.born.prediction.p_valid < 0.05 for s in rejected)
    assert len(trained) == 1 and trained[0].born.features["graph_op_max"] == 1
    # the feature cost of the pool's dropped child is charged to the trained one
    assert trained[0].born.seconds > 0
    explorer = Prescreen(cfg.replace(evolution=cfg.evolution.replace(prescreen_explore=1.0)), surrogate=_Oracle())
    (only,) = explorer.choose(_draws(), random.Random(0))  # the hopeless first draw, trained
    assert only.train and only.born.explore and only.born.prediction.p_valid == 0.01
    assert only.born.record()["explore"] is True


def test_features_are_computed_at_one_torch_thread_and_the_count_is_restored():
    import torch

    seen = []

    def task_features(graph):
        seen.append(torch.get_num_threads())
        return {"x": 1.0}

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        feats = Prescreen(SearchConfig(), task_features).features(resolve_graph("evonorm_s0").to_json())
        assert seen == [1] and feats["task_x"] == 1.0
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


@pytest.mark.extras
def test_a_prescreened_search_on_an_own_objective_records_prescreen_rejections(tmp_path):
    pytest.importorskip("sklearn", reason="scikit-learn is not installed (the `prescreen` extra)")
    run = tmp_path / "run"
    result = search(_objectives.needs_max, out=run, preset="tiny", budget=60, workers=1,
                    progress=False, prescreen=True, prescreen_min=2, prescreen_explore=0.5,
                    prescreen_threshold=0.4, initial_population=1, p_random=0.5,
                    prechecks=False)  # what the prescreen itself rejects, not the layer checks
    assert result.complete
    with Store(run, readonly=True) as st:
        cands = st.candidates()
        assert st.get_meta("schema_version") == SCHEMA_VERSION
    screened = [c for c in cands if c.reason == "prescreen"]
    assert screened, [(c.status, c.reason) for c in cands]
    for c in screened:  # recorded untrained, with the prediction that rejected it
        assert c.prediction["p_valid"] < 0.4 and c.detail["p_valid"] == c.prediction["p_valid"]
        assert "train" not in c.timings and c.features is not None
    explored = [c for c in cands if (c.prediction or {}).get("explore")]
    assert explored and all(c.reason != "prescreen" for c in explored)
    fresh = [c for c in cands if not c.cache_hit and c.features is not None]
    # an own objective hands over no features: the engine's only
    assert fresh and all(k.startswith(("graph_", "probe_")) for c in fresh for k in c.features)
    predicted = [c for c in cands if c.prediction is not None and c.reason != "prescreen"]
    assert predicted and all(0.0 <= c.prediction["p_valid"] <= 1.0 for c in predicted)


@pytest.mark.extras
def test_a_child_the_tasks_features_reject_is_rejected_untrained_in_every_slot(tmp_path):
    """The task's features may find a child hopeless as they measure it: rejected at birth with
    the task's reason, before the surrogate can predict (cold start) and in exploring slots."""
    pytest.importorskip("sklearn", reason="scikit-learn is not installed (the `prescreen` extra)")
    run = tmp_path / "run"
    search(_objectives.NeedsMaxScreened(), out=run, preset="tiny", budget=30, workers=1,
           progress=False, prescreen=True, prescreen_min=1000, prescreen_explore=1.0,
           initial_population=1, p_random=1.0, seed_layers=())
    with Store(run, readonly=True) as st:
        cands = [c for c in st.candidates() if not c.cache_hit]
    screened = [c for c in cands if c.reason == "signal"]
    assert screened and all(c.detail == {"why": "no max"} and c.reason_step == 0 for c in screened)
    assert all("train" not in c.timings and c.seconds > 0 for c in screened)  # its features' cost
    # the objective, which rejects a layer without a max, saw none (a layer degenerate on the
    # probe has no features to reject it by: the pre-checks reject those)
    assert not any(c.reason == "no max" for c in cands), [c.reason for c in cands]


def test_search_cli_refuses_a_bad_prescreen_value(tmp_path):
    evonorm = str(Path(sys.executable).parent / "evonorm")
    out = subprocess.run([evonorm, "search", "--preset", "tiny",
                          "--dataset", "synthetic", "--out", str(tmp_path / "r"),
                          "--prescreen", "maybe"], capture_output=True, text=True)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "--prescreen" in out.stderr and not (tmp_path / "r").exists()


def test_the_report_shows_predicted_against_measured():
    from evonorm.report.data import RunData
    from evonorm.report.html import prescreen_table
    from evonorm.report.prescreen import summarize

    f = {"graph_nodes": 2.0}

    def cand(i, status, p, *, fit=None, pred_fit=None, explore=False, reason=None):
        return {"id": i, "status": status, "reason": reason, "fitness": fit,
                "scores": {"a": fit} if fit is not None else {}, "features": f,
                "prediction": {"p_valid": p, "fitness": pred_fit, "explore": explore}}

    cands = [cand(1, "valid", 0.9, fit=0.6, pred_fit=0.55), cand(2, "valid", 0.7, fit=0.5, pred_fit=0.5),
             cand(3, "valid", 0.6, fit=0.4, pred_fit=0.45), cand(4, "rejected", 0.3, reason="quality:a"),
             cand(5, "valid", 0.01, fit=0.3, pred_fit=0.2, explore=True),  # a false negative
             cand(6, "rejected", 0.02, explore=True, reason="stability"),
             cand(7, "rejected", 0.01, reason="prescreen")]
    s = summarize(RunData("r", cands).candidates, 0.05)
    assert s.rejected == 1 and (s.explored, s.explored_below, s.false_negatives) == (2, 2, 1)
    assert s.bins[0] == ("0.00-0.05", 2, 1) and s.bins[-1] == ("0.50-1.00", 3, 3)
    assert s.fitness_spearman == pytest.approx(1.0) and s.fitness_n == 4
    page = prescreen_table(RunData("r", cands, config={"evolution": {"prescreen_threshold": 0.05}}))
    assert "predicted against measured" in page and "1 of 2 explored" in page
    assert prescreen_table(RunData("r", [{"id": 1, "status": "valid"}])) == ""
    assert "from this run alone" in page
    primed = RunData("r", cands, prescreen_prior={"rows": 40, "valid": 9})
    assert "a prior of 40 labelled candidates of earlier runs (9 valid)" in prescreen_table(primed)


def test_with_the_prescreen_off_nothing_is_computed_or_stored(tmp_path):
    run = tmp_path / "run"
    search(_objectives.needs_max, out=run, preset="tiny", budget=5, workers=1, progress=False)
    with Store(run, readonly=True) as st:
        assert st.search_config().evolution.prescreen is False
        assert all(c.features is None and c.prediction is None for c in st.candidates())


@pytest.mark.extras
def test_a_prior_ends_the_cold_start_before_the_search_has_learned_anything():
    pytest.importorskip("sklearn", reason="scikit-learn is not installed (the `prescreen` extra)")
    prior = [{"features": f, "valid": v, "fitness": t} for f, v, t in _rows(12)]
    s = Surrogate(min_each=3, prior=prior)
    assert s.ready and s.prior == 12 and s.counts == (6, 6)
    good, bad = s.predict({"graph_op_max": 1.0, "noise": 0.5}), s.predict({"graph_op_max": 0.0})
    assert good.p_valid > 0.5 > bad.p_valid and good.learned_from == 12
    for f, v, t in _rows(20)[12:]:  # the search's own labels join the prior's
        s.add(f, v, t)
    assert s.predict({"graph_op_max": 1.0}).learned_from == 20 and s.prior == 12


@pytest.mark.extras
def test_a_search_predicts_from_its_first_candidate_with_the_objectives_prior(tmp_path):
    pytest.importorskip("sklearn", reason="scikit-learn is not installed (the `prescreen` extra)")

    def first_predicted(run, **kw):
        search(_objectives.NeedsMaxWithPrior(), out=run, preset="tiny", budget=8, workers=1,
               progress=False, prescreen=True, prescreen_explore=0.0, initial_population=1, **kw)
        with Store(run, readonly=True) as st:
            cands = [c for c in st.candidates() if c.features is not None]
        return cands[0].prediction

    with_prior = first_predicted(tmp_path / "a")
    assert with_prior is not None and with_prior["learned_from"] >= 12
    with Store(tmp_path / "a", readonly=True) as st:  # the report says what it started from
        assert st.get_meta("prescreen_prior") == {"rows": 12, "valid": 6}
    assert first_predicted(tmp_path / "b", prescreen_prior=False) is None  # cold, as before


def test_the_prior_is_said_on_the_log_and_a_malformed_one_is_refused():
    from evonorm.search.driver import prescreen_prior

    cfg = SearchConfig(evolution=Evolution(prescreen=True))
    lines = []
    rows = prescreen_prior(_objectives.NeedsMaxWithPrior(), cfg, lines.append)
    assert len(rows) == 12 and lines == ["prescreen: starts from a prior of 12 labelled "
                                         "candidates (6 valid)"]
    assert prescreen_prior(_objectives.NeedsMaxWithPrior(), cfg.replace(evolution=cfg.evolution.replace(prescreen_prior=False)),
                           lines.append) == []
    assert prescreen_prior(_objectives.needs_max, cfg, None) == []  # an objective without one
    assert "no prior" in lines[-1]
    with pytest.raises(ValueError, match="row 12") as err:
        prescreen_prior(_objectives.NeedsMaxWithPrior(broken=True), cfg, None)
    assert "\n" not in str(err.value)


def test_search_cli_refuses_a_bad_prescreen_prior_value(tmp_path):
    evonorm = str(Path(sys.executable).parent / "evonorm")
    out = subprocess.run([evonorm, "search", "--preset", "tiny", "--dataset", "synthetic",
                          "--out", str(tmp_path / "r"), "--prescreen-prior", "maybe"],
                         capture_output=True, text=True)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "--prescreen-prior" in out.stderr and not (tmp_path / "r").exists()


def _proxy_run(run, **overrides):
    """A run folder of the proxy task (tiny, synthetic data) whose candidates a fast objective of
    one's own scored: a prior reads the run's setting and labels, not how they were scored."""
    from evonorm.proxy.presets import get_preset
    from evonorm.search.driver import init_run, run_search

    init_run(run, get_preset("tiny", dataset="synthetic", workers=1,
                             **{"budget": 3, "initial_population": 1, **overrides}))
    run_search(run, objective=_objectives.needs_max, progress=False)
    return run


def test_a_prior_built_from_runs_applies_to_their_setting_only(tmp_path, monkeypatch):
    from evonorm.proxy.presets import get_preset
    from evonorm.proxy.prior import build_prior, read_prior
    from evonorm.files import write_atomic

    a = _proxy_run(tmp_path / "a")
    b = _proxy_run(tmp_path / "b", seed=1, data_root=str(tmp_path))  # where data lies: same setting
    prior = build_prior([a, b], command="build it")
    with Store(a, readonly=True) as st:
        cfg, cands = st.search_config(), st.candidates()
    taught = [c for c in cands if not c.cache_hit and c.status != "failed"]
    assert 0 < len(prior.rows) <= 2 * len(taught)
    row = prior.rows[0]
    assert any(k.startswith("task_") for k in row["features"])  # the task's features, computed now
    assert prior.provenance["command"] == "build it" and len(prior.provenance["runs"]) == 2
    assert prior.provenance["valid"] == sum(r["valid"] for r in prior.rows)
    with Store(b, readonly=True) as st:  # what it cost: both searches' worker-seconds
        spent = sum(c.seconds for c in cands) + sum(c.seconds for c in st.candidates())
    assert prior.provenance["worker_seconds"] == pytest.approx(spent, abs=0.1)
    folder = tmp_path / "priors"
    folder.mkdir()
    write_atomic(folder / "tiny.json", json.dumps(prior.to_dict()).encode())
    assert read_prior(folder / "tiny.json") == prior
    assert _prior_for(cfg, folder).rows == prior.rows
    assert _prior_for(configured(cfg, n_train=123), folder) is None  # another setting: not this prior
    assert _prior_for(get_preset("demo"), folder) is None
    other = _proxy_run(tmp_path / "c", n_train=123, budget=2)
    # runs of two settings are refused before any feature is computed (hours for long searches)
    monkeypatch.setattr("evonorm.proxy.prior.labelled_rows", lambda *a: pytest.fail("computed"))
    with pytest.raises(ValueError, match="another setting"):
        build_prior([a, other], command="x")


@pytest.mark.parametrize("text, problem", [
    ("{", "p.json: not valid JSON"), ('{"format": 9}', "format 1"),
    ('{"format": 1, "setting": {}, "provenance": {}, "rows": [{"valid": true}]}', "row 0"),
])
def test_a_damaged_prior_file_is_refused_in_one_line(tmp_path, text, problem):
    from evonorm.proxy.prior import read_prior

    path = tmp_path / "p.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=problem) as err:
        read_prior(path)
    assert "\n" not in str(err.value)


def test_every_shipped_prior_holds_for_its_preset_as_it_ships():
    """A prior built under an earlier version of a preset would never be found (its setting is
    not the preset's any more) and would ship dead weight: each file must match its preset."""
    from evonorm.proxy.config import stored_task
    from evonorm.proxy.presets import get_preset
    from evonorm.proxy.prior import PRIORS, read_prior, setting

    files = sorted(PRIORS.glob("*.json"))
    assert "demo-s.json" in [f.name for f in files]
    for path in files:
        preset, space = path.stem.rsplit("-", 1)
        cfg = get_preset(preset, space=space)
        cfg = configured(cfg, dataset=stored_task(cfg).dataset or "fashion_mnist")  # as a run names it
        prior = read_prior(path)
        assert prior.setting == setting(ProxyTask.of_run(cfg), space), path.name
        assert {r["run"] for r in prior.provenance["runs"]} and prior.provenance["valid"] > 0


def test_a_bad_prior_is_skipped_in_one_line_and_a_prior_serves_its_own_space_only(tmp_path, capsys):
    import shutil

    from evonorm.proxy.presets import get_preset
    from evonorm.proxy.prior import PRIORS
    from evonorm.proxy.api import start

    shutil.copy(PRIORS / "demo-s.json", tmp_path / "demo-s.json")
    (tmp_path / "a-bad.json").write_text('{"format": 2}')
    demo = start(get_preset("demo"))[0]
    assert _prior_for(demo, tmp_path) is not None
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "skipped the prescreen prior" in err[0] and "a-bad.json" in err[0]
    assert _prior_for(start(get_preset("demo", space="b"))[0], tmp_path) is None  # S only


@pytest.mark.extras
def test_features_beyond_float32_are_capped_so_the_surrogate_still_fits():
    from evonorm.search.surrogate import Surrogate

    pytest.importorskip("sklearn", reason="scikit-learn is not installed (the `prescreen` extra)")
    s = Surrogate(min_each=2, seed=0, trees=10)
    for i in range(6):
        s.add({"a": 1e308 if i % 2 else -1e39, "b": float(i), "c": 10**400}, i % 2 == 0, None)
    pred = s.predict({"a": 1e39, "b": 2.0, "c": 10**400})
    assert pred is not None and 0.0 <= pred.p_valid <= 1.0


@pytest.mark.parametrize("kind", ["fifo", "link", "folder"])
def test_a_fifo_link_or_folder_among_the_priors_is_skipped_naming_what_it_is(tmp_path, monkeypatch, capsys,
                                                                               kind):
    import os

    from evonorm.proxy.objective import ProxyObjective
    from evonorm.proxy.presets import get_preset

    priors = tmp_path / "priors"
    priors.mkdir()
    (tmp_path / "elsewhere.json").write_text("{}")
    {"fifo": lambda p: os.mkfifo(p), "link": lambda p: p.symlink_to(tmp_path / "elsewhere.json"),
     "folder": lambda p: p.mkdir()}[kind](priors / "a.json")
    monkeypatch.setattr("evonorm.proxy.prior.PRIORS", priors)
    assert ProxyObjective.for_run(get_preset("tiny", prescreen=True)).prescreen_prior() is None
    warned = capsys.readouterr().err.strip().splitlines()
    cause = "is a symbolic link" if kind == "link" else "is not a regular file"
    assert len(warned) == 1 and "skipped the prescreen prior" in warned[0] and cause in warned[0], warned


@pytest.mark.extras
def test_the_surrogate_refits_once_its_labels_grew_by_a_share_not_on_every_label():
    """A refit on a prior of a thousand rows takes seconds of the driver's time: it waits until
    the labels grew by REFIT_GROWTH (one label at a time while they are few)."""
    pytest.importorskip("sklearn", reason="scikit-learn is not installed (the `prescreen` extra)")
    from evonorm.search.surrogate import REFIT_GROWTH, Surrogate

    prior = [{"features": {"a": float(i % 2), "b": float(i)}, "valid": i % 2 == 0, "fitness": None}
             for i in range(200)]
    s = Surrogate(min_each=2, seed=0, trees=5, prior=prior)
    s.predict({"a": 1.0, "b": 3.0})
    first = s._clf
    s.add({"a": 1.0, "b": 1.0}, True, None)
    s.predict({"a": 1.0, "b": 3.0})
    assert s._clf is first  # one label over 200: not yet
    for _ in range(int(REFIT_GROWTH * 200)):
        s.add({"a": 1.0, "b": 1.0}, True, None)
    s.predict({"a": 1.0, "b": 3.0})
    assert s._clf is not first
    small = Surrogate(min_each=2, seed=0, trees=5, prior=prior[:6])
    small.predict({"a": 1.0, "b": 3.0})
    model = small._clf
    small.add({"a": 0.0, "b": 0.0}, False, None)
    small.predict({"a": 1.0, "b": 3.0})
    assert small._clf is not model  # few labels: each one refits


def test_the_scratch2_prior_applies_from_the_first_candidate_and_is_ignored_in_one_line_elsewhere(
        capsys, monkeypatch):
    """The preset's shipped prior holds for its setting only: a run of another space or of another
    version of the network's features ignores it, saying so in one line that names what differs."""
    from evonorm.proxy import features
    from evonorm.proxy.objective import ProxyObjective
    from evonorm.proxy.presets import get_preset
    from evonorm.proxy.api import start

    cfg = start(get_preset("scratch2"))[0]
    prior = _prior_for(cfg)
    assert prior is not None and prior.provenance["valid"] > 100
    assert ProxyObjective.for_run(cfg).prescreen_prior() == prior.rows
    assert all(k.startswith(("graph_", "probe_", "task_signal_")) for k in prior.rows[0]["features"])
    assert capsys.readouterr().err == ""
    assert _prior_for(start(get_preset("scratch2", space="b"))[0]) is None
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "scratch2-s.json" in err[0] and "space" in err[0] and "ignored" in err[0]
    monkeypatch.setattr(features, "SIGNAL_VERSION", features.SIGNAL_VERSION + 1)
    assert _prior_for(cfg) is None
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "features" in err[0] and "space" not in err[0]


def test_a_layer_degenerate_on_the_probe_is_still_judged_by_the_tasks_features():
    """sigmoid(instance_rms(x) / v0) is constant at its initial v0 = 0 (no engine features: the
    surrogate cannot rank it) yet passes the checks of the layer alone, which randomise v0: the
    task's features still judge it. A layer the checks reject costs the task nothing."""
    from evonorm.search.reject import Reject

    seen = []

    def task_features(graph):
        seen.append(graph.key())
        raise Reject("signal", step=0, detail={"why": "logits alike"})

    screen = Prescreen(SearchConfig(evolution=Evolution(prescreen=True)), task_features)
    flat_at_init = {"nodes": [["instance_rms", 0], ["div", 4, 2], ["sigmoid", 5]]}
    assert layer_features(flat_at_init) is None
    born = screen.born(flat_at_init)
    assert born.reject is not None and born.reject.detail == {"why": "logits alike"}
    assert screen.born(CONSTANT).reject is None and len(seen) == 1  # the pre-checks reject it


@pytest.mark.extras
def test_the_layer_rung_rejects_before_the_tasks_features_are_computed():
    """With `prescreen_layer_threshold`, a forest on the layer alone's features (milliseconds)
    rejects the children it is surest of before the task's (costlier) features are computed;
    exploring slots skip it."""
    pytest.importorskip("sklearn", reason="scikit-learn is not installed (the `prescreen` extra)")
    computed = []

    def task_features(graph):
        computed.append(graph.key())
        return {"x": 1.0}

    # what a prior teaches: valid layers have a live max (the task's feature says nothing)
    prior = [{"features": {**layer_features(g), "task_x": 1.0}, "valid": i % 2 == 1,
              "fitness": 0.6 if i % 2 else None}
             for i, g in enumerate(({"nodes": [["layer_std", 0], ["div", 0, 4]]},
                                    {"nodes": [["group_std", 0], ["div", 0, 4], ["max", 5, 1]]}) * 4)]
    cfg = SearchConfig(evolution=Evolution(prescreen=True, prescreen_pool=4, prescreen_explore=0.0,
                                           prescreen_min=2, prescreen_layer_threshold=0.5))
    screen = Prescreen(cfg, task_features, prior=prior)
    out = screen.choose(_draws(), random.Random(0))
    first = [s for s in out if s.born.layer_rung]
    assert first and all(not s.train and s.born.features["graph_op_max"] == 0 for s in first)
    assert all(not any(k.startswith("task_") for k in s.born.features) for s in first)
    assert len(computed) == 4 - len(first)  # the task paid only for the others
    assert any(s.train for s in out)
    explorer = Prescreen(cfg.replace(evolution=cfg.evolution.replace(prescreen_explore=1.0)),
                         task_features, prior=prior)
    (only,) = explorer.choose(_draws(), random.Random(0))  # the hopeless first draw, trained
    assert only.train and not only.born.layer_rung
