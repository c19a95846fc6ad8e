"""Rejection (paper Sec. 4.4): cheap pre-checks, the stability stress test, the quality test.

Each check returns None when the layer passes, or a `Reject(reason, step=, detail=)` saying why and
where (the objective protocol's one type for a rejection; the objective raises it).
Order in a search: the engine's checks of the layer alone (`evonorm.search.checks`, milliseconds) -> stability (one small batch, one architecture) ->
quality (a short training per architecture, stopping at the first failure) -> full training.

The trainer, models and data are imported in the checks that train: they load torch.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

from evonorm.search.objective import Reject


def _measured(value: float) -> float | str:
    """A measurement as a rejection's detail stores it: a finite number, else its name ("inf",
    "nan"), since a stored detail holds finite values only."""
    return value if math.isfinite(value) else str(value)


def _grad_norm(grads: Sequence[Any]):
    import torch
    return torch.sqrt(sum((g.float() ** 2).sum() for g in grads))


def model_and_batch(norm_act, dataset, *, arch: str, width: float | None, batch: int, seed: int,
                    model_kwargs: dict | None = None):
    """`arch` with the layer in every slot, in train mode, as the trainer builds it (`evonorm.train.Run`
    at `seed`: the model, initialisation and device a training run of this layer starts from), and one
    fixed training batch (a seeded draw, cropped and flipped as in training, normalized): what the
    checks and features that look at a network at initialisation start from."""
    import torch

    from evonorm.data import crop_size, normalize, random_crop_flip
    from evonorm.train import Run, TrainConfig

    device = dataset.train_x.device
    groups = (model_kwargs or {}).get("groups")
    model = Run(norm_act, dataset, TrainConfig(arch=arch, width=width, seed=seed, groups=groups,
                                               device=str(device))).model
    model.train()
    gen = torch.Generator().manual_seed(seed)
    idx = torch.randperm(len(dataset.train_y), generator=gen)[:batch].to(device)
    x = normalize(random_crop_flip(dataset.train_x[idx], crop_size(dataset.train_x.shape[-1]), gen),
                  dataset.mean, dataset.std)
    return model, x, dataset.train_y[idx]


def stability(norm_act, dataset, *, arch: str, width: float | None = None, steps: int = 100,
              threshold: float = 1e8, batch: int = 8, lr: float = 0.1, seed: int = 0,
              model_kwargs: dict | None = None, trace: list | None = None) -> Reject | None:
    """Worst-case gradient norm by gradient ascent on ||dL/dtheta||_2 over the conv weights theta.

    Double backprop: the gradient norm is differentiated again and each conv weight tensor moves
    `lr` times its own norm along its normalized ascent direction (so every layer is stressed at
    the same relative rate). Rejects at the first step where the norm exceeds `threshold` or is
    non-finite; passes after `steps` ascent steps otherwise. `trace` collects the norm per step.
    Runs on the device the dataset's tensors are on (the search's, `search_dataset`).

    The model is the trainer's (`evonorm.train.Run` at `seed`: the model, initialisation and device
    a training run of this layer starts from); the ascent is this test's own loop, as it climbs
    the gradient norm rather than descending the loss.
    """
    import torch
    import torch.nn.functional as F

    model, x, y = model_and_batch(norm_act, dataset, arch=arch, width=width, batch=batch,
                                  seed=seed, model_kwargs=model_kwargs)
    theta = [m.weight for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    for step in range(steps + 1):
        loss = F.cross_entropy(model(x), y)
        if not torch.isfinite(loss):
            return Reject("stability", step=step, detail={"loss": _measured(float(loss.detach()))})
        grads = torch.autograd.grad(loss, theta, create_graph=True, allow_unused=True)
        used = [(w, g) for w, g in zip(theta, grads) if g is not None]
        if not used:
            return None  # the loss does not depend on any conv weight: nothing can explode
        norm = _grad_norm([g for _, g in used])
        value = float(norm.detach())
        if trace is not None:
            trace.append(value)
        if not math.isfinite(value) or value > threshold:
            return Reject("stability", step=step, detail={"grad_norm": _measured(value)})
        if step == steps or norm.grad_fn is None or value == 0.0:
            break  # a vanishing gradient gives no direction to ascend: nothing can explode
        # the squared norm has the same ascent direction and no sqrt'(0) singularity
        ascent = torch.autograd.grad(norm * norm, [w for w, _ in used], allow_unused=True)
        with torch.no_grad():
            for (w, _), a in zip(used, ascent):
                if a is None:
                    continue
                a_norm = float(a.norm())
                if not math.isfinite(a_norm):
                    return Reject("stability", step=step, detail={"grad_norm": _measured(value)})
                if a_norm > 0:
                    w.add_(a, alpha=lr * float(w.norm()) / a_norm)
    return None


def quality_threshold(num_classes: int, factor: float = 2.0) -> float:
    """Reject below `factor` x chance: 20% for 10 classes with the paper's factor 2."""
    return factor / num_classes


def quality(norm_act, dataset, archs: Sequence[str], make_config: Callable[[str], Any], *,
            factor: float = 2.0) -> tuple[Reject | None, dict[str, float]]:
    """Short training on each architecture in turn; stop at the first one below the threshold.

    `make_config(arch)` gives the TrainConfig of the short run. Returns (rejection or None, the
    accuracies reached; a rejection carries them as its `scores`). A non-finite loss rejects as "nonfinite" at its step; an exception in the
    layer propagates to the caller, which records it.
    """
    from evonorm.train import train

    threshold = quality_threshold(dataset.num_classes, factor)
    accs: dict[str, float] = {}
    for arch in archs:
        cfg = make_config(arch)
        res = train(norm_act, dataset, cfg)
        if res.status != "ok" or res.accuracy is None:
            return Reject("nonfinite", step=res.failed_step, detail={"arch": arch, "phase": "quality"},
                          scores=accs), accs
        accs[arch] = float(res.accuracy)
        if res.accuracy < threshold:
            return Reject(f"quality:{arch}", step=res.steps_done, scores=accs,
                          detail={"accuracy": float(res.accuracy), "threshold": threshold}), accs
    return None, accs
