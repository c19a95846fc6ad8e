"""Multi-fidelity evaluation: staged training that continues from the previous stage's weights,
progressive dynamic hurdles, tournaments at an equal stage, stage results in the store, resume."""

import pytest

from _search_fakes import fake_config, staged_objective
from evonorm.data import load_dataset
from evonorm.graph.library import NAMED_GRAPHS
from evonorm.search.candidates import top_layers
from evonorm.search.driver import init_run, run_search
from evonorm.search.evaluation import Evaluation
from evonorm.proxy.training import search_dataset, train_stages
from evonorm.search.evolution import AgingPopulation, Member
from evonorm.search.objective import Reject
from evonorm.search.store import Store
from evonorm.train import Run, TrainConfig, lr_at, train
from evonorm.proxy.config import ProxyTask, configured, stored_task


def _staged_cfg(**kw):
    from evonorm.proxy.presets import get_preset

    base = dict(dataset="synthetic", n_train=96, quality_steps=0, stage_steps=(3,), quality_factor=0.0,
                train={"steps": 6, "batch_size": 8, "width": 0.0625, "eval_batch_size": 64})
    base.update(kw)
    return get_preset("tiny", **base)


def test_a_run_advanced_in_stages_equals_one_run():
    ds = load_dataset("synthetic", n_train=64, n_test=32)
    cfg = TrainConfig(arch="resnet50_cifar", width=0.0625, steps=6, batch_size=8,
                      schedule="cosine", restarts=(3,), n_train=64, n_test=32)
    whole = train(NAMED_GRAPHS["evonorm_s0"], ds, cfg)
    run = Run(NAMED_GRAPHS["evonorm_s0"], ds, cfg)
    run.advance(3)
    mid = run.score()
    state = run.state()
    other = Run(NAMED_GRAPHS["evonorm_s0"], ds, cfg)  # a fresh process would do this
    other.restore(state)
    other.advance()
    assert mid is not None and run.step == 3 and other.step == 6
    assert other.score() == whole.accuracy


def test_runs_advanced_in_turns_train_as_each_alone():
    """MobileNetV2's classifier dropout draws from torch's random stream: each run keeps its own, so
    runs advanced in turns (a candidate's training runs, stage by stage) end as each would alone,
    and a caller's stream is left where it was."""
    import torch

    ds = load_dataset("synthetic", n_train=64, n_test=32)
    cfgs = [TrainConfig(arch="mobilenetv2_cifar", width=0.0625, steps=6, batch_size=8, schedule="cosine",
                        restarts=(3,), n_train=64, n_test=32, seed=s) for s in (0, 100)]
    alone = [Run("gn_relu", ds, c) for c in cfgs]
    for r in alone:
        r.advance()
    torch.manual_seed(123)
    before = torch.get_rng_state()
    turns = [Run("gn_relu", ds, c) for c in cfgs]
    torch.set_rng_state(before)
    for step in (3, 6):
        for r in turns:
            r.advance(step)
    assert torch.equal(torch.get_rng_state(), before)
    for a, b in zip(alone, turns):
        for (name, pa), pb in zip(a.model.state_dict().items(), b.model.state_dict().values()):
            assert torch.equal(pa, pb), name


def test_restarts_anneal_each_stage():
    cfg = TrainConfig(steps=10, schedule="cosine", restarts=(4,), lr=1.0)
    assert lr_at(cfg, 0) == 1.0 and lr_at(cfg, 4) == 1.0  # a new cycle starts at the restart
    assert lr_at(cfg, 3) < 0.2 and lr_at(cfg, 9) < 0.1
    with pytest.raises(ValueError, match="restarts"):
        TrainConfig(steps=10, schedule="constant", restarts=(4,))
    with pytest.raises(ValueError, match="restarts"):
        TrainConfig(steps=10, schedule="cosine", restarts=(10,))


def test_train_stages_hurdle_stops_and_quality_bar_rejects():
    cfg = _staged_cfg()
    ds = search_dataset(ProxyTask.of_run(cfg))
    g = NAMED_GRAPHS["evonorm_s0"]
    full = train_stages(g, ds, ProxyTask.of_run(cfg))
    assert full.status == "valid" and full.stage == 2 and full.scores == full.stage_scores[-1]
    arch = stored_task(cfg).archs[0]  # a reference or re-training run is the candidates' full run
    assert train(g, ds, ProxyTask.of_run(cfg).training[arch]).accuracy == full.stage_scores[-1][arch]
    stopped = train_stages(g, ds, ProxyTask.of_run(cfg), hurdles=[1.01])  # no layer clears a hurdle above 100%
    assert stopped.status == "valid" and stopped.stage == 1
    assert stopped.stage_scores[0] == full.stage_scores[0]  # the same first stage either way
    with pytest.raises(Reject) as rejected:  # bar: 200% accuracy
        train_stages(g, ds, ProxyTask.of_run(configured(cfg, quality_factor=20.0)))
    assert rejected.value.reason == f"quality:{stored_task(cfg).archs[0]}"
    assert list(rejected.value.scores) == [stored_task(cfg).archs[0]]  # the other archs were not trained


