"""Long work shows progress: a search without a terminal prints status lines between candidates;
with one, the bar keeps the best fitness inside 80 columns."""

import io
import os
import re

import pytest

from _search_fakes import fake_config, slow_fake
from evonorm.search.driver import init_run, run_search



def test_without_a_terminal_status_lines_come_every_few_seconds(tmp_path, capsys):
    init_run(tmp_path, fake_config(budget=8))
    run_search(tmp_path, objective=slow_fake, progress=True, progress_every=0.05)
    err = capsys.readouterr().err
    status = re.findall(r"search: (\d+)/8 done \| valid \d+ \| best (\S+) \| \d+ training \| \d+s elapsed, ETA (\S+)", err)
    assert len(status) >= 2, err
    assert any(eta.endswith("s") for _, _, eta in status)  # an ETA once something has finished
    assert len(re.findall(r"^\[\d+/8\] #\d+ ", err, re.M)) == 8  # and a line per candidate


def test_the_eta_counts_the_worker_seconds_budget_too(tmp_path, capsys):
    # a huge candidate budget stopped by a few worker-seconds: the ETA is that of the seconds
    init_run(tmp_path, fake_config(budget=100_000, budget_seconds=2.0))
    run_search(tmp_path, objective=slow_fake, progress=True, progress_every=0.05)
    etas = [int(e) for e in re.findall(r"elapsed, ETA (\d+)s", capsys.readouterr().err)]
    assert etas and max(etas) < 60, etas  # by count alone, thousands of seconds


class FakeTTY(io.StringIO):
    def isatty(self):
        return True


def test_the_bar_keeps_the_best_fitness_visible_at_80_columns(tmp_path, monkeypatch):
    init_run(tmp_path, fake_config(budget=8))
    tty = FakeTTY()
    monkeypatch.setattr("sys.stderr", tty)
    run_search(tmp_path, objective=slow_fake, progress=True)
    frames = [f for f in re.split(r"[\r\n]", tty.getvalue()) if re.search(r" [1-8]/8 ", f)]
    # a terminal cuts the bar on the right: the best fitness leads, inside the first 80 columns
    assert frames and all(re.search(r"search best \d\.\d{4}", f[:80]) for f in frames)


def test_train_logs_a_line_per_tenth_of_its_steps():
    from evonorm.data import synthetic_dataset
    from evonorm.train import get_train_preset, train

    lines = []
    train("bn_relu", synthetic_dataset(256, 64, seed=0), get_train_preset("tiny", steps=20), log=lines.append)
    assert len(lines) == 10 and all(re.match(r"\w+: step \d+/20 loss \d", line) for line in lines)
    assert "step 20/20" in lines[-1]


def test_the_eta_counts_the_candidates_still_running():
    from evonorm.search.progress import eta_seconds

    quick, long = [5.0] * 8, [70.0, 80.0]
    # the last candidate has trained 10 s; those that ran longer took 75 s on average: 65 s left,
    # not the few seconds of the pace of mostly quick candidates
    assert eta_seconds(quick + long, [10.0], 0, 15.0, 2) == pytest.approx(65.0)
    # older than every finished one: as long again
    assert eta_seconds(quick + long, [100.0], 0, 15.0, 2) == pytest.approx(100.0)
    # queued candidates at the mean cost, shared among the workers, beside the running ones
    assert eta_seconds(quick, [1.0, 1.0], 10, 5.0, 2) == pytest.approx((4.0 + 4.0 + 50.0) / 2)
    assert eta_seconds([], [], 3, None, 2) is None
    # before any has finished, an expected cost stands for the finished ones too
    assert eta_seconds([], [30.0], 2, 100.0, 1) == pytest.approx(70.0 + 200.0)


