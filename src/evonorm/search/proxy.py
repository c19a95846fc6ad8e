"""The built-in proxy task, written as an objective (`objective(norm_act, trial)`): the one a search
runs when it names none.

Per candidate: pre-checks, the stability stress test and the quality test, then the full training
on every anchor architecture of the run's config (in stages, with hurdles, over `train_seeds`
training runs; `evaluator.train_stages`). The checks need the layer itself, not only its module:
they read `trial.graph`; the anchor architectures build the layer from that graph. The fitness is
the held-out accuracy per architecture (a dict: the architectures are the objectives).
"""

from __future__ import annotations

import time

from evonorm.search.evaluation import Evaluation
from evonorm.search.evaluator import quality_config, search_dataset, train_config, train_stages
from evonorm.search.objective import Reject, Trial, run_trial
from evonorm.search.proxy_features import task_features
from evonorm.search.rejection import Rejection, precheck, quality, stability


def _reject(rej: Rejection, accuracies: dict | None = None) -> Reject:
    return Reject(rej.reason, step=rej.step, detail=rej.detail, scores=accuracies)


def _error(err: BaseException) -> Rejection:
    msg = str(err).splitlines()[0] if str(err) else ""
    return Rejection(f"error: {type(err).__name__}: {msg}"[:300])


def objective(norm_act, trial: Trial) -> dict[str, float]:
    """The proxy task on `trial.graph` under `trial.config` (see the module docstring).

    A layer that raises is rejected with reason "error: ..." (the layer's fault, so cached like any
    rejection); a non-finite loss with "nonfinite". Missing data raises: the run's problem, not the
    layer's, so the candidate is failed. Phase times go to `trial.timings`.
    """
    cfg, graph = trial.config, trial.graph
    t = time.perf_counter()

    def lap(phase: str) -> None:
        nonlocal t
        now = time.perf_counter()
        trial.timings[phase] = trial.timings.get(phase, 0.0) + now - t
        t = now

    ds = search_dataset(cfg)  # outside the try: missing data is the run's problem
    lap("data")
    try:
        screen = cfg.algorithm != "random-norej"
        if screen and cfg.prechecks:
            rej = precheck(graph, seed=cfg.seed)
            lap("precheck")
            if rej:
                raise _reject(rej)
        if screen and cfg.stability_steps > 0:
            for arch in cfg.archs[:cfg.stability_archs]:
                tcfg = train_config(cfg, arch)
                rej = stability(graph, ds, arch=arch, width=tcfg.resolved_width(),
                                steps=cfg.stability_steps, threshold=cfg.stability_threshold,
                                batch=cfg.stability_batch, lr=cfg.stability_lr, seed=cfg.seed,
                                model_kwargs=tcfg.layer_kwargs())
                if rej:
                    lap("stability")
                    raise _reject(rej)
            lap("stability")
        if screen and cfg.quality_steps > 0:
            rej, accs = quality(graph, ds, cfg.archs, lambda a: quality_config(cfg, a),
                                factor=cfg.quality_factor)
            lap("quality")
            if rej:
                raise _reject(rej, accs)
        result = train_stages(graph, ds, cfg, checkpoint=trial.checkpoint, screen=screen,
                              trial=trial)
        lap("train")
    except Reject:
        raise
    except (KeyboardInterrupt, SystemExit, MemoryError):
        raise
    except Exception as err:  # an exception in the layer is a rejection with its reason
        lap("error")
        raise _reject(_error(err)) from None
    if result.status != "valid":
        raise _reject(Rejection(result.reason or "rejected", result.reason_step, result.detail),
                      result.accuracies)
    return dict(result.accuracies)


# what the task hands the engine for the prescreen: its anchor architectures' features at birth
objective.prescreen_features = task_features


def evaluate_candidate(payload: dict) -> Evaluation:
    """One candidate through the proxy objective (`run_trial`), as a search's worker runs it."""
    return run_trial(objective, payload)


def check_data(cfg) -> None:
    """Load the run's data once in the driver, so a missing dataset fails in one line up front."""
    search_dataset(cfg)
