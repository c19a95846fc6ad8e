"""Search on the user's own objective: the protocol (float, dict, Reject, non-finite, an objective
that raises, hurdles), search / resume / load from Python and the command line, and the engine
importing neither the trainer, the models nor the data."""

import json
import math
import sys
from pathlib import Path

import pytest

import _objectives
from evonorm.cli import main as cli
from evonorm.graph.library import NAMED_GRAPHS
from evonorm.search import Candidate, Evaluation, Reject, Trial, load, resume, search
from evonorm.search.objective import load_objective, run_trial
from evonorm.proxy.presets import get_preset
from evonorm.search.store import Store

TESTS = Path(__file__).resolve().parent


def _payload(graph="evonorm_s0", **cfg):
    """What the driver sends a worker for one candidate: the trial's values, not the run's config."""
    c = get_preset("tiny", **cfg)
    return {"graph": NAMED_GRAPHS[graph].to_json(), "seed": c.seed, "device": c.execution.device,
            "staged": bool(c.hurdles.stage_steps)}


def test_run_trial_turns_each_kind_of_answer_into_an_evaluation():
    ok = run_trial(_objectives.mixed, _payload())
    assert ok.status == "valid" and ok.scores == {"objective": ok.fitness} and ok.timings
    two = run_trial(_objectives.two, _payload())
    assert two.status == "valid" and set(two.scores) == {"acc", "speed"}
    assert two.fitness == pytest.approx(sum(two.scores.values()) / 2)
    rej = run_trial(_objectives.mixed, _payload("evonorm_s1"))
    assert (rej.status, rej.reason) == ("rejected", "too slow on my phone")
    nan = run_trial(_objectives.mixed, _payload("evonorm_s2"))
    assert (nan.status, nan.reason) == ("rejected", "nonfinite")
    bad = run_trial(_objectives.mixed, _payload("s_top1"))
    assert bad.status == "failed"
    assert bad.reason.startswith("error: RuntimeError: my objective broke")
    assert "_objectives.py" in bad.reason  # where it raised
    none = run_trial(lambda n, t: None, _payload())
    assert none.status == "failed" and "not a number" in none.reason
    detailed = run_trial(lambda n, t: (_ for _ in ()).throw(
        Reject("quality:x", step=3, detail={"a": 1}, scores={"x": 0.1})), _payload())
    assert (detailed.reason, detailed.reason_step, detailed.detail, detailed.scores) == (
        "quality:x", 3, {"a": 1}, {"x": 0.1})


def test_a_near_miss_is_any_rejection_by_a_stated_bar_that_some_score_reached():
    """An objective of one's own makes near misses as the built-in task does: a Reject stating
    its bar (`detail["threshold"]`) with a score at or above it on some name."""
    from evonorm.search.candidates import reason_group

    def judged(reason, detail, scores):
        return run_trial(lambda n, t: (_ for _ in ()).throw(
            Reject(reason, detail=detail, scores=scores)), _payload())

    assert judged("too slow on one phone", {"threshold": 0.5}, {"a": 0.7, "b": 0.2}).near_miss
    assert not judged("too slow on both", {"threshold": 0.5}, {"a": 0.3, "b": 0.2}).near_miss
    assert not judged("stability", {"grad_norm": 9.0}, {"a": 0.7}).near_miss  # no bar stated
    assert not judged("odd bar", {"threshold": "high"}, {"a": 0.7}).near_miss
    assert not Evaluation.valid({"a": 0.9}).near_miss
    assert reason_group("speed:phone") == "speed" and reason_group("speed:phone", fine=True) == \
        "speed:phone"
    assert reason_group("error: ValueError: x", fine=True) == "error"
    assert reason_group("timeout: worker killed after 5s", fine=True) == "timeout"
    assert reason_group("stability", fine=True) == "stability" and reason_group(None) == "?"


