"""Reranking (paper Sec. 5.2): retrain the search's top layers in a larger setting on 90% of the
training set, score them on the held-out 10%, and rank by mean accuracy over the architectures.
Results go into the run's store; candidates already reranked in the same setting are skipped, so
an interrupted rerank continues where it stopped.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from evonorm.search.candidates import top_layers
from evonorm.search.config import SearchConfig
from evonorm.search.store import Store


def rerank_config(cfg: SearchConfig, preset: str | None = None,
                  overrides: dict | None = None) -> SearchConfig:
    """The search config with the rerank setting asked for; ValueError if it cannot train
    (checked on every architecture before anything is trained or written)."""
    from evonorm.search.evaluator import train_config

    if preset is not None:
        cfg = cfg.replace(rerank_preset=preset, rerank_train=dict(overrides or {}))
    elif overrides:
        cfg = cfg.replace(rerank_train={**cfg.rerank_train, **overrides})
    for arch in cfg.archs:
        train_config(cfg, arch, cfg.rerank_training)
    return cfg


def rerank(run_dir: str | Path, *, top: int | None = None, preset: str | None = None,
           overrides: dict | None = None, log=None) -> list[dict]:
    """Rerank a run's top layers; returns the store's rerank rows (best first)."""
    from evonorm.search.evaluator import search_dataset, train_config
    from evonorm.train import train

    log = log or (lambda s: print(s, file=sys.stderr, flush=True))
    with Store(run_dir) as store:
        cfg = rerank_config(store.search_config(), preset, overrides)
        setting = cfg.rerank_training
        label = setting.label
        chosen = [row.best for row in top_layers(store.candidates(), top or cfg.rerank_top)]
        done = store.reranked_ids(label)
        todo = [c for c in chosen if c.id not in done]
        if not chosen:
            log("rerank: no valid candidate to rerank")
            return store.reranks()
        data = search_dataset(cfg.replace(n_train=None))  # the whole training split
        for n, c in enumerate(todo, 1):
            start = time.perf_counter()
            accs: dict[str, float] = {}
            status, reason = "ok", None
            for arch in cfg.archs:
                try:
                    res = train(c.graph, data, train_config(cfg, arch, setting))
                except Exception as err:  # record it; the other layers still get their rerank
                    status, reason = "failed", f"error: {type(err).__name__}: {err}"[:300]
                    break
                if res.status != "ok" or res.accuracy is None:
                    status, reason = "failed", f"nonfinite:{arch}@{res.failed_step}"
                    break
                accs[arch] = float(res.accuracy)
                log(f"rerank [{n}/{len(todo)}] candidate {c.id}: {arch} {accs[arch]:.4f} ({res.seconds:.0f}s)")
            mean = sum(accs.values()) / len(accs) if status == "ok" else None
            store.add_rerank(candidate_id=c.id, preset=label, accuracies=accs, mean=mean,
                             status=status, reason=reason, search_fitness=c.fitness,
                             seconds=time.perf_counter() - start)
            log(f"rerank [{n}/{len(todo)}] candidate {c.id}: "
                + (f"mean {mean:.4f}" if mean is not None else reason))
        return [r for r in store.reranks() if r["preset"] == label]
