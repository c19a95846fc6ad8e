"""Architectures from outside the package: `timm:NAME` (a timm model with the candidate layer put in by
`convert_norm_act`) and `MODULE:FUNCTION` (the user's own builder `fn(norm_act, num_classes, in_chans)`).

A name's form is checked without importing anything (`arch_kind`), so a config naming one can be read,
stored and compared safely; the code behind it is imported only by `check_arch` and `build_external`,
which callers reach only for a name the user gave (a run folder's stored names are never imported
unless the user passes them again).

`build_model` is imported where an architecture is probed: `evonorm.models` imports this module.
"""

from __future__ import annotations

import importlib
import inspect
import os
import re
import sys
from typing import Any, Callable, Sequence

from torch import nn

from evonorm.layers import convert_norm_act

_DOTTED = r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*"
_MODULE_FUNCTION = re.compile(rf"^({_DOTTED}):({_DOTTED})$")
_TIMM = re.compile(r"^timm:([\w.\-]+)$")
FORMS = "timm:NAME (a timm model) or MODULE:FUNCTION (your builder fn(norm_act, num_classes, in_chans))"


def arch_kind(arch: str) -> str | None:
    """"timm" or "module" for a well-formed external name, None for anything else (no import)."""
    if not isinstance(arch, str):
        return None
    if _TIMM.match(arch):
        return "timm"
    if _MODULE_FUNCTION.match(arch) and not arch.startswith("timm:"):
        return "module"
    return None


def is_user_code(arch: str) -> bool:
    """Whether `arch` names the user's own code (MODULE:FUNCTION): never imported from a stored name."""
    return arch_kind(arch) == "module"


def check_named_again(run: Any, archs: Sequence[str], given: Sequence[str] = ()) -> None:
    """A run's MODULE:FUNCTION architectures are code named in its folder, imported only when the
    caller names them again (`given`), so a planted or edited run folder cannot make evonorm import
    anything. ValueError naming the first one missing, or a given one the run does not have.
    timm:NAME and built-in names need nothing (nothing of the user's is imported for them)."""
    for arch in given:
        if arch not in archs:
            raise ValueError(f"--arch {arch} is not one of the run's architectures "
                             f"({', '.join(archs)})")
    missing = [a for a in archs if is_user_code(a) and a not in given]
    if missing:
        raise ValueError(f"run {run} builds its models with {', '.join(missing)}, code that is never "
                         f"imported from a run folder: name it again to use it (--arch {missing[0]}; "
                         f"from Python, user_archs=[{missing[0]!r}])")


def import_callable(spec: str, what: str) -> Callable[..., Any]:
    """The object `MODULE:FUNCTION` names (FUNCTION may be dotted: `pkg.mod:Class.make`), imported with
    the working directory on sys.path (as `python -m` has it), so a module next to the user's data is
    found, by the driver and by local workers alike. ValueError in one line naming `what` otherwise:
    no such module, an error raised while importing it, no such attribute, not callable."""
    m = _MODULE_FUNCTION.match(spec) if isinstance(spec, str) else None
    if m is None:
        raise ValueError(f"{what} {spec!r} is not MODULE:FUNCTION (e.g. mymodels:build)")
    module_name, attr = m.groups()
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name and (module_name == err.name or module_name.startswith(err.name + ".")):
            raise ValueError(f"{what} {spec}: no module named {err.name!r} (not installed, and not "
                             f"a file {err.name.split('.')[0]}.py in {cwd})") from None
        raise ValueError(f"{what} {spec}: importing {module_name} failed: {_first_line(err)}") from None
    except (Exception, SystemExit) as err:  # noqa: BLE001 - any failure of the user's module
        raise ValueError(f"{what} {spec}: importing {module_name} raised {_first_line(err)}") from None
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ValueError(f"{what} {spec}: {module_name} has no attribute {attr!r}") from None
        except (Exception, SystemExit) as err:  # noqa: BLE001 - a module __getattr__ may raise anything
            raise ValueError(f"{what} {spec}: reading {attr} raised {_first_line(err)}") from None
    if not callable(obj):
        raise ValueError(f"{what} {spec}: {attr} is a {type(obj).__name__}, not callable")
    return obj


def _first_line(err: BaseException) -> str:
    text = (str(err).strip().splitlines() or [""])[0][:200]
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def _builder(arch: str) -> Callable[..., nn.Module]:
    """The user's builder, its signature checked: it must take (norm_act, num_classes=, in_chans=)."""
    fn = import_callable(arch, "--arch")
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without a signature: called as is
        return fn
    try:
        sig.bind(nn.Identity, num_classes=10, in_chans=3)
    except TypeError as err:
        raise ValueError(f"--arch {arch}: {fn.__name__ if hasattr(fn, '__name__') else 'it'}"
                         f"{sig} cannot be called as fn(norm_act, num_classes=..., in_chans=...) "
                         f"({err})") from None
    return fn


