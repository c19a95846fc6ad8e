"""The fast eager path of a compiled graph layer: the whole layer as one autograd function.

On a CPU the plain fx layer costs what its ops cost: each primitive is a few aten ops, each op is a full
pass over the tensor plus dispatch and autograd bookkeeping, and a six-node layer runs about 190 of them
per forward + backward. Here the live nodes run under no_grad with few ops each (statistics of full
tensors from torch's one-pass group-norm kernel: `var` is far slower on CPU; the division guard as
`+ eps` where the divisor cannot be negative), and backward is a hand-derived reverse sweep (one
vector-Jacobian product per node, each a few full-size ops, gradients updated in place where the sweep
owns them). Some subgraphs become one step:

- norm: `(h - mean_I(h)) / std_I(h)` over one axis set I (layer, instance or group), i.e. the div guard's
  (h - mu) / (sqrt(var + eps) + eps); forward is torch's group-norm kernel and one multiply, backward its
  fused backward with inputs rescaled so that it differentiates the guarded divisor exactly;
- relu: `max(y, zero)`, with autograd's rule for `maximum` at ties (half the gradient where y == 0);
- swish: `h * sigmoid(v * h)` (v = v0 or v1) and `h * sigmoid(h)`;
- a whole layer `max((x - mean_I(x)) / std_I(x), 0)` (the `demo` seed layers): torch's group-norm kernels
  each way, and four elementwise passes forward (three in place);
- an output `div(F, statistic)`: the division joins the final affine.

The function is the plain path's (tests compare them in float64). Where the plain path is needed the
layer uses it: batch statistics (running buffers, cross-rank sync), float16/bfloat16 input, tracing,
export and torch.compile, and double backward (create_graph=True differentiates the plain formula).
"""

from __future__ import annotations

from dataclasses import dataclass
import torch

from evonorm.graph import primitives as P
from evonorm.graph.interpret import interpret
from evonorm.graph.primitives import NUM_INPUTS, LayerGraph
from evonorm.runtime.common import differentiable_grads, groups_to_channels

AXES = ("layer", "instance", "group")
_NONNEG_OPS = frozenset({"sigmoid", "exp", "abs", "square", "relu"}
                        | {f"{a}_{s}" for a in AXES for s in ("std", "rms")})
"""Ops whose value is >= 0 or NaN: the division guard b + eps * sign(b) is then b + eps."""
_OWN_VALUE_UNUSED = frozenset({"norm", "add", "mul", "neg", "swish"})
"""Steps whose backward does not read their own value (so a consumer may overwrite it)."""
FAST_DTYPES = (torch.float32, torch.float64)


@dataclass(frozen=True)
class Step:
    """One node of the fast path: a primitive, or a fused "norm" / "relu"; `args` are node ids."""

    kind: str
    nid: int
    args: tuple[int, ...]
    axes: str | None = None  # norm: the axis set of its mean and std
    nonneg_divisor: bool = False  # div: the divisor is known >= 0 (or NaN)


@dataclass(frozen=True)
class Plan:
    """The steps in order, the output node, and the node ids a gradient must reach (they depend on x, v0, v1)."""

    steps: tuple[Step, ...]
    output: int
    grad_nodes: frozenset[int]
    full: frozenset[int]  # nodes whose value has the input's full shape
    inplace: frozenset[int]  # relu steps that may overwrite their input (its only use, not needed in backward)
    norm_relu: str | None = None  # the axis set when the layer is max((x - mean(x)) / std(x), 0) exactly
    scaled_output: bool = False  # the output is div(full, statistic): the division joins the final affine


def _match_norm(graph: LayerGraph, p: int, s: int, full: set[int]) -> tuple[int, str] | None:
    """(h, axes) when p = h - mean_I(h) (as add(h, neg(mean)) either way round) and s = std_I(h), h full."""
    if p < NUM_INPUTS or s < NUM_INPUTS:
        return None
    sop, *sargs = graph.node(s)
    pop, *pargs = graph.node(p)
    if pop != "add" or not sop.endswith("_std") or sop.split("_")[0] not in AXES:
        return None
    axes, h = sop.split("_")[0], sargs[0]
    if h not in full:
        return None
    for a, n in (pargs, pargs[::-1]):
        if a == h and n >= NUM_INPUTS and graph.node(n)[0] == "neg":
            m = graph.node(n)[1]
            if m >= NUM_INPUTS and graph.node(m) == (f"{axes}_mean", h):
                return h, axes
    return None


