"""The built-in proxy task, written as an objective (`objective(norm_act, trial)`): a
`ProxyObjective` holds the run's resolved task (`ProxyTask`) and is handed to the search engine
like any objective.

Per candidate (after the engine's checks of the layer alone): the stability stress test and the quality test, then the full training
on every anchor architecture of the run's config (in stages, with hurdles, over `train_runs`
training runs; `evonorm.proxy.training.train_stages`). The checks need the layer itself, not only its module:
they read `trial.graph`; the anchor architectures build the layer from that graph. The fitness is
the held-out accuracy per architecture (a dict: the architectures are the objectives).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

from evonorm.proxy.config import ProxyTask
from evonorm.proxy.rejection import quality, stability
from evonorm.proxy.training import search_dataset, train_stages
from evonorm.search.config import SearchConfig
from evonorm.search.evaluation import Evaluation
from evonorm.search.objective import CandidateCost, Reject, Trial, run_trial


# what measuring a run after its search (`evonorm.measure`) records in the run folder: the rows name
# the store's candidates, so a search started over (`force`) clears them with the store
RERANK_FILE = "rerank.jsonl"
RETRAIN_FILE = "retrain.jsonl"


def _error(err: BaseException) -> Reject:
    msg = str(err).splitlines()[0] if str(err) else ""
    return Reject(f"error: {type(err).__name__}: {msg}"[:300])


@dataclass(frozen=True)
class ProxyObjective:
    """The proxy task under a run's settings, as an objective: picklable, so that the engine hands
    it to its workers like a user's function. It holds the resolved task and the few engine facts
    its hooks report: the preset and search space (which shipped prescreen prior applies), the
    workers and executor (the run's facts), and the preset's measured cost per candidate."""

    task: ProxyTask
    preset: str = "custom"
    space: str = "s"
    workers: int = 1
    executor: str = "local"
    cost: CandidateCost | None = None
    # the task's records in the run folder, which name the store's candidates: a search started
    # over (`force`) clears them with the store
    run_files = (RERANK_FILE, RETRAIN_FILE)

    @classmethod
    def for_run(cls, cfg: SearchConfig, task: ProxyTask | None = None) -> "ProxyObjective":
        """The objective of a run's config: its task (`task`, where the caller resolved it, else
        `ProxyTask.of_run(cfg)`) and the engine's facts, taken once. ValueError for a config
        without the built-in task's settings."""
        from evonorm.proxy.presets import measured_cost

        ex = cfg.execution
        return cls(task or ProxyTask.of_run(cfg), preset=cfg.preset, space=cfg.evolution.space,
                   workers=ex.num_workers, executor=ex.executor, cost=measured_cost(cfg))

    def __call__(self, norm_act, trial: Trial) -> dict[str, float]:
        """The task on `trial.graph`, at the trial's seed and device (`objective`)."""
        task = dataclasses.replace(self.task, seed=trial.seed, device=trial.device)
        if trial.data_dir:  # the data folder as a remote worker received it
            task = task.replace_settings(data_root=trial.data_dir)
        return objective(task, trial)

    def run_facts(self) -> dict:
        """What the run trains on, for its start line and report: the dataset's name and train /
        held-out sizes after the search's split, and the device the trainer resolves."""
        task = self.task
        ds = search_dataset(task)
        return {"dataset": {"name": task.settings.dataset, "train": len(ds.train_y),
                            "held_out": len(ds.test_y), "classes": ds.num_classes,
                            "image_size": ds.image_size},
                "device": {"type": task.training[task.archs[0]].device,
                           "workers": self.workers, "executor": self.executor}}

    def prescreen_features(self, graph) -> dict[str, float | None]:
        """What the task hands the engine's prescreen: features of the new layer in the anchor
        architectures at initialisation (`evonorm.proxy.features`), under the task's own
        settings: every architecture's (`task_features`), or the first's signal propagation
        alone (`signal_features`, prefixed "signal_"), as the task's `prescreen_features` says.
        With "signal", a hopeless network (`signal_verdict`) is rejected here, untrained, with
        reason "signal" and what was wrong."""
        from evonorm.proxy.features import signal_features, signal_verdict, task_features

        if self.task.settings.prescreen_features == "signal":
            feats = signal_features(graph, self.task)
            why = signal_verdict(feats)
            if why is not None:
                raise Reject("signal", step=0, detail={"why": why})
            return {f"signal_{k}": v for k, v in feats.items()}
        return task_features(graph, self.task)

    def prescreen_prior(self) -> list[dict] | None:
        """The labelled candidates the task ships for the run's setting (`evonorm.proxy.prior`),
        from which the prescreen's surrogate starts; None where it ships none."""
        from evonorm.proxy.prior import prior_for

        prior = prior_for(self.task, self.space, self.preset)
        return None if prior is None else prior.rows

    def expected_cost(self) -> CandidateCost | None:
        """What a candidate of the run's preset was measured to cost (measured.json's "cost"), for
        the search's ETA before it has timings of its own; None for a run whose settings are not
        the preset's as measured (`evonorm.proxy.presets.unmeasured`), or a preset not measured."""
        return self.cost


