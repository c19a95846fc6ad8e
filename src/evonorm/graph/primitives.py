"""The 24 primitives of the search space (paper Table 1), and the graph's four inputs.

Every op maps NCHW tensors to tensors that broadcast to the input's shape. Aggregations return
their statistic with the reduced axes kept as size 1 (keepdim) instead of materialising the
broadcast: the result is the same function (a statistic over axes along which a tensor is constant
equals the statistic over its other axes), and the compiled layer does no extra copies.
Statistics run in float32 for float16/bfloat16 input and come back in the input dtype.

The functions here are the single implementation: the fx compiler calls them and `to_python`
copies their source (so each must only use torch and the helpers named in `requires`).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Callable, Mapping, Protocol

import torch


def _compute_dtype(x: torch.Tensor) -> torch.Tensor:
    """x in the dtype statistics are computed in: float32 for half/bfloat16, else unchanged."""
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def _reduce(x: torch.Tensor, stat: str, dims: tuple, eps: float) -> torch.Tensor:
    """mean, std = sqrt(biased var + eps) or rms = sqrt(mean(x^2) + eps) over `dims`, kept as size 1."""
    xc = _compute_dtype(x)
    if stat == "mean":
        r = xc.mean(dims, keepdim=True)
    elif stat == "std":
        r = (xc.var(dims, correction=0, keepdim=True) + eps).sqrt()
    else:
        r = (xc.square().mean(dims, keepdim=True) + eps).sqrt()
    return r.to(x.dtype)


def _group(x: torch.Tensor, stat: str, groups: int, eps: float) -> torch.Tensor:
    """The statistic over (c/g, h, w) per sample and channel group, as an (N, C, 1, 1) tensor.

    `groups` is already resolved for the layer's channel count; a tensor that is constant along
    channels (size-1 channel axis) has the same statistic over (h, w) alone.
    """
    n, c, h, w = x.shape
    if c == 1:
        return _reduce(x, stat, (2, 3), eps)
    r = _reduce(x.reshape(n, groups, c // groups, h, w), stat, (2, 3, 4), eps)
    return r.expand(n, groups, c // groups, 1, 1).reshape(n, c, 1, 1)


# ---- element-wise ops (12) ------------------------------------------------------------------------

def op_add(a, b):
    return a + b


def op_mul(a, b):
    return a * b


def op_div(a, b, eps: float):
    """a / (b + eps * sign(b)), sign(0) = +1 so the divisor is never 0."""
    e = b.new_tensor(eps)  # 0-dim: where() then makes one full tensor and backward skips it
    return a / (b + torch.where(b >= 0, e, -e))


def op_max(a, b):
    return torch.maximum(a, b)


def op_neg(a):
    return -a


def op_sigmoid(a):
    return torch.sigmoid(a)


def op_tanh(a):
    return torch.tanh(a)


def op_exp(a):
    return torch.exp(a)


def op_log(a, eps: float):
    """sign(a) * ln(|a| + eps)."""
    return torch.sign(a) * torch.log(a.abs() + eps)


def op_abs(a):
    return a.abs()


def op_square(a):
    return a * a


def op_sqrt(a):
    """sign(a) * sqrt(|a|) (its gradient at exactly 0 is not finite, as in the paper's definition)."""
    return torch.sign(a) * torch.sqrt(a.abs())


# ---- aggregation ops without the batch axis (9; the 3 batch ops live in batch.py) ----------------

def op_layer_mean(a):
    return _reduce(a, "mean", (1, 2, 3), 0.0)


def op_layer_std(a, eps: float):
    return _reduce(a, "std", (1, 2, 3), eps)


def op_layer_rms(a, eps: float):
    return _reduce(a, "rms", (1, 2, 3), eps)


def op_instance_mean(a):
    return _reduce(a, "mean", (2, 3), 0.0)


def op_instance_std(a, eps: float):
    return _reduce(a, "std", (2, 3), eps)


def op_instance_rms(a, eps: float):
    return _reduce(a, "rms", (2, 3), eps)


def op_group_mean(a, groups: int):
    return _group(a, "mean", groups, 0.0)


def op_group_std(a, groups: int, eps: float):
    return _group(a, "std", groups, eps)


def op_group_rms(a, groups: int, eps: float):
    return _group(a, "rms", groups, eps)


# ---- graph plumbing used by the compiled forward ------------------------------------------------

def op_check(x, num_features: int):
    """A clear error for input the layer cannot take (instead of a broadcasting error deep inside)."""
    if x.dim() != 4 or x.shape[1] != num_features:
        raise ValueError(f"layer expects input of shape (N, {num_features}, H, W), got {tuple(x.shape)}")
    return x


def op_zeros(x):
    """The constant `zero` node: a (1, 1, 1, 1) zero that broadcasts to anything."""
    return x.new_zeros((1, 1, 1, 1))


def op_channel(p, x):
    """A per-channel (C,) parameter as (1, C, 1, 1) in the input dtype."""
    return p.to(x.dtype).view(1, -1, 1, 1)


def op_affine(y, weight, bias):
    """gamma * y + beta per channel (y already has the input's shape)."""
    return torch.addcmul(bias.to(y.dtype).view(1, -1, 1, 1), y, weight.to(y.dtype).view(1, -1, 1, 1))


def op_affine_expand(y, weight, bias, x):
    """gamma * y + beta for an output that is constant along some axes: broadcast to x's shape first."""
    return op_affine(y.expand(x.shape), weight, bias)


@dataclass(frozen=True)
class Primitive:
    """One op of Table 1: its arity, extra arguments and, for aggregations, statistic and axis set."""

    name: str
    arity: int
    fn: Callable | None  # None for batch ops: they are stateful modules (batch.BatchStat)
    extra: tuple[str, ...] = ()  # trailing arguments the compiler passes: "groups", "eps"
    statistic: str | None = None  # "mean" | "std" | "rms" for aggregations
    axes: str | None = None  # "batch" | "layer" | "instance" | "group"
    requires: tuple[str, ...] = ()  # helpers in this module the function's source needs

    @property
    def aggregation(self) -> bool:
        return self.statistic is not None

    def extra_args(self, groups: int, eps: float) -> tuple:
        """The trailing arguments the op takes after its inputs, in order (`extra`)."""
        return tuple(groups if name == "groups" else eps for name in self.extra)

    @property
    def batch_dependent(self) -> bool:
        """True for the batch_* ops: their value depends on the other samples (running stats in eval)."""
        return self.axes == "batch"


def _table() -> dict[str, Primitive]:
    t: dict[str, Primitive] = {}
    for name, arity, extra in [("add", 2, ()), ("mul", 2, ()), ("div", 2, ("eps",)), ("max", 2, ()),
                               ("neg", 1, ()), ("sigmoid", 1, ()), ("tanh", 1, ()), ("exp", 1, ()),
                               ("log", 1, ("eps",)), ("abs", 1, ()), ("square", 1, ()), ("sqrt", 1, ())]:
        t[name] = Primitive(name, arity, globals()[f"op_{name}"], extra)
    for stat in ("mean", "std", "rms"):
        for axes in ("batch", "layer", "instance", "group"):
            name = f"{axes}_{stat}"
            if axes == "batch":
                t[name] = Primitive(name, 1, None, (), stat, axes)
                continue
            extra = (("groups",) if axes == "group" else ()) + (("eps",) if stat != "mean" else ())
            requires = ("_compute_dtype", "_reduce") + (("_group",) if axes == "group" else ())
            t[name] = Primitive(name, 1, globals()[f"op_{name}"], extra, stat, axes, requires)
    return t


PRIMITIVES: Mapping[str, Primitive] = MappingProxyType(_table())
"""All 24 primitives by name, in Table 1 order (12 element-wise, then mean/std/rms x batch/layer/instance/group)."""

OP_NAMES: tuple[str, ...] = tuple(PRIMITIVES)

INPUTS: tuple[str, ...] = ("x", "zero", "v0", "v1")
"""The graph's four input nodes, ids 0..3: the layer input, constant zeros, and two per-channel vectors
(initialised to 0 and 1)."""
NUM_INPUTS = len(INPUTS)


class LayerGraph(Protocol):
    """What the compiler, interpreter, renderer, exporter and fingerprint read of a graph: its
    structure. `evonorm.graph.Graph` is the one implementation; typing against this shape keeps
    those modules from importing the Graph module, whose views call them."""

    nodes: tuple[tuple, ...]
    max_nodes: int

    @property
    def output(self) -> int: ...

    @property
    def uses_batch_stats(self) -> bool: ...

    def node(self, nid: int) -> tuple: ...

    def live_nodes(self) -> list[int]: ...

    def full_shape_nodes(self) -> set[int]: ...

    def dumps(self) -> str: ...

    def to_text(self, *, affine: bool = True) -> str: ...
BATCH_OPS: frozenset[str] = frozenset(n for n, p in PRIMITIVES.items() if p.batch_dependent)
COMMUTATIVE: frozenset[str] = frozenset({"add", "mul", "max"})