def _timm(arch: str):
    """(timm, model name), refused in one line when timm does not import or has no such model."""
    name = arch.split(":", 1)[1]
    try:
        import timm
    except ImportError as err:
        raise ValueError(f"--arch {arch} needs timm: pip install timm ({_first_line(err)})") from None
    except (Exception, SystemExit) as err:  # noqa: BLE001 - e.g. a torchvision that does not import
        raise ValueError(f"--arch {arch}: timm does not import here ({_first_line(err)})") from None
    if not timm.is_model(name):
        raise ValueError(f"--arch {arch}: timm has no model {name!r} (timm.list_models() lists them)")
    return timm, name


def check_arch(arch: str) -> None:
    """Import what an external name needs and check it, so a wrong one fails in one line before any
    work: the module and builder (its signature), or timm and the model name. Nothing is built
    (`probe_arch` builds one)."""
    kind = arch_kind(arch)
    if kind == "timm":
        _timm(arch)
    elif kind == "module":
        _builder(arch)
    else:
        raise ValueError(f"{arch!r} is not an external architecture: {FORMS}")


def build_external(arch: str, factory: Callable[..., nn.Module], *, num_classes: int, in_chans: int,
                   **model_kw) -> nn.Module:
    """The model an external name builds, with `factory` (num_features -> the candidate layer) in it.

    timm: `timm.create_model(NAME, pretrained=False, num_classes=, in_chans=, **model_kw)`, then
    `convert_norm_act` puts the layer at every BatchNorm-activation pair (a BatchNorm without one
    becomes a per-channel affine). MODULE:FUNCTION: `fn(factory, num_classes=, in_chans=, **model_kw)`,
    which must return an nn.Module."""
    if arch_kind(arch) == "timm":
        timm, name = _timm(arch)
        model = timm.create_model(name, pretrained=False, num_classes=num_classes, in_chans=in_chans,
                                  **model_kw)
        model, _ = convert_norm_act(model, factory)
        return model
    fn = _builder(arch)
    model = fn(factory, num_classes=num_classes, in_chans=in_chans, **model_kw)
    if not isinstance(model, nn.Module):
        raise TypeError(f"--arch {arch} returned {type(model).__name__}, not an nn.Module")
    return model


class CountingLayer(nn.Module):
    """The probe's layer: a plain one (bn_relu) that counts its forward calls in `calls[0]`."""

    def __init__(self, inner: nn.Module, calls: list[int]):
        super().__init__()
        self.inner, self.calls = inner, calls

    def forward(self, x):
        self.calls[0] += 1
        return self.inner(x)


def probe_arch(arch: str, *, num_classes: int, in_chans: int, batch=None, **layer_kw) -> None:
    """Build `arch` once with a plain layer (bn_relu) that counts its calls, as a run will, and with `batch`
    (images as the trainer feeds them) run one forward pass: ValueError in one line when the builder raises
    or returns no module, when the forward pass raises or gives no (batch, num_classes) logits, or when the
    model never calls a layer `norm_act` built (then every candidate would score alike). So a broken
    architecture fails before any work, not once per candidate."""
    import torch

    from evonorm.models import build_model, resolve_norm_act

    check_arch(arch)
    plain, calls = resolve_norm_act("bn_relu"), [0]

    def probe(num_features: int, **kw) -> nn.Module:
        return CountingLayer(plain(num_features, **kw), calls)

    try:
        model = build_model(arch, probe, num_classes=num_classes, in_chans=in_chans, **layer_kw)
    except (Exception, SystemExit) as err:  # noqa: BLE001 - whatever the user's builder raises
        raise ValueError(f"--arch {arch}: building it for {num_classes} classes and {in_chans} "
                         f"input channel(s) raised {_first_line(err)}") from None
    if batch is None:
        return
    shape = "x".join(map(str, batch.shape))
    try:
        with torch.no_grad():
            out = model.train()(batch)
    except (Exception, SystemExit) as err:  # noqa: BLE001 - the model cannot take the search's images
        raise ValueError(f"--arch {arch}: its model raised {_first_line(err)} on a batch of the search's "
                         f"images ({shape})") from None
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != (len(batch), num_classes):
        got = "x".join(map(str, out.shape)) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ValueError(f"--arch {arch}: its model gave {got} for a batch of {shape} images, not "
                         f"{len(batch)}x{num_classes} logits")
    if calls[0] == 0:
        raise ValueError(f"--arch {arch}: its model never calls a layer built by norm_act in its forward "
                         f"pass, so every candidate layer would score alike: use norm_act(num_features) "
                         f"where its normalization-activation layers go")