def objective(task: ProxyTask, trial: Trial) -> dict[str, float]:
    """The proxy task on `trial.graph` (see the module docstring).

    A layer that raises is rejected with reason "error: ..." (the layer's fault, so cached like any
    rejection); a non-finite loss with "nonfinite". Missing data raises: the run's problem, not the
    layer's, so the candidate is failed. Phase times go to `trial.timings`.
    """
    settings = task.settings
    graph = trial.graph
    t = time.perf_counter()

    def lap(phase: str) -> None:
        nonlocal t
        now = time.perf_counter()
        trial.timings[phase] = trial.timings.get(phase, 0.0) + now - t
        t = now

    ds = search_dataset(task)  # outside the try: missing data is the run's problem
    lap("data")
    try:
        screen = settings.rejection
        if screen and settings.stability_steps > 0:
            trial.phase("stability test")
            rej = stability_test(task, graph, ds)
            lap("stability")
            if rej:
                raise rej
        if screen and settings.quality_steps > 0:
            trial.phase("quality test")
            rej = quality(graph, ds, task.archs, task.quality_training,
                          factor=settings.quality_factor)[0]
            lap("quality")
            if rej:
                raise rej
        result = train_stages(graph, ds, task, checkpoint=trial.checkpoint, screen=screen,
                              trial=trial)
        lap("train")
    except Reject:
        raise
    except (KeyboardInterrupt, SystemExit, MemoryError):
        raise
    except Exception as err:  # an exception in the layer is a rejection with its reason
        lap("error")
        raise _error(err) from None
    return dict(result.scores)


def stability_test(task: ProxyTask, graph, ds) -> Reject | None:
    """The stress test on the run's first `stability_archs` architectures: the first rejection."""
    given = task.settings
    for arch in task.archs[:given.stability_archs]:
        tcfg = task.training[arch]
        rej = stability(graph, ds, arch=arch, width=tcfg.resolved_width(),
                        steps=given.stability_steps, threshold=given.stability_threshold,
                        batch=given.stability_batch, lr=given.stability_lr, seed=task.seed,
                        model_kwargs=tcfg.layer_kwargs())
        if rej:
            return rej
    return None


def evaluate_candidate(payload: dict) -> Evaluation:
    """One candidate through the proxy objective (`run_trial`), as a search's worker runs it.
    payload: {"graph": graph JSON, "config": SearchConfig.to_dict()}."""
    cfg = SearchConfig.from_dict(payload["config"])
    return run_trial(ProxyObjective(ProxyTask.of_run(cfg)), {
        "graph": payload["graph"], "seed": cfg.seed, "prechecks": cfg.evolution.prechecks,
        "device": cfg.execution.device, "staged": bool(cfg.hurdles.stage_steps)})
