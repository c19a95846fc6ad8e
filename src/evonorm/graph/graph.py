"""`Graph`: a normalization-activation layer as a DAG over the 24 primitives.

Nodes 0..3 are the inputs x, zero, v0, v1; node i + 4 is the i-th entry of `nodes`, an op name and
the ids of earlier nodes; the last node is the output. JSON: {"nodes": [["op", id, ...], ...]}.
A Graph is immutable and always valid: the constructor checks every node.

The views of a graph (`to_module`, `to_text`, `to_latex`, `to_python`, `fingerprint`) are functions
of the compiler, renderer, exporter and fingerprint modules, which read a graph through its
structure (`nodes`, `node`, `live_nodes`, `output`) and never import this module; the methods here
only hand the graph to them.
"""

from __future__ import annotations

import hashlib
import json
import reprlib
from dataclasses import dataclass, field
from typing import Any

from evonorm.graph.module import to_module as compile_module
from evonorm.graph.export import to_python as export_python
from evonorm.graph.fingerprint import fingerprint as functional_fingerprint
from evonorm.graph.primitives import COMMUTATIVE, INPUTS, NUM_INPUTS, PRIMITIVES
from evonorm.graph.render import to_latex as render_latex, to_text as render_text
MAX_NODES = 10
MAX_JSON_CHARS = 100_000  # far above any graph; bounds parsing time and memory for junk input


def _short(value: Any) -> str:
    """A bounded one-line repr for error messages (junk input may be huge or deeply nested)."""
    return reprlib.repr(value).replace("\n", "\\n")


def _check_node(i: int, node: Any, total: int) -> tuple:
    """One node entry as a tuple, or ValueError naming node i + 4 and what is wrong with it."""
    nid = i + NUM_INPUTS
    where = f"node {nid} (entry {i})"
    if not isinstance(node, (list, tuple)) or not node:
        raise ValueError(f"{where}: expected a list [op, input ids...], got {_short(node)}")
    op, *args = node
    if not isinstance(op, str):
        raise ValueError(f"{where}: op must be a string, got {_short(op)}")
    prim = PRIMITIVES.get(op)
    if prim is None:
        raise ValueError(f"{where}: unknown op {_short(op)} (choose from {', '.join(PRIMITIVES)})")
    if len(args) != prim.arity:
        raise ValueError(f"{where}: op {op!r} takes {prim.arity} input(s), got {len(args)}")
    for a in args:
        if isinstance(a, bool) or not isinstance(a, int):
            raise ValueError(f"{where}: input ids must be integers, got {_short(a)}")
        if a < 0:
            raise ValueError(f"{where}: input id {a} is out of range (ids start at 0)")
        if a >= nid:
            kind = "forward reference" if a < total else "out-of-range reference"
            raise ValueError(f"{where}: {kind} to node {a} (inputs must be earlier nodes, ids < {nid})")
    return (op, *args)