def test_trial_hurdles_and_nonfinite_reports():
    t = Trial(graph=None, hurdles=[0.5, None])
    assert not t.should_stop()
    t.report(0.4, step=10)
    assert t.should_stop()  # below the first stage's hurdle
    t.report({"a": 0.1, "b": 0.2}, step=20)
    assert not t.should_stop()  # no hurdle at the second stage yet
    t.report(float("inf"), step=30)
    assert t.should_stop()

    def reports_nan(norm_act, trial):
        trial.report(float("nan"), step=1)
        return 0.9

    ev = run_trial(reports_nan, _payload(stage_steps=(2,), quality_steps=0))
    assert (ev.status, ev.reason, ev.reason_step) == ("rejected", "nonfinite", 1)

    def two_stages(norm_act, trial):
        trial.report(0.3, step=1)
        trial.report(0.6, step=2)
        return 0.6

    staged = run_trial(two_stages, _payload(stage_steps=(2,), quality_steps=0))
    assert staged.stage_scores == [{"objective": 0.3}, {"objective": 0.6}] and staged.stage == 2

    def reports_then_returns(norm_act, trial):
        trial.report(0.3, step=1)
        return 0.7 if not trial.should_stop() else 0.3

    on = run_trial(reports_then_returns, _payload(stage_steps=(2,), quality_steps=0))
    assert on.stage_scores == [{"objective": 0.3}, {"objective": 0.7}] and on.fitness == 0.7
    payload = {**_payload(stage_steps=(2,), quality_steps=0), "hurdles": [0.5]}
    stopped = run_trial(reports_then_returns, payload)
    assert stopped.stage_scores == [{"objective": 0.3}] and stopped.stage == 1


def test_search_on_own_objective_stores_every_outcome_and_ranks_distinct_layers(tmp_path):
    seeds = ("evonorm_s0", "evonorm_s1", "evonorm_s2", "s_top1", "evonorm_s0")
    res = search(_objectives.mixed, out=tmp_path / "run", preset="tiny", budget=8, workers=1,
                 seed_layers=seeds, progress=False)
    assert res.complete and res.done == 8
    with Store(tmp_path / "run", readonly=True) as store:
        by_proposal = {c.proposal: c for c in store.candidates()}
        cfg = store.search_config()
    assert cfg.objective == "_objectives:mixed" and cfg.scores == ("objective",)
    assert cfg.task is None  # an own objective holds its own settings
    assert by_proposal[0].status == "valid"
    assert (by_proposal[1].status, by_proposal[1].reason) == ("rejected", "too slow on my phone")
    assert (by_proposal[2].status, by_proposal[2].reason) == ("rejected", "nonfinite")
    assert by_proposal[3].status == "failed" and "my objective broke" in by_proposal[3].reason
    assert by_proposal[4].cache_hit  # the same layer again: answered from the store
    top = res.top(5)
    assert top and top == load(tmp_path / "run").top(5)
    assert [c.fitness for c in top] == sorted((c.fitness for c in top), reverse=True)
    assert len({c.key for c in top}) == len(top)  # distinct layers
    assert all(isinstance(c.graph, dict) and math.isfinite(c.fitness) for c in top)

    with pytest.raises(ValueError, match="pass the objective"):
        resume(tmp_path / "run")  # never falls back to the built-in task
    with pytest.raises(ValueError, match="is not the run's objective"):
        resume(tmp_path / "run", _objectives.other)


def test_dict_objective_names_the_scores_of_the_pareto_tournament(tmp_path):
    res = search(_objectives.two, out=tmp_path / "run", preset="tiny", budget=6, workers=1,
                 initial_population=1, p_random=0.0, progress=False)
    assert res.done == 6
    with Store(tmp_path / "run", readonly=True) as store:
        assert store.search_config().scores == ("acc", "speed")  # named by the first valid result
        cands = store.candidates()
    assert all(set(c.scores) == {"acc", "speed"} for c in cands if c.status == "valid")
    assert any(c.origin == "mutation" for c in cands)  # tournaments ran on the named scores


