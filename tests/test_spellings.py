"""Spellings of one function read alike and count as one layer: constant folding in formulas and
merging by two fingerprints."""

from evonorm.graph import Graph
from evonorm.graph.fingerprint import fingerprint
from evonorm.search.candidates import function_key
from evonorm.search.candidates import top_layers

# x - tanh(0), x - sign(0)*ln|0|, x*exp(0) and x are one function; x + 1 is another
X_MINUS_TANH0 = {"nodes": [["tanh", 1], ["neg", 4], ["add", 0, 5]]}
X_MINUS_LOG0 = {"nodes": [["log", 1], ["neg", 4], ["add", 0, 5]]}
X_PLUS_ONE = {"nodes": [["tanh", 1], ["exp", 4], ["add", 0, 5]]}


def test_constants_fold_in_text_and_latex():
    assert Graph.from_json(X_MINUS_TANH0).to_text() == "x*gamma + beta"
    assert Graph.from_json(X_MINUS_TANH0).to_text(affine=False) == "x"
    assert Graph.from_json(X_MINUS_LOG0).to_latex(affine=False) == "x"
    assert Graph.from_json(X_PLUS_ONE).to_text(affine=False) == "x + 1"
    assert Graph.from_json({"nodes": [["sigmoid", 1], ["mul", 0, 4]]}).to_text(affine=False) == "x*0.5"
    # a variable subexpression is kept: x - tanh(v0)
    assert Graph.from_json({"nodes": [["tanh", 2], ["neg", 4], ["add", 0, 5]]}).to_text(affine=False) == "x - tanh(v0)"


def test_second_fingerprint_differs_from_first_but_agrees_on_spellings():
    g = Graph.from_json(X_MINUS_TANH0)
    assert fingerprint(g) != fingerprint(g, probe=1)
    assert function_key(X_MINUS_TANH0) == function_key(X_MINUS_LOG0) != function_key(X_PLUS_ONE)
    assert function_key({"nodes": [["nope", 0]]}) is None


def test_two_spellings_are_one_row_with_count_two():
    cands = [
        {"id": 1, "graph": X_MINUS_TANH0, "key": "a", "status": "valid", "fitness": 0.5},
        {"id": 2, "graph": X_MINUS_LOG0, "key": "b", "status": "valid", "fitness": 0.6},
        {"id": 3, "graph": X_MINUS_LOG0, "key": "b", "status": "rejected"},
        {"id": 4, "graph": X_PLUS_ONE, "key": "c", "status": "valid", "fitness": 0.4},
    ]
    plain = top_layers(cands)
    assert [r.key for r in plain] == ["b", "a", "c"] and all(r.spellings == 1 for r in plain)
    rows = top_layers(cands, same=lambda c: function_key(c.graph))
    assert [(r.best.id, r.spellings, r.found) for r in rows] == [(2, 2, 3), (4, 1, 1)]
    assert len(top_layers(cands, 1, same=lambda c: function_key(c.graph))) == 1


def _over_layer_std(shift):  # max((x - shift(v0)) / layer std(x), 0)
    return {"nodes": [[shift, 2], ["neg", 4], ["add", 0, 5], ["layer_std", 0], ["div", 6, 7],
                      ["max", 8, 1]]}


def test_layers_equal_at_init_that_trained_identically_are_one_row():
    """x - v0^2 and x - sign(v0)*ln|v0| differ as functions of v0, but v0 starts at 0 where
    neither has a gradient, so both train as x: a main-job run listed them as two layers with
    the same accuracies. x - sqrt(var(v0)) (= x - sqrt(eps) there) is another layer."""
    from evonorm.search.candidates import init_key
    from evonorm.search.candidates import same_layer_keys

    square, log, std = _over_layer_std("square"), _over_layer_std("log"), _over_layer_std("group_std")
    assert function_key(square) != function_key(log) and init_key(square) == init_key(log)
    assert init_key(std) != init_key(square)
    accs = {"resnet50_cifar": 0.416, "mobilenetv2_cifar": 0.2095}
    cands = [
        {"id": 40, "graph": square, "key": "a", "status": "valid", "scores": accs},
        {"id": 68, "graph": log, "key": "b", "status": "valid", "scores": dict(accs)},
        {"id": 96, "graph": std, "key": "c", "status": "valid", "scores": dict(accs)},
        {"id": 97, "graph": _over_layer_std("tanh"), "key": "d", "status": "valid",
         "scores": {"resnet50_cifar": 0.416, "mobilenetv2_cifar": 0.2096}},  # v0 moves
        {"id": 98, "graph": log, "key": "b", "status": "valid", "scores": dict(accs)},
    ]
    for c in cands:
        c["fitness"] = sum(c["scores"].values()) / 2
    rows = top_layers(cands, same=same_layer_keys())
    assert init_key(_over_layer_std("tanh")) == init_key(square)
    assert [(r.best.id, r.spellings, r.found) for r in rows] == [(97, 1, 1), (40, 2, 3), (96, 1, 1)]
    assert len(top_layers(cands, same=lambda c: function_key(c.graph))) == 4


def test_rows_equal_on_any_key_merge_transitively():
    """a = b on the first key, b = c on the second: one row, whatever order they come in."""
    cands = [{"id": i, "key": k, "status": "valid", "fitness": f}
             for i, k, f in ((1, "a", 0.9), (2, "b", 0.8), (3, "c", 0.7), (4, "d", 0.6))]
    first = {1: "x", 2: None, 3: "y", 4: "x"}  # 1 = 4
    second = {1: None, 2: "z", 3: None, 4: "z"}  # 4 = 2
    rows = top_layers(cands, same=(lambda c: first[c.id], lambda c: second[c.id]))
    assert [(r.best.id, r.spellings) for r in rows] == [(1, 3), (3, 1)]