@dataclass(frozen=True)
class Graph:
    """An immutable, validated layer graph; `nodes` holds (op, *input_ids) tuples."""

    nodes: tuple[tuple, ...]
    max_nodes: int = field(default=MAX_NODES, compare=False)

    def __post_init__(self):
        if isinstance(self.nodes, (str, bytes)) or not isinstance(self.nodes, (list, tuple)):
            raise ValueError(f"graph nodes must be a list, got {type(self.nodes).__name__}")
        if not self.nodes:
            raise ValueError("graph is empty: it needs at least one intermediate node (the output)")
        if len(self.nodes) > self.max_nodes:
            raise ValueError(f"graph has {len(self.nodes)} intermediate nodes, more than the limit of "
                             f"{self.max_nodes} (node {NUM_INPUTS + self.max_nodes} onwards)")
        object.__setattr__(self, "nodes",
                           tuple(_check_node(i, n, NUM_INPUTS + len(self.nodes)) for i, n in enumerate(self.nodes)))

    # ---- interchange ----------------------------------------------------------------------------
    @classmethod
    def from_json(cls, obj: Any, *, max_nodes: int = MAX_NODES) -> Graph:
        """A Graph from a dict {"nodes": [...]} or its JSON text (or a Graph); ValueError on bad input."""
        if isinstance(obj, Graph):
            return cls(obj.nodes, max_nodes)
        if isinstance(obj, bytes):  # e.g. a file's content
            try:
                obj = obj.decode("utf-8")
            except UnicodeDecodeError as err:
                raise ValueError(f"graph is not UTF-8 text (byte {err.start})") from None
        if isinstance(obj, str):
            if len(obj) > MAX_JSON_CHARS:
                raise ValueError(f"graph JSON is {len(obj)} characters, more than {MAX_JSON_CHARS} "
                                 f"(a {MAX_NODES}-node graph needs a few hundred)")
            try:
                obj = json.loads(obj)
            except json.JSONDecodeError as err:
                raise ValueError(f"graph is not valid JSON: {err}") from None
            except RecursionError:
                raise ValueError("graph JSON is nested too deeply") from None
        if not isinstance(obj, dict):
            raise ValueError(f'graph must be a JSON object {{"nodes": [...]}}, got {type(obj).__name__}')
        unknown = sorted(map(str, set(obj) - {"nodes"}))
        if unknown:
            raise ValueError(f"graph has unknown key(s) {', '.join(map(_short, unknown[:5]))} "
                             "(expected only 'nodes')")
        if "nodes" not in obj:
            raise ValueError("graph has no 'nodes' list")
        return cls(obj["nodes"], max_nodes)

    def to_json(self) -> dict:
        return {"nodes": [list(n) for n in self.nodes]}

    def dumps(self) -> str:
        """Compact JSON text (what `key` hashes for the canonical form)."""
        return json.dumps(self.to_json(), separators=(",", ":"))

    # ---- structure ------------------------------------------------------------------------------
    @property
    def output(self) -> int:
        return NUM_INPUTS + len(self.nodes) - 1

    def node(self, nid: int) -> tuple:
        """(op, *inputs) of an intermediate node id (>= 4)."""
        return self.nodes[nid - NUM_INPUTS]

    def live_nodes(self) -> list[int]:
        """Ids (inputs included) that the output depends on, ascending; the output is last."""
        live = {self.output}
        for nid in range(self.output, NUM_INPUTS - 1, -1):
            if nid in live:
                live.update(self.node(nid)[1:])
        return sorted(live)

    def full_shape_nodes(self) -> set[int]:
        """Live node ids whose value has the input's full shape (the others are statistics or
        constants that broadcast): x is full, element-wise ops are full when an input is,
        aggregations are not."""
        full = {0}
        for nid in self.live_nodes():
            if nid >= NUM_INPUTS:
                op, *args = self.node(nid)
                if not PRIMITIVES[op].aggregation and any(a in full for a in args):
                    full.add(nid)
        return full

    @property
    def uses_batch_stats(self) -> bool:
        """True for a "B" layer: a live node is a batch_* op (dead genes do not count)."""
        return any(PRIMITIVES[self.node(i)[0]].batch_dependent for i in self.live_nodes() if i >= NUM_INPUTS)

    def canonical(self) -> Graph:
        """The same layer in a normal form: dead nodes dropped, identical subexpressions merged,
        inputs of add/mul/max ordered by their structure, and nodes numbered in the post-order of a
        depth-first walk from the output. Graphs that differ only in those ways become equal."""
        digest: dict[int, str] = {i: name for i, name in enumerate(INPUTS)}
        for nid in self.live_nodes():
            if nid >= NUM_INPUTS:
                op, *args = self.node(nid)
                parts = [digest[a] for a in args]
                if op in COMMUTATIVE:
                    parts.sort()
                digest[nid] = hashlib.sha1(f"{op}({','.join(parts)})".encode()).hexdigest()
        new_id: dict[str, int] = {name: i for i, name in enumerate(INPUTS)}
        out: list[tuple] = []

        def emit(nid: int) -> int:  # depth <= max_nodes, so recursion is shallow
            d = digest[nid]
            if d not in new_id:
                op, *args = self.node(nid)
                if op in COMMUTATIVE:
                    args = sorted(args, key=digest.__getitem__)
                ids = [emit(a) for a in args]
                new_id[d] = NUM_INPUTS + len(out)
                out.append((op, *ids))
            return new_id[d]

        emit(self.output)
        return Graph(tuple(out), max(self.max_nodes, len(out)))

    def key(self) -> str:
        """Stable hash of the canonical form (16 hex digits): equal layers up to dead/duplicate nodes."""
        return hashlib.sha256(self.canonical().dumps().encode()).hexdigest()[:16]

    def fingerprint(self) -> str:
        """Functional hash: graphs computing the same function collide (see fingerprint.py)."""
        return functional_fingerprint(self)

    # ---- views ----------------------------------------------------------------------------------
    def to_text(self, *, affine: bool = True) -> str:
        return render_text(self, affine=affine)

    def to_latex(self, *, affine: bool = True) -> str:
        return render_latex(self, affine=affine)

    def to_python(self, class_name: str = "EvoLayer") -> str:
        return export_python(self, class_name)

    def to_module(self, num_features: int, *, apply_act: bool = True, groups: int = 32, eps: float = 1e-5,
                  momentum: float = 0.1, impl: str = "auto", **kwargs):
        """The layer as an nn.Module (`evonorm.graph.module.to_module`); impl "auto" | "plain" | "fast" | "cpp"."""
        return compile_module(self, num_features, apply_act=apply_act, groups=groups, eps=eps,
                         momentum=momentum, impl=impl, **kwargs)

    def __str__(self) -> str:
        return self.to_text()
