"""Named graphs: the EvoNorm layers, the paper's appendix top-10 candidates, Table 2's random layers,
a layer a search found here, and a few known-bad layers for tests.

Their nodes are data in `evonorm.catalog` (`GRAPH_SPECS`), so that `evonorm list` names them without torch.
"""

from __future__ import annotations

import reprlib
from pathlib import Path

from types import MappingProxyType
from typing import Any, Mapping

from evonorm.catalog import GRAPH_SPECS, did_you_mean
from evonorm.graph.graph import Graph

NAMED_GRAPHS: Mapping[str, Graph] = MappingProxyType({k: Graph.from_json({"nodes": v}) for k, v in GRAPH_SPECS.items()})
"""Every named graph, read-only."""


def get_graph(name: str) -> Graph:
    """The named graph; KeyError listing the names when unknown."""
    try:
        return NAMED_GRAPHS[name]
    except KeyError:
        raise KeyError(f"unknown graph {name!r} (choose from {', '.join(NAMED_GRAPHS)})") from None


def resolve_graph(spec: Any) -> Graph:
    """A layer given as a named graph, graph JSON (text or dict) or a Graph, as a Graph.

    The one rule behind `--seed-layers`, `evonorm show` and `build_model(arch, norm_act)`;
    ValueError naming the problem otherwise.
    """
    if isinstance(spec, Graph):
        return spec
    if isinstance(spec, str):
        text = spec.strip()
        if text in NAMED_GRAPHS:
            return NAMED_GRAPHS[text]
        if not text.startswith("{"):
            raise ValueError(f"{reprlib.repr(spec)} is neither a named graph nor graph JSON"
                             f"{did_you_mean(spec)} (`evonorm list graphs` names them)")
        spec = text
    return Graph.from_json(spec)


def read_layer(text: str) -> str | Graph:
    """A layer argument as `evonorm train --layer` reads it: a name or inline JSON (kept as text),
    or @path to a graph JSON file (read); ValueError, one line, for a file that cannot be read."""
    if not text.startswith("@"):
        return text
    path = Path(text[1:])
    try:
        return Graph.from_json(path.read_bytes())
    except OSError as err:
        raise ValueError(f"cannot read layer JSON from {path}: {err.strerror or err}") from None
    except ValueError as err:
        raise ValueError(f"invalid layer JSON in {path}: {err}") from None
