"""`convert_norm_act`: put a normalization-activation layer (a registered name, a layer graph or a factory)
into an existing model.

Every BatchNorm2d / SyncBatchNorm is replaced, timm's BatchNormAct2d and SyncBatchNormAct included. Where a
BatchNorm's only consumer is a ReLU / ReLU6 / SiLU / GELU (a module, a functional call or a tensor method,
in place or not), possibly through nn.Identity, Dropout, DropBlock or DropPath modules, the pair becomes one
layer with `apply_act=True` (the dropouts then follow it: the same function for ReLU, and at eval); a
BatchNorm with any other consumer becomes the layer with `apply_act=False`. A BatchNormAct2d's own
activation is fused the same way, or kept after the new layer when no layer fuses it (e.g. Hardswish); a
BatchNorm subclass with some other forward raises with its name before anything changes. The new layer
takes the BatchNorm's gamma/beta (and, for a bn_* baseline, its eps, momentum and running statistics), so
converting with the baseline equal to the original (bn_relu over ReLU, bn_swish1 over SiLU) keeps the
model's function; one replacing a SyncBatchNorm is synchronised over its process group.

The data flow comes from torch.fx. When the activation modules can simply be swapped for `nn.Identity` the
model is changed in place and keeps its class ("module" mode); when an activation is a functional call or
a module shared with another use, the graph is rewritten and an `fx.GraphModule` is returned ("fx" mode).
A module that fx cannot trace (data-dependent control flow) is handled child by child: its traceable
children are converted as above, and its own BatchNorms are fused only with an activation that follows
them in an `nn.Sequential`.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import fx, nn

from evonorm.layers.affine import Affine2d
from evonorm.layers.baselines import _BatchNormAct
from evonorm.layers.registry import NORM_ACTS, as_graph, registered_name
from evonorm.layers.sync import convert_sync_norm_act

_ACT_MODULES = (nn.ReLU, nn.ReLU6, nn.SiLU, nn.GELU)
_ACT_FUNCTIONS = {F.relu: "relu", F.relu6: "relu6", F.silu: "silu", F.gelu: "gelu", torch.relu: "relu",
                  torch.relu_: "relu", F.hardtanh: "hardtanh"}
_ACT_METHODS = {"relu": "relu", "relu_": "relu"}
# Modules looked through between a BatchNorm and its activation (timm's DropBlock2d / DropPath by class name,
# so timm is not needed here); with a fused activation they end up after it.
_PASSTHROUGH_NAMES = frozenset({"DropBlock2d", "DropPath"})
_PLAIN_BN_FORWARDS = (nn.BatchNorm2d.forward, nn.SyncBatchNorm.forward)


@dataclass
class Replacement:
    """One BatchNorm2d that was replaced."""

    name: str  # qualified name of the BatchNorm2d in the original model
    num_features: int
    layer: str  # class of the new layer
    apply_act: bool
    activation: str | None = None  # what was fused, e.g. "ReLU6 module features.0.2" or "F.relu"


@dataclass
class ConvertReport:
    """What `convert_norm_act` did; `str(report)` is a readable table."""

    norm_act: str
    mode: str = "module"  # "module": changed in place; "fx": graph rewritten, a GraphModule returned
    replaced: list[Replacement] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.replaced)

    @property
    def fused(self) -> list[Replacement]:
        return [r for r in self.replaced if r.apply_act]

    def __str__(self) -> str:
        lines = [f"convert_norm_act({self.norm_act!r}): {len(self.replaced)} BatchNorm2d replaced, "
                 f"{len(self.fused)} fused with their activation (mode: {self.mode})"]
        for r in self.replaced:
            act = f" + {r.activation}" if r.activation else ""
            lines.append(f"  {r.name or '<root>'} ({r.num_features}){act} -> {r.layer}(apply_act={r.apply_act})")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def _is_bn(m: nn.Module | None) -> bool:
    return isinstance(m, (nn.BatchNorm2d, nn.SyncBatchNorm)) and not isinstance(m, _BatchNormAct)


def _is_passthrough(m: nn.Module | None) -> bool:
    """Identity and the dropouts that scale by a non-negative mask (so ReLU commutes with them)."""
    return isinstance(m, (nn.Identity, nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d)) or (
        m is not None and type(m).__name__ in _PASSTHROUGH_NAMES)


def _inner(bn: nn.Module, qual: str) -> tuple[nn.Module | None, nn.Module | None]:
    """(drop, act) inside a timm-style BatchNormAct2d (forward: bn -> drop -> act), None for Identity ones;
    (None, None) for a plain BatchNorm. A BatchNorm subclass with some other forward raises: its function
    could not be kept."""
    drop, act = getattr(bn, "drop", None), getattr(bn, "act", None)
    if type(bn).forward in _PLAIN_BN_FORWARDS:
        return None, None
    if (act is not None or drop is not None) and (act is None or isinstance(act, nn.Module)) and (
            drop is None or _is_passthrough(drop)):  # timm's SyncBatchNormAct may lack either attribute
        return (None if isinstance(drop, nn.Identity) else drop), (None if isinstance(act, nn.Identity) else act)
    raise ValueError(f"{qual or '<root>'}: {type(bn).__name__} is a BatchNorm with its own forward that "
                     "convert_norm_act cannot read (it knows timm's BatchNormAct2d: .drop then .act); "
                     "nothing was changed")


class _Tracer(fx.Tracer):
    """Keeps evonorm's own layers (autograd Functions inside) and every BatchNorm (timm's BatchNormAct2d
    included) as leaves, like torch.nn's."""

    def is_leaf_module(self, m: nn.Module, qualname: str) -> bool:
        return (type(m).__module__.startswith("evonorm.layers") or _is_bn(m)
                or super().is_leaf_module(m, qualname))


