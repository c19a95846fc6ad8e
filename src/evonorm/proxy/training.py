"""The built-in proxy task's pieces: the run's data (`with_dataset`, `search_dataset`) and the staged
full training on each anchor architecture (`train_stages`), each under the resolved task
(`evonorm.proxy.config.ProxyTask`, whose `training` holds every architecture's TrainConfig). The
objective that runs them for each candidate is `evonorm.proxy.objective`. Fitness is the vector
of held-out accuracies, one per architecture; the search never sees the dataset's test split.

The trainer, models and data are imported in the functions that train: they load torch, which
the search engine's processes need only where candidates are trained.
"""

from __future__ import annotations

import dataclasses
import os
import time
from functools import lru_cache, partial

from evonorm.proxy.config import ProxyTask
from evonorm.search.config import SearchConfig
from evonorm.search.evaluation import Evaluation
from evonorm.search.objective import TRAINING, Reject, Trial
from evonorm.proxy.rejection import quality_threshold


def with_dataset(task: ProxyTask) -> ProxyTask:
    """The task with its dataset named (the default one when unset): resolved once, when a
    run starts, and stored with it. Never a silent fall-back to the synthetic set: without
    Fashion-MNIST installed, FileNotFoundError says how to install it. A file.npz is named by
    its absolute path, with its sha256 (`data_sha256`)."""
    from evonorm.data import default_dataset_name, file_sha256, is_npz, read_npz_bytes

    given = task.settings
    if given.dataset is None:
        return task.replace_settings(dataset=default_dataset_name(given.data_root, fallback=False))
    if is_npz(given.dataset) and given.data_sha256 is None:
        path = os.path.abspath(given.dataset)
        return task.replace_settings(dataset=path, data_sha256=file_sha256(read_npz_bytes(path)))
    return task


def search_dataset(task: ProxyTask):
    """The run's data: (1 - holdout) of the (subset) training split to train, the rest to score,
    with its tensors on the run's device.

    The task names its dataset (`with_dataset`, stored when the run starts).
    Cached per process and device, so each worker loads the data and moves it to its device once.
    """
    given = task.settings
    if given.dataset is None:
        raise ValueError("the search config names no dataset (with_dataset() resolves the "
                         "default when a run starts)")
    return _load_split(given.dataset, given.data_root, given.n_train, given.holdout,
                       task.split_seed, task.device, given.data_sha256)


@lru_cache(maxsize=4)
def _load_split(name: str, root: str | None, n_train: int | None, holdout: float, seed: int,
                device: str, sha256: str | None = None):
    from evonorm.data import holdout_split, load_dataset, to_device

    ds = load_dataset(name, root, n_train=n_train, seed=seed, sha256=sha256)
    return to_device(holdout_split(ds, frac=holdout, seed=seed), device)


def require_builtin(cfg: SearchConfig, what: str) -> None:
    """ValueError unless the run was searched on the built-in proxy task: `what` (a rerank, a
    re-training, the reference layers) trains that task's architectures on its data, which a run
    on an objective of one's own never used."""
    if cfg.objective:
        raise ValueError(f"{what} trains on the built-in proxy task, and this run was searched with "
                         f"the objective {cfg.objective}: retrain its top layers in your own task "
                         "(evonorm.search.load(RUN).top(k))")


