"""Graph -> a self-contained Python source file defining an nn.Module (needs only torch).

The file carries the exact source of the primitives it uses (copied with `inspect` from
`primitives.py` / `batch.py` / `evonorm.layers`), so it computes what `to_module` computes, and its
parameter and buffer names match `to_module`'s (a state_dict loads into either). Only op names from
the fixed table and integer node ids are written into the code.
"""

from __future__ import annotations

import ast
import inspect
import json
import keyword
from evonorm.graph import batch as B
from evonorm.graph import primitives as P
from evonorm.graph.primitives import INPUTS, NUM_INPUTS, LayerGraph
from evonorm.runtime.common import resolve_groups

_HELPER_ORDER = ("_compute_dtype", "_reduce", "_group")


def _source(obj) -> str:
    return inspect.getsource(obj).rstrip() + "\n"


def to_python(graph: LayerGraph, class_name: str = "EvoLayer") -> str:
    """Source of a module file defining `class_name(num_features, *, apply_act=True, groups=32,
    eps=1e-5, momentum=0.1, **kwargs)`, equal to `graph.to_module(...)`."""
    if not class_name.isidentifier() or keyword.iskeyword(class_name):
        raise ValueError(f"class_name must be a Python identifier, got {class_name[:80]!r}")
    code = _module_source(graph, class_name)
    taken = _names_used(_module_source(graph, "EvoLayerClassNamePlaceholder"))
    if class_name in taken or class_name.startswith("__"):
        raise ValueError(f"class_name {class_name!r} would shadow a name the exported module uses "
                         "(its imports, helper functions or builtins); choose another")
    return code


def _names_used(source: str) -> set[str]:
    """Every name the module binds or reads (imports, defs, globals, builtins, locals): a class
    bound at its end under one of them could break the code that reads it."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    names.discard("EvoLayerClassNamePlaceholder")
    return names


def _module_source(graph: LayerGraph, class_name: str) -> str:
    """The layer as a file of its own: a header, the functions it calls, and its class."""
    live = [n for n in graph.live_nodes()]
    ops = [graph.node(n)[0] for n in live if n >= NUM_INPUTS]
    prims = [P.PRIMITIVES[op] for op in dict.fromkeys(ops)]
    full = graph.output in graph.full_shape_nodes()
    init, body = _node_lines(graph, live)
    out = f"h{graph.output}"
    ret = (f"op_affine({out}, self.weight, self.bias)" if full
           else f"op_affine_expand({out}, self.weight, self.bias, x)")
    cls = _class_source(graph, class_name, init, body, ret)
    return _file_header(graph, class_name) + "\n\n".join(_helper_sources(live, prims, full) + [cls])


def _helper_sources(live: list[int], prims: list, full: bool) -> list[str]:
    """The source of every function the layer's forward calls (the primitives it uses and their helpers),
    and the batch statistic's where a primitive needs one."""
    funcs: list[str] = []
    helpers = {h for p in prims for h in p.requires}
    funcs += [h for h in _HELPER_ORDER if h in helpers]
    funcs += [p.fn.__name__ for p in prims if p.fn is not None]
    if 1 in live:
        funcs.append("op_zeros")
    if 2 in live or 3 in live:
        funcs.append("op_channel")
    funcs += ["op_check", "op_affine"] + ([] if full else ["op_affine_expand"])
    parts = [_source(resolve_groups)] + [_source(getattr(P, f)) for f in funcs]
    if any(p.batch_dependent for p in prims):
        parts += [f"RUNNING = {B.RUNNING!r}\n", _source(B.batch_stat_train), _source(B.batch_stat_eval),
                  _source(B.BatchStat)]
    return parts


def _node_lines(graph: LayerGraph, live: list[int]) -> tuple[list[str], list[str]]:
    """The lines of `__init__` that make the layer's parameters and batch statistics (none where it has
    neither), and the lines of `forward` that compute each live node."""
    init = ["        if apply_act:"]
    body = []
    for nid in live:
        if nid < NUM_INPUTS:
            name = INPUTS[nid]
            if name == "zero":
                body.append(f"        h{nid} = op_zeros(x)")
            elif name in ("v0", "v1"):
                init.append(f"            self.{name} = nn.Parameter(torch.full((num_features,), {float(name == 'v1')!r}))")
                body.append(f"        h{nid} = op_channel(self.{name}, x)")
            continue
        op, *args = graph.node(nid)
        prim = P.PRIMITIVES[op]
        ins = [f"h{a}" for a in args]
        if prim.batch_dependent:
            init.append(f"            self.batch{nid} = BatchStat(num_features, {prim.statistic!r}, eps=eps, "
                        f"momentum=momentum)")
            body.append(f"        h{nid} = self.batch{nid}({', '.join(ins)}, x)")
        else:
            extra = [f"self.{e}" for e in prim.extra]
            body.append(f"        h{nid} = {prim.fn.__name__}({', '.join(ins + extra)})")
    return ([] if len(init) == 1 else init), body


def _file_header(graph: LayerGraph, class_name: str) -> str:
    return f'''"""{class_name}: a normalization-activation layer generated by evonorm (needs only torch).

Formula: {graph.to_text()}
Graph:   {graph.dumps()}

    layer = {class_name}(num_features)   # NCHW input; apply_act=False gives the plain per-channel affine
"""

from __future__ import annotations

import torch
from torch import nn

'''


def _class_source(graph: LayerGraph, class_name: str, init: list[str], body: list[str], ret: str) -> str:
    return f'''class {class_name}(nn.Module):
    """{graph.to_text()}"""

    GRAPH = {json.dumps(graph.to_json())}

    def __init__(self, num_features, *, apply_act=True, groups=32, eps=1e-5, momentum=0.1, **kwargs):
        super().__init__()
        self.num_features = num_features
        self.apply_act = apply_act
        self.groups = resolve_groups(num_features, groups)
        self.eps = eps
        self.momentum = momentum
        self.weight = nn.Parameter(torch.ones(num_features))
        self.bias = nn.Parameter(torch.zeros(num_features))
{chr(10).join(init)}

    def forward(self, x):
        h0 = x = op_check(x, self.num_features)
        if not self.apply_act:
            return op_affine(x, self.weight, self.bias)
{chr(10).join(body)}
        return {ret}
'''
