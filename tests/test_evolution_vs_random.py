"""The Fig. 10 experiment's protocol pieces: equal worker-seconds, the metric, the exact test."""

import argparse
import shutil

import pytest

from _scripts import load_script

from evonorm.search.candidates import Candidate
from evonorm.proxy.config import ProxyTask, configured, stored_task

evr, arms = load_script("evolution_vs_random"), load_script("_arms")
fresh_seeds, main, summarize = evr.fresh_seeds, evr.main, evr.summarize
(arm_numbers, first_full_at, progress_line, read_run, run_config, run_metric, run_seed, top_mean,
 within_budget) = (arms.arm_numbers, arms.first_full_at, arms.progress_line, arms.read_run,
                   arms.run_config, arms.run_metric, arms.run_seed, arms.top_mean, arms.within_budget)


def _cand(i, seconds, status="valid", fitness=0.5, stages=2):
    return Candidate.from_dict({"id": i, "seconds": seconds, "status": status, "fitness": fitness,
                                "stage_scores": [{"a": fitness}] * stages if status == "valid" else []})


def test_budget_cut_and_metric():
    cands = [_cand(1, 10, fitness=0.3), _cand(2, 10, fitness=0.6, stages=1),
             _cand(3, 10, status="rejected", fitness=None), _cand(4, 10, fitness=0.9)]
    within = within_budget(cands, 25)
    assert [c.id for c in within] == [1, 2, 3]  # the third crossed the line and counts
    assert run_metric(within, stages=2, chance=0.1) == 0.3  # a stopped layer's 0.6 is earlier
    assert run_metric([], stages=2, chance=0.1) == 0.1
    assert first_full_at(cands, stages=2) == 10 and first_full_at(cands[1:], stages=2) == 30
    assert first_full_at(cands[1:3], stages=2) is None
    # the paper's metric: the 10 best trained to the end, the missing 8 at chance
    assert top_mean(cands, stages=2, chance=0.1) == pytest.approx((0.3 + 0.9 + 8 * 0.1) / 10)
    assert top_mean(cands, stages=2, chance=0.1, k=1) == pytest.approx(0.9)


def test_the_prescreened_runs_are_read_as_the_evolution_arm_with_the_top10_metric(
        tmp_path, monkeypatch, capsys):
    from types import SimpleNamespace

    seen = []

    def fake_read(run, budget):
        seen.append(run.name)
        cfg = SimpleNamespace(hurdles=SimpleNamespace(num_stages=2))
        fit = {"prescreen": 0.5, "evolution": 0.2, "random": 0.3}[run.name.split("_s")[0]]
        return cfg, "complete", 0.1, [_cand(1, 10, fitness=fit), _cand(2, 10, fitness=fit - 0.1)]

    monkeypatch.setattr(evr, "read_run", fake_read)
    monkeypatch.setattr(evr, "_plot", lambda rows, d: None)
    args = SimpleNamespace(seeds=[0, 1], budget_seconds=900.0, preset="demo", set=[],
                           test="paired", evolution_arm="prescreen")
    s = summarize(tmp_path, args, tmp_path)
    assert seen == ["prescreen_s0", "prescreen_s1", "random_s0", "random_s1"]
    assert s["evolution"] == [0.5, 0.5] and s["random"] == [0.3, 0.3]
    assert s["evolution_arm"] == "prescreen" and s["paired_p_value"] == 0.25
    assert s["top10_mean"]["evolution"] == [pytest.approx((0.5 + 0.4 + 0.8) / 10)] * 2
    assert s["top10_mean"]["paired_p_value"] == 0.25
    with pytest.raises(SystemExit) as err:  # running new arms under another experiment's name: no
        main(["--evolution-arm", "prescreen", "--runs", str(tmp_path)])
    assert err.value.code == 2 and "--summarize-only" in capsys.readouterr().err


@pytest.mark.fashion_mnist
def test_both_arms_share_everything_but_the_algorithm():
    evo, rnd = (run_config("scratch", a, 3, 600.0).to_dict() for a in ("evolution", "random"))
    assert {(p, k) for p in ("evolution", "hurdles", "execution", "task") for k in evo[p]
            if evo[p][k] != rnd[p][k]} == {("evolution", "algorithm")}
    assert {k for k in evo if k not in ("evolution", "hurdles", "execution", "task")
            and evo[k] != rnd[k]} == set()
    e = evo["evolution"]
    assert e["seed_layers"] == [] and e["budget_seconds"] == 600.0 and evo["execution"]["workers"] == 1
    assert e["near_misses"] is True  # parents before the first valid layer (random ignores it)


@pytest.mark.fashion_mnist
def test_overrides_reach_both_arms_and_progress_reads_a_run(tmp_path):
    from evonorm.search.driver import init_run

    evo, rnd = (run_config("demo", a, 0, 900.0, {"final_train_runs": 4}) for a in ("evolution", "random"))
    assert stored_task(evo).final_train_runs == stored_task(rnd).final_train_runs == 4
    # demo puts every search seed on split 0; `--data-seed seed` gives each its own, as before
    assert stored_task(evo).data_seed == 0 and ProxyTask.of_run(evo).split_seed == 0
    p = argparse.ArgumentParser()
    evr.add_search_flags(p)
    flags = p.parse_args(["--data-seed", "seed", "--final-train-runs", "4"])
    assert evr.search_settings(flags) == {"data_seed": "seed", "final_train_runs": 4}
    own = run_config("demo", "random", 3, 900.0, evr.search_settings(flags, 3))
    assert stored_task(own).data_seed == ProxyTask.of_run(own).split_seed == 3 and stored_task(own).final_train_runs == 4
    assert progress_line(tmp_path / "absent", "random", 900.0) == "random starting"
    init_run(tmp_path / "run", evo)
    assert progress_line(tmp_path / "run", "evolution", 900.0) == "evolution 0 candidates, 0/900 worker-s, best -"


