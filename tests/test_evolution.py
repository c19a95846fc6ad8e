"""Regularized evolution: Pareto front, tournaments, aging, offspring rules (hand-made scores)."""

import random
from collections import Counter

import pytest

from evonorm.search.evolution import (AgingPopulation, Member, dominates, pareto_front,
                                      select_winner, tournament_size)


def test_dominates_is_strict():
    assert dominates((0.5, 0.5), (0.4, 0.5))
    assert not dominates((0.5, 0.5), (0.5, 0.5))
    assert not dominates((0.6, 0.1), (0.1, 0.6))


def test_pareto_front_hand_made():
    # Fig. 6 of the paper: A, B, C efficient; D dominated by B; E dominated by everyone
    scores = [(0.9, 0.2), (0.7, 0.7), (0.2, 0.9), (0.6, 0.6), (0.1, 0.1)]
    assert pareto_front(scores) == [0, 1, 2]
    # equal vectors are both on the front; three objectives
    assert pareto_front([(0.5, 0.5, 0.5), (0.5, 0.5, 0.5), (0.4, 0.6, 0.1)]) == [0, 1, 2]
    assert pareto_front([(0.5, 0.5, 0.5), (0.5, 0.5, 0.6)]) == [1]
    assert pareto_front([(0.3,)]) == [0]


def test_pareto_winner_is_uniform_over_front_and_average_picks_best_mean():
    scores = [(0.9, 0.2), (0.7, 0.7), (0.2, 0.9), (0.6, 0.6), (0.1, 0.1)]
    rng = random.Random(0)
    wins = Counter(select_winner(scores, rng, "pareto") for _ in range(3000))
    assert set(wins) == {0, 1, 2}
    for i in (0, 1, 2):
        assert abs(wins[i] / 3000 - 1 / 3) < 0.04
    assert {select_winner(scores, rng, "average") for _ in range(50)} == {1}
    with pytest.raises(ValueError, match="criterion"):
        select_winner(scores, rng, "median")


def test_tournament_size_is_five_percent_with_floor():
    assert tournament_size(2500, 0.05) == 125
    assert tournament_size(10, 0.05) == 2
    assert tournament_size(1, 0.05) == 1
    assert tournament_size(40, 0.05, minimum=1) == 2


def test_aging_removes_the_oldest():
    pop = AgingPopulation(3)
    evicted = [pop.add(Member(i, {}, (float(i),))) for i in range(1, 6)]
    assert evicted == [None, None, None, Member(1, {}, (1.0,)), Member(2, {}, (2.0,))]
    assert pop.ids() == [3, 4, 5]
    # the best member ages out like any other (regularized evolution)
    pop = AgingPopulation(2, [Member(1, {}, (0.99,)), Member(2, {}, (0.1,))])
    pop.add(Member(3, {}, (0.2,)))
    assert pop.ids() == [2, 3]


def test_tournament_draws_from_population_and_returns_front_member():
    members = [Member(i, {}, s) for i, s in enumerate([(0.9, 0.1), (0.1, 0.9), (0.05, 0.05)])]
    pop = AgingPopulation(10, members)
    rng = random.Random(1)
    winners = Counter(pop.tournament(rng, 1.0).id for _ in range(400))
    assert set(winners) == {0, 1}  # the whole population competes; 2 is dominated
    # small tournaments sample: the dominated member wins when it is drawn with itself only
    winners = Counter(pop.tournament(rng, 0.0, minimum=1).id for _ in range(600))
    assert set(winners) == {0, 1, 2}