def test_the_bar_moves_while_the_first_candidate_trains(tmp_path, monkeypatch):
    import _objectives

    init_run(tmp_path, fake_config(budget=1, workers=1))
    tty = FakeTTY()
    monkeypatch.setattr("sys.stderr", tty)
    run_search(tmp_path, objective=_objectives.sleepy, progress=True)
    waiting = [f for f in re.split(r"[\r\n]", tty.getvalue()) if " 0/1 " in f]
    clocks = {m.group(1) for f in waiting if (m := re.search(r"\[(\d\d:\d\d)\]", f))}
    assert len(clocks) >= 2, waiting  # the elapsed time ticks before anything has finished
    assert any("1 training" in f for f in waiting)
    # one estimate on a line: the search's ETA, not also tqdm's remaining time beside it
    assert not any(re.search(r"\d\d:\d\d<", f) or f.count("ETA") > 1 for f in waiting), waiting


def test_the_status_line_says_the_stage_and_step_of_each_running_candidate(tmp_path, capsys):
    from _search_fakes import CountedStages, counted_stages_config

    (tmp_path / "marks").mkdir()
    run = init_run(tmp_path / "run", counted_stages_config(budget=2))
    run_search(run, objective=CountedStages(tmp_path / "marks"), progress=True, progress_every=0.05)
    running = re.findall(r"\| running: (.*)$", capsys.readouterr().err, re.M)
    # proposal numbers as the candidates' ids; a stage once the worker said it trains, then the
    # stage it is in after each report, with the step it reported last
    assert {"#1 stage 1/3", "#1 stage 2/3 (step 1)", "#1 stage 3/3 (step 2)",
            "#2 stage 2/3 (step 1)"} <= set(running), running
    assert not list((run / "stages").iterdir())  # no progress file outlives its candidate


def test_the_bar_says_where_the_running_candidate_is(tmp_path, monkeypatch):
    from _search_fakes import CountedStages, counted_stages_config

    (tmp_path / "marks").mkdir()
    run = init_run(tmp_path / "run", counted_stages_config(budget=1))
    tty = FakeTTY()
    monkeypatch.setattr("sys.stderr", tty)
    run_search(run, objective=CountedStages(tmp_path / "marks", seconds=1.5), progress=True)
    assert "running: #1 stage 2/3 (step 1)" in tty.getvalue()


def test_before_its_own_timings_the_eta_is_the_objectives_expected_cost_and_says_so(tmp_path,
                                                                                   capsys):
    import _objectives

    run = init_run(tmp_path / "run", fake_config(budget=4, workers=1))
    run_search(run, objective=_objectives.Priced(100.0), progress=True, progress_every=0.05)
    lines = re.findall(r"^search: (\d)/4 done .* ETA (.*?)(?: \| running: .*)?$",
                       capsys.readouterr().err, re.M)
    # the first line, before any worker has started: 4 candidates of 100 worker-seconds, 1 worker
    assert lines[0] == ("0", "~7 min (test's measured cost)"), lines
    assert all(eta.endswith("(test's measured cost)") for done, eta in lines if done == "0")
    assert any(re.fullmatch(r"\d+s", eta) for done, eta in lines if done != "0"), lines


def test_an_expected_cost_that_is_not_one_is_a_one_line_error(tmp_path):
    import _objectives

    run = init_run(tmp_path / "run", fake_config(budget=1, workers=1))
    with pytest.raises(ValueError, match="expected_cost returned .*not a CandidateCost"):
        run_search(run, objective=_objectives.Priced(None), progress=False)


def test_a_progress_file_that_is_not_one_reads_as_none(tmp_path):
    from evonorm.search.objective import TrialProgress

    path = tmp_path / "p.json"
    assert TrialProgress.read(path) is None  # not written yet
    for text in ("{", "[]", '{"phase": null}', '{"phase": null, "reports": "x", "step": null}'):
        path.write_text(text)
        assert TrialProgress.read(path) is None
    TrialProgress("quality test", 0, None).write(path)
    assert TrialProgress.read(path).describe(2) == "quality test"
    (tmp_path / "link.json").symlink_to(path)
    os.mkfifo(tmp_path / "fifo.json")
    assert TrialProgress.read(tmp_path / "link.json") is None  # never followed
    assert TrialProgress.read(tmp_path / "fifo.json") is None  # nor waited on
    assert TrialProgress("training", 0, None).describe(3) == "stage 1/3"
    assert TrialProgress("training", 1, 150).describe(2) == "stage 2/2 (step 150)"
    assert TrialProgress("evaluating", 1, 40).describe(1) == "evaluating (step 40)"


