"""What a report reads: one run's candidates and population from its store, and the task's records
(reranks, re-training) from their files beside it.

The figures and tables take plain data (`RunData`, candidate records or dicts) so they can be
built and tested without a store; `load_run` is the only place that opens one, read-only, and it
tolerates a search that is still writing (a locked database is retried, unknown statuses count as
pending, a candidate whose graph cannot be parsed is kept with its JSON shown instead of a formula).

Graph imports are made where a layer is read: they load torch, which reading a store does not need.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evonorm.files import printable
from evonorm.search.candidates import Candidate, as_candidate, reason_group
from evonorm.search.evaluation import STATUSES, finite
from evonorm.proxy.config import ProxyConfig
from evonorm.measure.references import REFERENCES_FILE, read_references
from evonorm.measure.rerank import read_reranks
from evonorm.measure.ledger import Row
from evonorm.measure.retrain import read_rows
from evonorm.search.store import Store, resolve_path, run_folder

FINISHED = STATUSES


@dataclass
class RunData:
    """Everything a report shows about one run; `name` labels it in figures and tables."""

    name: str
    candidates: list[Candidate] = field(default_factory=list)  # or flat dicts, read as Candidates
    population: list[int] = field(default_factory=list)
    reranks: list[Row] = field(default_factory=list)  # best first
    config: dict = field(default_factory=dict)  # as stored: each part's settings under its part
    # Reference layers (e.g. "bn_relu", "evonorm_b0") -> {arch: accuracy}, for the Pareto figure.
    references: dict[str, dict[str, float]] = field(default_factory=dict)
    in_flight: int = 0  # proposals handed to workers and not finished when the store was read
    status: str = ""  # the store's run status ("running", "complete", ...) when it records one
    retrain: list[Row] = field(default_factory=list)  # multi-seed re-training, if any
    setup: str = ""  # what the run trained on: preset, dataset and its sizes, device (`setup_line`)
    path: str = ""  # the run folder, as the report names it
    classes: int | None = None  # the dataset's class count, as `evonorm search` stores it
    # labelled candidates of earlier runs the prescreen's surrogate started from ({"rows", "valid"})
    prescreen_prior: dict | None = None

    def __post_init__(self) -> None:
        self.candidates = sorted((as_candidate(c) for c in self.candidates), key=lambda c: c.id)

    def part(self, name: str) -> dict:
        """One part of the stored config ("evolution", "hurdles", "execution", "task"); {} where
        it has none (an objective of one's own has no task)."""
        part = self.config.get(name)
        return part if isinstance(part, dict) else {}

    @property
    def train_seeds(self) -> int:
        """Training runs behind a fully trained layer's search fitness (the task's
        `final_train_runs`, else `train_runs`; 1 without a task)."""
        task = self.part("task")
        return int(task.get("final_train_runs") or task.get("train_runs", 1))

    @property
    def fidelity(self) -> str:
        """How far the run's proxy orders layers as longer training does (a line; empty for a
        search on the user's own objective, whose proxy is the user's)."""
        if self.config.get("objective"):
            return ""
        from evonorm.proxy.presets import fidelity_note

        return fidelity_note(str(self.config.get("preset", "?")),
                             str(self.part("evolution").get("space", "s")), self.config)

    @property
    def finished(self) -> list[Candidate]:
        return [c for c in self.candidates if c.status in FINISHED]

    @property
    def valid(self) -> list[Candidate]:
        return [c for c in self.candidates if c.status == "valid" and finite(c.fitness)]

    @property
    def archs(self) -> list[str]:
        """The score names (the proxy task's architectures) in the order the config lists them, else in order
        of first appearance."""
        cfg = self.part("task").get("archs") or self.config.get("scores") or []
        seen = [a for a in cfg if isinstance(a, str)]
        for c in self.candidates:
            for a in c.scores or {}:
                if a not in seen:
                    seen.append(a)
        return seen

    @property
    def num_classes(self) -> int:
        n = self.classes
        if isinstance(n, (int, float)) and not isinstance(n, bool) and n >= 2:
            return int(n)
        return 100 if str(self.part("task").get("dataset") or "").lower() == "cifar100" else 10


def load_run(run: Path, *, name: str | None = None, retries: int = 20, wait: float = 0.25) -> RunData:
    """Read one run's store read-only; a writer holding a lock is waited for, then retried.

    Raises FileNotFoundError naming the expected file when the run has no store.
    """
    path = resolve_path(run)
    if not path.is_file():
        raise FileNotFoundError(f"no search store at {path} (is {run_folder(run)} a run folder?)")

    last: Exception | None = None
    for _ in range(max(1, retries)):
        store = None
        try:
            store = Store(path, readonly=True)
            data = RunData(
                name=name or run_folder(run).name or str(run),
                candidates=list(store.candidates()),
                population=list(store.population()),
                config=store.checked_config(task=ProxyConfig),
                in_flight=len(_safe(store, "pending_proposals")),
                status=_meta(store, "status"),
            )
            facts = store.get_meta("dataset")
            data.setup = setup_line(data.config, facts, store.get_meta("device"))
            data.path = str(run_folder(run))
            data.classes = facts.get("classes") if isinstance(facts, dict) else None
            prior = store.get_meta("prescreen_prior")
            data.prescreen_prior = prior if isinstance(prior, dict) else None
            data.references = _references(data, run_folder(run))
            data.retrain = read_rows(run)
            data.reranks = read_reranks(run)
            return data
        except sqlite3.OperationalError as err:  # "database is locked" while a writer commits
            last = err
            time.sleep(wait)
        finally:
            if store is not None:
                store.close()
    raise RuntimeError(f"could not read {path}: {last}")


def setup_line(config: dict, dataset: Any = None, device: Any = None) -> str:
    """'preset demo, dataset fashion_mnist (3000 train / 1000 held-out images), device cpu, 2 local
    worker(s)' from the facts `evonorm search` stores (meta keys dataset, device), else the config."""
    parts = [f"preset {config.get('preset', '?')}"]
    if config.get("objective"):  # a search on the user's own objective: no dataset of ours
        parts.append(f"objective {config['objective']}")
    elif isinstance(dataset, dict):
        parts.append(f"dataset {dataset.get('name')} ({dataset.get('train')} train / "
                     f"{dataset.get('held_out')} held-out images)")
    else:
        task = config.get("task") if isinstance(config.get("task"), dict) else {}
        parts.append(f"dataset {task.get('dataset') or '?'}")
    if isinstance(device, dict):
        parts.append(f"device {device.get('type')}, {device.get('workers')} {device.get('executor')} worker(s)")
    return ", ".join(parts)


def _meta(store: Any, key: str) -> str:
    try:
        return str(store.get_meta(key, "") or "")
    except sqlite3.OperationalError:
        raise
    except Exception:
        return ""


def _safe(store: Any, method: str, default: Any = ()) -> Any:
    """An optional part of the read API (e.g. no reranks yet) reads as empty, not as an error."""
    fn = getattr(store, method, None)
    if fn is None:
        return default
    try:
        return fn()
    except sqlite3.OperationalError:
        raise
    except Exception:
        return default


def _references(data: RunData, folder: Path) -> dict[str, dict[str, float]]:
    """Reference layers' accuracies: from `references.json` in the run folder or the report folder
    (written by `evonorm retrain --references`), or from seed candidates whose
    graph is a named library layer. A damaged references file is a DamagedFile naming it."""
    refs: dict[str, dict[str, float]] = {}
    for p in (folder / REFERENCES_FILE, folder / "report" / REFERENCES_FILE):
        refs.update({k: {a: x for a, x in v.items() if finite(x)} for k, v in read_references(p).items()})
    names = named_keys()
    for c in data.candidates:
        label = names.get(c.key or "")
        if label and c.scores and label not in refs:
            refs[label] = dict(c.scores)
    return refs


def named_keys() -> dict[str, str]:
    """Canonical key -> name for the library's named EvoNorm layers (empty when unavailable)."""
    try:
        from evonorm.graph.library import NAMED_GRAPHS
    except Exception:
        return {}
    out = {}
    for name, g in NAMED_GRAPHS.items():
        if name.startswith("evonorm_"):
            try:
                out[g.key()] = name
            except Exception:
                continue
    return out


def reason_category(c: Candidate) -> str:
    """A short label for a candidate's outcome: "valid", "pending" (not finished), or its reason's
    kind ("quality:resnet50_cifar", "precheck:constant", "stability", "nonfinite", "error", ...)."""
    if c.status == "valid":
        return "valid"
    if c.status not in FINISHED:
        return "pending"
    return printable(reason_group(c.reason or c.status, fine=True))  # a reason is the objective's text


def formula(graph_json: Any, *, latex: bool = False) -> str:
    """The layer's formula, or its JSON when the graph cannot be parsed (never raises)."""
    import json

    try:
        from evonorm.graph import Graph

        g = Graph.from_json(graph_json)
        return g.to_latex() if latex else g.to_text()
    except Exception:
        return json.dumps(graph_json, separators=(",", ":")) if graph_json is not None else "?"
