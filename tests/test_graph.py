"""Graph: JSON, validation, canonical form and key, fingerprint, random graphs and mutation, rendering."""

import json
import random

import pytest

from evonorm.graph import BATCH_OPS, Graph, mutate, random_graph
from evonorm.graph.library import get_graph

B0 = {"nodes": [["instance_std", 0], ["mul", 3, 0], ["add", 5, 4], ["batch_std", 0], ["max", 7, 6], ["div", 0, 8]]}


def test_json_round_trip_from_dict_and_text():
    g = Graph.from_json(B0)
    assert g.to_json() == B0
    assert Graph.from_json(json.dumps(B0)) == g
    assert Graph.from_json(g.dumps()) == g
    assert json.loads(g.dumps()) == B0
    assert g.output == 9 and g.uses_batch_stats
    assert Graph.from_json(g) == g


@pytest.mark.parametrize("obj,message", [
    ({"nodes": [["foo", 0]]}, "node 4 (entry 0): unknown op 'foo'"),
    ({"nodes": [["add", 0]]}, "node 4 (entry 0): op 'add' takes 2 input(s), got 1"),
    ({"nodes": [["neg", 0], ["neg", 0, 1]]}, "node 5 (entry 1): op 'neg' takes 1 input(s), got 2"),
    ({"nodes": [["neg", 4]]}, "node 4 (entry 0): forward reference to node 4"),
    ({"nodes": [["neg", 0], ["add", 0, 5]]}, "node 5 (entry 1): forward reference to node 5"),
    ({"nodes": [["neg", 0], ["neg", 6], ["neg", 0]]}, "node 5 (entry 1): forward reference to node 6"),
    ({"nodes": [["neg", 0], ["neg", 99]]}, "node 5 (entry 1): out-of-range reference to node 99"),
    ({"nodes": [["neg", -1]]}, "node 4 (entry 0): input id -1 is out of range"),
    ({"nodes": [["neg", "0"]]}, "node 4 (entry 0): input ids must be integers, got '0'"),
    ({"nodes": [["neg", 1.0]]}, "node 4 (entry 0): input ids must be integers"),
    ({"nodes": [["neg", True]]}, "node 4 (entry 0): input ids must be integers"),
    ({"nodes": [[3, 0]]}, "node 4 (entry 0): op must be a string"),
    ({"nodes": [[]]}, "node 4 (entry 0): expected a list"),
    ({"nodes": ["neg"]}, "node 4 (entry 0): expected a list"),
    ({"nodes": [["neg", 0]] * 11}, "11 intermediate nodes, more than the limit of 10"),
    ({"nodes": []}, "graph is empty"),
    ({"nodes": "neg"}, "graph nodes must be a list"),
    ({"nodes": {"a": 1}}, "graph nodes must be a list"),
    ({}, "no 'nodes' list"),
    ({"nodes": [["neg", 0]], "extra": 1}, "unknown key(s) 'extra'"),
    ([["neg", 0]], "graph must be a JSON object"),
    (None, "graph must be a JSON object"),
    ("{not json", "graph is not valid JSON"),
    ('{"nodes": [["__import__", 0]]}', "unknown op '__import__'"),
])
def test_malformed_graphs_are_refused_with_a_message(obj, message):
    with pytest.raises(ValueError) as err:
        Graph.from_json(obj)
    assert message in str(err.value)


def test_node_limit_is_configurable():
    nodes = {"nodes": [["neg", 0]] + [["neg", 4 + i] for i in range(11)]}
    assert len(Graph.from_json(nodes, max_nodes=12).nodes) == 12
    with pytest.raises(ValueError, match="more than the limit of 10"):
        Graph.from_json(nodes)


def test_live_nodes_and_dead_batch_genes():
    g = Graph.from_json({"nodes": [["batch_mean", 0], ["sigmoid", 0], ["mul", 0, 5]]})
    assert g.live_nodes() == [0, 5, 6]
    assert not g.uses_batch_stats  # the batch node is dead: still an S layer