def _match_swish(graph: LayerGraph, args) -> tuple[int, ...] | None:
    """(h,) or (h, v) when mul(args) is h * sigmoid(h) or h * sigmoid(v * h) (either order), v = v0 or v1."""
    for h, s in (args, args[::-1]):
        if s < NUM_INPUTS or graph.node(s)[0] != "sigmoid":
            continue
        z = graph.node(s)[1]
        if z == h:
            return (h,)
        if z >= NUM_INPUTS and graph.node(z)[0] == "mul":
            za, zb = graph.node(z)[1:]
            for a, b in ((za, zb), (zb, za)):
                if a == h and b in (2, 3) and h != b:
                    return (h, b)
    return None


def make_plan(graph: LayerGraph) -> Plan | None:
    """The fast plan of a graph, or None when it must run on the plain path (a live batch op)."""
    if graph.uses_batch_stats:
        return None

    full = graph.full_shape_nodes()
    steps: dict[int, Step] = {}
    for nid in graph.live_nodes():
        if nid < NUM_INPUTS:
            continue
        op, *args = graph.node(nid)
        step = Step(op, nid, tuple(args))
        if op == "div":
            norm = _match_norm(graph, args[0], args[1], full)
            if norm is not None:
                step = Step("norm", nid, (norm[0],), axes=norm[1])
            else:
                b = args[1]
                nonneg = b == 1 or (b >= NUM_INPUTS and steps[b].kind in _NONNEG_OPS)
                step = Step(op, nid, tuple(args), nonneg_divisor=nonneg)
        elif op == "max" and 1 in args and args != (1, 1):
            step = Step("relu", nid, (args[0] if args[1] == 1 else args[1],))
        elif op == "mul":
            swish = _match_swish(graph, args)
            if swish is not None:
                step = Step("swish", nid, swish)
        steps[nid] = step
    needed = {graph.output}
    for nid in sorted(steps, reverse=True):  # fused steps skip the nodes they absorb
        if nid in needed:
            needed.update(steps[nid].args)
    order = tuple(steps[n] for n in sorted(needed) if n >= NUM_INPUTS)
    grad_nodes = {0, 2, 3}
    for st in order:
        if any(a in grad_nodes for a in st.args):
            grad_nodes.add(st.nid)
    uses: dict[int, int] = {graph.output: 1}
    for st in order:
        for a in st.args:
            uses[a] = uses.get(a, 0) + 1
    inplace = {st.nid for st in order if st.kind == "relu" and st.args[0] in full and uses[st.args[0]] == 1
               and st.args[0] in steps and steps[st.args[0]].kind in _OWN_VALUE_UNUSED}
    norm_relu = None
    if [st.kind for st in order] == ["norm", "relu"] and order[0].args == (0,):
        norm_relu = order[0].axes
    last = order[-1]
    scaled = last.kind == "div" and last.args[0] in full and last.args[1] not in full
    return Plan(order, graph.output, frozenset(grad_nodes), frozenset(full), frozenset(inplace), norm_relu,
                scaled)


# ---- helpers ------------------------------------------------------------------------------------