@pytest.mark.parametrize("text", ['{"phase": null, "reports": Infinity, "step": null}',
                                  '{"phase": null, "reports": 1e400, "step": null}',
                                  '{"phase": null, "reports": 1, "step": -50}',
                                  '{"phase": null, "reports": -1, "step": 3}',
                                  '{"phase": null, "reports": 1, "step": NaN}'])
def test_a_progress_file_out_of_range_is_not_believed(tmp_path, text):
    from evonorm.search.objective import TrialProgress

    path = tmp_path / "p.json"
    path.write_text(text)
    assert TrialProgress.read(path) is None


def test_a_progress_file_is_checked_for_size_before_it_is_read_and_its_phase_quoted(tmp_path, monkeypatch):
    from evonorm.search.objective import TrialProgress

    path = tmp_path / "p.json"
    with open(path, "wb") as f:
        f.truncate(2 << 30)  # sparse: no disk, and 2 GB of memory if read whole
    monkeypatch.setattr("json.loads", lambda *a, **k: pytest.fail("read"))
    assert TrialProgress.read(path) is None
    monkeypatch.undo()
    TrialProgress("\x1b]0;owned\x07\x1b[2J\x00x", 0, None).write(path)
    shown = TrialProgress.read(path).describe(1)
    assert shown.isprintable() and "\\x1b" in shown, shown


def test_workers_that_do_not_see_the_run_folder_get_no_progress_file_and_show_the_number(tmp_path,
                                                                                       capsys):
    from functools import partial

    from _search_fakes import CountedStages, counted_stages_config
    from evonorm.search.executors import LocalExecutor
    from evonorm.search.objective import run_trial

    (tmp_path / "marks").mkdir()
    objective = CountedStages(tmp_path / "marks")
    run = init_run(tmp_path / "run", counted_stages_config(budget=1, executor="ray"))
    with LocalExecutor(partial(run_trial, objective), 1) as pool:  # as a Ray cluster's workers
        run_search(run, objective=objective, executor=pool, progress=True, progress_every=0.05)
    running = re.findall(r"\| running: (.*)$", capsys.readouterr().err, re.M)
    assert running and set(running) == {"#1"}
    assert not (run / "stages").exists()


def test_the_proxy_task_names_its_phases_and_reports_its_stages(tmp_path):
    from evonorm.graph.library import NAMED_GRAPHS
    from evonorm.proxy.objective import ProxyObjective
    from evonorm.proxy.presets import get_preset
    from evonorm.proxy.api import start
    from evonorm.search.objective import Trial, TrialProgress

    seen = []

    class Watched(Trial):
        def tell(self):
            super().tell()
            seen.append(TrialProgress.read(self.progress_file).describe(2))

    cfg = start(get_preset("tiny", stage_steps=(2,), quality_steps=0, workers=1))[0]
    g = NAMED_GRAPHS["evonorm_s0"]
    trial = Watched(g, progress_file=str(tmp_path / "p.json"))
    ProxyObjective.for_run(cfg)(g.to_module, trial)
    assert seen[:2] == ["stability test", "quality test"]  # staged: the first stage is the test
    assert "stage 2/2 (step 2)" in seen


