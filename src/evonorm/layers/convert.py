"""`convert_norm_act`: put a normalization-activation layer into an existing model.

Every BatchNorm2d is replaced. Where a BatchNorm's only consumer is a ReLU / ReLU6 / SiLU / GELU (a module,
a functional call or a tensor method), the pair becomes one layer with `apply_act=True`; a BatchNorm with any
other consumer becomes the layer with `apply_act=False`. The data flow comes from torch.fx. When the
activation modules can simply be swapped for `nn.Identity` the model is changed in place and keeps its class
("module" mode); when an activation is a functional call or a module shared with another use, the graph is
rewritten and an `fx.GraphModule` is returned ("fx" mode). A module that fx cannot trace (data-dependent
control flow) is handled child by child: its traceable children are converted as above, and its own
BatchNorms are fused only with an activation that directly follows them in an `nn.Sequential`.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import fx, nn

from evonorm.layers.baselines import _BatchNormAct
from evonorm.layers.registry import create_norm_act

_ACT_MODULES = (nn.ReLU, nn.ReLU6, nn.SiLU, nn.GELU)
_ACT_FUNCTIONS = {F.relu: "relu", F.relu6: "relu6", F.silu: "silu", F.gelu: "gelu", torch.relu: "relu",
                  torch.relu_: "relu", F.hardtanh: "hardtanh"}
_ACT_METHODS = {"relu": "relu", "relu_": "relu"}


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


def _is_bn(m: nn.Module) -> bool:
    return isinstance(m, nn.BatchNorm2d) and not isinstance(m, _BatchNormAct)


class _Tracer(fx.Tracer):
    """Keeps evonorm's own layers (autograd Functions inside) as leaves, like torch.nn's."""

    def is_leaf_module(self, m: nn.Module, qualname: str) -> bool:
        return type(m).__module__.startswith("evonorm.layers") or super().is_leaf_module(m, qualname)


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


def _new_layer(bn: nn.BatchNorm2d, name: str, apply_act: bool, kwargs: dict) -> nn.Module:
    layer = create_norm_act(name, bn.num_features, **{**kwargs, "apply_act": apply_act})
    ref = next(iter(bn.parameters()), None) if bn.affine else bn.running_mean
    return layer.to(device=ref.device) if ref is not None else layer


def _set(root: nn.Module, qualname: str, module: nn.Module) -> None:
    parent, _, child = qualname.rpartition(".")
    setattr(root.get_submodule(parent) if parent else root, child, module)


def _convert_traced(module: nn.Module, graph: fx.Graph, prefix: str, name: str, kwargs: dict,
                    report: ConvertReport) -> nn.Module:
    """Fuse/replace using the traced graph; in place when only Identity swaps are needed, else a GraphModule."""
    modules = dict(module.named_modules())
    calls: dict[str, int] = {}
    for node in graph.nodes:
        if node.op == "call_module":
            calls[node.target] = calls.get(node.target, 0) + 1
    pairs: dict[str, fx.Node | None] = {}  # BN target -> fused activation node (None: lone)
    for node in graph.nodes:
        if node.op != "call_module" or not _is_bn(modules[node.target]):
            continue
        users = list(node.users)
        act = users[0] if len(users) == 1 and users[0].args[:1] == (node,) else None
        if act is not None and _activation_of(act, modules) is None:
            act = None
        if calls[node.target] > 1:  # one BN module called at several places: keep it simple and safe
            act = None
            report.notes.append(f"{prefix}{node.target} is called {calls[node.target]} times: not fused")
        pairs[node.target] = act
    in_place = all(a is None or (a.op == "call_module" and calls[a.target] == 1) for a in pairs.values())
    for bn_name, act in pairs.items():
        bn = modules[bn_name]
        desc = _activation_of(act, modules, prefix) if act is not None else None
        report.replaced.append(Replacement(prefix + bn_name, bn.num_features, "", act is not None, desc))
    if in_place:
        for bn_name, act in pairs.items():
            _set(module, bn_name, _new_layer(modules[bn_name], name, act is not None, kwargs))
            if act is not None:
                _set(module, act.target, nn.Identity())
        result = module
    else:
        for act in pairs.values():
            if act is not None:
                act.replace_all_uses_with(act.args[0])
                graph.erase_node(act)
        graph.lint()
        result = fx.GraphModule(module, graph, class_name=type(module).__name__)
        for bn_name, act in pairs.items():
            _set(result, bn_name, _new_layer(modules[bn_name], name, act is not None, kwargs))
        report.mode = "fx"
    for r in report.replaced[len(report.replaced) - len(pairs):]:
        r.layer = type(result.get_submodule(r.name[len(prefix):])).__name__
    # BatchNorms the trace never called (dead code in forward): replaced as lone ones
    for qual, m in list(result.named_modules()):
        if _is_bn(m):
            _set(result, qual, _new_layer(m, name, False, kwargs))
            report.replaced.append(Replacement(prefix + qual, m.num_features, type(result.get_submodule(qual)).__name__,
                                               False, None))
            report.notes.append(f"{prefix}{qual} is not called in the traced forward: replaced as a lone BatchNorm")
    return result


def _convert(module: nn.Module, prefix: str, name: str, kwargs: dict, report: ConvertReport) -> nn.Module:
    if _is_bn(module):
        new = _new_layer(module, name, False, kwargs)
        report.replaced.append(Replacement(prefix.rstrip("."), module.num_features, type(new).__name__, False))
        return new
    if not any(_is_bn(m) for m in module.modules()):
        return module
    try:
        graph = _Tracer().trace(module)
    except Exception as e:  # noqa: BLE001 - any tracing failure means: go one level down
        first_line = (str(e).strip().splitlines() or [type(e).__name__])[0][:120]
        report.notes.append(f"fx could not trace {prefix.rstrip('.') or '<root>'} ({first_line}); "
                            "converting its children one by one")
    else:
        return _convert_traced(module, graph, prefix, name, kwargs, report)
    children = list(module.named_children())
    for idx, (child_name, child) in enumerate(children):
        nxt = children[idx + 1][1] if idx + 1 < len(children) else None
        if _is_bn(child) and isinstance(module, nn.Sequential) and isinstance(nxt, _ACT_MODULES):
            setattr(module, child_name, _new_layer(child, name, True, kwargs))
            report.replaced.append(Replacement(prefix + child_name, child.num_features,
                                               type(getattr(module, child_name)).__name__, True,
                                               f"{type(nxt).__name__} module {prefix}{children[idx + 1][0]}"))
            setattr(module, children[idx + 1][0], nn.Identity())
        elif _is_bn(child):
            new = _new_layer(child, name, False, kwargs)
            setattr(module, child_name, new)
            report.replaced.append(Replacement(prefix + child_name, child.num_features, type(new).__name__, False))
        else:
            new = _convert(child, f"{prefix}{child_name}.", name, kwargs, report)
            if new is not child:
                setattr(module, child_name, new)
    return module


def convert_norm_act(model: nn.Module, name: str, **kwargs) -> tuple[nn.Module, ConvertReport]:
    """Replace every BatchNorm2d of `model` with the layer `name` (fusing a following activation).

    Returns (model, report). Use the returned model: it is `model` changed in place, or a `fx.GraphModule`
    sharing `model`'s other submodules when the graph had to be rewritten (report.mode == "fx").
    `kwargs` go to the layer (e.g. groups=16, eps=1e-3); new layers are created on the BatchNorm's device.
    """
    create_norm_act(name, 1)  # unknown names fail here, before anything is changed
    report = ConvertReport(norm_act=name)
    was_training = model.training
    result = _convert(model, "", name, kwargs, report)
    result.train(was_training)
    return result, report
