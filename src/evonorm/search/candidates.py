"""A run's candidates as read back from its store, and the two ways every reader looks at them:
the best distinct valid layers, and rejections grouped by reason (stdlib only).

Graph and fingerprint imports are made where a layer's key is computed: they load torch, which
reading candidates does not need.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, Callable, Iterable, Literal, Mapping, Sequence

from evonorm.search.evaluation import Evaluation, finite

Origin = Literal["random", "mutation", "seed"]


def _evaluation_field(name: str) -> Any:
    """A read-only attribute that is the same field of the candidate's evaluation."""
    return property(lambda self: getattr(self.evaluation, name), doc=f"`evaluation.{name}`")


@dataclass(frozen=True, repr=False)
class Candidate:
    """One finished evaluation: the `Evaluation` the store saved whole, plus where it came from.

    The defaults serve hand-written records (reports of plain dicts, tests); the store fills every
    field. The evaluation's fields read through (`c.status`, `c.scores`, ...).
    """

    id: int
    evaluation: Evaluation
    graph: dict | None = None
    key: str | None = None  # canonical structure
    fingerprint: str | None = None  # function on a fixed probe input
    parent_id: int | None = None
    origin: Origin = "random"
    cache_hit: bool = False
    seconds: float = 0.0
    worker: str | None = None
    created_at: float | None = None  # proposed
    finished_at: float | None = None
    proposal: int = -1
    features: dict | None = None  # at birth, with the prescreen on (`evonorm.search.features`)
    prediction: dict | None = None  # the surrogate's, before training (`surrogate.Born.record`)

    # the evaluation's fields, read through: c.status, c.reason, c.scores, ...
    status = _evaluation_field("status")
    reason = _evaluation_field("reason")
    reason_step = _evaluation_field("reason_step")
    detail = _evaluation_field("detail")
    scores = _evaluation_field("scores")
    fitness = _evaluation_field("fitness")
    timings = _evaluation_field("timings")
    stage_scores = _evaluation_field("stage_scores")
    stage = _evaluation_field("stage")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Candidate":
        """A flat record (the candidate's and its evaluation's fields side by side) as a Candidate;
        a record with no status reads as still pending, unknown keys are ignored."""
        own = {f.name for f in fields(cls)} - {"evaluation"}
        kw = {k: v for k, v in d.items() if k in own}
        kw.setdefault("id", 0)
        return cls(evaluation=Evaluation.from_dict({"status": "pending", **d}), **kw)

    @property
    def formula(self) -> str | None:
        """The layer as a formula (`Graph.to_text`); None without a graph (or one that does not
        parse). `graph` itself is the layer's graph JSON as a dict (`Graph.from_json(c.graph)`)."""
        if not self.graph:
            return None
        from evonorm.graph import Graph

        try:
            return Graph.from_json(self.graph).to_text()
        except (ValueError, TypeError, KeyError):
            return None

    def layer(self, num_features: int, **kwargs):
        """The layer found, as a module: a drop-in for BatchNorm2d(num_features) + ReLU (`Graph.to_module`;
        kwargs: apply_act, groups, eps, momentum, impl). ValueError for a record without a graph."""
        if not self.graph:
            raise ValueError(f"candidate {self.id} holds no layer graph")
        from evonorm.graph import Graph

        return Graph.from_json(self.graph).to_module(num_features, **kwargs)

    def __repr__(self) -> str:
        """One line: what a reader of `result.top(5)` looks for."""
        fitness = "-" if self.fitness is None else f"{self.fitness:.4f}"
        status = self.status + (f" ({self.reason})" if self.reason else "")
        stage = f", stage {self.stage}" if self.status == "valid" and self.stage_scores else ""
        return (f"Candidate(#{self.id} {status}, fitness {fitness}{stage}: "
                f"{self.formula or self.graph})")


def as_candidate(c: Candidate | Mapping[str, Any]) -> Candidate:
    """A Candidate as is; a mapping via `Candidate.from_dict`."""
    return Candidate.from_dict(c) if isinstance(c, Mapping) else c


@dataclass(frozen=True)
class TopLayer:
    """One distinct layer among a run's candidates: its best valid candidate and how often the
    search proposed it (`found`, every status counted) and, when spellings are merged, how many
    distinct structures compute it (`spellings`)."""

    key: str
    best: Candidate
    found: int
    spellings: int = 1

    @property
    def fitness(self) -> float:
        return self.best.fitness  # type: ignore[return-value]  (finite for a top layer)


KeyFn = Callable[[Candidate], "str | None"]


