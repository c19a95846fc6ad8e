"""The experiment and benchmark scripts as modules, for the tests of their own glue (what a user
needs is in the package and tested there): loaded by path, each once."""

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"
BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load_script(name: str, folder: Path = EXPERIMENTS) -> ModuleType:
    """<folder>/<name>.py (default experiments/) as a module kept in sys.modules, so that spawned
    workers and monkeypatching see the same one: an experiment as `experiments.<name>`, the
    package it is run from (`python -m experiments.<name>`), a benchmark by path as `name`."""
    if folder == EXPERIMENTS:
        return importlib.import_module(f"experiments.{name}")
    if name in sys.modules and getattr(sys.modules[name], "__file__", None) == str(
            folder / f"{name}.py"):
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, folder / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
