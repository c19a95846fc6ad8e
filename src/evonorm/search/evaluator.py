"""One candidate end to end: cache lookup (driver side), then pre-checks, stability, quality and
full training on each anchor architecture (worker side). Fitness is the vector of held-out
accuracies, one per architecture; the search never sees the dataset's test split.
"""

from __future__ import annotations

import dataclasses
import time
from functools import lru_cache
from typing import Any

from evonorm.search.presets import SearchConfig
from evonorm.search.rejection import Rejection, precheck, quality, stability


def layer_identity(graph_json: dict) -> tuple[str, str | None]:
    """(canonical key, functional fingerprint) of a graph, for the store's cache lookup."""
    from evonorm.graph import Graph

    g = Graph.from_json(graph_json)
    try:
        fp = g.fingerprint()
    except Exception:  # a layer that cannot even run on the probe input: structure only
        fp = None
    return g.key(), fp


def cached_result(store, key: str, fingerprint: str | None) -> dict | None:
    """An earlier evaluation of the same layer (by structure, then by function) as a result dict."""
    hit = store.find_cached(key, fingerprint)
    if hit is None:
        return None
    return {"status": hit.status, "reason": hit.reason, "reason_step": hit.reason_step,
            "accuracies": dict(hit.accuracies), "fitness": hit.fitness, "timings": {},
            "cached_from": hit.id}


@lru_cache(maxsize=4)
def search_dataset(name: str, root: str | None, n_train: int | None, holdout: float, seed: int):
    """The search's data: (1 - holdout) of the training split to train, the rest to score.

    Cached per worker process so each worker loads the data once per run.
    """
    from evonorm.data import holdout_split, load_dataset

    ds = load_dataset(name, root, n_train=n_train, seed=seed)
    return holdout_split(ds, frac=holdout, seed=seed)


def train_config(cfg: SearchConfig, arch: str, *, steps: int | None = None, rerank: bool = False,
                 **extra):
    """The TrainConfig for `arch`: the named trainer preset with the search's overrides.

    The quality test passes schedule="constant": its short run stands for the first steps of the
    full run, where a cosine schedule is still at its peak learning rate.
    """
    from evonorm.train import PRESETS

    name = cfg.rerank_preset if rerank else cfg.train_preset
    if name not in PRESETS:
        raise ValueError(f"unknown training preset {name!r} (choose from {', '.join(PRESETS)})")
    base = PRESETS[name]
    over: dict[str, Any] = dict(cfg.rerank_train if rerank else cfg.train)
    over.update(cfg.arch_train.get(arch, {}))
    if not rerank:  # the search's data is already subset and split; reranks use the preset's size
        over.setdefault("n_train", None)
        over.setdefault("n_test", None)
    over.update(arch=arch, seed=cfg.seed)
    if steps is not None:
        over["steps"] = steps
    over.update(extra)
    return dataclasses.replace(base, **over)


def quality_config(cfg, arch: str, schedule: str = "constant"):
    """The quality test's training run on one architecture: the preset's settings, cut to
    `quality_steps` at a constant lr (it stands in for the first steps of the full run)."""
    return train_config(cfg, arch, steps=cfg.quality_steps, schedule=schedule)


def _result(status: str, rejection: Rejection | None = None, accuracies=None,
            timings=None) -> dict:
    accs = dict(accuracies or {})
    fitness = sum(accs.values()) / len(accs) if status == "valid" and accs else None
    return {"status": status, "reason": rejection.reason if rejection else None,
            "reason_step": rejection.step if rejection else None,
            "detail": rejection.detail if rejection else None,
            "accuracies": accs, "fitness": fitness, "timings": dict(timings or {})}


def _error(err: BaseException) -> Rejection:
    msg = str(err).splitlines()[0] if str(err) else ""
    return Rejection(f"error: {type(err).__name__}: {msg}"[:300])


def evaluate(payload: dict) -> dict:
    """Evaluate one graph under a search config (runs in a worker; must be importable by name).

    payload: {"graph": graph JSON, "config": SearchConfig.to_dict()}. Returns a result dict with
    status valid | rejected, reason, reason_step, accuracies {arch: acc}, fitness, timings.
    A layer that raises is rejected with reason "error: ..."; a non-finite loss with "nonfinite".
    """
    from evonorm.graph import Graph

    cfg = SearchConfig.from_dict(payload["config"])
    timings: dict[str, float] = {}
    t = time.perf_counter()

    def lap(phase: str) -> None:
        nonlocal t
        now = time.perf_counter()
        timings[phase] = timings.get(phase, 0.0) + now - t
        t = now

    # outside the try: missing data is the run's problem, not the layer's (the worker reports it)
    ds = search_dataset(cfg.dataset or "synthetic", cfg.data_root, cfg.n_train, cfg.holdout,
                        cfg.seed)
    lap("data")
    try:
        graph = Graph.from_json(payload["graph"])
        screen = cfg.algorithm != "random-norej"
        if screen and cfg.prechecks:
            rej = precheck(graph, seed=cfg.seed)
            lap("precheck")
            if rej:
                return _result("rejected", rej, timings=timings)
        if screen and cfg.stability_steps > 0:
            for arch in cfg.archs[:cfg.stability_archs]:
                width = train_config(cfg, arch).resolved_width()
                rej = stability(graph, ds, arch=arch, width=width, steps=cfg.stability_steps,
                                threshold=cfg.stability_threshold, batch=cfg.stability_batch,
                                lr=cfg.stability_lr, seed=cfg.seed)
                if rej:
                    lap("stability")
                    return _result("rejected", rej, timings=timings)
            lap("stability")
        if screen and cfg.quality_steps > 0:
            rej, accs = quality(graph, ds, cfg.archs, lambda a: quality_config(cfg, a),
                                factor=cfg.quality_factor)
            lap("quality")
            if rej:
                return _result("rejected", rej, accs, timings)
        from evonorm.train import train

        accs = {}
        for arch in cfg.archs:
            res = train(graph, ds, train_config(cfg, arch))
            if res.status != "ok" or res.accuracy is None:
                lap("train")
                rej = Rejection("nonfinite", res.failed_step, {"arch": arch, "phase": "train"})
                return _result("rejected", rej, accs, timings)
            accs[arch] = float(res.accuracy)
        lap("train")
        return _result("valid", None, accs, timings)
    except (KeyboardInterrupt, SystemExit, MemoryError):
        raise
    except Exception as err:  # an exception in the layer is a rejection with its reason (SPEC)
        lap("error")
        return _result("rejected", _error(err), timings=timings)
