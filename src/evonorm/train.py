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
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Callable

import torch
from torch import nn

from evonorm.data import Dataset, eval_batches, subset, train_batches
from evonorm.models import ARCHS, build_model


WARMUP_STEPS = 3


@dataclass(frozen=True)
class TrainConfig:
    """One training run. `width=None` takes the architecture's multiplier times `width_scale`."""

    arch: str = "resnet50_cifar"
    width: float | None = None
    width_scale: float = 1.0
    steps: int = 2000
    batch_size: int = 128
    lr: float = 0.1
    momentum: float = 0.9
    nesterov: bool = True
    weight_decay: float = 1e-4
    schedule: str = "constant"  # "constant" | "cosine"
    lr_warmup: int = 0  # steps of linear learning-rate warm-up (0: none, the paper's recipe)
    eval_batch_size: int = 512
    crop: int | None = None  # None: 3/4 of the image side (24 for 32x32)
    flip: bool = True
    n_train: int | None = None  # seeded subset of the training set
    n_test: int | None = None
    seed: int = 0
    channels_last: bool = False
    compile: bool = False
    device: str = "cpu"

    def __post_init__(self):
        if self.schedule not in ("constant", "cosine"):
            raise ValueError(f"schedule must be 'constant' or 'cosine', got {self.schedule!r}")
        for name in ("steps", "batch_size", "eval_batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.lr_warmup < 0:
            raise ValueError(f"lr_warmup must be >= 0, got {self.lr_warmup}")
        if self.arch not in ARCHS:
            raise ValueError(f"unknown architecture {self.arch!r} (choose from {', '.join(ARCHS)})")
        for name in ("lr", "width", "width_scale"):  # nan/inf/<= 0 would train nothing silently
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a finite number > 0, got {value}")
        for name in ("n_train", "n_test"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")

    def resolved_width(self) -> float:
        return self.width if self.width is not None else ARCHS[self.arch].width * self.width_scale

    def replace(self, **changes) -> "TrainConfig":
        """A copy with `changes`; None values are ignored (handy for optional CLI flags)."""
        return replace(self, **{k: v for k, v in changes.items() if v is not None})


PRESETS: dict[str, TrainConfig] = {
    # the paper's proxy task (appendix C)
    "paper-b": TrainConfig(steps=2000, schedule="constant"),
    "paper-s": TrainConfig(steps=5000, schedule="cosine"),
    # a minute or two per model on 2 CPU cores: half width, 400 steps of 64, 10k images
    "small": TrainConfig(width_scale=0.5, steps=400, batch_size=64, schedule="cosine",
                         n_train=10000, n_test=2000),
    # seconds: for tests and smoke runs
    "tiny": TrainConfig(width_scale=0.25, steps=60, batch_size=32, schedule="cosine",
                        eval_batch_size=256, n_train=1024, n_test=256),
}


def get_preset(name: str, **overrides) -> TrainConfig:
    """A preset by name, with `overrides` (None values ignored)."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r} (choose from {', '.join(PRESETS)})")
    return PRESETS[name].replace(**overrides)


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
    networks at a batch of 32 diverge or stall in their first steps at the full rate."""
    lr = cfg.lr
    if cfg.schedule == "cosine":
        lr = 0.5 * cfg.lr * (1.0 + math.cos(math.pi * step / cfg.steps))
    if step < cfg.lr_warmup:
        lr *= (step + 1) / cfg.lr_warmup
    return lr


def train(norm_act: Any, dataset: Dataset, cfg: TrainConfig, *, progress: bool = False,
          model: nn.Module | None = None, log: Callable[[str], None] | None = None) -> TrainResult:
    """Train `cfg.arch` with `norm_act` on `dataset` and evaluate on its test split.

    Progress: `progress` draws a bar (for a terminal); `log` gets a plain line after each tenth
    of the steps (for a log file).

    Deterministic for `cfg.seed` (model init, data order, augmentation). `model` lets a caller
    pass a prebuilt network (e.g. a converted third-party model) instead of building `cfg.arch`.
    """
    start = time.perf_counter()
    ds = subset(dataset, cfg.n_train, cfg.n_test, seed=cfg.seed)
    torch.manual_seed(cfg.seed)
    if model is None:
        model = build_model(cfg.arch, norm_act, num_classes=ds.num_classes,
                            width=cfg.resolved_width(), in_chans=ds.channels)
    device = torch.device(cfg.device)
    model = model.to(device)
    memory_format = torch.channels_last if cfg.channels_last else torch.contiguous_format
    if cfg.channels_last:
        model = model.to(memory_format=memory_format)
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.SGD(param_groups(model, cfg.weight_decay), lr=cfg.lr,
                          momentum=cfg.momentum, nesterov=cfg.nesterov)
    step_model = torch.compile(model) if cfg.compile else model
    loss_fn = nn.CrossEntropyLoss()
    result = TrainResult(accuracy=None, status="ok", params=n_params, config=asdict(cfg))

    batches = train_batches(ds, cfg.batch_size, cfg.steps, seed=cfg.seed, crop=cfg.crop,
                            flip=cfg.flip)
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=cfg.steps, desc=f"{cfg.arch}", unit="step", leave=False)
    model.train()
    loss_value = None
    warm = min(WARMUP_STEPS, cfg.steps // 4)  # first steps pay for allocation and compilation
    t_warm = None
    try:
        for step, (x, y) in enumerate(batches):
            if step == warm:
                t_warm = time.perf_counter()
            for group in opt.param_groups:
                group["lr"] = lr_at(cfg, step)
            x = x.to(device, memory_format=memory_format, non_blocking=True)
            y = y.to(device, non_blocking=True)
            loss = loss_fn(step_model(x), y)
            loss_value = float(loss.detach())
            if not math.isfinite(loss_value):
                result.status, result.reason, result.failed_step = "nonfinite", "nonfinite loss", step
                result.final_loss = loss_value
                break
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            result.steps_done = step + 1
            if bar is not None:
                bar.update(1)
                if step % 10 == 0:
                    bar.set_postfix(loss=f"{loss_value:.3f}")
            if log is not None and (step + 1) % max(1, cfg.steps // 10) == 0:
                log(f"{cfg.arch}: step {step + 1}/{cfg.steps} loss {loss_value:.3f} "
                    f"({time.perf_counter() - start:.0f}s)")
    finally:
        if bar is not None:
            bar.close()
    if t_warm is not None and result.steps_done > warm:
        result.step_seconds = (time.perf_counter() - t_warm) / (result.steps_done - warm)
    if result.status == "ok":
        result.final_loss = loss_value
        result.accuracy, finite = evaluate(model, ds, cfg.eval_batch_size, device, memory_format)
        if not finite:
            result.status, result.reason = "nonfinite", "nonfinite eval output"
            result.failed_step = result.steps_done
    result.seconds = time.perf_counter() - start
    return result


@torch.no_grad()
def evaluate(model: nn.Module, ds: Dataset, batch_size: int = 512,
             device: torch.device | str = "cpu",
             memory_format: torch.memory_format = torch.contiguous_format) -> tuple[float, bool]:
    """(top-1 accuracy on the full-size test images, whether every logit was finite)."""
    was_training = model.training
    model.eval()
    correct, total, finite = 0, 0, True
    for x, y in eval_batches(ds, batch_size):
        logits = model(x.to(device, memory_format=memory_format))
        finite = finite and bool(torch.isfinite(logits).all())
        correct += int((logits.argmax(1).cpu() == y).sum())
        total += len(y)
    model.train(was_training)
    return correct / max(1, total), finite


def config_fields() -> list[str]:
    return [f.name for f in fields(TrainConfig)]