def test_a_mutation_that_keeps_the_parents_function_is_drawn_again():
    """Most single mutations of a one-op layer hit nodes its output does not use: such a child
    would only be a cache hit of its parent (and join the population as its clone)."""
    import random

    from evonorm.graph import Graph
    from evonorm.search.evolution import AgingPopulation, Member, propose

    # tanh(x) as a random graph drew it: nine nodes the output does not use (a near miss of a
    # from-scratch search, which evolution re-proposed 1,528 times before this redraw existed)
    parent = Graph.from_json({"nodes": [["div", 0, 3], ["instance_rms", 2], ["layer_rms", 3],
                                        ["square", 6], ["layer_mean", 5], ["group_rms", 1],
                                        ["neg", 5], ["add", 2, 2], ["add", 5, 9], ["tanh", 0]]})
    pop = AgingPopulation(4, [Member(1, parent.to_json(), (0.3, 0.1), 0)])

    def same_function(redraws):
        rng = random.Random(0)
        kids = [propose(rng, pop, p_random=0.0, mutations=1, allow_batch=False, redraws=redraws)
                for _ in range(60)]
        assert all(k.origin == "mutation" and k.parent_id == 1 for k in kids)
        return sum(Graph.from_json(k.graph).fingerprint() == parent.fingerprint() for k in kids)

    assert same_function(0) > 30  # without redraws most children are the parent again
    assert same_function(50) <= 2


def test_a_child_of_a_known_function_is_mutated_again_and_counted():
    """A child computing a function the run already scored would take a slot only to repeat a
    known result (a cache hit): with `fresh_tries` it is drawn again, and the redraws counted."""
    import random

    from evonorm.graph import Graph
    from evonorm.search.evolution import AgingPopulation, Member, propose

    parent = Graph.from_json({"nodes": [["layer_rms", 0], ["div", 0, 4], ["tanh", 5]]})
    pop = AgingPopulation(4, [Member(1, parent.to_json(), (0.3, 0.1), 1)])
    # what the run has scored: the children of 100 other streams
    scored = {Graph.from_json(propose(random.Random(100 + i), pop, p_random=0.0, mutations=1,
                                      allow_batch=False).graph).fingerprint() for i in range(100)}

    def known(g: dict) -> bool:
        return Graph.from_json(g).fingerprint() in scored

    def kids(tries: int):
        rng = random.Random(7)
        return [propose(rng, pop, p_random=0.0, mutations=1, allow_batch=False, known=known,
                        fresh_tries=tries) for _ in range(40)]

    plain, fresh = kids(0), kids(20)
    assert all(k.repeats == 0 for k in plain)
    assert sum(known(k.graph) for k in plain) >= 15  # without redraws, repeats take slots
    assert sum(known(k.graph) for k in fresh) <= 2
    assert sum(k.repeats for k in fresh) >= 15  # each redrawn child counted
    assert all(k.parent_id == 1 and k.origin == "mutation" for k in fresh)  # the same parent


def test_a_niche_is_the_statistic_a_layer_divides_by():
    from evonorm.graph.library import resolve_graph
    from evonorm.search.evolution import niche

    assert niche({"nodes": [["group_rms", 0], ["div", 0, 4], ["neg", 5]]}) == "group_rms"
    assert niche(resolve_graph("evonorm_s0").to_json()) == "group_std"
    assert niche({"nodes": [["max", 0, 2], ["add", 0, 4], ["tanh", 5]]}) == "none"
    # a statistic that is not under a division does not normalize
    assert niche({"nodes": [["layer_mean", 0], ["add", 0, 4]]}) == "none"


def test_with_niches_a_normalizing_layer_found_early_stays_a_contestant():
    """From random graphs the first experiment's evolution lost its normalizing layers to the
    unnormalized ones that followed: with niches the best of each niche outlives the window."""
    normalizing = Member(1, {"nodes": [["group_rms", 0], ["div", 0, 4], ["neg", 5]]}, (0.6, 0.6))
    later = [Member(2 + i, {"nodes": [["tanh", 0]]}, (0.3 + 0.01 * i, 0.3)) for i in range(8)]
    for niches, kept in ((False, False), (True, True)):
        pop = AgingPopulation(4, niches=niches)
        for m in [normalizing, *later]:
            pop.add(m)
        assert len(pop) == 4 and 1 not in pop.ids()  # aged out of the window either way
        assert (1 in [m.id for m in pop.contestants()]) is kept
        winners = {pop.tournament(random.Random(i), 1.0, "average").id for i in range(5)}
        assert (winners == {1}) is kept
    # one member per niche beyond the window: the best tanh layer is in the window already
    assert len(pop.contestants()) == 5 and pop.elites["none"].id == 9
