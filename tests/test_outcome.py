"""The gate between an objective's outcome and the store: numpy values stored as Python numbers,
what cannot be stored a failed candidate saying why, and a run that stays readable and resumable."""

import json
from pathlib import Path

import pytest

import _objectives
from evonorm.cli import main as cli
from evonorm.graph.library import NAMED_GRAPHS
from evonorm.search import load, resume, search
from evonorm.search.evaluation import Evaluation
from evonorm.search.objective import run_trial
from evonorm.search.outcome import Unstorable, check, storable
from evonorm.search.store import Store


def _run(outcome):
    """run_trial on an objective that ends with `outcome` (raised when an exception, else returned)."""
    def objective(norm_act, trial):
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome
    return run_trial(objective, {"graph": NAMED_GRAPHS["evonorm_s0"].to_json()})


@pytest.mark.parametrize("kind", ["np_step", "np_detail", "np_scores"])
def test_numpy_values_are_stored_as_python_numbers(kind):
    e = _run(_objectives.HOSTILE[kind]())
    assert e.status == "rejected" and e.reason == "low"
    stored = json.loads(json.dumps({"step": e.reason_step, "detail": e.detail, "scores": e.scores}))
    assert stored == {"step": e.reason_step, "detail": e.detail, "scores": e.scores}
    assert type(e.reason_step) in (int, type(None))
    if kind == "np_detail":
        assert e.detail == {"s": 0.25, "n": [2]} and type(e.detail["n"][0]) is int
    assert _run(__import__("numpy").float32(0.5)).scores == {"objective": 0.5}


@pytest.mark.parametrize("kind, says", [
    ("text_step", "step is str"), ("text_score", "scores['a'] is str"),
    ("text_detail", "detail is str, not an object"), ("nan_detail", "not a finite number"),
    ("deep_detail", "nested deeper than"), ("surrogate", "not valid UTF-8"),
    ("object_detail", "is object, not a JSON value")])
def test_what_cannot_be_stored_fails_the_candidate_saying_what_it_was(kind, says):
    e = _run(_objectives.HOSTILE[kind]())
    assert e.status == "failed" and e.reason.startswith("error: the objective returned")
    assert says in e.reason, e.reason
    json.dumps(e.reason).encode("utf-8")  # the reason itself is storable
    rej = _objectives.HOSTILE[kind]()
    with pytest.raises(Unstorable):
        check(Evaluation.rejected(rej, rej.scores))


def test_a_timing_that_is_not_a_number_fails_the_candidate():
    e = storable(Evaluation.valid({"a": 0.5}, {"t": "slow"}))
    assert e.status == "failed" and "timings['t'] is str" in e.reason and e.timings == {}


def test_a_search_of_a_hostile_objective_stays_reportable_and_resumable(tmp_path, capsys):
    out = tmp_path / "run"
    result = search(_objectives.hostile, out=out, preset="tiny", budget=12, workers=1,
                    seed_layers=(), executor="local", prechecks=False)  # all reach the objective
    with Store(out, readonly=True) as st:
        cands = st.candidates()
    assert {c.status for c in cands} == {"failed", "rejected", "valid"} and result.done == 12
    assert any(type(c.reason_step) is int for c in cands if c.reason == "low")
    assert cli(["report", str(out)]) == 0
    assert resume(out, _objectives.hostile).done == 12  # its budget spent: reads, resumes, ends
    assert len(load(out).top(5)) == 2


