"""The from-primitives experiment's protocol pieces: its metrics, where worker-seconds went, the
prescreen's false negatives, the layers chosen for the reference training and its tests."""

import pytest

from _scripts import load_script

from evonorm.search.candidates import Candidate
from evonorm.search.evaluation import Evaluation

fs = load_script("from_scratch")
(ARMS, arm_config, exact_sign_flip, exact_two_sample, false_negatives, per_seed_means, run_metrics,
 spending, top_layers) = (fs.ARMS, fs.arm_config, fs.exact_sign_flip, fs.exact_two_sample,
                          fs.false_negatives, fs.per_seed_means, fs.run_metrics, fs.spending,
                          fs.top_layers)


def _valid(i, fitness, stages=2, seconds=100.0, **kw):
    e = Evaluation("valid", scores={"a": fitness, "b": fitness}, fitness=fitness,
                   stage_scores=[{"a": fitness, "b": fitness}] * stages)
    return Candidate(i, e, graph={"nodes": [["relu", 0]]}, key=f"k{i}", seconds=seconds, **kw)


def _rejected(i, reason, seconds, scores=None, bar=None, **kw):
    e = Evaluation("rejected", reason=reason, scores=scores or {},
                   detail=None if bar is None else {"threshold": bar})
    return Candidate(i, e, key=f"r{i}", seconds=seconds, **kw)


def test_the_metrics_count_layers_trained_to_the_end_and_valid_ones_per_budget_hour():
    cands = [_valid(1, 0.6), _valid(2, 0.8, stages=1), _rejected(3, "quality:a", 30.0),
             _valid(4, 0.7, cache_hit=True)]
    m = run_metrics(cands, stages=2, chance=0.1, budget_seconds=1800.0)
    # layer 2 stopped at the hurdle: valid, but not trained to the end
    assert m["best_fitness"] == 0.6
    assert m["top10_mean"] == pytest.approx((0.6 + 9 * 0.1) / 10)
    assert m["valid_per_worker_hour"] == 4.0  # 2 valid (the cache hit is no layer found) per half hour
    assert m["distinct_valid_own"] == 2
    assert run_metrics([], 2, 0.1, 3600.0)["best_fitness"] == 0.1


def test_spending_splits_the_worker_seconds_by_outcome():
    cands = [_valid(1, 0.6, seconds=100.0), _rejected(2, "quality:resnet", 30.0),
             _rejected(3, "quality:resnet", 20.0), _rejected(4, "precheck:constant", 0.5),
             _rejected(5, "stability", 0.0, cache_hit=True)]
    s = spending(cands)
    assert list(s) == ["valid", "quality:resnet", "precheck:constant", "cache hit"]
    assert s["quality:resnet"] == {"candidates": 2, "worker_seconds": 50.0}


def test_false_negatives_are_counted_on_the_exploring_slots_only():
    low = {"p_valid": 0.01, "explore": True}
    cands = [_valid(1, 0.6, prediction=low),                       # would have been lost
             _rejected(2, "quality:b", 40.0, scores={"a": 0.5, "b": 0.1}, bar=0.12,
                       prediction=low),                            # a near miss: worth training
             _rejected(3, "quality:a", 30.0, scores={"a": 0.1}, bar=0.12, prediction=low),
             _rejected(4, "quality:a", 30.0, prediction={"p_valid": 0.5, "explore": True}),
             _valid(5, 0.6, prediction={"p_valid": 0.01, "explore": False})]  # not explored
    assert false_negatives(cands, threshold=0.05) == {
        "explored": 4, "predicted_below_threshold": 3, "worth_training_among_them": 2}


def test_the_reference_layers_are_the_best_distinct_ones_of_the_evolution_arms():
    arms = {"evolution": {"full": [(0.7, "k1", {"g": 1}, "evolution", 0, 5),
                                   (0.9, "k2", {"g": 2}, "evolution", 1, 7)]},
            "evolution_no_prescreen": {"full": [(0.8, "k2", {"g": 2}, "evolution_no_prescreen", 3, 2),
                                                (0.75, "k3", {"g": 3}, "evolution_no_prescreen", 2, 9)]},
            "random": {"full": [(0.99, "k9", {"g": 9}, "random", 0, 1)]}}  # never chosen
    top = top_layers(arms)
    assert [t["graph"] for t in top] == [{"g": 2}, {"g": 3}, {"g": 1}]  # k2 once, at its best
    assert (top[0]["arm"], top[0]["seed"], top[0]["candidate"]) == ("evolution", 1, 7)


def test_per_seed_means_average_the_architectures_and_skip_unfinished_seeds():
    runs = [{"layer": "w", "arch": "r", "seed": 10, "test_accuracy": 0.7},
            {"layer": "w", "arch": "m", "seed": 10, "test_accuracy": 0.5},
            {"layer": "w", "arch": "r", "seed": 11, "test_accuracy": 0.9}]  # m not trained yet
    assert per_seed_means(runs, "w") == {10: pytest.approx(0.6)}


