"""Graph -> nn.Module: a torch.fx GraphModule whose generated forward computes only the live nodes.

The generated code only ever names functions from the fixed primitive table (`primitives.op_*`),
submodules `batch<id>` and parameters `v0`/`v1`/`weight`/`bias`; node ids are integers checked by
`Graph`, so no text from the JSON reaches fx's code generator. The same semantics without a module
is `evonorm.graph.interpret`, for fingerprints and as a test oracle.

In eager mode a layer built with impl="auto" (the default) runs, for float32/float64 input, the compiled
C++ kernel of `evonorm.graph.cpp` on the CPU and the fast path of `evonorm.graph.fast` elsewhere (the same
function with a hand-derived backward), and this fx module otherwise: under tracing, export and
torch.compile, for float16/bfloat16 input, and for graphs with batch statistics.
"""

from __future__ import annotations

import torch
import torch.fx as fx
from torch import nn

from evonorm.graph import primitives as P
from evonorm.graph.batch import BatchStat
from evonorm.graph.fast import FastGraphFunction, FastSpec, fast_applies, make_plan
from evonorm.graph.cpp import CppGraphFunction, cpp_applies, load_kernel, program
from evonorm.graph.primitives import INPUTS, NUM_INPUTS, LayerGraph
from evonorm.runtime.common import resolve_groups
from evonorm.runtime.impl import check_impl
from evonorm.runtime.paths import fell_back, ran
from evonorm.runtime.tracing import exporting, fx_leaf

GRAPH_IMPLS = ("auto", "plain", "fast", "cpp")
"""How a graph layer runs in eager mode (the package's one `impl` vocabulary, `evonorm.runtime.impl.IMPLS`):
"plain" this fx module (one autograd op per primitive op), "fast" one autograd function with a hand-derived
backward (`evonorm.graph.fast`), "cpp" the whole layer as one compiled C++ kernel for CPU tensors
(`evonorm.graph.cpp`; the fast path for others, said once), "auto" the C++ kernel where it applies and
could be built, else the fast path where it applies."""


def to_module(graph: LayerGraph, num_features: int, *, apply_act: bool = True, groups: int = 32,
              eps: float = 1e-5, momentum: float = 0.1, impl: str = "auto", **kwargs) -> GraphLayer:
    """The layer as a module: y = graph(x) * weight + bias per channel (weight = 1, bias = 0 at init).

    Parameters `v0` (init 0) and `v1` (init 1) exist when a live node uses them; each live batch node
    i is a submodule `batch<i>` with its running buffer. apply_act=False gives the plain per-channel
    affine (the paper's `nonlinearity=False`). `impl` picks the eager path (`GRAPH_IMPLS`): "fast" and "cpp" are
    refused for a graph with a live batch op, which always runs the plain path, and "cpp" where the kernel
    cannot be built (the reason is in the error). Unknown keyword arguments are ignored.
    """
    impl = check_impl(impl, GRAPH_IMPLS, "graph layers")
    plan = make_plan(graph) if apply_act and impl != "plain" else None
    if impl in ("fast", "cpp") and apply_act and plan is None:
        raise ValueError(f"impl={impl!r} does not take layers with batch statistics (batch_mean/std/rms): "
                         "use impl='auto' or 'plain'")
    if impl == "cpp" and not load_kernel().ok:
        raise ValueError(f"impl='cpp': the CPU graph kernel could not be built ({load_kernel().reason})")
    groups = resolve_groups(num_features, groups)
    root = nn.Module()
    root.weight = nn.Parameter(torch.ones(num_features))
    root.bias = nn.Parameter(torch.zeros(num_features))
    g = fx.Graph()
    x = g.call_function(P.op_check, (g.placeholder("x"), num_features))
    if not apply_act:
        out = g.call_function(P.op_affine, (x, g.get_attr("weight"), g.get_attr("bias")))
    else:
        env: dict[int, fx.Node] = {0: x}
        for nid in graph.live_nodes():
            if nid < NUM_INPUTS:
                name = INPUTS[nid]
                if name == "zero":
                    env[nid] = g.call_function(P.op_zeros, (x,))
                elif name in ("v0", "v1"):
                    setattr(root, name, nn.Parameter(torch.full((num_features,), float(name == "v1"))))
                    env[nid] = g.call_function(P.op_channel, (g.get_attr(name), x))
                continue
            op, *args = graph.node(nid)
            prim = P.PRIMITIVES[op]
            inputs = tuple(env[a] for a in args)
            if prim.batch_dependent:
                root.add_module(f"batch{nid}", BatchStat(num_features, prim.statistic, eps=eps, momentum=momentum))
                env[nid] = g.call_module(f"batch{nid}", inputs + (x,))
            else:
                env[nid] = g.call_function(prim.fn, inputs + prim.extra_args(groups, eps))
        w, b = g.get_attr("weight"), g.get_attr("bias")
        if graph.output in graph.full_shape_nodes():
            out = g.call_function(P.op_affine, (env[graph.output], w, b))
        else:
            out = g.call_function(P.op_affine_expand, (env[graph.output], w, b, x))
    g.output(out)
    module = GraphLayer(root, g, class_name="GraphLayer")
    module.layer_graph = graph
    module.num_features, module.groups, module.eps, module.momentum = num_features, groups, eps, momentum
    module.apply_act, module.impl = apply_act, impl
    module.fast_spec = None if plan is None else FastSpec(plan, graph, groups, eps)
    module.cpp_program = program(plan) if plan is not None and impl in ("auto", "cpp") else None
    return module


