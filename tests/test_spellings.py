"""Spellings of one function read alike and count as one layer: constant folding in formulas and
merging by two fingerprints."""

from evonorm.graph import Graph
from evonorm.graph.fingerprint import fingerprint, function_key
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