def _activation_of(node: fx.Node, modules: dict[str, nn.Module], prefix: str = "") -> str | None:
    """A short description when `node` is a supported activation applied to its first argument, else None."""
    if node.op == "call_module" and isinstance(modules.get(node.target), _ACT_MODULES):
        return f"{type(modules[node.target]).__name__} module {prefix}{node.target}"
    if node.op == "call_function" and node.target in _ACT_FUNCTIONS:
        kind = _ACT_FUNCTIONS[node.target]
        if kind == "hardtanh":  # F.relu6 may trace as hardtanh(x, 0, 6)
            lo = node.args[1] if len(node.args) > 1 else node.kwargs.get("min_val", -1.0)
            hi = node.args[2] if len(node.args) > 2 else node.kwargs.get("max_val", 1.0)
            if (lo, hi) != (0.0, 6.0):
                return None
            kind = "relu6"
        return f"F.{kind}"
    if node.op == "call_method" and node.target in _ACT_METHODS and len(node.args) == 1:
        return f"Tensor.{node.target}"
    return None


def _external_act(node: fx.Node, modules: dict[str, nn.Module]) -> fx.Node | None:
    """The activation that is the only consumer of `node`, looking through Identity / dropout modules."""
    cur = node
    while True:
        users = list(cur.users)
        if len(users) != 1 or users[0].args[:1] != (cur,):
            return None
        user = users[0]
        if user.op == "call_module" and _is_passthrough(modules.get(user.target)) and len(user.args) == 1:
            cur = user
            continue
        return user if _activation_of(user, modules) is not None else None


def _between(bn: fx.Node, act: fx.Node | None, modules: dict[str, nn.Module]) -> list[str]:
    """The non-Identity modules the chain bn -> ... -> act passes through (all dropouts)."""
    names, cur = [], act.args[0] if act is not None else bn
    while cur is not bn:
        names.append(cur.target)
        cur = cur.args[0]
    return [n for n in reversed(names) if not isinstance(modules.get(n), nn.Identity)]


@dataclass(frozen=True)
class _Layer:
    """What replaces each BatchNorm: a registered class (told apply_act, and for a BN baseline the
    BatchNorm's own eps / momentum), or a factory `(num_features, **kwargs)` whose layer stands for
    a BatchNorm-activation pair; a BatchNorm with no activation then becomes the per-channel affine
    (the rule of the searched architectures: a searched layer is a normalization-activation)."""

    label: str
    kwargs: dict
    cls: type[nn.Module] | None = None
    factory: Callable[..., nn.Module] | None = None


def _layer(layer: Any, kwargs: dict) -> _Layer:
    """`layer` (registry name, layer graph, or factory) as a _Layer; ValueError naming the problem before
    anything changes."""
    key = registered_name(layer)
    if key is not None:
        return _Layer(layer, kwargs, cls=NORM_ACTS[key])
    if isinstance(layer, (str, dict)):
        layer = as_graph(layer)
    to_module = getattr(layer, "to_module", None)
    if callable(to_module):  # a Graph
        return _Layer(f"graph {layer}", kwargs, factory=partial(to_module, **kwargs))
    if callable(layer):
        label = getattr(layer, "__qualname__", None) or type(layer).__name__
        return _Layer(label, kwargs, factory=partial(layer, **kwargs) if kwargs else layer)
    raise TypeError(f"layer must be a registered name, a layer graph (Graph, its dict or JSON text) or a "
                    f"factory (num_features) -> nn.Module, got {type(layer).__name__}")