def test_a_candidate_killed_after_a_stage_continues_from_its_checkpoint(tmp_path, monkeypatch):
    cfg = _staged_cfg()
    ds = search_dataset(ProxyTask.of_run(cfg))
    g = NAMED_GRAPHS["evonorm_s0"]
    whole = train_stages(g, ds, ProxyTask.of_run(cfg))
    ckpt = tmp_path / "stages" / "7.pt"
    real = Run.advance
    calls = []

    def dies_in_stage_two(self, to_step=None, **kw):
        if to_step is not None and to_step > 3:
            raise KeyboardInterrupt  # as if the worker were killed
        calls.append(to_step)
        return real(self, to_step, **kw)

    monkeypatch.setattr(Run, "advance", dies_in_stage_two)
    with pytest.raises(KeyboardInterrupt):
        train_stages(g, ds, ProxyTask.of_run(cfg), checkpoint=str(ckpt))
    assert ckpt.is_file() and len(calls) == len(stored_task(cfg).archs)
    monkeypatch.setattr(Run, "advance", lambda self, to_step=None, **kw: (
        calls.append(to_step), real(self, to_step, **kw))[1])
    calls.clear()
    again = train_stages(g, ds, ProxyTask.of_run(cfg), checkpoint=str(ckpt))
    assert calls == [6] * len(stored_task(cfg).archs)  # stage one was not trained again
    assert again.stage_scores == whole.stage_scores and not ckpt.exists()


def test_config_checks_stages():
    with pytest.raises(ValueError, match="quality_steps"):
        _staged_cfg(quality_steps=5)
    with pytest.raises(ValueError, match="increasing"):
        _staged_cfg(stage_steps=(4, 2))
    with pytest.raises(ValueError, match="train_runs must be >= 1"):
        _staged_cfg(train_runs=0)
    with pytest.raises(ValueError, match="train_runs > 1 needs stage steps"):
        _staged_cfg(stage_steps=(), train_runs=2)


def test_final_train_runs_add_runs_only_for_a_layer_that_reaches_the_end(monkeypatch):
    cfg = _staged_cfg(final_train_runs=2)
    ds = search_dataset(ProxyTask.of_run(cfg))
    g = NAMED_GRAPHS["evonorm_s0"]
    one = train_stages(g, ds, ProxyTask.of_run(configured(cfg, final_train_runs=None)))
    arch = stored_task(cfg).archs[0]
    other = train(g, ds, ProxyTask.of_run(cfg).training[arch].replace(seed=cfg.seed + 100)).accuracy
    steps = []
    real = Run.advance
    monkeypatch.setattr(Run, "advance", lambda self, to_step=None, **kw: (
        steps.append((self.cfg.arch, self.cfg.seed, to_step)), real(self, to_step, **kw))[1])
    more = train_stages(g, ds, ProxyTask.of_run(cfg))
    assert more.stage_scores[0] == one.stage_scores[0]  # the first stage is scored on train_runs runs
    assert more.stage_scores[-1][arch] == pytest.approx((one.stage_scores[-1][arch] + other) / 2)
    assert more.scores == more.stage_scores[-1]
    assert [s for s in steps if s[1] == cfg.seed + 100] == [(a, cfg.seed + 100, 6) for a in stored_task(cfg).archs]
    steps.clear()  # stopped by a hurdle: no extra run
    stopped = train_stages(g, ds, ProxyTask.of_run(cfg), hurdles=[1.0])
    assert len(stopped.stage_scores) == 1 and all(s[1] == cfg.seed for s in steps)
    with pytest.raises(ValueError, match="final_train_runs must be >= train_runs"):
        _staged_cfg(train_runs=2, final_train_runs=1)


def test_train_runs_score_the_mean_of_their_runs_and_resume_from_a_checkpoint(tmp_path,
                                                                                monkeypatch):
    cfg = _staged_cfg(train_runs=2)
    ds = search_dataset(ProxyTask.of_run(cfg))
    g = NAMED_GRAPHS["evonorm_s0"]
    both = train_stages(g, ds, ProxyTask.of_run(cfg))
    one = train_stages(g, ds, ProxyTask.of_run(configured(cfg, train_runs=1)))
    arch = stored_task(cfg).archs[0]
    other = train(g, ds, ProxyTask.of_run(cfg).training[arch].replace(seed=cfg.seed + 100)).accuracy
    assert both.stage_scores[-1][arch] == pytest.approx((one.stage_scores[-1][arch] + other) / 2)
    assert both.scores == both.stage_scores[-1] and len(both.stage_scores) == 2
    # the quality bar judges the mean: a bar above one seed's first stage but below the mean
    # rejects that seed alone and passes the pair (where the two seeds differ on `arch`)
    firsts = {s: train_stages(g, ds, ProxyTask.of_run(configured(cfg, seed=s, train_runs=1, archs=(arch,))))
              .stage_scores[0][arch] for s in (cfg.seed, cfg.seed + 100)}
    low = min(firsts, key=firsts.get)
    mean = sum(firsts.values()) / 2
    assert both.stage_scores[0][arch] == pytest.approx(mean)
    if firsts[low] < mean:
        factor = (firsts[low] + mean) / 2 * ds.num_classes
        with pytest.raises(Reject):  # alone
            train_stages(g, ds, ProxyTask.of_run(configured(cfg, seed=low, train_runs=1, quality_factor=factor)))
        pair = train_stages(g, ds, ProxyTask.of_run(configured(cfg, quality_factor=factor)))
        assert pair.status == "valid"
    # killed in the second stage, it continues both seeds' runs from the checkpoint
    ckpt = tmp_path / "3.pt"
    real = Run.advance

    def dies_in_stage_two(self, to_step=None, **kw):
        if to_step is not None and to_step > 3:
            raise KeyboardInterrupt
        return real(self, to_step, **kw)

    monkeypatch.setattr(Run, "advance", dies_in_stage_two)
    with pytest.raises(KeyboardInterrupt):
        train_stages(g, ds, ProxyTask.of_run(cfg), checkpoint=str(ckpt))
    calls = []
    monkeypatch.setattr(Run, "advance", lambda self, to_step=None, **kw: (
        calls.append(to_step), real(self, to_step, **kw))[1])
    again = train_stages(g, ds, ProxyTask.of_run(cfg), checkpoint=str(ckpt))
    assert calls == [6] * (2 * len(stored_task(cfg).archs)) and again.stage_scores == both.stage_scores


