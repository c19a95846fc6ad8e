"""The built-in proxy task's features of a candidate layer at birth: each anchor architecture at
initialisation, with the layer in every slot, on one fixed batch of the run's data.

- the gradient-norm profile across depth: log10 of each conv weight's gradient norm, in module
  order, summarised (first, last, mean, spread, slope, and the worst step between neighbours): a
  layer that lets gradients vanish or explode through depth rarely trains;
- the empirical Fisher information of the classifier at initialisation, from per-sample
  gradients of the batch (as AQuaSurF reads a network's trainability from its Fisher spectrum
  at initialisation): its eigenvalues are those of the batch's B x B Gram matrix of per-sample
  gradients, which for a linear classifier under cross-entropy factorises into (softmax - onehot)
  and the penultimate features, so no per-sample backward is needed;
- the loss and the logits' spread at initialisation;
- how far a few optimiser steps on that one batch bring its loss down (`FIT_STEPS`, the
  trainer's optimiser at the architecture's learning rate, no warm-up): the quality test rejects
  layers with which a network learns next to nothing in its first stage, and one that cannot even
  start to fit a single batch rarely does better on many.

The task hands `task_features` to the engine as its objective's `prescreen_features`; the engine
never imports this module. The trainer's settings, models and data are imported where features
are computed: they load torch.
"""

from __future__ import annotations

import math

# raised whenever a feature's definition changes (see `evonorm.search.features.FEATURES_VERSION`)
FEATURES_VERSION = 2
FEATURE_BATCH = 32
FIT_STEPS = 4
FEATURE_SEED = 0


def _log10(x: float) -> float | None:
    return math.log10(max(x, 1e-12)) if math.isfinite(x) else None


def gradient_profile(norms: list[float]) -> dict[str, float | None]:
    """Summary of per-layer gradient norms, first to last layer (log10 scale)."""
    logs = [_log10(v) for v in norms]
    if not logs or any(v is None for v in logs):
        return {k: None for k in ("first", "last", "mean", "spread", "slope", "jump")}
    n = len(logs)
    mean = sum(logs) / n
    spread = math.sqrt(sum((v - mean) ** 2 for v in logs) / n)
    xs = [i / max(1, n - 1) for i in range(n)]
    xm = sum(xs) / n
    var = sum((x - xm) ** 2 for x in xs)
    slope = sum((x - xm) * (v - mean) for x, v in zip(xs, logs)) / var if var else 0.0
    jump = max((abs(b - a) for a, b in zip(logs, logs[1:])), default=0.0)
    return {"first": logs[0], "last": logs[-1], "mean": mean, "spread": spread, "slope": slope,
            "jump": jump}


def fisher_spectrum(delta, h) -> dict[str, float | None]:
    """Eigenvalue summary of the empirical Fisher of a linear classifier (weight and bias) from
    its per-sample gradients g_i = delta_i (x) [h_i, 1], where delta_i = softmax_i - onehot_i:
    the nonzero eigenvalues of (1/B) sum g_i g_i^T are those of K_ij = (delta_i . delta_j)
    (h_i . h_j + 1) / B."""
    import torch

    d, hh = delta.double(), h.double()
    gram = (d @ d.T) * (hh @ hh.T + 1.0) / len(d)
    eig = torch.linalg.eigvalsh(gram).clamp_min(0.0).flip(0)
    total = float(eig.sum())
    if not math.isfinite(total) or total <= 0:
        return {k: None for k in ("top", "trace", "top_share", "effective_rank", "decay")}
    p = eig / total
    entropy = float(-(p[p > 0] * p[p > 0].log()).sum())
    k = min(4, len(eig) - 1)
    return {"top": _log10(float(eig[0])), "trace": _log10(total), "top_share": float(p[0]),
            "effective_rank": math.exp(entropy) / len(eig),
            "decay": (_log10(float(eig[0])) or 0.0) - (_log10(float(eig[k])) or 0.0)}


def arch_features(graph, ds, task, arch: str) -> dict[str, float | None]:
    """Gradient profile, classifier Fisher spectrum, loss and logit spread of one architecture at
    initialisation (the search's width and seed) on a fixed batch."""
    import torch

    with torch.random.fork_rng(devices=[]):  # the caller's random stream is left as it was
        torch.manual_seed(task.seed)  # the model's init and any dropout: the same every call
        return _at_init(graph, ds, task, arch)