def _new_layer(bn: nn.Module, spec: _Layer, apply_act: bool) -> nn.Module:
    """The layer for one BatchNorm, carrying its gamma/beta (and, for a BN baseline, its eps, momentum and
    running statistics), on its device; synchronised like it when it is a SyncBatchNorm."""
    if spec.cls is not None:
        kwargs = spec.kwargs
        if issubclass(spec.cls, nn.BatchNorm2d):
            kwargs = {"eps": bn.eps, **({"momentum": bn.momentum} if bn.momentum is not None else {}),
                      **kwargs}
        layer = spec.cls(bn.num_features, **{**kwargs, "apply_act": apply_act})
    elif apply_act:
        layer = spec.factory(bn.num_features)
        if not isinstance(layer, nn.Module):
            raise TypeError(f"the layer factory {spec.label} returned {type(layer).__name__}, "
                            "not an nn.Module")
    else:
        layer = Affine2d(bn.num_features)
    state = {"weight": bn.weight, "bias": bn.bias} if bn.affine else {}
    if isinstance(layer, nn.BatchNorm2d) and bn.track_running_stats:
        state.update(running_mean=bn.running_mean, running_var=bn.running_var,
                     num_batches_tracked=bn.num_batches_tracked)
    with torch.no_grad():
        for key, value in state.items():
            target = getattr(layer, key, None)
            if isinstance(target, torch.Tensor) and target.shape == value.shape:
                target.copy_(value)
    if isinstance(bn, nn.SyncBatchNorm):
        layer = convert_sync_norm_act(layer, bn.process_group)
    ref = next(iter(bn.parameters()), None) if bn.affine else bn.running_mean
    return layer.to(device=ref.device) if ref is not None else layer


def _replace(bn: nn.Module, qual: str, spec: _Layer, report: ConvertReport,
             external: str | None = None) -> nn.Module:
    """The module that takes `bn`'s place; `external` describes an activation after it that is fused.

    An activation inside a BatchNormAct2d is fused when a layer can fuse it, else kept after the new layer;
    its dropout (and any between a BatchNorm and a fused external activation) then follows the activation:
    the same function for ReLU, and at eval for any activation."""
    drop, act = _inner(bn, qual)
    fused, tail = external, [drop]
    if act is not None and isinstance(act, _ACT_MODULES):
        fused = f"{type(act).__name__} module {qual}.act"
    elif act is not None:
        tail.append(act)
        report.notes.append(f"{qual}: its {type(act).__name__} is not an activation a layer fuses; it is kept "
                            "after the new layer")
    tail = [m for m in tail if m is not None]
    if fused and drop is not None:
        report.notes.append(f"{qual}: {type(drop).__name__} now follows the fused activation")
    layer = _new_layer(bn, spec, fused is not None)
    report.replaced.append(Replacement(qual, bn.num_features, type(layer).__name__, fused is not None, fused))
    return nn.Sequential(layer, *tail) if tail else layer


def _set(root: nn.Module, qualname: str, module: nn.Module) -> None:
    parent, _, child = qualname.rpartition(".")
    setattr(root.get_submodule(parent) if parent else root, child, module)