def test_a_worker_seconds_budget_is_what_the_bar_and_the_lines_count(tmp_path, monkeypatch, capsys):
    # 100,000 candidates are only a cap: the budget is 2 worker-seconds, and the share of it spent
    init_run(tmp_path / "a", fake_config(budget=100_000, budget_seconds=2.0))
    result = run_search(tmp_path / "a", objective=slow_fake, progress=True, progress_every=0.05)
    assert re.fullmatch(r"\d/2 worker-seconds, \d+ candidates", result.progress()), result.progress()
    err = capsys.readouterr().err
    spent = re.findall(r"^search: (\d+)/2 worker-s spent \((\d+)%\), (\d+) done \|", err, re.M)
    assert spent and spent[0] == ("0", "0", "0"), err
    assert "100000" not in err and re.search(r"^\[\d+, \d+/2 worker-s\] #\d+ ", err, re.M), err
    init_run(tmp_path / "b", fake_config(budget=100_000, budget_seconds=2.0))
    tty = FakeTTY()
    monkeypatch.setattr("sys.stderr", tty)
    run_search(tmp_path / "b", objective=slow_fake, progress=True)
    frames = [f for f in re.split(r"[\r\n]", tty.getvalue()) if "search" in f]
    assert frames and all(re.search(r"\| \d+/2 worker-s \[", f) for f in frames), frames
    assert not any("100000" in f for f in frames)


def test_the_start_line_says_a_worker_seconds_budget():
    from evonorm.proxy.presets import get_preset
    from evonorm.search.progress import budget_text

    assert budget_text(get_preset("scratch")) == ("budget 3,600 worker-seconds (at most 100,000 "
                                                  "candidates)")
    assert budget_text(get_preset("demo")) == "budget 75 candidates"


def test_the_eta_of_a_worker_seconds_budget_is_the_rest_of_it_at_the_rate_spent(tmp_path):
    from evonorm.search.loop import SearchLoop
    from evonorm.search.progress import SearchProgress
    from evonorm.search.store import Store

    init_run(tmp_path, fake_config(budget=100_000, budget_seconds=3600.0, workers=2))
    with Store(tmp_path) as store:
        search = SearchLoop(store, store.search_config(), executor=None)
        shown = SearchProgress(search)
        # before it has run a few seconds: both workers busy
        assert shown.seconds_eta(1.0, [1.0, 1.0]) == pytest.approx((3600 - 2) / 2)
        # two workers 100 s into their candidates, 400 worker-s finished in 300 s: 2 worker-s/s
        search.history.spent = 400.0
        assert shown.seconds_eta(300.0, [100.0, 100.0]) == pytest.approx((3600 - 600) / 2)
        # a worker idle half the time: 1 worker-s a second, so the rest takes twice as long
        search.history.spent = 200.0
        assert shown.seconds_eta(300.0, [100.0]) == pytest.approx(3600 - 300)


def test_the_running_candidate_shows_the_step_in_flight(tmp_path):
    from evonorm.search.objective import Trial, TrialProgress

    path = tmp_path / "p.json"
    trial = Trial(None, progress_file=str(path))
    trial.phase("training")
    trial.report({"a": 0.5}, 150)
    for step in range(151, 451):  # every step: the driver is told at most once a second
        trial.training_step(step, of="resnet50_cifar")
    assert TrialProgress.read(path).describe(2) == "stage 2/2 (step 150)"  # within the second
    trial.told -= 1.0  # a second later
    trial.training_step(452, of="resnet50_cifar")
    assert TrialProgress.read(path).describe(2) == "stage 2/2 (resnet50_cifar step 452)"
    assert TrialProgress("quality test", 0, None, 60, "m").describe(2) == "quality test (m step 60)"
    # an own objective's count not known yet: the stage alone
    assert TrialProgress("training", 1, 150).describe(None) == "stage 2 (step 150)"
    assert TrialProgress("training", 4, 4).describe(None) == "stage 5 (step 4)"


def test_the_proxy_task_says_every_training_step_and_its_architecture():
    from evonorm.graph.library import NAMED_GRAPHS
    from evonorm.proxy.objective import ProxyObjective
    from evonorm.proxy.presets import get_preset
    from evonorm.proxy.api import start
    from evonorm.search.objective import Trial

    steps = []

    class Watched(Trial):
        def training_step(self, step, of=None):
            steps.append((of, step))

    cfg = start(get_preset("tiny", stage_steps=(2,), quality_steps=0, workers=1,
                           archs=("resnet50_cifar",)))[0]
    g = NAMED_GRAPHS["evonorm_s0"]
    ProxyObjective.for_run(cfg)(g.to_module, Watched(g))
    assert steps[:3] == [("resnet50_cifar", 1), ("resnet50_cifar", 2), ("resnet50_cifar", 3)]
    # every step, the stages one training (the stage at step 2 goes on from there)
    assert [s for _, s in steps] == list(range(1, len(steps) + 1)) and len(steps) > 2, steps


