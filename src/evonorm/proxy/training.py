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
    """Full training on every architecture, in stages (the task's `stage_steps`, then the end).

    Every stage continues each architecture's run from the previous stage's weights, so a layer
    that goes all the way costs exactly one full training. After stage k the layer stops, valid
    with k stages, if its fitness is below `hurdles[k-1]` (None: no hurdle yet). The first stage
    of a staged config is the quality test: an architecture below the bar rejects the layer, and
    the remaining architectures are not trained. `checkpoint` (a file path) saves the runs after
    each stage and is picked up again if the candidate is evaluated anew after a crash; it is
    removed once the candidate is decided. It holds tensors and plain data only and is read with
    `weights_only=True`, so a file planted in the run folder cannot run code: one that does not
    load (corrupt, a pickle of anything else, another candidate's) is dropped with a warning on
    stderr and the candidate trains from its first stage.

    Each stage's accuracies are reported to `trial` (`Trial.report`; a resumed candidate reports
    its saved stages first), and its `should_stop()` decides the hurdles; without a trial, one
    that holds `hurdles`.

    With the task's `train_runs` > 1 each architecture trains that many runs (`run_seed`) and each stage
    scores their mean accuracy; a non-finite loss in any of them rejects the layer. The last stage
    scores the task's `final_runs` runs: those beyond `train_runs` train from scratch only for a layer
    that got that far.
    """
    settings = task.settings
    import io
    import warnings
    from pathlib import Path

    import torch

    from evonorm.files import check_folder, read_bytes, warn, write_atomic
    from evonorm.train import Run

    ends = [*task.stage_steps, task.training[task.archs[0]].steps]
    keys = {(arch, i): arch if i == 0 else f"{arch}#{i}"  # the checkpoint's names for the runs
            for arch in task.archs for i in range(settings.train_runs)}

    def new_run(arch: str, i: int) -> Run:
        return Run(graph, ds, dataclasses.replace(task.training[arch], seed=task.run_seed(i)))

    runs: dict[tuple[str, int], Run] = {}
    stages: list[dict[str, float]] = []
    ckpt = Path(checkpoint) if checkpoint else None
    if ckpt is not None and (ckpt.exists() or ckpt.is_symlink()) and not (ckpt.is_file() or ckpt.is_symlink()):
        # a folder or FIFO at the name: neither read nor removed, and the candidate keeps no checkpoint
        # (writing one would fail, and that failure is not the layer's)
        warn(f"{ckpt} is not a regular file: the candidate keeps no stage checkpoint")
        ckpt = None
    if ckpt is not None and (ckpt.is_file() or ckpt.is_symlink()):
        try:  # tensors and plain data only: a planted pickle is refused, never run; a link never followed
            fresh = {ai: new_run(*ai) for ai in keys}
            limit = CHECKPOINT_SLACK + 4 * sum(_state_bytes(r) for r in fresh.values())
            with warnings.catch_warnings():  # e.g. on the pickle protocol: the one line below
                warnings.simplefilter("ignore")
                saved = torch.load(io.BytesIO(read_bytes(ckpt, limit) or b""), weights_only=True)
            stages = [{str(a): float(v) for a, v in s.items()} for s in saved["stages"]]
            if (not 0 < len(stages) < len(ends) or any(set(s) != set(task.archs) for s in stages)
                    or set(saved["runs"]) != set(keys.values())):
                raise ValueError("its stages and runs are not this candidate's")
            for (arch, i), name in keys.items():
                runs[arch, i] = fresh[arch, i]
                runs[arch, i].restore(saved["runs"][name])
            check_restored(runs, stages, ends[len(stages) - 1])
        except Exception as err:  # noqa: BLE001 - corrupt, planted or from other settings: retrain
            first = (str(err).strip().splitlines() or [""])[0][:200]
            warn(f"dropped stage checkpoint {ckpt} ({type(err).__name__}: {first}); the candidate trains "
                 "again from its first stage")
            ckpt.unlink(missing_ok=True)
            runs, stages = {}, []
    trial = trial if trial is not None else Trial(graph, hurdles=list(hurdles))
    for k, accs in enumerate(stages):  # the saved stages, as if just measured
        trial.report(accs, ends[k])
    staged = bool(task.stage_steps)
    bar = quality_threshold(ds.num_classes, settings.quality_factor) if staged and screen else None
    trial.phase("quality test" if bar is not None and not stages else TRAINING)

    def decided(e: Evaluation) -> Evaluation:
        if ckpt is not None:
            ckpt.unlink(missing_ok=True)
        return e

    run_scores: dict[str, list[float]] = {}  # the last stage's score of each run
    seconds = dict.fromkeys(task.archs, 0.0)  # this evaluation's training time per architecture
    try:
        for k in range(len(stages), len(ends)):
            accs: dict[str, float] = {}
            for arch in task.archs:
                t0 = time.perf_counter()
                scores = []
                for i in range(settings.final_runs if k == len(ends) - 1 else settings.train_runs):
                    run = runs.get((arch, i))
                    if run is None:
                        run = runs[arch, i] = new_run(arch, i)
                    run.advance(ends[k], on_step=partial(trial.training_step, of=arch))
                    acc = run.score()
                    if acc is None:
                        phase = "quality" if k == 0 and bar is not None else "train"
                        rej = Reject("nonfinite", step=run.result.failed_step,
                                     detail={"arch": arch, "phase": phase})
                        return decided(Evaluation.rejected(rej, accs))
                    scores.append(float(acc))
                seconds[arch] += time.perf_counter() - t0
                run_scores[arch] = scores
                accs[arch] = acc = sum(scores) / len(scores)
                if k == 0 and bar is not None and acc < bar:
                    rej = Reject(f"quality:{arch}", step=ends[0],
                                 detail={"accuracy": acc, "threshold": bar})
                    return decided(Evaluation.rejected(rej, accs))
            stages.append(accs)
            if k == 0:
                trial.phase(TRAINING)
            trial.report(accs, ends[k])
            if k < len(ends) - 1 and trial.should_stop():
                break
            if ckpt is not None and k < len(ends) - 1:
                buf = io.BytesIO()
                torch.save({"stages": stages, "runs": {keys[ai]: r.state() for ai, r in runs.items()}}, buf)
                try:
                    write_atomic(check_folder(ckpt.parent, create=True) / ckpt.name, buf.getvalue())
                except OSError as err:  # the run folder's fault, not the layer's: it trains on without
                    warn(f"cannot write stage checkpoint {ckpt} ({err.strerror or err}); the candidate "
                         "trains on without one")
                    ckpt = None
        # what lies under the scores, for whoever studies the proxy (`evonorm calibrate --panel`)
        detail = {"runs": run_scores, "seconds": seconds}
        return decided(dataclasses.replace(
            Evaluation.valid(stages[-1], stage_scores=stages if staged else None), detail=detail))
    except Exception:  # the layer raised: decided too (a killed worker keeps its checkpoint)
        if ckpt is not None:
            ckpt.unlink(missing_ok=True)
        raise


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