def _convert_traced(module: nn.Module, graph: fx.Graph, prefix: str, spec: _Layer,
                    report: ConvertReport) -> nn.Module:
    """Fuse/replace using the traced graph; in place when only Identity swaps are needed, else a GraphModule."""
    modules = dict(module.named_modules())
    calls: dict[str, int] = {}
    for node in graph.nodes:
        if node.op == "call_module":
            calls[node.target] = calls.get(node.target, 0) + 1
    pairs: dict[str, tuple[fx.Node | None, str | None]] = {}  # BN target -> (fused activation node, its name)
    for node in graph.nodes:
        if node.op != "call_module" or not _is_bn(modules[node.target]):
            continue
        has_own_act = _inner(modules[node.target], prefix + node.target)[1] is not None
        act = None if has_own_act else _external_act(node, modules)
        if act is not None and calls[node.target] > 1:  # one BN module called at several places: keep it safe
            act = None
            report.notes.append(f"{prefix}{node.target} is called {calls[node.target]} times: not fused")
        between = _between(node, act, modules)
        if between:
            report.notes.append(f"{prefix}{node.target}: {', '.join(between)} (between it and its activation) "
                                "now follows the fused activation")
        pairs[node.target] = (act, _activation_of(act, modules, prefix) if act is not None else None)
    if all(a is None or (a.op == "call_module" and calls[a.target] == 1) for a, _ in pairs.values()):
        for bn_name, (act, desc) in pairs.items():
            _set(module, bn_name, _replace(modules[bn_name], prefix + bn_name, spec, report, desc))
            if act is not None:
                _set(module, act.target, nn.Identity())
        result = module
    else:
        for act, _ in pairs.values():
            if act is not None:
                act.replace_all_uses_with(act.args[0])
                graph.erase_node(act)
        graph.lint()
        result = fx.GraphModule(module, graph, class_name=type(module).__name__)
        for bn_name, (_, desc) in pairs.items():
            _set(result, bn_name, _replace(modules[bn_name], prefix + bn_name, spec, report, desc))
        report.mode = "fx"
    # BatchNorms the trace never called (dead code in forward): replaced as lone ones
    for qual, m in list(result.named_modules()):
        if _is_bn(m):
            _set(result, qual, _replace(m, prefix + qual, spec, report))
            report.notes.append(f"{prefix}{qual} is not called in the traced forward: replaced as a lone BatchNorm")
    return result


def _next_act(children: list[tuple[str, nn.Module]], idx: int) -> int | None:
    """Index of the activation module after children[idx] in a Sequential, looking through pass-throughs."""
    j = idx + 1
    while j < len(children) and _is_passthrough(children[j][1]):
        j += 1
    return j if j < len(children) and isinstance(children[j][1], _ACT_MODULES) else None


def _convert(module: nn.Module, prefix: str, spec: _Layer, report: ConvertReport) -> nn.Module:
    if _is_bn(module):
        return _replace(module, prefix.rstrip("."), spec, report)
    if not any(_is_bn(m) for m in module.modules()):
        return module
    try:
        graph = _Tracer().trace(module)
    except Exception as e:  # noqa: BLE001 - any tracing failure means: go one level down
        first_line = (str(e).strip().splitlines() or [type(e).__name__])[0][:120]
        report.notes.append(f"fx could not trace {prefix.rstrip('.') or '<root>'} ({first_line}); "
                            "converting its children one by one")
    else:
        return _convert_traced(module, graph, prefix, spec, report)
    children = list(module.named_children())
    for idx, (child_name, child) in enumerate(children):
        act = _next_act(children, idx) if isinstance(module, nn.Sequential) and _is_bn(child) else None
        if act is not None and _inner(child, prefix + child_name)[1] is None:
            act_name, act_module = children[act]
            desc = f"{type(act_module).__name__} module {prefix}{act_name}"
            setattr(module, child_name, _replace(child, prefix + child_name, spec, report, desc))
            setattr(module, act_name, nn.Identity())
        else:
            new = _convert(child, f"{prefix}{child_name}.", spec, report)
            if new is not child:
                setattr(module, child_name, new)
    return module


def convert_norm_act(model: nn.Module, layer: Any, **kwargs) -> tuple[nn.Module, ConvertReport]:
    """Replace every BatchNorm2d / SyncBatchNorm of `model` with `layer` (fusing its activation).

    `layer` is a registered name (`list_norm_acts()`), a layer graph (a `Graph`, its dict or JSON text, a
    named graph: a search's find as stored), or a factory `(num_features, **kwargs) -> nn.Module`. A
    registered layer is told `apply_act`; a graph's or a factory's layer takes each BatchNorm-activation
    pair, and a BatchNorm without an activation becomes a per-channel affine (`Affine2d`), as in the
    searched architectures.

    Returns (model, report). Use the returned model: it is `model` changed in place, or a `fx.GraphModule`
    sharing `model`'s other submodules when the graph had to be rewritten (report.mode == "fx").
    `kwargs` go to the layer (e.g. groups=16, eps=1e-3); new layers are created on the BatchNorm's device.
    """
    spec = _layer(layer, kwargs)  # unknown names fail here, before anything is changed
    bns = [(qual, m) for qual, m in model.named_modules() if _is_bn(m)]
    for qual, m in bns:  # as do BatchNorm subclasses whose function could not be kept
        _inner(m, qual)
    if spec.factory is not None and bns:  # and a factory that raises or returns no module
        _new_layer(bns[0][1], spec, True)
    report = ConvertReport(norm_act=spec.label)
    was_training = model.training
    result = _convert(model, "", spec, report)
    result.train(was_training)
    return result, report