def test_own_objective_search_honours_hurdles(tmp_path):
    search(_objectives.staged, out=tmp_path / "run", preset="tiny", budget=12, workers=1,
           stage_steps=(1,), hurdle_min=2, progress=False)
    with Store(tmp_path / "run", readonly=True) as store:
        cands = [c for c in store.candidates() if c.status == "valid"]
    assert {c.stage for c in cands} == {1, 2}  # some stopped below the hurdle, some went on
    assert 0 < load(tmp_path / "run").tally.stopped < len(cands)


def test_a_child_the_run_knows_takes_no_slot_and_the_redraws_are_stored(tmp_path):
    """Evolution around one small parent (a window of one) keeps proposing functions it has
    scored: each would take a slot as a cache hit. With `fresh_tries` it is drawn again, and the
    store counts the children drawn and drawn again, across the run."""
    parent = json.dumps({"nodes": [["layer_rms", 0], ["div", 0, 4]]})

    def run(name: str, tries: int):
        res = search(_objectives.mixed, out=tmp_path / name, preset="tiny", budget=30, workers=1,
                     initial_population=1, p_random=0.0, mutations=1, window=1,
                     seed_layers=(parent,), fresh_tries=tries, progress=False)
        with Store(tmp_path / name, readonly=True) as store:
            return res.tally.cache_hits, store.get_meta("repeats")

    hits, counted = run("plain", 0)
    assert hits >= 5 and counted is None  # the repeats took slots; nothing was checked
    hits, counted = run("fresh", 20)
    assert hits <= 1
    assert counted["redrawn"] >= 5 and counted["children"] == 29 + counted["redrawn"]


def test_a_search_with_niches_keeps_each_niches_best_across_a_resume(tmp_path):
    """The niches' elites are rebuilt from the store on resume, from every member, not only the
    window's."""
    from evonorm.search.loop import SearchLoop
    from evonorm.search.evolution import niche

    seeds = (json.dumps({"nodes": [["group_rms", 0], ["div", 0, 4]]}), "evonorm_s0")
    res = search(_objectives.two, out=tmp_path / "run", preset="tiny", budget=10, workers=1,
                 window=2, initial_population=1, p_random=0.0, niches=True, seed_layers=seeds,
                 progress=False)
    assert res.complete
    with Store(tmp_path / "run") as store:
        cfg = store.search_config()
        assert cfg.evolution.niches
        valid = [c for c in store.candidates() if c.status == "valid"]
        again = SearchLoop(store, cfg, executor=None)
    kinds = {niche(c.graph) for c in valid}
    assert {"group_rms", "group_std"} <= kinds and set(again.history.population.elites) == kinds
    assert len(again.history.population.contestants()) >= len(kinds)


