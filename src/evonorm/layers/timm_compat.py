"""timm's EvoNorm layers in evonorm's terms: which layer each is, with which settings, and a converter.

A timm EvoNorm state_dict has evonorm's keys (weight, bias, v, running_var), so it loads strictly into the
evonorm layer of the same name; what it does not carry is eps, and timm's defaults differ from the paper's
1e-5 for EvoNorm2dB0 and the `a` variants (1e-3). Loaded into a layer built with evonorm's defaults, the
weights would then compute another function (2.3e-3 off for B0 on a unit-variance input). So:
`timm_settings("EvoNorm2dB0")` gives the keyword arguments that make evonorm's layer equal to timm's
defaults, and `convert_timm_evonorm(model)` swaps every timm EvoNorm module for the equal evonorm layer
(its own eps, groups, momentum and state), saying per module where that differs from evonorm's defaults.
timm's `groups` and `group_size` are taken as they are (timm requires C to be a multiple of the groups).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from evonorm.layers.registry import create_norm_act

PAPER_EPS = 1e-5


@dataclass(frozen=True)
class TimmEvoNorm:
    """One timm EvoNorm class: the evonorm layer computing the same function, and timm's default eps."""

    timm_name: str
    norm_act: str
    eps: float
    normalizes_without_act: bool = False  # the `a` variants divide by the group std even with apply_act=False


TIMM_EVONORMS: dict[str, TimmEvoNorm] = {t.timm_name: t for t in (
    TimmEvoNorm("EvoNorm2dB0", "evonorm_b0", 1e-3),
    TimmEvoNorm("EvoNorm2dB1", "evonorm_b1", 1e-5),
    TimmEvoNorm("EvoNorm2dB2", "evonorm_b2", 1e-5),
    TimmEvoNorm("EvoNorm2dS0", "evonorm_s0", 1e-5),
    TimmEvoNorm("EvoNorm2dS0a", "evonorm_s0", 1e-3, True),
    TimmEvoNorm("EvoNorm2dS1", "evonorm_s1", 1e-5),
    TimmEvoNorm("EvoNorm2dS1a", "evonorm_s1", 1e-3, True),
    TimmEvoNorm("EvoNorm2dS2", "evonorm_s2", 1e-5),
    TimmEvoNorm("EvoNorm2dS2a", "evonorm_s2", 1e-3, True),
)}


def _entry(timm_name: str) -> TimmEvoNorm:
    if timm_name not in TIMM_EVONORMS:
        raise ValueError(f"unknown timm EvoNorm {timm_name!r}; known: {', '.join(TIMM_EVONORMS)}")
    return TIMM_EVONORMS[timm_name]


def timm_settings(timm_name: str) -> tuple[str, dict]:
    """(evonorm layer name, keyword arguments) equal to timm's class with its defaults, e.g.
    `name, kw = timm_settings("EvoNorm2dB0"); layer = create_norm_act(name, 64, **kw)` then
    `layer.load_state_dict(timm_state)` computes what timm's layer computes."""
    entry = _entry(timm_name)
    return entry.norm_act, {"eps": entry.eps, **({"groups": 32} if entry.norm_act.startswith("evonorm_s") else {})}


def from_timm(module: nn.Module, qualname: str = "") -> tuple[nn.Module, str]:
    """The evonorm layer equal to one timm EvoNorm module (its settings and state), and a note on what
    differs from evonorm's defaults. Raises ValueError where no evonorm layer computes the same function."""
    entry = _entry(type(module).__name__)
    where = qualname or type(module).__name__
    apply_act = bool(module.apply_act)
    if entry.normalizes_without_act and not apply_act:
        raise ValueError(f"{where}: {entry.timm_name}(apply_act=False) divides by the group std; evonorm's "
                         "apply_act=False is a plain affine, so no layer here is equal")
    act = getattr(module, "act", None)
    if apply_act and act is not None and not isinstance(act, (nn.SiLU, nn.Identity)):
        raise ValueError(f"{where}: {entry.timm_name} with act {type(act).__name__}: evonorm's layer uses "
                         "x * sigmoid(x); no layer here is equal")
    kwargs = {"eps": float(module.eps), "apply_act": apply_act}
    if hasattr(module, "momentum"):
        kwargs["momentum"] = float(module.momentum)
    if hasattr(module, "groups"):
        kwargs["groups"] = int(module.groups)
    layer = create_norm_act(entry.norm_act, module.weight.numel(), **kwargs)
    if "groups" in kwargs and layer.groups != kwargs["groups"]:  # evonorm would round down to a divisor
        raise ValueError(f"{where}: {module.weight.numel()} channels do not split into {module.groups} groups")
    layer.load_state_dict(module.state_dict())
    layer.to(module.weight.device)
    layer.train(module.training)
    note = f"{where}: {entry.timm_name} -> {type(layer).__name__}(eps={kwargs['eps']:g})"
    if kwargs["eps"] != PAPER_EPS:
        note += f"; evonorm's default eps is {PAPER_EPS:g} (the paper's), kept {kwargs['eps']:g} to compute the same"
    return layer, note


def convert_timm_evonorm(model: nn.Module) -> tuple[nn.Module, list[str]]:
    """Replace every timm EvoNorm module of `model` with the equal evonorm layer, in place; returns (model,
    one note per module). Checks every module before changing any."""
    found = [(q, m) for q, m in model.named_modules() if type(m).__name__ in TIMM_EVONORMS
             and type(m).__module__.startswith("timm.")]
    new = [from_timm(m, q) for q, m in found]
    if found and found[0][0] == "":
        return new[0][0], [new[0][1]]
    for (qual, _), (layer, _) in zip(found, new):
        parent, _, child = qual.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, child, layer)
    return model, [note for _, note in new]
