"""Priors of the prescreen: labelled candidates of earlier runs of the proxy task, from which the
surrogate starts instead of from nothing.

Why: a short search finds too few valid layers to end the surrogate's cold start (the `demo` main
job finds 2-3 in 75 candidates), so without a prior the prescreen never predicts in the searches
most users run. A prior applies only to a run under the same setting (`setting`: the task's
settings that decide a candidate's features and labels, the hurdles' stages, the features'
versions): under another one a layer's fitness, and even whether it passes the quality test,
means something else. Shipped priors lie in `priors/` beside this module, each with its
provenance (the runs it was built from, the command that built it, when); `build_prior` makes
one from run folders.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Sequence

from evonorm import __version__
from evonorm.files import read_json, warn, write_atomic
from evonorm.proxy import features as task_features_module
from evonorm.proxy.config import ProxyTask
from evonorm.search import features as engine_features_module
from evonorm.search.store import Store
from evonorm.search.surrogate import Prescreen, check_prior, labelled_rows

PRIORS = Path(__file__).parent / "priors"
FORMAT = 1
# task settings that change neither a candidate's features nor its labels: where the data lies,
# and what a rerank does after the search. The held-out split's seed is left out too: the labels
# are the layer's, not the split's (seed layers' fitness spread is the same with a fixed split).
_IGNORED = ("data_root", "data_seed", "rerank_preset", "rerank_train", "rerank_top")


def setting(task: ProxyTask, space: str) -> dict[str, Any]:
    """What a prior shares with every run it applies to (plain JSON values, compared whole): the
    task's settings that matter, its stages and the engine's search space."""
    kept = {k: v for k, v in task.settings.to_dict().items() if k not in _IGNORED}
    versions = {"engine": engine_features_module.FEATURES_VERSION}
    if task.settings.prescreen_features == "signal":
        versions["signal"] = task_features_module.SIGNAL_VERSION
    else:
        versions["task"] = task_features_module.FEATURES_VERSION
    return json.loads(json.dumps({
        "space": space,  # an S-space prior says nothing of the batch ops' layers
        "task": kept, "stage_steps": list(task.stage_steps), "features": versions}))


@dataclass(frozen=True)
class Prior:
    """Labelled rows ({"features", "valid", "fitness"}), the setting they hold for, and where they
    came from."""

    setting: dict
    rows: list
    provenance: dict

    def to_dict(self) -> dict:
        return {"format": FORMAT, "setting": self.setting, "provenance": self.provenance,
                "rows": self.rows}


def read_prior(path: str | Path) -> Prior:
    """A prior file, checked; ValueError, one line naming the file, for anything else."""
    data = read_json(path)
    where = f"prescreen prior {path}"
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"{where}: not a prior file of format {FORMAT}")
    if not isinstance(data.get("setting"), dict) or not isinstance(data.get("provenance"), dict):
        raise ValueError(f"{where}: 'setting' and 'provenance' must be objects")
    rows = data.get("rows")
    if not isinstance(rows, list):
        raise ValueError(f"{where}: 'rows' must be a list")
    check_prior(rows, where)
    return Prior(data["setting"], rows, data["provenance"])


def write_prior(path: str | Path, prior: Prior) -> None:
    """A prior file as `read_prior` reads it, written whole or not at all: the setting and
    provenance indented, one line per row (a row is a candidate, so a rebuilt prior's diff reads
    candidate by candidate)."""
    head = json.dumps({k: v for k, v in prior.to_dict().items() if k != "rows"}, indent=1)
    rows = ",\n".join("  " + json.dumps(r) for r in prior.rows)
    write_atomic(path, (head[:-2] + ',\n "rows": [\n' + rows + "\n ]\n}\n").encode())


def prior_for(task: ProxyTask, space: str, preset: str,
              folder: str | Path | None = None) -> Prior | None:
    """The prior in `folder` (default: the shipped ones, PRIORS) built under the run's setting, or
    None where there is none. The run's preset's own prior, where its setting is not the run's
    (another space, a features version, a task setting changed), is ignored with one line on stderr
    naming what differs."""
    want = setting(task, space)
    own = None
    for path in sorted(Path(PRIORS if folder is None else folder).glob("*.json")):
        try:
            prior = read_prior(path)
        except (ValueError, OSError) as err:  # a bad prior costs the search its head start, not the search
            # OSError: a link, FIFO or folder at the name (UnsafePath), or a file that cannot be read
            warn(f"skipped the prescreen prior {path}: {(str(err).splitlines() or [''])[0][:300]}")
            continue
        if prior.setting == want:
            return prior
        if path.stem.rsplit("-", 1)[0] == preset:
            own = own or (path, prior)
    if own is not None:
        path, prior = own
        theirs, ours = prior.setting, want
        off = [k for k in sorted(set(ours) | set(theirs)) if k != "task" and ours.get(k) != theirs.get(k)]
        off += [f"task.{k}" for k in sorted(set(ours["task"]) | set(theirs.get("task", {})))
                if ours["task"].get(k) != theirs.get("task", {}).get(k)]
        warn(f"the prescreen prior {path.name} does not apply to this run (it differs in "
             f"{', '.join(off)}): ignored")
    return None


def build_prior(runs: Sequence[str | Path], command: str) -> Prior:
    """A prior from finished run folders of one setting (read only): every candidate that
    teaches the surrogate something, with its features at birth (computed now for a run searched
    without the prescreen). ValueError when the runs' settings differ, before any feature is
    computed (that takes a while for a long search)."""
    read = []
    for run in runs:
        with Store(run, readonly=True) as st:
            read.append((run, st.search_config(), st.candidates(), st.get_meta("status")))
    if not read:
        raise ValueError("a prior needs at least one run folder")
    tasks = [ProxyTask.of_run(cfg) for _, cfg, _, _ in read]
    want = setting(tasks[0], read[0][1].evolution.space)
    for (run, cfg, _, _), task in zip(read[1:], tasks[1:]):
        if setting(task, cfg.evolution.space) != want:
            raise ValueError(f"run {run} was searched under another setting than {runs[0]}: "
                             "a prior holds one setting")
    rows: list[dict] = []
    sources: list[dict] = []
    for (run, cfg, cands, status), task in zip(read, tasks):
        found = labelled_rows(cands, Prescreen(cfg, partial(task_features_module.task_features,
                                                            task=task)))
        rows.extend(found)
        sources.append({"run": Path(run).name, "preset": cfg.preset,
                        "algorithm": cfg.evolution.algorithm,
                        "seed": cfg.seed, "space": cfg.evolution.space, "candidates": len(cands),
                        "status": status, "rows": len(found),
                        "valid": sum(r["valid"] for r in found),
                        "worker_seconds": round(sum(c.seconds for c in cands), 1)})
    provenance = {"runs": sources, "command": command, "evonorm": __version__,
                  "created": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                  "rows": len(rows), "valid": sum(r["valid"] for r in rows),
                  # what the prior cost to build: its searches' worker-seconds in all
                  "worker_seconds": round(sum(r["worker_seconds"] for r in sources), 1)}
    return Prior(want, rows, provenance)