def test_canonical_ignores_dead_nodes_order_commutativity_and_duplicates():
    a = Graph.from_json({"nodes": [["sigmoid", 0], ["exp", 0], ["mul", 0, 4]]})  # exp is dead
    b = Graph.from_json({"nodes": [["sigmoid", 0], ["mul", 4, 0]]})  # inputs swapped
    c = Graph.from_json({"nodes": [["tanh", 0], ["sigmoid", 0], ["mul", 5, 0]]})
    assert a.canonical() == b.canonical() == c.canonical()
    assert a.key() == b.key() == c.key()
    assert a.canonical().to_json() == {"nodes": [["sigmoid", 0], ["mul", 0, 4]]} or len(a.canonical().nodes) == 2
    dup = Graph.from_json({"nodes": [["instance_std", 0], ["instance_std", 0], ["add", 4, 5]]})
    assert dup.canonical().nodes == (("instance_std", 0), ("add", 4, 4))
    # independent branches written in a different order
    assert get_graph("evonorm_b0").key() == get_graph("b_top6").key()
    # different layers differ
    assert a.key() != Graph.from_json({"nodes": [["sigmoid", 0], ["add", 0, 4]]}).key()
    # div is not commutative
    assert Graph.from_json({"nodes": [["div", 0, 3]]}).key() != Graph.from_json({"nodes": [["div", 3, 0]]}).key()
    for g in (a, b, c, dup, get_graph("s_top10")):
        assert g.canonical().canonical() == g.canonical()  # idempotent
        assert g.canonical().fingerprint() == g.fingerprint()


def test_key_is_stable_text():
    assert get_graph("evonorm_b0").key() == "b188a5f0052f7ac8"  # stored in search databases: must not drift


@pytest.mark.parametrize("a,b", [
    ([["mul", 0, 0]], [["square", 0]]),
    ([["add", 0, 3], ["add", 4, 2]], [["add", 3, 2], ["add", 0, 4]]),  # (x + v1) + v0 == x + (v1 + v0): float noise
    ([["neg", 0], ["neg", 4]], [["exp", 1], ["mul", 0, 4]]),  # -(-x) == x * exp(0)
    ([["sqrt", 0], ["mul", 4, 4]], [["abs", 0]]),  # (sign(x) sqrt|x|)^2 == |x| up to rounding
    ([["instance_mean", 0], ["instance_mean", 4]], [["instance_mean", 0]]),
    ([["batch_mean", 0], ["batch_mean", 4]], [["batch_mean", 0]]),  # equal in train, and in eval (same running mean)
])
def test_fingerprint_collides_on_equal_functions_written_differently(a, b):
    ga, gb = Graph.from_json({"nodes": a}), Graph.from_json({"nodes": b})
    assert ga.key() != gb.key()
    assert ga.fingerprint() == gb.fingerprint()


def test_fingerprint_commutative_inputs_collide():
    a = Graph.from_json({"nodes": [["sigmoid", 0], ["add", 0, 4]]})
    b = Graph.from_json({"nodes": [["sigmoid", 0], ["add", 4, 0]]})
    assert a.fingerprint() == b.fingerprint() and a.key() == b.key()


def test_fingerprint_separates_axis_sets_statistics_and_eval_behaviour():
    from evonorm.graph.fingerprint import fingerprint_values

    names = ["batch_mean", "layer_mean", "instance_mean", "group_mean", "batch_std", "layer_std", "instance_std",
             "group_std", "batch_rms", "layer_rms", "instance_rms", "group_rms"]
    fps = {Graph.from_json({"nodes": [[n, 0]]}).fingerprint() for n in names}
    assert len(fps) == len(names)
    assert Graph.from_json({"nodes": [["neg", 0]]}).fingerprint() != Graph.from_json({"nodes": [["abs", 0]]}).fingerprint()
    # eval mode (running statistics) is part of the fingerprint
    train, ev = fingerprint_values(Graph.from_json({"nodes": [["batch_std", 0], ["div", 0, 4]]}))
    assert not (train - ev).abs().lt(1e-3).all()


def test_random_graphs_are_valid_and_deterministic_per_seed():
    a = [random_graph(random.Random(7)) for _ in range(3)]
    assert a[0] == a[1] == a[2]
    assert random_graph(random.Random(7)) != random_graph(random.Random(8))
    rng = random.Random(0)
    for _ in range(300):
        g = random_graph(rng, allow_batch=False)
        assert len(g.nodes) == 10
        assert not any(op in BATCH_OPS for op, *_ in g.nodes)
        assert Graph.from_json(g.to_json()) == g
    assert any(op in BATCH_OPS for _ in range(50) for op, *_ in random_graph(rng).nodes)
    g = random_graph(random.Random(1), num_nodes=3, max_nodes=5)
    assert len(g.nodes) == 3
    with pytest.raises(ValueError, match="num_nodes"):
        random_graph(random.Random(1), num_nodes=0)
    assert {op for op, *_ in random_graph(random.Random(2), ops=["neg", "exp"]).nodes} <= {"neg", "exp"}