@pytest.mark.parametrize("spec, message", [
    ("nomodule_xyz:f", "no module named 'nomodule_xyz'"),
    ("_objectives:nothing", "has no 'nothing'"),
    ("_objectives:not_callable", "not a function"),
    ("_objectives:wrong_signature", "must take (norm_act, trial)"),
    ("_raises_on_import:f", "importing _raises_on_import failed: ZeroDivisionError"),
    ("justamodule", "must be MODULE:FUNCTION"),
])
def test_wrong_objective_is_one_line_exit_2_before_anything_runs(tmp_path, monkeypatch, capsys,
                                                                 spec, message):
    (tmp_path / "_raises_on_import.py").write_text("1 / 0\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    assert cli(["search", "--preset", "tiny", "--objective", spec, "--out", "run"]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "run").exists()
    with pytest.raises(ValueError, match="objective"):
        load_objective(spec)


def test_cli_search_and_resume_need_the_same_objective(tmp_path, monkeypatch, capsys):
    (tmp_path / "myobjective.py").write_text(
        "def score(norm_act, trial):\n    return len(trial.graph.key()) / 100\n\n"
        "def other(norm_act, trial):\n    return 0.0\n")
    monkeypatch.chdir(tmp_path)  # the current folder is importable, as for `python -m`
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    run = ["search", "--preset", "tiny", "--objective", "myobjective:score", "--budget", "2",
           "--workers", "1", "--quiet", "--out", "run", "--prechecks", "off"]
    assert cli(run) == 0, capsys.readouterr().err
    with Store(tmp_path / "run", readonly=True) as store:
        assert store.search_config().objective == "myobjective:score"
        assert store.get_meta("objective") == "myobjective:score"
        assert all(c.status == "valid" for c in store.candidates())
    out = capsys.readouterr().out  # the closing summary names the objective, not a dataset
    assert "objective myobjective:score" in out and "Best layer so far: " in out
    assert "dataset" not in out
    for extra in ([], ["--objective", "myobjective:other"]):
        assert cli(["resume", "run", "--budget", "3", "--quiet", *extra]) == 2
        err = capsys.readouterr().err
        assert "--objective" in err and len(err.strip().splitlines()) == 1, err
    assert cli(["resume", "run", "--budget", "3", "--quiet", "--objective",
                "myobjective:score"]) == 0
    with Store(tmp_path / "run", readonly=True) as store:
        assert store.num_candidates() == 3
    capsys.readouterr()
    assert cli(["rerank", "run"]) == 2
    assert "built-in proxy task" in capsys.readouterr().err
    for extra in (["--references"], ["--seeds", "1"]):  # both train the built-in task
        assert cli(["retrain", "run", *extra]) == 2
        assert "built-in proxy task" in capsys.readouterr().err
    assert cli(["report", "run", "--out", "page"]) == 0  # the report itself only reads
    page = (tmp_path / "page" / "report.html").read_text()
    assert "Best layer so far: " in page and "by the objective myobjective:score" in page
    assert "evonorm.search.load(&#x27;" in page and "RUN" not in page.split("<h2>")[0]
    assert "accuracy_histogram" not in page and "calibration" not in page  # figures of accuracies


def test_builtin_task_flags_and_stray_ship_are_refused_with_an_own_objective(tmp_path, monkeypatch,
                                                                            capsys):
    monkeypatch.chdir(tmp_path)
    for extra, message in ((["--objective", "_objectives:two", "--dataset", "synthetic"],
                            "--dataset applies to the built-in objective only"),
                           (["--objective", "_objectives:two", "--archs", "resnet50_cifar"],
                            "--archs applies to the built-in objective only"),
                           (["--objective", "_objectives:two", "--ship", "nowhere"],
                            "--ship nowhere: no such file or folder"),
                           (["--ship", "."], "--ship applies to --objective only")):
        assert cli(["search", "--preset", "tiny", *extra, "--out", "run"]) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err
        assert not (tmp_path / "run").exists()


SCRIPT = '''
import sys
from evonorm.search import search

def objective(norm_act, trial):
    return 0.5

if __name__ == "__main__":
    search(objective, out=sys.argv[1], preset="tiny", budget=2, workers=1, seed_layers=(),
           progress=False)
'''


def test_a_search_started_from_a_script_resumes_from_python_and_from_the_command_line(tmp_path):
    import subprocess

    (tmp_path / "mysearch.py").write_text(SCRIPT)
    out = tmp_path / "run"
    env = {**__import__("os").environ, "PYTHONPATH": str(tmp_path)}
    subprocess.run([sys.executable, "mysearch.py", str(out)], cwd=tmp_path, env=env, check=True)
    with Store(out, readonly=True) as st:
        assert st.search_config().objective == "mysearch:objective"  # not __main__:objective
    done = subprocess.run(
        [sys.executable, "-m", "evonorm.cli", "resume", str(out), "--objective", "mysearch:objective",
         "--budget", "3", "--quiet"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    code = ("import sys; from mysearch import objective; from evonorm.search import resume; "
            "print(resume(sys.argv[1], objective, budget=4, progress=False).done)")
    py = subprocess.run([sys.executable, "-c", code, str(out)], cwd=tmp_path, env=env,
                        capture_output=True, text=True)
    assert py.returncode == 0 and py.stdout.split()[-1] == "4", py.stderr
    code = ("import sys; from mysearch import objective; from evonorm.search import resume; "
            "resume(sys.argv[1], objective, budget=1, progress=False)")
    py = subprocess.run([sys.executable, "-c", code, str(out)], cwd=tmp_path, env=env,
                        capture_output=True, text=True)
    assert py.returncode == 1 and "cannot shrink the run's budget of 4" in py.stderr


def test_a_candidate_prints_as_one_line_with_its_formula():
    g = NAMED_GRAPHS["evonorm_s0"]
    c = Candidate(7, Evaluation.valid({"a": 0.61, "b": 0.59}), graph=g.to_json())
    text = repr(c)
    assert "\n" not in text and text.startswith("Candidate(#7 valid, fitness 0.6000")
    assert c.formula == g.to_text() and c.formula in text
    r = Candidate(3, Evaluation("rejected", reason="quality:a"), graph={"nodes": "x"})
    assert r.formula is None and repr(r) == "Candidate(#3 rejected (quality:a), fitness -: {'nodes': 'x'})"
    assert str([c, r]).count("Candidate(") == 2


def test_the_checks_of_the_layer_alone_run_for_every_objective(tmp_path):
    """An own objective that would score anything: a layer that ignores x is rejected before it
    is called, as the built-in task rejects it; with the checks off it is scored."""
    ignores_x = {"nodes": [["tanh", 2], ["max", 4, 1]]}  # max(tanh(v0), 0): no x at all
    called = []

    def objective(norm_act, trial):
        called.append(trial.graph.key())
        return 0.5

    e = run_trial(objective, {"graph": ignores_x})
    assert (e.status, e.reason) == ("rejected", "precheck:x_independent") and not called
    assert "precheck" in e.timings
    e = run_trial(objective, {"graph": ignores_x, "prechecks": False})
    assert e.status == "valid" and called
    cfg = get_preset("tiny", prechecks=False)
    assert cfg.evolution.prechecks is False and get_preset("tiny").evolution.prechecks


def test_search_refuses_a_script_its_workers_cannot_run_before_anything_starts(tmp_path):
    """Local workers re-run the running script to import its objective: a script read from stdin
    cannot be, and one without the `__main__` guard would search again in every worker. Each is one
    line from search(), before the run folder or any worker exists."""
    import subprocess

    import evonorm
    from _processes import env_with_path

    env = env_with_path(tmp_path, Path(evonorm.__file__).parents[1])  # this evonorm, in the scripts too
    out = tmp_path / "run"
    stdin = subprocess.run([sys.executable, "-", str(out)], input=SCRIPT, cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=120)
    unguarded = SCRIPT.split("if __name__")[0] + "search(objective, out=sys.argv[1], preset='tiny', budget=2)\n"
    (tmp_path / "noguard.py").write_text(unguarded)
    line = len(unguarded.splitlines())
    file = subprocess.run([sys.executable, "noguard.py", str(out)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    for done, message in ((stdin, "ValueError: the objective __main__:objective is defined in a script that "
                                  "is no file"),
                          (file, f"ValueError: {tmp_path / 'noguard.py'}:{line} starts the search outside "
                                 "`if __name__ == \"__main__\":`")):
        last = done.stderr.strip().splitlines()[-1]
        assert done.returncode == 1 and last.startswith(message), done.stderr
        assert "FileNotFoundError" not in done.stderr and "in use" not in done.stderr
        assert not out.exists()
