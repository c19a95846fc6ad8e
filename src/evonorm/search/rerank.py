"""Reranking (paper Sec. 5.2): retrain the search's top layers in a larger setting on 90% of the
training set, score them on the held-out 10%, and rank by mean accuracy over the architectures.
Results go into the run's store; candidates already reranked in the same setting are skipped, so
an interrupted rerank continues where it stopped.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from evonorm.search.presets import SearchConfig
from evonorm.search.store import Candidate, Store


def top_candidates(cands: list[Candidate], top: int) -> list[Candidate]:
    """The `top` best valid candidates by search fitness, one per distinct layer (canonical key)."""
    seen, out = set(), []
    for c in sorted((c for c in cands if c.status == "valid" and c.fitness is not None),
                    key=lambda c: (-c.fitness, c.id)):
        if c.key not in seen:
            seen.add(c.key)
            out.append(c)
    return out[:top]


def setting_label(preset: str, overrides: dict) -> str:
    """How a rerank setting is named in the store: the trainer preset plus its overrides."""
    extra = ",".join(f"{k}={v}" for k, v in sorted(overrides.items()))
    return f"{preset}[{extra}]" if extra else preset


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
        train_config(cfg, arch, rerank=True)
    return cfg


def rerank(run_dir: str | Path, *, top: int | None = None, preset: str | None = None,
           overrides: dict | None = None, log=None) -> list[dict]:
    """Rerank a run's top layers; returns the store's rerank rows (best first)."""
    from evonorm.data import holdout_split, load_dataset
    from evonorm.search.evaluator import train_config
    from evonorm.train import train

    log = log or (lambda s: print(s, file=sys.stderr, flush=True))
    with Store(run_dir) as store:
        raw = store.config()
        if not raw:
            raise FileNotFoundError(f"{run_dir} holds no search (no config in its store)")
        cfg = rerank_config(SearchConfig.from_dict(raw), preset, overrides)
        label = setting_label(cfg.rerank_preset, cfg.rerank_train)
        chosen = top_candidates(store.candidates(), top or cfg.rerank_top)
        done = store.reranked_ids(label)
        todo = [c for c in chosen if c.id not in done]
        if not chosen:
            log("rerank: no valid candidate to rerank")
            return store.reranks()
        data = holdout_split(load_dataset(cfg.dataset or "synthetic", cfg.data_root, seed=cfg.seed),
                             frac=cfg.holdout, seed=cfg.seed)
        for n, c in enumerate(todo, 1):
            start = time.perf_counter()
            accs: dict[str, float] = {}
            status, reason = "ok", None
            for arch in cfg.archs:
                try:
                    res = train(c.graph, data, train_config(cfg, arch, rerank=True))
                except Exception as err:  # record it; the other layers still get their rerank
                    status, reason = "failed", f"error: {type(err).__name__}: {err}"[:300]
                    break
                if res.status != "ok" or res.accuracy is None:
                    status, reason = "failed", f"nonfinite:{arch}@{res.failed_step}"
                    break
                accs[arch] = float(res.accuracy)
            mean = sum(accs.values()) / len(accs) if status == "ok" else None
            store.add_rerank(candidate_id=c.id, preset=label, accuracies=accs, mean=mean,
                             status=status, reason=reason, search_fitness=c.fitness,
                             seconds=time.perf_counter() - start)
            log(f"rerank [{n}/{len(todo)}] candidate {c.id}: "
                + (f"mean {mean:.4f}" if mean is not None else reason))
        return [r for r in store.reranks() if r["preset"] == label]


def rerank_table(rows: list[dict], graphs: dict[int, dict]) -> str:
    """Plain-text ranking with formulas."""
    from evonorm.graph import Graph

    if not rows:
        return "no reranked layer"
    lines = []
    for rank, r in enumerate(rows, 1):
        try:
            formula = Graph.from_json(graphs[r["candidate_id"]]).to_text()
        except Exception as err:
            formula = f"<{type(err).__name__}>"
        mean = "failed" if r["mean"] is None else f"{r['mean']:.4f}"
        search = "-" if r["search_fitness"] is None else f"{r['search_fitness']:.4f}"
        lines.append(f"{rank:>3}  id {r['candidate_id']:<5} rerank {mean:<7} search {search:<7} "
                     f"{formula}")
    return "\n".join(lines)