def test_tournament_compares_only_at_the_furthest_stage():
    import random

    pop = AgingPopulation(10, [Member(1, {}, (0.9, 0.9), stage=1), Member(2, {}, (0.2, 0.2), stage=2)])
    for seed in range(20):
        assert pop.tournament(random.Random(seed), 1.0, "average").id == 2


def test_search_with_hurdles_stores_stages_and_stops_below_the_mean(tmp_path):
    cfg = fake_config(budget=30, stage_steps=(2,), quality_steps=0, hurdle_min=3, workers=1)
    run = init_run(tmp_path / "run", cfg)
    run_search(run, objective=staged_objective, progress=False)
    with Store(run, readonly=True) as store:
        every = store.candidates()
    cands = [c for c in every if not c.cache_hit]
    assert all(c.status == "valid" and 1 <= c.stage <= 2 for c in cands)
    stopped = [c for c in cands if c.stage == 1]
    assert stopped and len(stopped) < len(cands)
    # one worker: each candidate's hurdle is the mean stage-1 fitness of the layers before it
    # (the window's, once hurdle_min have reached stage 1; cache hits count)
    reached: list[float] = []
    for c in every:
        window = reached[-cfg.evolution.window:]
        h = sum(window) / len(window) if len(window) >= cfg.hurdles.hurdle_min else None
        first = c.evaluation.stage_fitness[0]
        if not c.cache_hit:
            assert (c.stage == 1) == (h is not None and first < h), (c.id, h, first)
        reached.append(first)
    top = top_layers(cands, n=None)
    assert [r.best.stage for r in top] == sorted((r.best.stage for r in top), reverse=True)


def test_per_stage_scores_round_trip_through_the_store(tmp_path):
    cfg = fake_config(budget=4, stage_steps=(2,), quality_steps=0, workers=1)
    run = init_run(tmp_path / "run", cfg)
    run_search(run, objective=staged_objective, progress=False)
    with Store(run, readonly=True) as store:
        valid = [c for c in store.candidates() if c.status == "valid"]
    assert valid and all(c.stage_scores and c.stage_scores[-1] == c.scores for c in valid)
    ev = Evaluation.valid({"a": 0.5}, stage_scores=[{"a": 0.3}, {"a": 0.5}])
    assert Evaluation.from_dict(ev.to_dict()) == ev and ev.stage_fitness == [0.3, 0.5]


@pytest.mark.parametrize("stages, message", [("x", "--stages must be"), ("4,2", "increasing"),
                                             ("0", "increasing"), ("200", "must end before")])
def test_search_stages_flag_bad_input_is_one_line_exit_2(tmp_path, stages, message):
    import subprocess
    import sys
    from pathlib import Path

    evonorm = str(Path(sys.executable).with_name("evonorm"))
    proc = subprocess.run([evonorm, "search", "--preset", "tiny", "--dataset", "synthetic",
                           "--stages", stages, "--out", str(tmp_path / "run")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not (tmp_path / "run").exists()


def test_search_flags_set_stages_and_budget_seconds():
    from evonorm.commands.search import build_parser, config_from_args

    args = build_parser().parse_args(["--preset", "demo", "--stages", "50,100", "--budget-seconds",
                                      "30", "--out", "x"])
    cfg = config_from_args(args)
    assert cfg.hurdles.stage_steps == (50, 100) and stored_task(cfg).quality_steps == 0 and cfg.evolution.budget_seconds == 30.0
    args = build_parser().parse_args(["--preset", "demo", "--stages", "none", "--out", "x"])
    unstaged = config_from_args(args)
    task = stored_task(unstaged)
    assert unstaged.hurdles.stage_steps == () and task.quality_steps == 50 and task.train_runs == 1