def test_the_exact_tests():
    # sign-flip over 5 seeds, all differences positive: 1 of 32 sign patterns is as large
    assert exact_sign_flip([2, 3, 4, 5, 6], [1, 1, 1, 1, 1]) == pytest.approx(1 / 32, abs=1e-4)
    assert exact_sign_flip([1], [0]) is None
    # 4 against 4, completely separated: 1 of C(8, 4) = 70 splits
    assert exact_two_sample([5, 6, 7, 8], [1, 2, 3, 4]) == pytest.approx(1 / 70, abs=1e-4)
    assert exact_two_sample([1, 2, 3, 4], [5, 6, 7, 8]) == pytest.approx(1.0)


def test_the_arms_differ_only_as_named():
    cfgs = {arm: arm_config(arm, 3, 3600.0) for arm in ARMS}
    evo = cfgs["evolution"]
    assert evo.evolution.prescreen and evo.evolution.near_misses and not evo.evolution.seed_layers
    assert evo.evolution.budget_seconds == 3600.0 and evo.seed == 3
    assert evo.execution.workers == 1 and evo.execution.threads == 1
    no_prescreen = evo.replace(evolution=evo.evolution.replace(prescreen=False))
    assert cfgs["evolution_no_prescreen"] == no_prescreen
    assert cfgs["random"] == no_prescreen.replace(
        evolution=no_prescreen.evolution.replace(algorithm="random"))


def test_per_arm_choice_takes_each_arm_s_best_distinct_functions_in_turn():
    exp = fs.Experiment(name="x", preset="scratch", arms={"evolution": ("evolution", {}),
                                                          "random": ("random", {})},
                        comparisons=(), chosen_from=("evolution", "random"), chosen_per_arm=2,
                        names=(),
                        reference_seeds=(10,), seeds=(0,), metrics=())
    arms = {"evolution": {"full": [(0.7, "k1", {"g": 1}, "evolution", 0, 5),
                                   (0.9, "k2", {"g": 2}, "evolution", 1, 7),
                                   (0.6, "k4", {"g": 4}, "evolution", 1, 8)]},
            "random": {"full": [(0.95, "k2", {"g": 2}, "random", 0, 1),   # evolution's already
                                (0.5, "k5", {"g": 5}, "random", 2, 3),
                                (0.4, "k6", {"g": 6}, "random", 2, 4)]}}
    top = fs.top_layers(arms, exp)
    assert [(t["name"], t["graph"]) for t in top] == [
        ("winner", {"g": 2}), ("evolution_2", {"g": 1}), ("random_1", {"g": 5}),
        ("random_2", {"g": 6})]
    arms["random"]["full"][1] = (0.99, "k5", {"g": 5}, "random", 2, 3)  # the best of all: winner
    assert [t["name"] for t in fs.top_layers(arms, exp)] == [
        "evolution_1", "evolution_2", "winner", "random_2"]


def test_a_normalizing_layer_is_told_from_one_that_is_not():
    from evonorm.graph.library import NAMED_GRAPHS

    assert fs.normalizing({"nodes": [["group_std", 0], ["div", 0, 4]]})  # x / group std(x)
    assert not fs.normalizing({"nodes": [["tanh", 0]]})
    # x sigmoid(v1 x) / std: invariant only for large inputs (its sigmoid sees the scale)
    assert not fs.normalizing(NAMED_GRAPHS["evonorm_s0"].to_json())


def test_reference_tests_correct_the_best_for_the_number_of_chosen_layers():
    runs = [{"layer": layer, "arch": "r", "seed": s, "test_accuracy": acc + 0.01 * s}
            for layer, acc in (("winner", 0.8), ("second", 0.5), ("gn_relu", 0.6),
                               ("evonorm_s0", 0.9)) for s in (10, 11, 12, 13)]
    p = fs.reference_tests(runs, ("winner", "second"))
    assert p["winner>gn_relu"] == pytest.approx(1 / 70, abs=1e-4)
    assert p["best_of_2>gn_relu_bonferroni"] == pytest.approx(2 / 70, abs=1e-4)
    assert p["winner>evonorm_s0"] == pytest.approx(1.0)


def test_the_second_experiment_s_arms_differ_only_in_their_algorithm():
    evo, rnd = (arm_config(arm, 4, 3600.0, fs.SECOND) for arm in ("evolution", "random"))
    assert evo.preset == "scratch2" and evo.evolution.prescreen and evo.evolution.fresh_tries
    assert evo.evolution.budget_seconds == 3600.0 and evo.seed == 4 and evo.execution.workers == 1
    assert rnd == evo.replace(evolution=evo.evolution.replace(algorithm="random"))