class GraphLayer(fx.GraphModule):
    """The compiled layer: fx's generated forward plus the graph and settings it was built from.

    Pickling and deepcopy rebuild it from (graph JSON, settings, state_dict): fx's own pickling
    re-traces the generated code, which the primitives' shape checks do not allow, and fx's deepcopy
    would drop the attributes."""

    layer_graph: LayerGraph

    def __call__(self, *args, **kwargs):
        # inside a model traced by torch.fx: one call_module node, as for torch.nn's layers (fx would otherwise
        # trace into the generated code, whose input check and dtype rules are Python control flow)
        leaf = fx_leaf(self, args[0]) if args else None
        if leaf is not None:
            return leaf
        if self.fast_spec is not None and len(args) == 1 and not kwargs:
            x, p = args[0], self._parameters  # (plain dict look-ups: this runs once per layer per step)
            w, b, v0, v1 = p["weight"], p["bias"], p.get("v0"), p.get("v1")
            if isinstance(x, torch.Tensor) and x.shape[1:2] == (self.num_features,) and not exporting(x):
                if (self.cpp_program is not None and cpp_applies(x, (w, b, v0, v1))
                        and load_kernel().ok):
                    ran("cpp")
                    return CppGraphFunction.apply(x, v0, v1, w, b, self.fast_spec, self.cpp_program)
                if fast_applies(x, (w, b, v0, v1)):
                    self._ran("fast", x)
                    return FastGraphFunction.apply(x, v0, v1, w, b, self.fast_spec)
                self._ran("plain", x)
            elif isinstance(x, torch.Tensor) and exporting(x):
                self._ran("plain", None)
        else:
            ran("plain")
        return super().__call__(*args, **kwargs)

    def _ran(self, path: str, x: torch.Tensor | None) -> None:
        """Count a call on `path` (x: its input; None under tracing); said once if the kernel was asked for."""
        if self.impl != "cpp":
            ran(path)
        elif x is None:
            fell_back("cpp", path, "traced, exported or compiled")
        elif not load_kernel().ok:
            fell_back("cpp", path, "the CPU graph kernel is unavailable: " + load_kernel().reason)
        else:
            fell_back("cpp", path, f"the CPU graph kernel takes float32/float64 CPU tensors and parameters, "
                                   f"got {x.dtype} on {x.device.type}")

    def _settings(self) -> dict:
        return dict(apply_act=self.apply_act, groups=self.groups, eps=self.eps, momentum=self.momentum,
                    impl=self.impl)

    def __reduce__(self):
        return _rebuild, (self.layer_graph, self.num_features, self._settings(), self.state_dict(),
                          self.training)

    def __deepcopy__(self, memo):
        import copy

        state = copy.deepcopy(self.state_dict(), memo)
        res = _rebuild(self.layer_graph, self.num_features, self._settings(), state, self.training)
        memo[id(self)] = res
        return res


def _rebuild(graph: LayerGraph, num_features: int, settings: dict, state: dict, training: bool) -> GraphLayer:
    module = to_module(graph, num_features, **settings)
    module.load_state_dict(state)
    return module.train(training)
