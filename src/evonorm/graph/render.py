"""A graph as a formula in the paper's notation: mu / s^2 with axis subscripts, sigma for sigmoid.

Plain text:  x / max(sqrt(s^2_{b,w,h}(x)), v1*x + sqrt(s^2_{w,h}(x)))*gamma + beta
LaTeX:       \\frac{x}{\\max(\\sqrt{s^2_{b,w,h}(x)}, v_1 x + \\sqrt{s^2_{w,h}(x)})}\\gamma + \\beta
As in the paper, eps is omitted, sqrt/log (sign(a) sqrt|a|, sign(a) ln|a|) and nodes used more than
once are named z (z_1, z_2, ... when there are several). A subexpression that depends on none of
x, v0, v1 (`tanh(0)`, `sign(0)*ln|0|`, `exp(0)`) is a constant and shown as its value, and
`a + 0`, `a - 0`, `a*1`, `a / 1` are shown as `a`, so that spellings of one function read alike.
"""

from __future__ import annotations

import math
from evonorm.graph.interpret import interpret
from evonorm.graph.primitives import NUM_INPUTS, PRIMITIVES, LayerGraph

ADD, MUL, UNARY, POW, ATOM = 1, 2, 3, 4, 5  # precedence of a rendered expression
AXES = {"batch": "b,w,h", "layer": "w,h,c", "instance": "w,h", "group": "w,h,c/g"}


class _Renderer:
    def __init__(self, graph: LayerGraph, latex: bool):
        self.g, self.latex = graph, latex
        live = graph.live_nodes()
        self.const = constants(graph)
        uses: dict[int, int] = {}
        for nid in live:
            if nid >= NUM_INPUTS:
                for a in graph.node(nid)[1:]:
                    uses[a] = uses.get(a, 0) + 1
        named = [n for n in live if n >= NUM_INPUTS and n not in self.const and (
            uses.get(n, 0) > 1 or any(graph.node(m)[0] in ("sqrt", "log") and n in graph.node(m)[1:]
                                      and not self._simple(n) for m in live if m >= NUM_INPUTS))]
        self.names = {}
        for k, n in enumerate(named):
            idx = "" if len(named) == 1 else (f"_{k + 1}" if latex else str(k + 1))
            self.names[n] = "z" + idx
        self.cache: dict[int, tuple[str, int]] = {}

    def _simple(self, nid: int) -> bool:
        return nid < NUM_INPUTS or nid in self.const

    def _is(self, nid: int, value: float) -> bool:
        return self.const.get(nid) == value

    def ref(self, nid: int) -> tuple[str, int]:
        if nid in self.names:
            return self.names[nid], ATOM
        return self.expr(nid)

    def expr(self, nid: int) -> tuple[str, int]:
        if nid not in self.cache:
            self.cache[nid] = self._render(nid)
        return self.cache[nid]

    def _leaf(self, nid: int) -> str:
        return {0: "x", 1: "0", 2: "v_0" if self.latex else "v0", 3: "v_1" if self.latex else "v1"}[nid]

    def _render(self, nid: int) -> tuple[str, int]:
        """A node's text and its precedence: a leaf, a folded constant, an operand its neutral element
        leaves alone, else its primitive's notation."""
        if nid < NUM_INPUTS:
            return self._leaf(nid), ATOM
        if nid in self.const:
            v = self.const[nid]
            return f"{v:.4g}", (ATOM if v >= 0 else UNARY)
        op, *args = self.g.node(nid)
        kept = self._neutral(op, args)
        if kept is not None:
            return self.ref(kept)
        a = [self.ref(i) for i in args]
        prim = PRIMITIVES[op]
        if prim.aggregation:
            return self._statistic(prim, a[0])
        if op in ("add", "mul", "div", "max", "neg"):
            return self._operator(op, args, a)
        return self._function(op, a[0])

    def _neutral(self, op: str, args: list[int]) -> int | None:
        """The operand x of x + 0, x - 0, x * 1, x / 1 (and 0 + x, 1 * x), which is shown alone."""
        if op == "add" and (self._is(args[1], 0.0) or self._neg_of_zero(args[1])):
            return args[0]
        if op == "add" and self._is(args[0], 0.0):
            return args[1]
        if op in ("mul", "div") and self._is(args[1], 1.0):
            return args[0]
        if op == "mul" and self._is(args[0], 1.0):
            return args[1]
        return None

    def _wrap(self, e: tuple[str, int], level: int) -> str:
        """An operand's text, in parentheses where it binds less tightly than `level`."""
        s, p = e
        if p >= level:
            return s
        return f"\\left({s}\\right)" if self.latex else f"({s})"

    def _statistic(self, prim, e: tuple[str, int]) -> tuple[str, int]:
        """mu, std or rms over the primitive's axes."""
        sub, arg = AXES[prim.axes], e[0]
        if self.latex:
            if prim.statistic == "mean":
                return f"\\mu_{{{sub}}}({arg})", ATOM
            if prim.statistic == "std":
                return f"\\sqrt{{s^2_{{{sub}}}({arg})}}", ATOM
            return f"\\sqrt{{\\mu_{{{sub}}}({self._wrap(e, ATOM)}^2)}}", ATOM
        if prim.statistic == "mean":
            return f"mu_{{{sub}}}({arg})", ATOM
        if prim.statistic == "std":
            return f"sqrt(s^2_{{{sub}}}({arg}))", ATOM
        return f"sqrt(mu_{{{sub}}}({self._wrap(e, ATOM)}^2))", ATOM

    def _operator(self, op: str, args: list[int], a: list[tuple[str, int]]) -> tuple[str, int]:
        """+ (a - b where b is a negation), *, /, max and unary minus."""
        L, w = self.latex, self._wrap
        if op == "add":
            other = args[1]
            if other >= NUM_INPUTS and other not in self.names and self.g.node(other)[0] == "neg":
                inner = self.ref(self.g.node(other)[1])
                return f"{a[0][0]} - {w(inner, MUL)}", ADD
            return f"{a[0][0]} + {w(a[1], MUL if a[1][1] == UNARY else ADD)}", ADD
        if op == "mul":
            right = w(a[1], POW) if a[1][1] == UNARY else w(a[1], MUL)
            return (f"{w(a[0], MUL)} {right}" if L else f"{w(a[0], MUL)}*{right}"), MUL
        if op == "div":
            if L:
                return f"\\frac{{{a[0][0]}}}{{{a[1][0]}}}", UNARY
            return f"{w(a[0], MUL)} / {w(a[1], POW)}", MUL
        if op == "max":
            return (f"\\max({a[0][0]}, {a[1][0]})" if L else f"max({a[0][0]}, {a[1][0]})"), ATOM
        return f"-{w(a[0], MUL)}", UNARY  # neg

    def _function(self, op: str, e: tuple[str, int]) -> tuple[str, int]:
        """A unary function of one operand."""
        L, x = self.latex, e[0]
        if op == "sigmoid":
            return (f"\\sigma({x})" if L else f"sigma({x})"), ATOM
        if op == "tanh":
            return (f"\\tanh({x})" if L else f"tanh({x})"), ATOM
        if op == "exp":
            return (f"e^{{{x}}}", POW) if L else (f"exp({x})", ATOM)
        if op == "abs":
            return (f"\\left|{x}\\right|" if L else f"|{x}|"), ATOM
        if op == "square":
            return f"{self._wrap(e, ATOM)}^2", POW
        if op == "sqrt":
            return (f"\\operatorname{{sign}}({x})\\sqrt{{\\left|{x}\\right|}}" if L
                    else f"sign({x})*sqrt(|{x}|)"), MUL
        if op == "log":
            return (f"\\operatorname{{sign}}({x})\\ln\\left|{x}\\right|" if L
                    else f"sign({x})*ln(|{x}|)"), MUL
        raise AssertionError(op)  # unreachable: Graph validated the op

    def _neg_of_zero(self, nid: int) -> bool:
        return nid >= NUM_INPUTS and self.g.node(nid)[0] == "neg" and self._is(self.g.node(nid)[1], 0.0)

    def formula(self, affine: bool) -> str:
        body = self.expr(self.g.output)
        if affine:
            if self.latex:
                s = (f"\\left({body[0]}\\right)" if body[1] < MUL else body[0]) + "\\gamma + \\beta"
            else:
                s = (f"({body[0]})" if body[1] < POW else body[0]) + "*gamma + beta"
        else:
            s = body[0]
        defs = [f"{name} = {self.expr(n)[0]}" for n, name in self.names.items()]
        return ", ".join([s, *defs])


