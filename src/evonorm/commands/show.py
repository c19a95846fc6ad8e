"""`evonorm show`: a layer (library name, JSON file or JSON text) as formula, properties and code.

The graph library is imported where the layer is read: it loads torch, which `--help` does not need.
"""

from __future__ import annotations

import reprlib
from pathlib import Path

from evonorm.cli import ArgumentParser, CommandError


def _load(spec: str):
    """A named graph, JSON text, or a JSON file (read here) as a Graph; a one-line error if none."""
    from evonorm.graph.library import NAMED_GRAPHS, resolve_graph

    if spec in NAMED_GRAPHS:
        return NAMED_GRAPHS[spec]
    text: str | bytes
    if spec.lstrip().startswith("{"):
        source, text = "JSON text", spec
    elif _is_file(spec):
        source = spec
        try:
            text = Path(spec).read_bytes()
        except OSError as err:
            raise CommandError(f"cannot read {spec}: {err.strerror}") from None
    else:
        raise CommandError(f"{reprlib.repr(spec)} is neither a named graph "
                           f"({', '.join(NAMED_GRAPHS)}), a JSON file nor JSON text")
    try:
        return resolve_graph(text)
    except ValueError as err:
        raise CommandError(f"invalid graph in {reprlib.repr(source)}: {err}") from None


def _is_file(spec: str) -> bool:
    try:
        return Path(spec).is_file()
    except (OSError, ValueError):  # a name too long for the file system, a NUL byte
        return False


def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="evonorm show", description=(
        "Print a layer graph as a formula with its properties (batch dependence, live nodes, canonical "
        "key, functional fingerprint) and, on request, LaTeX and a self-contained PyTorch module."))
    parser.add_argument("graph", metavar="NAME_OR_JSON",
                        help="a named graph (e.g. evonorm_b0, s_top1, random_rej), a .json file, or JSON text "
                             '\'{"nodes": [["op", id, ...], ...]}\'')
    parser.add_argument("--latex", action="store_true", help="also print the LaTeX formula")
    parser.add_argument("--python", action="store_true", help="also print a self-contained nn.Module source file")
    parser.add_argument("--class-name", default="EvoLayer", help="class name for --python (default: EvoLayer)")
    args = parser.parse_args(argv)
    g = _load(args.graph)
    code = None
    if args.python:  # before printing anything: a bad class name must not leave half an answer
        try:
            code = g.to_python(args.class_name)
        except ValueError as err:
            raise CommandError(str(err)) from None
    canon = g.canonical()
    live = [n for n in g.live_nodes() if n >= 4]
    print(f"formula:         {g.to_text()}")
    if args.latex:
        print(f"latex:           {g.to_latex()}")
    print(f"batch-dependent: {'yes (B layer: running statistics in eval mode)' if g.uses_batch_stats else 'no (S layer)'}")
    print(f"nodes:           {len(g.nodes)} ({len(live)} live: {', '.join(map(str, live))}; "
          f"{len(canon.nodes)} in canonical form)")
    print(f"key:             {g.key()}")
    print(f"fingerprint:     {g.fingerprint()}")
    print(f"json:            {g.dumps()}")
    print(f"canonical:       {canon.dumps()}")
    if code is not None:
        print()
        print(code, end="")
    return 0