def test_an_own_objectives_stage_count_is_what_it_reports(tmp_path, capsys):
    from _search_fakes import FiveStages, counted_stages_config
    from evonorm.search.api import own_objective_config

    (tmp_path / "marks").mkdir()
    objective = FiveStages(tmp_path / "marks", seconds=0.3)
    # the engine preset stages 3 times; the objective reports 5 stages
    run = init_run(tmp_path / "run", own_objective_config(counted_stages_config(budget=2), objective))
    result = run_search(run, objective=objective, progress=True, progress_every=0.05)
    running = re.findall(r"\| running: (.*)$", capsys.readouterr().err, re.M)
    # before a layer has finished the count is not known: the stage alone; then the 5 it reported
    assert {"#1 stage 2 (step 1)", "#1 stage 5 (step 4)", "#2 stage 2/5 (step 1)"} <= set(running), running
    assert not any("/3" in r for r in running), running
    assert result.tally.stages() == 5 and result.tally.stopped == 0 and result.tally.best is not None


def test_a_resumed_run_has_an_eta_from_its_earlier_candidates_before_its_own(tmp_path):
    from evonorm.search.api import own_objective_config
    from evonorm.search.loop import SearchLoop
    from evonorm.search.progress import SearchProgress
    from evonorm.search.store import Store

    # an own objective with no expected cost: the ETA was "?" until a candidate finished in
    # this session, also after a resume
    init_run(tmp_path, own_objective_config(fake_config(budget=3, workers=1), slow_fake))
    run_search(tmp_path, objective=slow_fake, progress=False)
    with Store(tmp_path) as store:
        cfg = store.search_config()
        search = SearchLoop(store, cfg.replace(evolution=cfg.evolution.replace(budget=6)), None)
        shown = SearchProgress(search)
        assert shown.cost_per_candidate() == pytest.approx(search.history.spent / 3)
        assert shown.status().eta != "?" and shown.status().eta.endswith("s")


def test_the_cost_per_candidate_starts_from_the_expected_one_and_follows_the_recent_ones():
    from types import SimpleNamespace

    from evonorm.search.history import Tally
    from evonorm.search.objective import CandidateCost
    from evonorm.search.progress import PRIOR_CANDIDATES, SearchProgress

    loop = SimpleNamespace(history=SimpleNamespace(tally=Tally(), spent=0.0), cfg=fake_config(budget=75))
    shown = SearchProgress(loop, expected=CandidateCost(5.5, "demo's measured cost"))
    assert shown.cost_per_candidate() == 5.5
    # the main job's first two candidates are its seed layers, trained to the end: 50 worker-s
    # each against a mean of 5.5 over the whole search
    for _ in range(2):
        shown.finished(SimpleNamespace(id=1, status="valid", reason=None, cache_hit=False), 50.0)
    assert shown.cost_per_candidate() < 15  # their mean alone: a 75-candidate search of 30 min, not 4
    for _ in range(60):  # then its own pace
        shown.finished(SimpleNamespace(id=1, status="rejected", reason="x", cache_hit=False), 9.0)
    assert shown.cost_per_candidate() == pytest.approx(9.0, rel=0.05)
    # a resumed session starts from the run's candidates, with the expected cost beside them
    loop = SimpleNamespace(history=SimpleNamespace(tally=Tally(done=20), spent=200.0), cfg=loop.cfg)
    again = SearchProgress(loop, expected=CandidateCost(5.5, "demo's measured cost"))
    assert again.cost_per_candidate() == pytest.approx((PRIOR_CANDIDATES * 5.5 + 200) / (PRIOR_CANDIDATES + 20))