def test_random_graph_draws_ops_and_inputs_uniformly():
    rng = random.Random(3)
    counts = {}
    firsts = [0] * 4
    for _ in range(2400):
        g = random_graph(rng, num_nodes=1)
        op, *args = g.nodes[0]
        counts[op] = counts.get(op, 0) + 1
        firsts[args[0]] += 1
    assert len(counts) == 24 and min(counts.values()) > 50  # expected 100 each
    assert min(firsts) > 450  # expected 600 each


def test_mutation_changes_one_node_and_is_deterministic():
    base = random_graph(random.Random(5), allow_batch=False)
    m1 = mutate(base, random.Random(9), allow_batch=False)
    assert m1 == mutate(base, random.Random(9), allow_batch=False)
    rng = random.Random(11)
    changed_somewhere = 0
    g = base
    for _ in range(300):
        new = mutate(g, rng, allow_batch=False)
        diff = [i for i, (p, q) in enumerate(zip(g.nodes, new.nodes)) if p != q]
        assert len(diff) <= 1 and len(new.nodes) == len(g.nodes)
        assert not any(op in BATCH_OPS for op, *_ in new.nodes)
        changed_somewhere += bool(diff)
        g = new
    assert changed_somewhere > 250


def test_rng_state_resumes_the_same_sequence():
    rng = random.Random(42)
    random_graph(rng)
    state = rng.getstate()
    first = [mutate(random_graph(rng), rng) for _ in range(5)]
    rng2 = random.Random()
    rng2.setstate(state)
    assert [mutate(random_graph(rng2), rng2) for _ in range(5)] == first


def test_text_and_latex_render_every_op():
    rng = random.Random(0)
    for _ in range(200):
        g = random_graph(rng)
        text, latex = g.to_text(), g.to_latex()
        assert text.count("(") == text.count(")")
        assert latex.count("{") == latex.count("}")
        assert text.endswith("gamma + beta") or ", z" in text
    g = Graph.from_json({"nodes": [["add", 0, 3], ["square", 4], ["neg", 5], ["mul", 0, 6], ["log", 7],
                                   ["exp", 0], ["abs", 9], ["div", 8, 10]]})
    assert g.to_text() == "(sign(z)*ln(|z|) / |exp(x)|)*gamma + beta, z = x*(-(x + v1)^2)"
    assert g.to_latex() == ("\\frac{\\operatorname{sign}(z)\\ln\\left|z\\right|}{\\left|e^{x}\\right|}\\gamma + \\beta, "
                            "z = x \\left(-\\left(x + v_1\\right)^2\\right)")
    assert g.to_text(affine=False) == "sign(z)*ln(|z|) / |exp(x)|, z = x*(-(x + v1)^2)"
    assert str(get_graph("zero")) == "(x*0)*gamma + beta"


def test_canonical_form_preserves_the_function_on_random_graphs():
    rng = random.Random(21)
    for _ in range(200):
        g = random_graph(rng)
        c = g.canonical()
        assert c.canonical() == c
        assert c.key() == g.key()
        assert c.fingerprint() == g.fingerprint()
        assert len(c.nodes) <= len([n for n in g.live_nodes() if n >= 4])
        assert [n for n in c.live_nodes() if n >= 4] == list(range(4, c.output + 1))  # no dead nodes left
        assert c.uses_batch_stats == g.uses_batch_stats


def test_mutating_a_dead_node_keeps_the_key():
    g = Graph.from_json({"nodes": [["sigmoid", 0], ["exp", 0], ["tanh", 0], ["mul", 0, 4]]})
    rng = random.Random(0)
    for _ in range(100):
        m = mutate(g, rng)
        changed = [i for i, (a, b) in enumerate(zip(g.nodes, m.nodes)) if a != b]
        if changed and changed[0] in (1, 2):  # nodes 5 and 6 are dead
            assert m.key() == g.key()