def to_text(graph: LayerGraph, *, affine: bool = True) -> str:
    """Plain-text formula (ASCII; `affine` appends the per-channel *gamma + beta)."""
    return _Renderer(graph, latex=False).formula(affine)


def to_latex(graph: LayerGraph, *, affine: bool = True) -> str:
    """LaTeX formula in the paper's notation."""
    return _Renderer(graph, latex=True).formula(affine)


def constants(graph: LayerGraph) -> dict[int, float]:
    """The live nodes that depend on none of x, v0, v1 (node 1, zero, included), with their value:
    each is evaluated as the output of the graph cut after it. A constant whose value is not finite
    or not the same everywhere is left out (it is then written out as an expression)."""
    import torch


    varying = {0, 2, 3}
    out: dict[int, float] = {1: 0.0}
    x = torch.linspace(-2.0, 3.0, 2 * 4 * 3 * 3, dtype=torch.float64).reshape(2, 4, 3, 3)
    v = torch.tensor([0.5, -1.5, 2.0, 0.25], dtype=torch.float64)
    for nid in graph.live_nodes():
        if nid < NUM_INPUTS:
            continue
        args = graph.node(nid)[1:]
        if any(a in varying for a in args):
            varying.add(nid)
            continue
        with torch.no_grad():
            y = interpret(type(graph)(graph.nodes[:nid - NUM_INPUTS + 1], graph.max_nodes), x, v, -v,
                          groups=2)
        value = float(y.flatten()[0])
        if math.isfinite(value) and bool((y == y.flatten()[0]).all()):
            out[nid] = value + 0.0  # -0.0 -> 0.0
        else:
            varying.add(nid)
    return out
