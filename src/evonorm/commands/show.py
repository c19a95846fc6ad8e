"""`evonorm show`: a layer (library name, JSON file or JSON text) as formula, properties and code.

The graph library is imported where the layer is read: it loads torch (the fingerprint evaluates the
graph), which `--help` does not need; the layer registry only for a registry layer without a graph.
"""

from __future__ import annotations

import reprlib
from pathlib import Path

from evonorm.cli import ArgumentParser, CommandError


# the registry's layers that the search space writes as a graph (the graph computes what the layer
# does), so that `show` gives their formula too
AS_GRAPH = {"bn_relu": "batch", "gn_relu": "group", "ln_relu": "layer"}


def _load(spec: str):
    """A named graph, a registry layer, JSON text, or a JSON file (read here) as a Graph, or the
    registry's class of a layer that has no graph; a one-line error if none, with the nearest
    names."""
    from evonorm.catalog import LAYERS, did_you_mean
    from evonorm.graph.library import NAMED_GRAPHS, resolve_graph

    if spec in NAMED_GRAPHS:
        return NAMED_GRAPHS[spec]
    if spec in AS_GRAPH:
        from evonorm.search.settings import norm_relu

        return resolve_graph(norm_relu(AS_GRAPH[spec]))
    if spec in LAYERS:
        from evonorm.layers import get_norm_act

        return get_norm_act(spec)
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
        raise CommandError(f"{reprlib.repr(spec)} is not a layer name (`evonorm list` shows them), "
                           f"a JSON file nor JSON text{did_you_mean(spec)}")
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
                        help="a named graph (e.g. evonorm_b0, s_top1, random_rej), a registry layer (e.g. "
                             "gn_relu), a .json file, or JSON text "
                             '\'{"nodes": [["op", id, ...], ...]}\'')
    parser.add_argument("--latex", action="store_true", help="also print the LaTeX formula (default: "
                        "the text formula only)")
    parser.add_argument("--python", action="store_true", help="also print a self-contained nn.Module "
                        "source file, to use the layer without evonorm (default: off)")
    parser.add_argument("--class-name", default="EvoLayer", help="class name for --python (default: EvoLayer)")
    args = parser.parse_args(argv)
    g = _load(args.graph)
    if isinstance(g, type):  # a registry layer the search space has no graph of
        doc = (g.__doc__ or "").strip().splitlines()
        print(f"{args.graph}: a layer of the registry (evonorm.layers.{g.__name__}"
              f"{': ' + doc[0] if doc else ''}), not a graph of the search space, so it has no "
              f"formula, key or fingerprint here; create_norm_act({args.graph!r}, C) builds it")
        return 0
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