def test_a_disk_that_fills_during_search_ends_it_in_one_line_and_the_run_resumes(
        tmp_path, capsys, monkeypatch):
    import sqlite3

    monkeypatch.chdir(Path(__file__).resolve().parent)
    real = Store.add_candidate
    calls = []

    def full_after_two(self, *a, **kw):
        calls.append(1)
        if len(calls) > 2:
            raise sqlite3.OperationalError("database or disk is full")
        return real(self, *a, **kw)

    monkeypatch.setattr(Store, "add_candidate", full_after_two)
    out = tmp_path / "run"
    argv = ["--objective", "_objectives:two", "--quiet"]
    code = cli(["search", "--preset", "tiny", "--out", str(out), "--budget", "5", "--workers", "1",
                *argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "database or disk is full" in err[0], err
    monkeypatch.setattr(Store, "add_candidate", real)  # space is back
    assert cli(["resume", str(out), *argv]) == 0
    with Store(out, readonly=True) as st:
        assert len(st.candidates()) == 5 and not st.pending_proposals()


# ---------------------------------------------------------------- the objective's hooks

@pytest.mark.parametrize("mode", ["raise", "exit", "os_exit", "none", "list", "array", "text"])
def test_a_feature_hook_that_fails_costs_its_layer_the_prediction_with_one_warning(mode, capsys):
    from evonorm.search.config import SearchConfig
    from evonorm.search.surrogate import Prescreen

    screen = Prescreen(SearchConfig(), _objectives.Hooked("prescreen_features", mode).prescreen_features)
    for name in ("evonorm_s0", "evonorm_b0"):
        assert screen.features(NAMED_GRAPHS[name].to_json()) is None
    warned = capsys.readouterr().err.strip().splitlines()
    assert len(warned) == 1 and "the objective's prescreen_features" in warned[0], warned


def test_numpy_features_are_stored_as_numbers_and_a_non_finite_one_as_missing():
    from evonorm.search.config import SearchConfig
    from evonorm.search.surrogate import Prescreen

    screen = Prescreen(SearchConfig(), _objectives.Hooked("prescreen_features", "numpy").prescreen_features)
    feats = screen.features(NAMED_GRAPHS["evonorm_s0"].to_json())
    assert type(feats["task_n"]) is float and feats["task_big"] is None
    json.dumps(feats, allow_nan=False)
    forks = Prescreen(SearchConfig(), _objectives.Hooked("prescreen_features", "fork").prescreen_features)
    assert forks.features(NAMED_GRAPHS["evonorm_s0"].to_json())["task_n"] == feats["task_n"]


@pytest.mark.parametrize("hook", ["expected_cost", pytest.param("prescreen_prior", marks=pytest.mark.extras),
                                  "run_facts"])
@pytest.mark.parametrize("mode", ["raise", "exit", "os_exit", "array", "text"])
def test_a_run_hook_that_fails_is_one_line_naming_it(tmp_path, hook, mode):
    import os

    from evonorm.search.outcome import HookFailed

    if hook == "prescreen_prior":  # asked for by a search with the prescreen on
        pytest.importorskip("sklearn", reason="scikit-learn is not installed (the `prescreen` extra)")
    real_exit = os._exit
    with pytest.raises(HookFailed, match=f"the objective's {hook}") as err:
        search(_objectives.Hooked(hook, mode), out=tmp_path / "run", preset="tiny", budget=2, workers=1,
               progress=False, prescreen=hook == "prescreen_prior", seed_layers=())
    assert "\n" not in str(err.value)
    assert os._exit is real_exit  # restored
    if hook == "run_facts":  # read before anything is written
        assert not (tmp_path / "run" / "store.sqlite").exists()


@pytest.mark.parametrize("files", [["../outside"], ("store.sqlite-wal",), ["a/b"], ["ok", 3], "name"])
def test_run_files_that_leave_the_run_folder_are_refused(tmp_path, files):
    from evonorm.search.driver import init_run
    from evonorm.search.outcome import HookFailed
    from evonorm.search.settings import engine_preset

    (tmp_path / "outside").write_text("precious")
    objective = _objectives.Hooked("none", "none")
    objective.run_files = files
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "x").write_text("")
    with pytest.raises(HookFailed, match="run_files"):
        init_run(tmp_path / "run", engine_preset("tiny"), objective, force=True)
    assert (tmp_path / "outside").read_text() == "precious"


def test_a_search_whose_feature_hook_raises_goes_on_and_the_cli_says_a_failed_hook_in_one_line(
        tmp_path, capsys):
    pytest.importorskip("sklearn", reason="the prescreen needs scikit-learn")
    result = search(_objectives.Hooked("prescreen_features", "raise"), out=tmp_path / "run", preset="tiny",
                    budget=4, workers=1, progress=False, prescreen=True, prescreen_explore=0.0,
                    initial_population=1)
    assert result.complete
    err = capsys.readouterr().err
    assert err.count("prescreen_features raised RuntimeError: hook broke") == 1 and "Traceback" not in err
    assert cli(["search", "--objective", "_objectives:hooked_cost", "--preset", "tiny", "--out",
                str(tmp_path / "cli"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "expected_cost raised RuntimeError" in err, err