def _sum_to(g: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """g summed over the axes along which a value of `shape` was broadcast (keepdim), expanded if smaller."""
    dims = [i for i, (a, b) in enumerate(zip(shape, g.shape)) if a == 1 and b != 1]
    if dims:
        g = g.sum(dims, keepdim=True)
    return g if g.shape == shape else g.expand(shape)


def _agg_view(a: torch.Tensor, axes: str, groups: int) -> tuple[torch.Tensor, tuple[int, ...]]:
    """`a` as the tensor a statistic reduces, and the reduced dims (the plain primitives' axis rules)."""
    n, c, h, w = a.shape
    if axes == "group" and c > 1:
        return a.reshape(n, groups, c // groups, h, w), (2, 3, 4)
    return a, ((1, 2, 3) if axes == "layer" else (2, 3))


def _to_node(r: torch.Tensor, a: torch.Tensor, axes: str) -> torch.Tensor:
    """A statistic of the view back to the node's (keepdim, per-channel) shape."""
    if r.dim() == 5:
        n, g, cg = r.shape[0], r.shape[1], a.shape[1] // r.shape[1]
        return r.expand(n, g, cg, 1, 1).reshape(n, g * cg, 1, 1)
    return r


def _fold(g: torch.Tensor, view: torch.Tensor) -> torch.Tensor:
    """A gradient of the node's shape summed back to the view's statistic shape."""
    if view.dim() == 5:
        n, gr, cg = view.shape[0], view.shape[1], view.shape[2]
        return g.reshape(n, gr, cg, 1, 1).sum(2, keepdim=True)
    return g


def _norm_groups(h: torch.Tensor, axes: str, groups: int) -> int:
    """The number of channel groups a norm's statistic runs over, in torch's group-norm terms."""
    c = h.shape[1]
    return 1 if axes == "layer" else c if axes == "instance" else groups


def _channel_sum(t: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """A full tensor summed to a per-channel `shape` (1, C, 1, 1)."""
    return t.sum((0, 2, 3), keepdim=True) if t.dim() == 4 and shape[1] == t.shape[1] else _sum_to(t, shape)


def _group_moments(h: torch.Tensor, ng: int, eps: float):
    """torch's group-norm kernel on a full (N, C, H, W) tensor: (normalized h, mean, 1 / sqrt(var + eps)),
    the statistics (N, ng) over each sample's ng channel groups: one fast pass (var_mean is far slower on CPU)."""
    n, c = h.shape[0], h.shape[1]
    return torch.ops.aten.native_group_norm(h, None, None, n, c, h.shape[2] * h.shape[3], ng, eps)


def _all_nonzero(t: torch.Tensor) -> bool:
    """No zero and no NaN in t (a cheap check that lets sign- and relu-like ops take their fast kernels)."""
    return t.numel() == 0 or bool(t.abs().amin() > 0)


def _per_channel(t: torch.Tensor, c: int) -> torch.Tensor:
    """Per-(sample, group) values (N, G) as (N, C, 1, 1)."""
    return groups_to_channels(t, c).view(t.shape[0], c, 1, 1)


# ---- forward ------------------------------------------------------------------------------------

def _forward(plan: Plan, x, v0, v1, groups: int, eps: float) -> tuple[dict, dict]:
    """Every step's value, and what each step's backward needs beyond the values."""
    vals: dict[int, torch.Tensor] = {0: x, 1: x.new_zeros((1, 1, 1, 1))}
    if v0 is not None:
        vals[2] = v0.view(1, -1, 1, 1)
    if v1 is not None:
        vals[3] = v1.view(1, -1, 1, 1)
    extra: dict[int, tuple] = {}
    for st in plan.steps:
        a = [vals[i] for i in st.args]
        if st.kind == "div" and st.nid == plan.output and plan.scaled_output:
            extra[st.nid] = (_divisor(a[1], st.nonneg_divisor, eps),)
            break  # the caller divides within the affine
        out, more = _step_forward(st, a, plan, groups, eps)
        if more is not None:
            extra[st.nid] = more
        vals[st.nid] = out
    return vals, extra


def _step_forward(st: Step, a: list, plan: Plan, groups: int, eps: float) -> tuple[torch.Tensor, tuple | None]:
    """One step's value from its arguments' `a`, and what its backward needs beyond it (None: nothing)."""
    k = st.kind
    if k == "norm":
        return _norm_forward(a[0], st.axes, groups, eps)
    if k == "swish":  # h * sigmoid(v h)
        h = a[0]
        sg = (h * a[1]).sigmoid_() if len(a) == 2 else torch.sigmoid(h)
        return h * sg, (sg,)
    if k == "relu":
        clean = _all_nonzero(a[0])  # then y > 0 exactly where the input is, and backward reads y alone
        return (a[0].relu_() if clean and st.nid in plan.inplace else torch.relu(a[0])), (clean,)
    if k == "div":
        d = _divisor(a[1], st.nonneg_divisor, eps)
        return a[0] / d, (d,)
    if k == "log":
        s, t = torch.sign(a[0]), a[0].abs().add_(eps)
        return torch.log(t).mul_(s), (s, t)
    if k == "sqrt":
        s, r = torch.sign(a[0]), a[0].abs().sqrt_()
        return s * r, (s, r)
    if k in _ELEMENTWISE:
        return _elementwise_forward(k, a), None
    return _aggregate_forward(k, a[0], st.args[0] in plan.full, groups, eps)


def _norm_forward(h: torch.Tensor, axes: str, groups: int, eps: float) -> tuple[torch.Tensor, tuple]:
    """(h - mean_I(h)) / (std_I(h) + eps) from torch's group-norm kernel and one multiply."""
    ng = _norm_groups(h, axes, groups)
    y_hat, mu, rstd = _group_moments(h, ng, eps)
    # (h - mu) / (std + eps) = (h - mu) * rstd * s with s = std / (std + eps) = 1 / (1 + eps * rstd)
    out = y_hat.mul_(_per_channel(rstd.mul(eps).add_(1.0).reciprocal_(), h.shape[1]))
    return out, (mu, rstd, ng)


def _divisor(b: torch.Tensor, nonneg: bool, eps: float) -> torch.Tensor:
    """The division guard b + eps * sign(b), in as few fast ops as `b` allows."""
    if nonneg:
        return b + eps
    if _all_nonzero(b):  # sign(b) is then +-1 (no zero, no NaN): b + eps * sign(b) in two fast ops
        return torch.add(b, torch.sign(b), alpha=eps)
    e = b.new_tensor(eps)  # sign(0) = +1, including -0.0
    return b + torch.where(b >= 0, e, -e)


_ELEMENTWISE = frozenset({"add", "mul", "max", "neg", "tanh", "sigmoid", "exp", "abs", "square"})
"""Steps whose backward needs nothing beyond the values."""


def _elementwise_forward(k: str, a: list) -> torch.Tensor:
    if k == "add":
        return a[0] + a[1]
    if k == "mul":
        return a[0] * a[1]
    if k == "max":
        return torch.maximum(a[0], a[1])
    if k == "neg":
        return -a[0]
    if k == "tanh" and a[0].device.type == "cpu":  # torch's CPU tanh costs 4-9x its sigmoid
        return torch.mul(a[0], 2).sigmoid_().mul_(2).sub_(1)  # tanh x = 2 sigmoid(2x) - 1
    if k in ("tanh", "sigmoid", "exp"):
        return getattr(torch, k)(a[0])
    if k == "abs":
        return a[0].abs()
    return a[0] * a[0]  # square


def _aggregate_forward(k: str, h: torch.Tensor, full: bool, groups: int, eps: float) -> tuple[torch.Tensor, tuple]:
    """An aggregation over layer / instance / group (`full`: h has the input's full shape)."""
    axes, stat = k.split("_")
    view, dims = _agg_view(h, axes, groups)
    if stat == "mean":
        r, more = view.mean(dims, keepdim=True), ()
    elif stat == "std" and full:  # torch's one-pass moments of a full tensor
        _, mu, rstd = _group_moments(h, _norm_groups(h, axes, groups), eps)
        shape = [1 if i in dims else s for i, s in enumerate(view.shape)]
        r, more = rstd.reciprocal().view(shape), (mu.view(shape),)
    elif stat == "std":
        var, mu = torch.var_mean(view, dims, correction=0, keepdim=True)
        r = var.add_(eps).sqrt_()
        more = (mu,)
    else:
        kk = view.numel() // max(1, _numel_kept(view, dims))
        r = torch.linalg.vector_norm(view, 2, dims, keepdim=True).square_().div_(kk).add_(eps).sqrt_()
        more = ()
    return _to_node(r, h, axes), (r, *more)


def _numel_kept(view: torch.Tensor, dims: tuple[int, ...]) -> int:
    n = 1
    for i, s in enumerate(view.shape):
        if i not in dims:
            n *= s
    return n


# ---- backward -----------------------------------------------------------------------------------

class _Sweep:
    """The gradients of a reverse sweep: each node's, summed as they arrive, updated in place where the
    tensor is the sweep's own."""

    def __init__(self, vals: dict, init: dict[int, torch.Tensor], need: frozenset[int]):
        self.vals, self.need = vals, need
        self.grads: dict[int, torch.Tensor] = dict(init)
        self.owned = set(init)  # nodes whose gradient tensor is this sweep's own (may be updated in place)

    def acc(self, nid: int, g: torch.Tensor, fresh: bool = True) -> None:
        """Add `g` to node `nid`'s gradient (`fresh`: the caller hands `g` over, it may be updated in place)."""
        if nid not in self.need:
            return
        shape = self.vals[nid].shape
        fresh = fresh and g.shape == shape and g.dtype == self.vals[nid].dtype and g.is_contiguous()
        g = _sum_to(g, shape)
        if nid not in self.grads:
            self.grads[nid] = g
            if fresh:
                self.owned.add(nid)
        elif nid in self.owned:
            self.grads[nid].add_(g)
        else:
            self.grads[nid] = self.grads[nid] + g
            self.owned.add(nid)


def _backward(plan: Plan, vals: dict, extra: dict, init: dict[int, torch.Tensor], groups: int, eps: float,
              scale: torch.Tensor | None = None) -> dict[int, torch.Tensor]:
    """Gradients of the inputs 0 (x), 2 (v0), 3 (v1) by a reverse sweep from the gradients `init` (node ->
    a tensor of its own). `scale`: the single init gradient is still to be multiplied by it per channel
    (a norm step folds it into its own multiply)."""
    start = next(iter(init))
    if scale is not None and not any(st.nid == start and st.kind == "norm" for st in plan.steps):
        init[start], scale = init[start].mul_(scale.view(1, -1, 1, 1)), None
    sweep = _Sweep(vals, init, plan.grad_nodes)
    for st in reversed(plan.steps):
        g = sweep.grads.pop(st.nid, None)
        if g is None:
            continue
        a = [vals[i] for i in st.args]
        if st.kind == "norm":
            _norm_backward(sweep, st, g, a[0], extra[st.nid], eps, scale if st.nid == start else None)
        elif st.kind == "swish":
            _swish_backward(sweep, st, g, a, extra[st.nid])
        elif st.kind == "relu":
            _relu_backward(sweep, st, g, a[0], extra[st.nid][0])
        elif st.kind in _ELEMENTWISE or st.kind in ("div", "log", "sqrt"):
            _pointwise_backward(sweep, st, g, a, extra.get(st.nid))
        else:
            _aggregate_backward(sweep, st, g, a[0], extra[st.nid], groups)
    return sweep.grads


def _norm_backward(sweep: _Sweep, st: Step, g: torch.Tensor, h: torch.Tensor, saved: tuple, eps: float,
                   scale: torch.Tensor | None) -> None:
    """The norm step's vector-Jacobian product by torch's fused group-norm backward (`scale`: the
    output gradient's per-channel factor, folded into its multiply)."""
    n, c = h.shape[0], h.shape[1]
    mu, rstd, ng = saved
    # torch's group-norm backward differentiates (h - mu) * rstd; fed grad * q and rstd * q with
    # q = 1 / sqrt(1 + eps * rstd) it gives d/dh of (h - mu) / (std + eps), std = 1 / rstd
    q = rstd.mul(eps).add_(1.0).rsqrt_()
    qc = _per_channel(q, c)
    if scale is not None:
        qc = qc * scale.view(1, -1, 1, 1)
    gs = g.mul_(qc) if st.nid in sweep.owned and g.is_contiguous() else (g * qc).contiguous()
    dh = torch.ops.aten.native_group_norm_backward(gs, h, mu, rstd * q, None, n, c, h[0, 0].numel(), ng,
                                                   [True, False, False])[0]
    sweep.acc(st.args[0], dh)


def _swish_backward(sweep: _Sweep, st: Step, g: torch.Tensor, a: list, saved: tuple) -> None:
    """f = h s, s = sigmoid(v h): df/dh = s + v h s (1 - s), df/dv = h^2 s (1 - s)."""
    (sg,) = saved
    ids, h = st.args, a[0]
    gz = torch.ops.aten.sigmoid_backward(g * h, sg)  # g h s (1 - s): the gradient of v h
    if len(ids) == 2 and ids[1] in sweep.need:
        sweep.acc(ids[1], _channel_sum(gz * h, a[1].shape))
    dh = g * sg
    sweep.acc(ids[0], dh.addcmul_(gz, a[1]) if len(ids) == 2 else dh.add_(gz))


def _relu_backward(sweep: _Sweep, st: Step, g: torch.Tensor, h: torch.Tensor, clean: bool) -> None:
    """autograd's maximum rule: g where y > 0, g / 2 where y == 0, exactly 0 where y < 0 (even for a
    non-finite g, e.g. sqrt's at 0); a NaN y gets 0 here and g there, with a NaN output either way."""
    if clean:  # no tie, no NaN: torch's relu backward is that rule
        sweep.acc(st.args[0], torch.ops.aten.threshold_backward(g, sweep.vals[st.nid], 0))
    else:
        half = torch.heaviside(h, h.new_tensor(0.5))
        sweep.acc(st.args[0], torch.where(h < 0, 0.0, g * half))


def _pointwise_backward(sweep: _Sweep, st: Step, g: torch.Tensor, a: list, saved: tuple | None) -> None:
    """The vector-Jacobian product of an elementwise primitive, from its arguments, value and `saved`."""
    k, ids, acc, y = st.kind, st.args, sweep.acc, sweep.vals[st.nid]
    if k == "add":
        acc(ids[0], g, fresh=False)
        acc(ids[1], g, fresh=False)
    elif k == "mul":
        if ids[0] in sweep.need:
            acc(ids[0], g * a[1])
        if ids[1] in sweep.need:
            acc(ids[1], g * a[0])
    elif k == "div":
        ga = g / saved[0]
        acc(ids[0], ga)
        if ids[1] in sweep.need:
            acc(ids[1], _sum_to(ga * y, a[1].shape).neg())
    elif k == "max":  # autograd's rule: ties share the gradient equally
        w = torch.where(a[0] == a[1], g * 0.5, g)
        if ids[0] in sweep.need:
            acc(ids[0], w.masked_fill(a[0] < a[1], 0))
        if ids[1] in sweep.need:
            acc(ids[1], w.masked_fill(a[0] > a[1], 0))
    elif k == "neg":
        acc(ids[0], -g)
    elif k == "sigmoid":
        acc(ids[0], torch.ops.aten.sigmoid_backward(g, y))
    elif k == "tanh":
        acc(ids[0], torch.ops.aten.tanh_backward(g, y))
    elif k == "exp":
        acc(ids[0], g * y)
    elif k == "abs":
        acc(ids[0], g * a[0].sgn())
    elif k == "square":
        acc(ids[0], (g * a[0]).mul_(2))
    elif k == "log":  # sign(a) ln(|a| + eps): g sign(a) / (|a| + eps) sgn(a)
        s, t = saved
        acc(ids[0], (g * s).div_(t).mul_(s))
    else:  # sqrt: sign(a) sqrt|a|: g sign(a) / (2 sqrt|a|) sgn(a) (not finite at 0, as autograd's)
        s, r = saved
        acc(ids[0], (g * s).div_(r * 2).mul_(s))


def _aggregate_backward(sweep: _Sweep, st: Step, g: torch.Tensor, h: torch.Tensor, saved: tuple,
                        groups: int) -> None:
    """An aggregation's vector-Jacobian product: its gradient spread back over the values it reduced."""
    axes, stat = st.kind.split("_")
    view, dims = _agg_view(h, axes, groups)
    r = saved[0]
    gr = _fold(_sum_to(g, sweep.vals[st.nid].shape), view)
    kk = view.numel() // max(1, _numel_kept(view, dims))
    if stat == "mean":
        gv = (gr / kk).expand(view.shape)
    elif stat == "std":  # d std / d h = (h - mu) / (K std)
        gv = (view - saved[1]).mul_(gr / (r * kk))  # h - mu first: exactly 0 where they are equal
    else:
        gv = (gr / (r * kk)) * view
    sweep.acc(st.args[0], gv.reshape(h.shape))


# ---- the autograd function ----------------------------------------------------------------------

@dataclass(frozen=True)
class FastSpec:
    """What the autograd function needs besides tensors: the plan, and the graph for double backward."""

    plan: Plan
    graph: LayerGraph
    groups: int
    eps: float


def plain_formula(x, v0, v1, weight, bias, spec: FastSpec) -> torch.Tensor:
    """The layer as the plain primitives compute it (autograd differentiates this for double backward)."""
    c = x.shape[1]
    v0 = v0 if v0 is not None else x.new_zeros(c)
    v1 = v1 if v1 is not None else x.new_ones(c)
    return P.op_affine(interpret(spec.graph, x, v0, v1, groups=spec.groups, eps=spec.eps), weight, bias)


def _norm_relu_forward(x, weight, bias, ng: int, eps: float):
    """max((x - mu) / (std + eps), 0) * weight + bias: torch's group-norm kernel, then sign(x_hat) and three
    passes in place. z = x_hat * q with x_hat torch's (x - mu) * rstd and q = std / (std + eps) =
    1 / (1 + eps * rstd) > 0, so relu(z) = relu(x_hat) * q: q joins the weight in the final multiply and add
    (an out-of-place addcmul with a broadcast bias costs twice as much on CPU). Backward keeps sign(x_hat),
    from which maximum's rule follows (1 above 0, 1/2 at a tie, 0 below)."""
    c = x.shape[1]
    x_hat, mu, rstd = _group_moments(x, ng, eps)
    sign = torch.sign(x_hat)
    p = rstd.mul(eps).add_(1.0)  # 1 / q, per (sample, group)
    out = x_hat.relu_().mul_(weight.view(1, c, 1, 1) / _per_channel(p, c)).add_(bias.view(1, c, 1, 1))
    return out, (mu, rstd, p, sign, ng)


def _norm_relu_backward(dy, x, weight, saved):
    """(dx, dweight, dbias) of `_norm_relu_forward`; the normalization's part as in the "norm" step. Given the
    weight as its gamma and rstd * sqrt(q) as its rstd, torch's group-norm backward also sums
    dweight = sum(dy * relu(x_hat) * q) = sum(dy * relu(z)). A NaN x_hat has sign 0 and gets half the
    gradient where autograd gives all of it; its group's gradients are NaN either way (its mean or rstd is)."""
    mu, rstd, p, sign, ng = saved
    n, c = x.shape[0], x.shape[1]
    dbias = dy.sum((0, 2, 3))
    qq = p.rsqrt()  # 1 / sqrt(1 + eps * rstd) = sqrt(q)
    g = torch.addcmul(dy, dy, sign).mul_(_per_channel(qq * 0.5, c))  # dy (1 + sign) / 2 * sqrt(q)
    dx, dweight, _ = torch.ops.aten.native_group_norm_backward(g, x, mu, rstd * qq, weight, n, c,
                                                               x.shape[2] * x.shape[3], ng, [True, True, False])
    return dx, dweight, dbias


class FastGraphFunction(torch.autograd.Function):
    """y = graph(x) * weight + bias with a hand-derived backward; x, v0, v1, weight, bias share one dtype."""

    @staticmethod
    def forward(ctx, x, v0, v1, weight, bias, spec: FastSpec):
        xc = x.contiguous()
        ctx.spec, ctx.lean = spec, None
        if spec.plan.norm_relu is not None:
            ng = _norm_groups(xc, spec.plan.norm_relu, spec.groups)
            out, ctx.lean = _norm_relu_forward(xc, weight, bias, ng, spec.eps)
            ctx.xc = xc
        else:
            vals, extra = _forward(spec.plan, xc, v0, v1, spec.groups, spec.eps)
            ctx.vals, ctx.extra = vals, extra
            if spec.plan.scaled_output:  # F / d * weight + bias with 1 / d per (sample, channel) in the weight
                last = spec.plan.steps[-1]
                ctx.inv = extra[last.nid][0].reciprocal()
                out = torch.mul(vals[last.args[0]], ctx.inv * weight.view(1, -1, 1, 1)).add_(bias.view(1, -1, 1, 1))
            else:
                y = vals[spec.plan.output]
                y = y if y.shape == xc.shape else y.expand(xc.shape)
                out = torch.mul(y, weight.view(1, -1, 1, 1)).add_(bias.view(1, -1, 1, 1))
        ctx.save_for_backward(x, v0, v1, weight, bias)
        return like_input(out, x)

    @staticmethod
    def backward(ctx, dy):
        x, v0, v1, weight, bias = ctx.saved_tensors
        spec = ctx.spec
        if torch.is_grad_enabled():  # create_graph=True: differentiate the plain formula instead
            return (*differentiable_grads(plain_formula, (x, v0, v1, weight, bias), (spec,), dy), None)
        dy = dy.contiguous()
        if ctx.lean is not None:
            dx, dweight, dbias = _norm_relu_backward(dy, ctx.xc, weight, ctx.lean)
            return like_input(dx, x), None, None, dweight, dbias, None
        vals, extra = ctx.vals, ctx.extra
        c = dy.shape[1]
        last = spec.plan.steps[-1]
        dbias = dy.sum((0, 2, 3))
        y = None if spec.plan.scaled_output else vals[spec.plan.output]
        w = weight.view(1, -1, 1, 1)
        if y is None:  # out = F * inv * weight + bias: every gradient from s = sum_hw(dy * F) per (sample, channel)
            f, inv = last.args[0], ctx.inv
            sums = (dy * vals[f]).sum((2, 3), keepdim=True)
            dweight = (sums * inv).sum((0, 2, 3))
            init = {f: dy * (w * inv), last.args[1]: _sum_to(sums * w * inv * inv, vals[last.args[1]].shape).neg_()}
            scale = None
        elif y.shape == dy.shape:
            dweight = (dy * y).sum((0, 2, 3))
            if last.kind == "relu" and extra[last.nid][0]:  # relu(z) * weight: mask dy, weight comes after
                init, scale = {last.args[0]: torch.ops.aten.threshold_backward(dy, y, 0)}, weight
            else:
                init, scale = {last.nid: dy * w}, None
        else:
            dweight = (dy * y).sum((0, 2, 3))  # autograd's order, so an infinite y sums to what it sums to there
            init, scale = {last.nid: _sum_to(dy * w, y.shape).contiguous()}, None
        grads = _backward(spec.plan, vals, extra, init, spec.groups, spec.eps, scale)
        dx = grads.get(0)
        if dx is not None:
            dx = like_input(dx.expand(x.shape) if dx.shape != x.shape else dx, x)
        dv0 = grads[2].reshape(-1) if v0 is not None and 2 in grads else None
        dv1 = grads[3].reshape(-1) if v1 is not None and 3 in grads else None
        return dx, dv0, dv1, dweight, dbias, None


def like_input(t: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """`t` (the layer's output or input gradient, computed contiguous) in the input's memory format: a
    channels_last input gets channels_last back."""
    if x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous():
        return t.contiguous(memory_format=torch.channels_last)
    return t


def fast_applies(x: torch.Tensor, params) -> bool:
    """Whether `x` can take the fast path: a 4-d float32/float64 input, the parameters (None: absent) in its
    dtype and on its device."""
    return (x.dim() == 4 and x.dtype in FAST_DTYPES
            and all(p is None or (p.dtype == x.dtype and p.device == x.device) for p in params))
