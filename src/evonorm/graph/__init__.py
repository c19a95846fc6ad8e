"""The search space: layers as graphs over 24 primitives, compiled, compared, rendered and exported.

`Graph.from_json(...)`, `random_graph(rng)`, `mutate(graph, rng)`; named layers in
`evonorm.graph.library` (`get_graph("evonorm_b0")`).
"""

from evonorm.graph.graph import INPUTS, MAX_NODES, NUM_INPUTS, Graph
from evonorm.graph.mutation import mutate, op_choices, random_graph
from evonorm.graph.primitives import BATCH_OPS, OP_NAMES, PRIMITIVES, Primitive

__all__ = ["Graph", "INPUTS", "MAX_NODES", "NUM_INPUTS", "random_graph", "mutate", "op_choices",
           "PRIMITIVES", "Primitive", "OP_NAMES", "BATCH_OPS"]