def _tiny_run(path, algorithm: str, seed_layer: str):
    """A finished `tiny` search (synthetic data, seconds) whose best layer is the given seed layer."""
    from evonorm.proxy.objective import ProxyObjective
    from evonorm.search.driver import init_run, run_search
    from evonorm.proxy.presets import get_preset

    cfg = configured(get_preset("tiny"), algorithm=algorithm, budget=1, seed_layers=(get_preset("demo").evolution.seed_layers[
        {"group": 0, "layer": 1}[seed_layer]],))
    init_run(path, cfg)
    run_search(path, objective=ProxyObjective.for_run(cfg), progress=False)


@pytest.mark.slow
def test_fresh_seeds_retrain_the_arms_best_layers_and_test_the_differences(tmp_path):
    from types import SimpleNamespace

    from evonorm.measure.ledger import read_ledger

    runs, out = tmp_path / "runs", tmp_path / "out"
    out.mkdir()
    _tiny_run(runs / "evolution_s0", "evolution", "group")  # the arms' best layers differ in seed 0
    _tiny_run(runs / "random_s0", "random", "layer")
    for arm in ("evolution", "random"):  # and are the same layer in seed 1 (a copy: two searches fewer)
        shutil.copytree(runs / "evolution_s0", runs / f"{arm}_s1")
    args = SimpleNamespace(seeds=[0, 1], budget_seconds=1e9)
    res = fresh_seeds(runs, args, out, 2)
    r0, r1 = res["rows"]
    assert not r0["same_layer"] and r1["same_layer"] and r1["difference"] == 0.0
    for arm in ("evolution", "random"):  # two fresh seeds each, none of the search's own
        rows = read_ledger(runs / f"fresh_s0_{arm}.jsonl")
        assert [r.seed for r in rows] == [1000, 1001] and all(r.kind == "seed" for r in rows)
        assert r0[f"{arm}_fresh"] == pytest.approx(sum(r.fitness for r in rows) / 2)
        assert not (runs / f"fresh_s1_{arm}.jsonl").exists()  # the same layer: nothing to train
    assert r0["difference"] == pytest.approx(r0["evolution_fresh"] - r0["random_fresh"])
    assert res["p_value"] == (0.5 if r0["difference"] > 0 else 1.0)
    assert (out / "fresh_seeds.json").is_file() and "paired permutation" in (out / "fresh_seeds.md").read_text()
    again = fresh_seeds(runs, args, out, 2)  # resumable: nothing trains twice
    assert len(read_ledger(runs / "fresh_s0_evolution.jsonl")) == 2 and again["rows"] == res["rows"]


def test_prescreen_arms_counts_valid_layers_and_their_ceiling():
    cands = [Candidate.from_dict({"id": 1, "seconds": 100, "status": "valid", "origin": "seed",
                                  "key": "a"}),
             Candidate.from_dict({"id": 2, "seconds": 200, "status": "valid", "key": "b"}),
             Candidate.from_dict({"id": 3, "seconds": 0, "status": "valid", "key": "b",
                                  "cache_hit": True}),  # a repeat is not a layer found
             Candidate.from_dict({"id": 4, "seconds": 600, "status": "rejected"})]
    rate, own, ceiling = arm_numbers(cands, 900)
    assert rate == pytest.approx(2 / 0.25) and own == 1
    assert ceiling == pytest.approx(3600 / 150)  # every second on valid layers of the mean cost
    assert arm_numbers(cands[3:], 900) == (0.0, 0, None)


@pytest.mark.slow
def test_the_arms_of_a_seed_run_side_by_side_into_their_folders(tmp_path, capsys):
    configs = {arm: run_config("tiny", arm, 0, 2.0) for arm in ("evolution", "random")}
    run_seed(tmp_path, 0, configs, 2.0, 0.0)
    for arm in configs:
        cfg, status, _, within = read_run(tmp_path / f"{arm}_s0", 2.0)
        assert status == "complete" and cfg.evolution.algorithm == arm and within
    assert "seed 0 done" in capsys.readouterr().out


def test_a_seed_whose_arm_fails_stops_the_experiment_and_a_held_folder_is_not_searched(tmp_path):
    """An arm resuming a folder another search still writes to (a killed experiment's orphan)
    must not write beside it, and the seed must not be called done without that arm."""
    from evonorm.search.lock import RunLock

    configs = {arm: run_config("tiny", arm, 0, 2.0) for arm in ("evolution", "random")}
    (tmp_path / "random_s0").mkdir()
    with RunLock(tmp_path / "random_s0"):
        with pytest.raises(RuntimeError, match="seed 0: the random run failed: RunLocked"):
            run_seed(tmp_path, 0, configs, 2.0, 0.0)
    assert not (tmp_path / "random_s0" / "store.sqlite").exists()
    assert read_run(tmp_path / "evolution_s0", 2.0)[1] == "complete"
