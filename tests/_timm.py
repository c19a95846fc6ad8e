"""Load timm in tests: torchvision (which timm imports at package import) does not import beside torch 2.13
here, so a minimal stand-in for the torchvision names timm touches goes into sys.modules first (tests only).

The stand-in's classes are empty placeholders: timm only subclasses them (transforms), uses them in
isinstance checks (FrozenBatchNorm2d) or as dictionary keys (InterpolationMode) at import; the models the
tests build never call them.
"""

from __future__ import annotations

import enum
import importlib
import importlib.util
import sys
import types

import pytest

_MODULES = ("torchvision", "torchvision.ops", "torchvision.ops.misc", "torchvision.transforms",
            "torchvision.transforms.functional", "torchvision.datasets", "torchvision.models",
            "torchvision.utils", "torchvision.io")


class _StandIn(types.ModuleType):
    """A module whose every missing capitalised name is a new empty class (functions: a raising stub)."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        if name[:1].isupper():
            value = type(name, (), {"__init__": _unavailable(f"{self.__name__}.{name}")})
        else:
            value = _unavailable(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


def _unavailable(qualname: str):
    def stub(*args, **kwargs):
        raise RuntimeError(f"{qualname} is a test stand-in (torchvision does not import here)")
    return stub


class InterpolationMode(enum.Enum):
    NEAREST = "nearest"
    NEAREST_EXACT = "nearest-exact"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    BOX = "box"
    HAMMING = "hamming"
    LANCZOS = "lanczos"


def _install_stand_in(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(sys.modules):
        if name == "torchvision" or name.startswith("torchvision."):
            monkeypatch.delitem(sys.modules, name)
    mods = {name: _StandIn(name) for name in _MODULES}
    for name, mod in mods.items():
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(mods[parent], child, mod)
        monkeypatch.setitem(sys.modules, name, mod)
    mods["torchvision"].__version__ = "0.0+stand-in"
    mods["torchvision.transforms.functional"].InterpolationMode = InterpolationMode
    mods["torchvision.transforms"].InterpolationMode = InterpolationMode
    # timm's feature extraction tries this import and falls back when it fails
    monkeypatch.setitem(sys.modules, "torchvision.models.feature_extraction", None)


def load_timm(monkeypatch: pytest.MonkeyPatch):
    """timm, imported with the torchvision stand-in when the real torchvision does not import."""
    if importlib.util.find_spec("timm") is None:
        pytest.skip("timm is not installed (it is in the `test` extra)")
    if "timm" in sys.modules:
        return sys.modules["timm"]
    try:
        importlib.import_module("torchvision")
    except Exception:  # noqa: BLE001 - RuntimeError (operator torchvision::nms does not exist) here
        _install_stand_in(monkeypatch)
    return importlib.import_module("timm")