def top_layers(candidates: Iterable[Candidate | Mapping[str, Any]], n: int | None = 10,
               by: str = "key", same: KeyFn | Sequence[KeyFn] | None = None) -> list[TopLayer]:
    """The best distinct valid layers, best fitness first (ties: the earlier best candidate);
    in a staged search, layers that reached a further stage come first.

    Candidates are the same layer when they share `by` (canonical key, or "fingerprint"); a
    candidate without one stands alone. With `same` (a key of a candidate, or several, e.g.
    `same_layer_keys()`), layers equal on any key are one row (the best one, `spellings`
    counting them; the first key falls back to the row's own key, a later key of None merges
    nothing). `n=None` keeps every layer.
    """
    groups: dict[str, list[Candidate]] = {}
    for c in map(as_candidate, candidates):
        k = getattr(c, by, None) or c.key or f"id{c.id}"
        groups.setdefault(k, []).append(c)
    rows = []
    for k, members in groups.items():
        valid = [c for c in members if c.status == "valid" and finite(c.fitness)]
        if valid:
            best = max(valid, key=lambda c: (*c.evaluation.rank_key(), -c.id))
            rows.append(TopLayer(k, best, len(members)))
    # further stage first (multi-fidelity: a layer stopped by a hurdle ranks below those it
    # did not stop), then fitness
    rows.sort(key=lambda r: (-r.best.stage, -r.fitness, r.best.id))
    if same is not None:
        fns = [same] if callable(same) else list(same)
        parent = list(range(len(rows)))  # union-find over rows: equal on any key, one layer

        def root(i: int) -> int:
            while parent[i] != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i

        first: dict[tuple[int, str], int] = {}  # (key function, key) -> a row with it
        for j, r in enumerate(rows):
            for i, fn in enumerate(fns):
                k = fn(r.best) or (r.key if i == 0 else None)
                if k is not None:
                    a, b = root(first.setdefault((i, k), j)), root(j)
                    parent[max(a, b)] = min(a, b)  # the better row (earlier) stays the root
        merged: dict[int, TopLayer] = {}  # root -> row, insertion order: best first
        for j, r in enumerate(rows):
            m = merged.get(root(j))
            merged[root(j)] = r if m is None else replace(
                m, found=m.found + r.found, spellings=m.spellings + r.spellings)
        rows = list(merged.values())
    return rows if n is None else rows[:n]


def same_layer_keys() -> tuple[KeyFn, KeyFn]:
    """How readers tell that two distinct valid layers of a run are one (`top_layers(same=...)`):
    the same function (both fingerprints agree: `function_key`), or the same training: equal at
    v0 = 0 and v1 = 1, their initial values (`init_key`), and trained to exactly the same
    scores at the same stage (x - v0^2 and x - sign(v0)*ln|v0| both leave v0 at 0, where
    neither has a gradient). Each key is computed once per candidate."""
    memo: dict[tuple[str, int], str | None] = {}

    def function(c: Candidate) -> str | None:
        if ("function", c.id) not in memo:
            memo["function", c.id] = function_key(c.graph)
        return memo["function", c.id]

    def training(c: Candidate) -> str | None:
        if ("init", c.id) not in memo:
            memo["init", c.id] = init_key(c.graph)
        k = memo["init", c.id]
        if k is None or not c.scores:
            return None
        return f"{k}|{c.stage}|" + ",".join(f"{a}={v!r}" for a, v in sorted(c.scores.items()))

    return function, training


def function_key(graph_json: object) -> str | None:
    """Both fingerprints of a graph (its JSON or a Graph) as one key; None when it does not parse."""
    from evonorm.graph import Graph
    from evonorm.graph.fingerprint import fingerprint

    try:
        g = Graph.from_json(graph_json)
    except (ValueError, TypeError, KeyError):
        return None
    return fingerprint(g) + fingerprint(g, probe=1)


def init_key(graph_json: object) -> str | None:
    """The fingerprint with v0 = 0 and v1 = 1, their initial values; None when it does not run.

    Layers equal there compute the same function at the start of training, though not
    necessarily after (x - v0^2 and x agree at v0 = 0, and stay equal only because v0 gets no
    gradient at 0): readers pair it with equal training outcomes."""
    from evonorm.graph import Graph
    from evonorm.graph.fingerprint import INIT_PROBE, fingerprint_or_none

    try:
        g = Graph.from_json(graph_json)
    except (ValueError, TypeError, KeyError):
        return None
    return fingerprint_or_none(g, INIT_PROBE)


def reason_group(reason: str | None, *, fine: bool = False) -> str:
    """The kind of a rejection or failure reason, for counts: its part before a colon
    ("quality:resnet50_cifar" -> "quality"; kept whole, up to a space, when `fine`), "error: ..."
    -> "error", "stability" -> "stability"; "?" when there is none."""
    text = (reason or "").strip()
    head = text.split(":", 1)[0].strip()
    if head in ("error", "exception"):
        return "error"
    token = text.split(" ", 1)[0]
    if fine and ":" in token and not token.endswith(":"):  # "quality:x", not "timeout: worker..."
        return token
    return head.split(" ", 1)[0] or "?"
