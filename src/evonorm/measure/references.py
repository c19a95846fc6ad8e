"""Reference layers (BN-ReLU, EvoNorm-B0/S0) trained exactly like a search's candidates.

The report's Pareto and progress figures place them beside the search's layers. A search does
not evaluate them itself, so `evonorm retrain RUN --references` trains them once, with the run's
own data split, seed and full-training settings on each anchor architecture, as jobs of the ledger
(`RUN/references.jsonl`, resumable), and keeps their accuracies in `RUN/references.json`, which later
reports read without training again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Sequence

from evonorm.files import DamagedFile, key_text, number_problem, read_json, type_problem, warn, write_atomic
from evonorm.measure.ledger import Job, measure, run_measurement
from evonorm.proxy.config import ProxyTask
from evonorm.proxy.training import require_builtin
from evonorm.search.store import Store, run_folder

# The one list of reference layers per search space: what a calibration must rank above random
# layers, what a run's found layers are re-trained against, and what the report draws.
REFERENCES_BY_SPACE = {"s": ("bn_relu", "gn_relu", "evonorm_s0"),
                       "b": ("bn_relu", "evonorm_b0", "b_top1", "b_top2")}
DEFAULT_REFERENCES = ("bn_relu", "evonorm_b0", "evonorm_s0")  # a run's report, any space
REFERENCES_FILE = "references.json"  # what the report reads: {layer: {arch: accuracy or null}}
REFERENCES_LEDGER = "references.jsonl"  # the runs that made it


def train_references(run: Path, names: Sequence[str] = DEFAULT_REFERENCES, *,
                     log: Callable[[str], None] | None = None, user_archs: Sequence[str] = (),
                     fn: Callable[[dict], dict] | None = None) -> dict[str, dict[str, float | None]]:
    """Train each reference layer on every anchor architecture of the run; returns and stores
    {layer: {arch: held-out accuracy or None where it failed}}. Layers already in the run's
    references file are kept, not retrained. A run's MODULE:FUNCTION architectures are built only
    when named again in `user_archs` (ValueError otherwise). `fn` stands in for the ledger's
    `train_job` (tests; importable by name)."""
    from evonorm.models import check_named_again

    with Store(run, readonly=True) as store:
        cfg = store.search_config()
    require_builtin(cfg, "training the reference layers")
    task = ProxyTask.of_run(cfg)
    check_named_again(run, task.archs, user_archs)
    path = run_folder(run) / REFERENCES_FILE
    refs = read_references(path)  # a damaged file stops here, before any training
    jobs = [Job(name, "reference", cfg.seed, name) for name in names
            if not (name in refs and all(a in refs[name] for a in task.archs))]
    if jobs:
        m = run_measurement("references", task, cfg.execution, f"{task.settings.dataset} search split")
        for row in measure(run_folder(run) / REFERENCES_LEDGER, jobs, m, log=log or (lambda s: None), fn=fn):
            refs[row.layer] = {a: row.scores.get(a) for a in task.archs}
        write_atomic(path, (json.dumps(refs, indent=1) + "\n").encode())
    return refs


def read_references(path: Path) -> dict[str, dict[str, float | None]]:
    """A references file ({} when absent): {layer: {arch: accuracy or null}}; DamagedFile naming the file and
    the layer otherwise. A layer with an accuracy that is not finite or outside [0, 1] is dropped with a
    warning."""
    refs = read_json(path)
    if refs is None:
        return {}
    problem = type_problem(refs, dict[str, dict[str, float | None]])
    if problem is not None:
        raise DamagedFile(path, "", problem)
    wrong = {layer: f"{key_text(layer)}: {key_text(arch)}: {p}" for layer, accs in refs.items()
             for arch, acc in accs.items() if (p := number_problem(acc, 0.0, 1.0))}
    if wrong:  # an accuracy that cannot be true is not trusted (a retrain trains the layer again)
        warn(f"dropped {len(wrong)} layer(s) of {path} that cannot be true ({next(iter(wrong.values()))})")
    return {layer: accs for layer, accs in refs.items() if layer not in wrong}