def _at_init(graph, ds, task, arch: str) -> dict[str, float | None]:
    import torch
    import torch.nn.functional as F

    from evonorm.proxy.rejection import model_and_batch

    tcfg = task.training[arch]
    model, x, y = model_and_batch(graph, ds, arch=arch, width=tcfg.resolved_width(),
                                  batch=FEATURE_BATCH, seed=FEATURE_SEED,
                                  model_kwargs=tcfg.layer_kwargs())
    head = [m for m in model.modules() if isinstance(m, torch.nn.Linear)][-1]
    seen: dict[str, torch.Tensor] = {}
    hook = head.register_forward_hook(lambda m, inp, out: seen.update(h=inp[0].detach()))
    try:
        logits = model(x)
    finally:
        hook.remove()
    loss = F.cross_entropy(logits, y)
    convs = [m.weight for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    feats: dict[str, float | None] = {"loss": float(loss.detach()),
                                      "logit_std": _log10(float(logits.detach().std()))}
    if not torch.isfinite(loss):
        feats["loss"] = None
        return feats
    grads = torch.autograd.grad(loss, convs, allow_unused=True)
    norms = [float(g.norm()) if g is not None else 0.0 for g in grads]
    feats.update({f"grad_{k}": v for k, v in gradient_profile(norms).items()})
    probs = logits.detach().float().softmax(1)
    delta = probs - F.one_hot(y, ds.num_classes).float()
    feats.update({f"fisher_{k}": v for k, v in fisher_spectrum(delta, seen["h"].flatten(1)).items()})
    feats.update(fit_probe(model, x, y, tcfg))
    return feats


def fit_probe(model, x, y, tcfg) -> dict[str, float | None]:
    """log10 of the batch's loss after `FIT_STEPS` optimiser steps over its loss at the start
    (None, and `fit_finite` 0, where the loss stops being finite)."""
    import torch
    import torch.nn.functional as F

    from evonorm.train import sgd

    opt = sgd(model, tcfg, foreach=None)  # torch picks, as before
    first = last = None
    for step in range(FIT_STEPS + 1):
        loss = F.cross_entropy(model(x), y)
        if not torch.isfinite(loss):
            return {"fit_ratio": None, "fit_finite": 0.0}
        last = float(loss.detach())
        first = last if first is None else first
        if step < FIT_STEPS:
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    return {"fit_ratio": _log10(last / first) if first > 0 else None, "fit_finite": 1.0}


def task_features(graph, task) -> dict[str, float | None]:
    """The proxy task's features of `graph` (a `Graph`) under the run's task (`ProxyTask`): per anchor
    architecture, prefixed with its name; an architecture the layer breaks (it raises) gives
    `ARCH_error` 1.0 and nothing else."""
    from evonorm.proxy.training import search_dataset

    ds = search_dataset(task)
    out: dict[str, float | None] = {}
    for arch in task.archs:
        try:
            feats = arch_features(graph, ds, task, arch)
            feats["error"] = 0.0
        except Exception:  # noqa: BLE001 - the layer fails in this model: that is the feature
            feats = {"error": 1.0}
        out.update({f"{arch}_{k}": v for k, v in feats.items()})
    return out


# The ladder's network rung: a fraction of `task_features`' cost (one forward and one backward
# pass of the first anchor architecture on a small batch, no optimiser steps), raised with any
# change of its definition, as FEATURES_VERSION is for the task's.
SIGNAL_VERSION = 1
SIGNAL_BATCH = 16


def signal_features(graph, task) -> dict[str, float | None]:
    """Signal propagation through the first anchor architecture at initialisation, with the layer
    in every slot, on a fixed batch of the run's data (as NF-ResNets' plots read a network before
    training): per slot in depth order, the output's scale and the share of it that is a
    per-channel offset; the logits' spread across samples (a network whose every image gives the
    same logits has nothing to learn from); the loss; the conv weights' gradient profile. A layer
    the architecture breaks gives `error` 1.0 and nothing else."""
    import torch

    from evonorm.proxy.training import search_dataset

    ds = search_dataset(task)
    arch = task.archs[0]
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(task.seed)
            feats = _signal(graph, ds, task, arch)
    except Exception:  # noqa: BLE001 - the layer fails in this model: that is the feature
        return {"error": 1.0}
    feats["error"] = 0.0
    return feats


def _signal(graph, ds, task, arch: str) -> dict[str, float | None]:
    import torch
    import torch.nn.functional as F

    from evonorm.proxy.rejection import model_and_batch

    tcfg = task.training[arch]
    model, x, y = model_and_batch(graph, ds, arch=arch, width=tcfg.resolved_width(),
                                  batch=SIGNAL_BATCH, seed=FEATURE_SEED,
                                  model_kwargs=tcfg.layer_kwargs())
    scale: list[float] = []  # each conv's input rms, in the order the forward pass meets them
    offset: list[float] = []  # the share of its mean square that is a per-channel mean

    def seen(module, inp) -> None:
        o = inp[0].detach().double()
        if o.dim() != 4:
            return
        msq = float((o ** 2).mean())
        scale.append(math.sqrt(msq) if math.isfinite(msq) else math.inf)
        chan = float((o.mean(dim=(0, 2, 3)) ** 2).mean())
        offset.append(chan / msq if math.isfinite(msq) and msq > 0 else math.nan)

    head = [m for m in model.modules() if isinstance(m, torch.nn.Linear)][-1]
    pooled: dict[str, torch.Tensor] = {}
    # the layer's outputs as the convs after it read them (its own calls may bypass module hooks),
    # the stem's input (the image) aside
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    hooks = [m.register_forward_pre_hook(seen) for m in convs[1:]]
    hooks.append(head.register_forward_hook(lambda m, inp, out: pooled.update(h=inp[0].detach())))
    try:
        logits = model(x)
    finally:
        for h in hooks:
            h.remove()
    loss = F.cross_entropy(logits, y)
    lg = logits.detach().double()
    rms = float(lg.pow(2).mean().sqrt())
    h = pooled["h"].double().flatten(1)
    h_rms = float(h.pow(2).mean().sqrt())
    finite_offsets = [v for v in offset if math.isfinite(v)]
    feats: dict[str, float | None] = {
        "finite": float(bool(torch.isfinite(lg).all())),
        "loss": float(loss.detach()) if torch.isfinite(loss) else None,
        "logit_rms": _log10(rms),
        # std across the batch per class over the logits' rms: 0 when every image looks alike
        "logit_spread": float(lg.std(dim=0).mean()) / rms if math.isfinite(rms) and rms > 0 else None,
        "pooled_spread": (float(h.std(dim=0).mean()) / h_rms
                          if math.isfinite(h_rms) and h_rms > 0 else None),
        "offset_last": finite_offsets[-1] if finite_offsets else None,
        "offset_mean": sum(finite_offsets) / len(finite_offsets) if finite_offsets else None,
    }
    feats.update({f"scale_{k}": v for k, v in gradient_profile(scale).items()})
    if feats["loss"] is None:
        return feats
    grads = torch.autograd.grad(loss, [m.weight for m in convs], allow_unused=True)
    norms = [float(g.norm()) if g is not None else 0.0 for g in grads]
    feats.update({f"grad_{k}": v for k, v in gradient_profile(norms).items()})
    return feats


# the logits' spread across images (std over the batch per class, over their rms) below which a
# network at initialisation tells no image from another
SIGNAL_SPREAD_MIN = 1e-3


def signal_verdict(feats: dict[str, float | None]) -> str | None:
    """Why a network at initialisation is hopeless (`signal_features`), or None: the layer breaks
    the architecture, its loss is not finite, or every image gives the same logits. On the
    from-scratch experiment's stored candidates this rejected 74% of the quality tests' failures
    and none of the layers that passed the ResNet-50 test (results/from_scratch_2)."""
    if feats.get("error"):
        return "error"
    if not feats.get("finite") or feats.get("loss") is None:
        return "nonfinite"
    spread = feats.get("logit_spread")
    if spread is None or spread <= SIGNAL_SPREAD_MIN:
        return "logits alike"
    return None
