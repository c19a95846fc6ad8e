"""The code's shape in numbers, to compare before and after a refactor: lines of src/ and
experiments/, settings classes and their fields, flags per command, and the functions over 50 lines.

    python scripts/shape.py            # one table, from the checkout it stands in
    python scripts/shape.py --json     # the same, as JSON

Settings classes are the dataclasses that configure a run: a name ending in Config, Setting(s) or
Spec outside graph/ and models/ (whose specs describe a graph or an architecture, not a run), and
the dataclasses their fields hold.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src" / "evonorm"
SUFFIXES = ("Config", "Setting", "Settings", "Spec")
NOT_RUN_SETTINGS = ("graph", "models")


def python_lines(folder: Path) -> int:
    return sum(len(p.read_text().splitlines()) for p in folder.rglob("*.py"))


def dataclasses_in(tree: ast.Module) -> dict[str, ast.ClassDef]:
    def is_dataclass(c: ast.ClassDef) -> bool:
        return any("dataclass" in ast.unparse(d) for d in c.decorator_list)

    return {n.name: n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and is_dataclass(n)}


def settings_classes() -> dict[str, int]:
    """Name -> number of fields of each class that configures a run."""
    found: dict[str, tuple[ast.ClassDef, Path]] = {}
    for path in SRC.rglob("*.py"):
        for name, node in dataclasses_in(ast.parse(path.read_text())).items():
            found.setdefault(name, (node, path))

    def fields(node: ast.ClassDef) -> list[ast.AnnAssign]:
        return [s for s in node.body if isinstance(s, ast.AnnAssign)
                and "ClassVar" not in ast.unparse(s.annotation)]

    chosen = {n for n, (_, p) in found.items() if n.endswith(SUFFIXES)
              and p.relative_to(SRC).parts[0] not in NOT_RUN_SETTINGS}
    grown = True
    while grown:  # the dataclasses a settings class holds are settings too
        held = {n for c in chosen for f in fields(found[c][0]) for n in found
                if re.search(rf"\b{n}\b", ast.unparse(f.annotation))}
        grown = not held <= chosen
        chosen |= held
    return {n: len(fields(found[n][0])) for n in sorted(chosen)}


def flags_per_command() -> dict[str, int]:
    sys.path.insert(0, str(ROOT / "src"))
    from evonorm.cli import COMMANDS

    out = {}
    for name in COMMANDS:
        text = subprocess.run([sys.executable, "-m", "evonorm.cli", name, "--help"],
                              capture_output=True, text=True, cwd=ROOT,
                              env={"PYTHONPATH": str(ROOT / "src"), "PATH": ""}).stdout
        out[name] = len(set(re.findall(r"(?<![\w-])--[a-z][\w-]*", text)) - {"--help"})
    return out


def long_functions(limit: int = 50) -> list[tuple[str, int]]:
    out = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > limit:
                    out.append((f"{path.relative_to(ROOT)}:{node.name}", n))
    return sorted(out, key=lambda x: -x[1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = p.parse_args()
    classes = settings_classes()
    flags = flags_per_command()
    longs = long_functions()
    shape = {"src_lines": python_lines(SRC), "experiments_lines": python_lines(ROOT / "experiments"),
             "settings_classes": classes, "settings_fields": sum(classes.values()),
             "flags": flags, "flags_total": sum(flags.values()),
             "functions_over_50_lines": dict(longs)}
    if args.json:
        print(json.dumps(shape, indent=1))
        return 0
    print(f"src/ {shape['src_lines']} lines, experiments/ {shape['experiments_lines']} lines")
    print(f"settings classes: {len(classes)}, fields: {shape['settings_fields']} "
          f"({', '.join(f'{k} {v}' for k, v in classes.items())})")
    print(f"flags: {shape['flags_total']} ({', '.join(f'{k} {v}' for k, v in flags.items())})")
    print(f"functions over 50 lines: {len(longs)}")
    for where, n in longs:
        print(f"  {n:4d}  {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