def train_stages(graph, ds, task: ProxyTask, *, hurdles: list[float | None] = (),
                 checkpoint: str | None = None, screen: bool = True,
                 trial: Trial | None = None) -> Evaluation:
    """Full training on every architecture, in stages (the task's `stage_steps`, then the end);
    the valid Evaluation, or `Reject` raised where the layer is rejected (with the scores measured
    so far, which a near miss keeps).

    Every stage continues each architecture's run from the previous stage's weights, so a layer
    that goes all the way costs exactly one full training. After stage k the layer stops, valid
    with k stages, if its fitness is below `hurdles[k-1]` (None: no hurdle yet). The first stage
    of a staged config is the quality test: an architecture below the bar rejects the layer, and
    the remaining architectures are not trained. `checkpoint` (a file path) saves the runs after
    each stage and is picked up again if the candidate is evaluated anew after a crash
    (`StageCheckpoint`); it is removed once the candidate is decided.

    Each stage's accuracies are reported to `trial` (`Trial.report`; a resumed candidate reports
    its saved stages first), and its `should_stop()` decides the hurdles; without a trial, one
    that holds `hurdles`.

    With the task's `train_runs` > 1 each architecture trains that many runs (`run_seed`) and each stage
    scores their mean accuracy; a non-finite loss in any of them rejects the layer. The last stage
    scores the task's `final_runs` runs: those beyond `train_runs` train from scratch only for a layer
    that got that far.
    """
    ends = [*task.stage_steps, task.training[task.archs[0]].steps]
    saved = StageCheckpoint(checkpoint, graph, ds, task, len(ends))
    runs, stages = saved.load()
    trial = trial if trial is not None else Trial(graph, hurdles=list(hurdles))
    for k, accs in enumerate(stages):  # the saved stages, as if just measured
        trial.report(accs, ends[k])
    staged = bool(task.stage_steps)
    bar = quality_threshold(ds.num_classes, task.settings.quality_factor) if staged and screen else None
    trial.phase("quality test" if bar is not None and not stages else TRAINING)
    run_scores: dict[str, list[float]] = {}  # the last stage's score of each run
    seconds = dict.fromkeys(task.archs, 0.0)  # this evaluation's training time per architecture
    try:
        for k in range(len(stages), len(ends)):
            runs_now = task.settings.final_runs if k == len(ends) - 1 else task.settings.train_runs
            quality = bar if k == 0 else None
            stages.append(_train_stage(graph, ds, task, runs, trial, ends[k], runs_now, quality,
                                       run_scores, seconds))
            if k == 0:
                trial.phase(TRAINING)
            trial.report(stages[-1], ends[k])
            if k < len(ends) - 1 and trial.should_stop():
                break
            if k < len(ends) - 1:
                saved.save(stages, runs)
    except Exception:  # rejected, or the layer raised: decided (a stopped worker keeps its checkpoint)
        saved.remove()
        raise
    saved.remove()
    # what lies under the scores, for whoever studies the proxy (`evonorm calibrate --panel`)
    detail = {"runs": run_scores, "seconds": seconds}
    return dataclasses.replace(
        Evaluation.valid(stages[-1], stage_scores=stages if staged else None), detail=detail)


def _train_stage(graph, ds, task: ProxyTask, runs: dict, trial: Trial, end: int, n_runs: int,
                 bar: float | None, run_scores: dict[str, list[float]],
                 seconds: dict[str, float]) -> dict[str, float]:
    """One stage: each architecture's `n_runs` runs trained on to step `end` (a missing run is
    started), scored by their mean accuracy; Reject on a non-finite run, or on an architecture
    below the quality `bar` (the first stage of a staged config)."""
    accs: dict[str, float] = {}
    for arch in task.archs:
        t0 = time.perf_counter()
        scores = []
        for i in range(n_runs):
            if (arch, i) not in runs:
                runs[arch, i] = _new_run(graph, ds, task, arch, i)
            run = runs[arch, i]
            run.advance(end, on_step=partial(trial.training_step, of=arch))
            acc = run.score()
            if acc is None:
                raise Reject("nonfinite", step=run.result.failed_step, scores=accs,
                             detail={"arch": arch, "phase": "quality" if bar is not None else "train"})
            scores.append(float(acc))
        seconds[arch] += time.perf_counter() - t0
        run_scores[arch] = scores
        accs[arch] = acc = sum(scores) / len(scores)
        if bar is not None and acc < bar:
            raise Reject(f"quality:{arch}", step=end, scores=accs,
                         detail={"accuracy": acc, "threshold": bar})
    return accs


def _new_run(graph, ds, task: ProxyTask, arch: str, i: int):
    """Run `i` of the layer on `arch` (its seed `run_seed(i)`), from step 0."""
    from evonorm.train import Run

    return Run(graph, ds, dataclasses.replace(task.training[arch], seed=task.run_seed(i)))


