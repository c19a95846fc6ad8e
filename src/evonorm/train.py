"""The proxy-task trainer: train one layer on one architecture and report its accuracy.

The paper's recipe is the default (SGD 0.1, Nesterov 0.9, weight decay 1e-4 on conv and linear
weights, batch 128 of 24x24 crops, eval on full images at batch 512). Presets scale it down for a
2-core machine. A NaN/Inf loss stops the run with status "nonfinite"; an exception raised by the
layer propagates (the search records it). Thread count is the caller's business
(`torch.set_num_threads`): library code never changes it.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Callable

import torch
from torch import nn

from evonorm.data import Dataset, eval_batches, subset, to_device, train_batches
from evonorm.models import build_model
from evonorm.train_config import TRAIN_PRESETS, TrainConfig, get_train_preset  # the trainer's settings, here too


WARMUP_STEPS = 3


@dataclass
class TrainResult:
    accuracy: float | None
    status: str  # "ok" | "nonfinite"
    reason: str | None = None
    failed_step: int | None = None
    steps_done: int = 0
    seconds: float = 0.0
    final_loss: float | None = None
    step_seconds: float | None = None  # mean time of a training step after the warm-up steps
    params: int = 0
    config: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def sgd(model: nn.Module, cfg: TrainConfig, *, foreach: bool | None = True) -> torch.optim.SGD:
    """The paper's optimizer (appendix C): SGD with Nesterov momentum 0.9, weight decay on
    `param_groups`. Not settings: no preset or command ever changed them."""
    return torch.optim.SGD(param_groups(model, cfg.weight_decay), lr=cfg.lr, momentum=0.9,
                           nesterov=True, foreach=foreach)


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Weight decay on conv and linear weights only; norm/affine parameters and biases are free."""
    decay, no_decay = [], []
    for module in model.modules():
        for name, p in module.named_parameters(recurse=False):
            if not p.requires_grad:
                continue
            is_weight = name == "weight" and isinstance(module, (nn.Conv2d, nn.Linear))
            (decay if is_weight else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


def lr_at(cfg: TrainConfig, step: int) -> float:
    """The schedule's rate, ramped up linearly over the first `lr_warmup` steps: tiny, deep
    networks at a batch of 32 diverge or stall in their first steps at the full rate. With
    `restarts`, the cosine starts again at each (SGDR, Loshchilov & Hutter 2017), so a run scored
    at a restart is scored on annealed weights, as a short run of its own would be."""
    lr = cfg.lr
    if cfg.schedule == "cosine":  # within its cycle: a stage of a staged run ends annealed
        begin = max((r for r in cfg.restarts if r <= step), default=0)
        end = min((r for r in cfg.restarts if r > step), default=cfg.steps)
        lr = 0.5 * cfg.lr * (1.0 + math.cos(math.pi * (step - begin) / (end - begin)))
    if step < cfg.lr_warmup:
        lr *= (step + 1) / cfg.lr_warmup
    return lr


class Run:
    """One training run that can stop at any step, be scored, and go on from the same weights,
    optimizer state and batch stream: the stages of a multi-fidelity evaluation (a layer trains to
    a hurdle, and only if it clears it, on to the next) add up to exactly `train(cfg)`.

    Deterministic for `cfg.seed` (model init, data order, augmentation). The learning-rate
    schedule always spans `cfg.steps`, so a stage is the first part of the full run.
    """

    def __init__(self, norm_act: Any, dataset: Dataset, cfg: TrainConfig, *,
                 model: nn.Module | None = None):
        self.start = time.perf_counter()
        self.cfg = cfg
        self.device = torch.device(cfg.device)
        # the run's images go to the device once (not at all when the caller's data is there),
        # so no step copies a batch from the CPU
        self.ds = to_device(subset(dataset, cfg.n_train, cfg.n_test, seed=cfg.seed), self.device)
        torch.manual_seed(cfg.seed)
        if model is None:
            model = build_model(cfg.arch, norm_act, num_classes=self.ds.num_classes,
                                width=cfg.resolved_width(), in_chans=self.ds.channels,
                                **cfg.layer_kwargs())
        self.memory_format = torch.channels_last if cfg.channels_last else torch.contiguous_format
        self.model = model.to(self.device, memory_format=self.memory_format)
        # foreach: one call per update for all tensors, where a CPU step of a small model would
        # otherwise loop over them in Python; the same arithmetic, bit for bit
        self.opt = sgd(self.model, cfg)
        self.step_model = torch.compile(self.model) if cfg.compile else self.model
        self.batches = train_batches(self.ds, cfg.batch_size, cfg.steps, seed=cfg.seed,
                                     crop=cfg.crop)
        self.result = TrainResult(accuracy=None, status="ok",
                                  params=sum(p.numel() for p in self.model.parameters()),
                                  config=asdict(cfg))
        self._timed = (0, 0.0)  # (steps, seconds) after the first warm-up steps
        # the run's own random stream (dropout draws from torch's global one): swapped in while it
        # trains, so that runs advanced in turns, or in stages with other work between, train as
        # each would alone
        self._rng = self._get_rng()

    def _get_rng(self) -> tuple:
        cuda = torch.cuda.get_rng_state(self.device) if self.device.type == "cuda" else None
        return torch.get_rng_state(), cuda

    def _set_rng(self, rng: tuple) -> None:
        torch.set_rng_state(rng[0])
        if rng[1] is not None:
            torch.cuda.set_rng_state(rng[1], self.device)

    @property
    def step(self) -> int:
        return self.result.steps_done

    @property
    def ok(self) -> bool:
        return self.result.status == "ok"

    def advance(self, to_step: int | None = None, *, progress: bool = False,
                log: Callable[[str], None] | None = None,
                on_step: Callable[[int], None] | None = None) -> bool:
        """Train on until step `to_step` (default: the end); False once the loss is non-finite.
        `on_step(steps_done)` after each step (e.g. a search's progress display)."""
        cfg, result = self.cfg, self.result
        to_step = cfg.steps if to_step is None else min(to_step, cfg.steps)
        if not self.ok or self.step >= to_step:
            return self.ok
        bar = None
        if progress:
            from tqdm import tqdm
            bar = tqdm(total=to_step, initial=self.step, desc=cfg.arch, unit="step", leave=False)
        loss_fn = nn.CrossEntropyLoss()
        warm = min(WARMUP_STEPS, cfg.steps // 4)  # first steps pay for allocation and compilation
        self.model.train()
        t_warm = None
        outer = self._get_rng()
        self._set_rng(self._rng)
        try:
            while self.step < to_step:
                step = self.step
                x, y = next(self.batches)
                if step >= warm and t_warm is None:
                    t_warm, first = time.perf_counter(), step
                for group in self.opt.param_groups:
                    group["lr"] = lr_at(cfg, step)
                x = x.to(self.device, memory_format=self.memory_format, non_blocking=True)
                y = y.to(self.device, non_blocking=True)
                loss = loss_fn(self.step_model(x), y)
                loss_value = float(loss.detach())
                result.final_loss = loss_value
                if not math.isfinite(loss_value):
                    result.status, result.reason = "nonfinite", "nonfinite loss"
                    result.failed_step = step
                    break
                self.opt.zero_grad(set_to_none=True)
                loss.backward()
                self.opt.step()
                result.steps_done = step + 1
                if on_step is not None:
                    on_step(step + 1)
                if bar is not None:
                    bar.update(1)
                    if step % 10 == 0:
                        bar.set_postfix(loss=f"{loss_value:.3f}")
                if log is not None and (step + 1) % max(1, cfg.steps // 10) == 0:
                    log(f"{cfg.arch}: step {step + 1}/{cfg.steps} loss {loss_value:.3f} "
                        f"({time.perf_counter() - self.start:.0f}s)")
        finally:
            self._rng = self._get_rng()
            self._set_rng(outer)
            if bar is not None:
                bar.close()
            if t_warm is not None and self.step > first:
                n, secs = self._timed
                self._timed = (n + self.step - first, secs + time.perf_counter() - t_warm)
                result.step_seconds = self._timed[1] / self._timed[0]
            result.seconds = time.perf_counter() - self.start
        return self.ok

    def state(self) -> dict:
        """What `restore` needs to go on exactly as if never stopped (for a checkpoint): tensors
        and plain data only (dicts, lists, tuples, numbers, strings), so a checkpoint of it loads
        with `torch.load(..., weights_only=True)` and reading one never unpickles code."""
        return {"model": self.model.state_dict(), "opt": self.opt.state_dict(),
                "rng": self._rng[0], "result": asdict(self.result), "timed": self._timed}

    def restore(self, state: dict) -> None:
        """Continue from `state()` of a run of the same config: weights, optimizer, the random
        stream and the batch stream (regenerated and skipped to the saved step)."""
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["opt"])
        self._rng = (state["rng"], self._rng[1])
        self.result = TrainResult(**state["result"])
        self._timed = tuple(state["timed"])
        for _ in range(self.step):
            next(self.batches)

    def score(self) -> float | None:
        """Held-out accuracy of the weights now (None, and status "nonfinite", if a logit is
        not finite or the loss was)."""
        if not self.ok:
            return None
        acc, finite = held_out_accuracy(self.model, self.ds, self.cfg.eval_batch_size, self.device,
                               self.memory_format)
        if not finite:
            self.result.status, self.result.reason = "nonfinite", "nonfinite eval output"
            self.result.failed_step = self.step
            return None
        self.result.accuracy = acc
        self.result.seconds = time.perf_counter() - self.start
        return acc


def train(norm_act: Any, dataset: Dataset, cfg: TrainConfig, *, progress: bool = False,
          model: nn.Module | None = None, log: Callable[[str], None] | None = None) -> TrainResult:
    """Train `cfg.arch` with `norm_act` on `dataset` and evaluate on its test split.

    Progress: `progress` draws a bar (for a terminal); `log` gets a plain line after each tenth
    of the steps (for a log file). `model` lets a caller pass a prebuilt network (e.g. a
    converted third-party model) instead of building `cfg.arch`.
    """
    run = Run(norm_act, dataset, cfg, model=model)
    if run.advance(progress=progress, log=log):
        run.score()
    return run.result


@torch.no_grad()
def held_out_accuracy(model: nn.Module, ds: Dataset, batch_size: int = 512,
                      device: torch.device | str = "cpu",
                      memory_format: torch.memory_format = torch.contiguous_format
                      ) -> tuple[float, bool]:
    """(top-1 accuracy on the full-size test images, whether every logit was finite)."""
    was_training = model.training
    model.eval()
    correct, total, finite = 0, 0, True
    for x, y in eval_batches(ds, batch_size):
        logits = model(x.to(device, memory_format=memory_format))
        finite = finite and bool(torch.isfinite(logits).all())
        correct += int((logits.argmax(1) == y.to(logits.device)).sum())
        total += len(y)
    model.train(was_training)
    return correct / max(1, total), finite


def config_fields() -> list[str]:
    return [f.name for f in fields(TrainConfig)]
