"""Random graphs and mutation (paper Sec. 3.1 and 4.3).

Both draw only from the stdlib `random.Random` they are given (ops in the fixed table order), so a
seed, or a saved `rng.getstate()`, reproduces a search exactly.
"""

from __future__ import annotations

import random
from typing import Sequence

from evonorm.graph.graph import MAX_NODES, NUM_INPUTS, Graph
from evonorm.graph.primitives import OP_NAMES, PRIMITIVES


def op_choices(*, allow_batch: bool = True, ops: Sequence[str] | None = None) -> list[str]:
    """The ops to draw from: `ops` (default: all 24), without the batch_* ops when allow_batch=False."""
    names = list(OP_NAMES if ops is None else ops)
    unknown = [n for n in names if n not in PRIMITIVES]
    if unknown:
        raise ValueError(f"unknown op(s) {', '.join(map(repr, unknown))}")
    names = [n for n in names if allow_batch or not PRIMITIVES[n].batch_dependent]
    if not names:
        raise ValueError("no ops left to draw from")
    return names


def _random_node(rng: random.Random, nid: int, names: list[str]) -> tuple:
    op = rng.choice(names)
    return (op, *(rng.randrange(nid) for _ in range(PRIMITIVES[op].arity)))


def random_graph(rng: random.Random, *, allow_batch: bool = True, max_nodes: int = MAX_NODES,
                 num_nodes: int | None = None, ops: Sequence[str] | None = None) -> Graph:
    """Add `num_nodes` nodes (default `max_nodes`, a fixed-size genome whose unused nodes are inert
    genes for later mutations) one by one: op uniform, inputs uniform among the existing nodes."""
    n = max_nodes if num_nodes is None else num_nodes
    if not 1 <= n <= max_nodes:
        raise ValueError(f"num_nodes must be in 1..{max_nodes}, got {n}")
    names = op_choices(allow_batch=allow_batch, ops=ops)
    return Graph(tuple(_random_node(rng, NUM_INPUTS + i, names) for i in range(n)), max_nodes)


def mutate(graph: Graph, rng: random.Random, *, allow_batch: bool = True,
           ops: Sequence[str] | None = None) -> Graph:
    """Pick an intermediate node uniformly, give it a uniformly drawn op (possibly the same one) and
    new inputs drawn uniformly among the earlier nodes. Other nodes are kept as they are."""
    names = op_choices(allow_batch=allow_batch, ops=ops)
    i = rng.randrange(len(graph.nodes))
    nodes = list(graph.nodes)
    nodes[i] = _random_node(rng, NUM_INPUTS + i, names)
    return Graph(tuple(nodes), graph.max_nodes)