class StageCheckpoint:
    """A candidate's training after its last finished stage, as a file in the run folder. It holds
    tensors and plain data only and is read with `weights_only=True`, so a file planted there
    cannot run code: one that does not load (corrupt, a pickle of anything else, another
    candidate's) is dropped with a warning on stderr and the candidate trains from its first
    stage. A folder or FIFO at its name is neither read nor removed, and the candidate keeps no
    checkpoint; one that cannot be written is the run folder's fault, not the layer's: it trains
    on without."""

    def __init__(self, path: str | None, graph, ds, task: ProxyTask, num_stages: int):
        from pathlib import Path

        from evonorm.files import warn

        self.path = Path(path) if path else None
        self.graph, self.ds, self.task, self.num_stages = graph, ds, task, num_stages
        # the checkpoint's names for the runs
        self.keys = {(arch, i): arch if i == 0 else f"{arch}#{i}"
                     for arch in task.archs for i in range(task.settings.train_runs)}
        p = self.path
        if p is not None and (p.exists() or p.is_symlink()) and not (p.is_file() or p.is_symlink()):
            warn(f"{p} is not a regular file: the candidate keeps no stage checkpoint")
            self.path = None

    def load(self) -> tuple[dict, list[dict[str, float]]]:
        """(runs by (architecture, index), the finished stages' scores): empty without a file."""
        import io
        import warnings

        import torch

        from evonorm.files import read_bytes, warn

        p = self.path
        if p is None or not (p.is_file() or p.is_symlink()):
            return {}, []
        try:  # tensors and plain data only: a planted pickle is refused, never run; a link never followed
            task = self.task
            fresh = {(a, i): _new_run(self.graph, self.ds, task, a, i) for a, i in self.keys}
            limit = CHECKPOINT_SLACK + 4 * sum(_state_bytes(r) for r in fresh.values())
            with warnings.catch_warnings():  # e.g. on the pickle protocol: the one line below
                warnings.simplefilter("ignore")
                saved = torch.load(io.BytesIO(read_bytes(p, limit) or b""), weights_only=True)
            stages = [{str(a): float(v) for a, v in s.items()} for s in saved["stages"]]
            if (not 0 < len(stages) < self.num_stages
                    or any(set(s) != set(task.archs) for s in stages)
                    or set(saved["runs"]) != set(self.keys.values())):
                raise ValueError("its stages and runs are not this candidate's")
            for ai, name in self.keys.items():
                fresh[ai].restore(saved["runs"][name])
            ends = [*task.stage_steps, task.training[task.archs[0]].steps]
            check_restored(fresh, stages, ends[len(stages) - 1])
            return fresh, stages
        except Exception as err:  # noqa: BLE001 - corrupt, planted or from other settings: retrain
            first = (str(err).strip().splitlines() or [""])[0][:200]
            warn(f"dropped stage checkpoint {p} ({type(err).__name__}: {first}); the candidate trains "
                 "again from its first stage")
            p.unlink(missing_ok=True)
            return {}, []

    def save(self, stages: list[dict[str, float]], runs: dict) -> None:
        import io

        import torch

        from evonorm.files import check_folder, warn, write_atomic

        if self.path is None:
            return
        buf = io.BytesIO()
        torch.save({"stages": stages, "runs": {self.keys[ai]: r.state() for ai, r in runs.items()}}, buf)
        try:
            write_atomic(check_folder(self.path.parent, create=True) / self.path.name, buf.getvalue())
        except OSError as err:
            warn(f"cannot write stage checkpoint {self.path} ({err.strerror or err}); the candidate "
                 "trains on without one")
            self.path = None

    def remove(self) -> None:
        if self.path is not None:
            self.path.unlink(missing_ok=True)


CHECKPOINT_SLACK = 1 << 20  # bytes a stage checkpoint holds beside its tensors: stages, random state, results


def _state_bytes(run) -> int:
    """The bytes of a run's model state (its weights and buffers): a checkpoint holds those, the optimizer's
    state (at most twice as many) and little else, so a file far larger is not one."""
    return sum(t.numel() * t.element_size() for t in run.model.state_dict().values())


def check_restored(runs: dict, stages: list[dict[str, float]], step: int) -> None:
    """ValueError unless restored runs are what their checkpoint claims: its stage scores accuracies (finite,
    in [0, 1]), each run at the step its last stage ended on, its weights finite, and its last stage's
    scores what the restored weights score now (a forged score would otherwise be believed)."""
    import torch

    from evonorm.files import number_problem

    for k, accs in enumerate(stages):
        for arch, v in accs.items():
            if number_problem(v, 0.0, 1.0):
                raise ValueError(f"stage {k + 1} score of {arch} is {v}, not an accuracy")
    scores: dict[str, list[float]] = {}
    for (arch, i), run in runs.items():
        if run.step != step or not run.ok:
            raise ValueError(f"run {i} of {arch} is at step {run.step} ({run.result.status}), not {step}")
        if not all(bool(torch.isfinite(t).all()) for t in run.model.state_dict().values() if t.is_floating_point()):
            raise ValueError(f"run {i} of {arch} has weights that are not finite")
        acc = run.score()
        if acc is None:
            raise ValueError(f"run {i} of {arch} scores no finite output")
        scores.setdefault(arch, []).append(acc)
    for arch, accs in scores.items():
        if abs(sum(accs) / len(accs) - stages[-1][arch]) > 1e-6:
            raise ValueError(f"its last stage's score of {arch} is not what its weights score")
