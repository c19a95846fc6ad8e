"""Triton kernels for the six EvoNorm layers (impl="triton"; on CUDA also what `auto` runs: on an H100 they beat
the compiled formula at every shape measured).

Why hand-written: on a GPU the cost of these layers is the number of passes over memory and of kernel launches,
so statistics and the element-wise part are fused here.

- S layers: forward is one kernel, one program per (sample, group): group statistics (two passes over the
  group, the second from cache) then the output. Backward is one kernel per (sample, group) plus one sum over
  the batch for the parameter gradients.
- B layers: a two-phase batch reduction. Forward: per-(sample, channel) moments (program per sample and channel
  block), then per-channel batch moments combined exactly (law of total variance; updates `running_var`, or
  reads it in eval mode), then the element-wise output. Backward: per-(sample, channel) sums, per-channel sums
  over the batch (parameter gradients, batch-std term), then dx.

Inputs are NCHW or channels_last (any other layout is made contiguous), float32/bfloat16/float16 (statistics
and arithmetic in float32) or float64 (in float64). Only the input and per-(sample, group|channel) statistics
are saved for backward. Double backward differentiates the plain formulas, as the CPU kernels do.
With TRITON_INTERPRET=1 set before Triton is imported, these kernels run on CPU tensors (the tests do that).
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from evonorm.layers._formula import b_formula, s_formula
from evonorm.runtime.common import differentiable_grads

_TILE = 2048  # elements per [BLOCK_C, BLOCK_L] tile: registers per program stay modest at 4 warps
_CHAN_BLOCK = 128  # channels per program of the per-channel (batch) reductions


def _layout(t: torch.Tensor) -> tuple[torch.Tensor, int, int, int]:
    """`t` as a dense NCHW or channels_last tensor, with its (sample, channel, position) strides."""
    if t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last) and not t.is_contiguous():
        return t, t.stride(0), t.stride(1), t.stride(3)
    t = t.contiguous()
    n, c = t.shape[:2]
    length = t[0, 0].numel()
    return t, c * length, length, 1


def _tile(channels: int, length: int, stride_c: int) -> tuple[int, int]:
    """(BLOCK_C, BLOCK_L): the contiguous dimension gets the long side of the tile (coalesced loads)."""
    if stride_c == 1 and channels > 1:  # channels_last: channels are contiguous
        block_c = min(triton.next_power_of_2(channels), 64)
        return block_c, max(1, min(triton.next_power_of_2(length), _TILE // block_c))
    block_l = min(triton.next_power_of_2(length), 1024, _TILE)
    return max(1, min(triton.next_power_of_2(channels), _TILE // block_l)), block_l


def _compute_type(dtype: torch.dtype):
    return tl.float64 if dtype == torch.float64 else tl.float32


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _check_device(x: torch.Tensor) -> None:
    if not x.is_cuda and os.environ.get("TRITON_INTERPRET") != "1":
        raise ValueError("impl='triton' needs CUDA tensors (or TRITON_INTERPRET=1 for Triton's interpreter on CPU)")


# ---------------------------------------------------------------- S layers: one program per (sample, group)

@triton.jit
def _s_fwd(X, Y, V, W, B, MEAN, RSTD, C, L, G, sn, sc, sl, eps,
           VARIANT: tl.constexpr, CT: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_L: tl.constexpr):
    pid = tl.program_id(0)
    n = (pid // G).to(tl.int64)
    g = pid % G
    cpg = C // G
    base = n * sn + (g * cpg).to(tl.int64) * sc
    k = cpg * L
    cr = tl.arange(0, BLOCK_C)
    lr = tl.arange(0, BLOCK_L)
    acc = tl.zeros([BLOCK_C, BLOCK_L], dtype=CT)
    for c0 in range(0, cpg, BLOCK_C):  # pass 1: mean (S0, S1) or mean square (S2)
        for l0 in range(0, L, BLOCK_L):
            cs, ls = c0 + cr, l0 + lr
            m = (cs < cpg)[:, None] & (ls < L)[None, :]
            x = tl.load(X + base + cs[:, None] * sc + ls[None, :] * sl, mask=m, other=0.0).to(CT)
            acc += x * x if VARIANT == 2 else x
    mean = tl.sum(tl.sum(acc, axis=1), axis=0) / k
    if VARIANT == 2:
        rstd = 1.0 / tl.sqrt(mean + eps)
    else:  # pass 2, centred (the group is in cache): the variance without cancellation
        acc = tl.zeros([BLOCK_C, BLOCK_L], dtype=CT)
        for c0 in range(0, cpg, BLOCK_C):
            for l0 in range(0, L, BLOCK_L):
                cs, ls = c0 + cr, l0 + lr
                m = (cs < cpg)[:, None] & (ls < L)[None, :]
                x = tl.load(X + base + cs[:, None] * sc + ls[None, :] * sl, mask=m, other=0.0).to(CT)
                d = tl.where(m, x - mean, 0.0)
                acc += d * d
        rstd = 1.0 / tl.sqrt(tl.sum(tl.sum(acc, axis=1), axis=0) / k + eps)
        tl.store(MEAN + pid, mean)
    tl.store(RSTD + pid, rstd)
    for c0 in range(0, cpg, BLOCK_C):  # pass 3: y = x sigmoid(v x) rstd gamma + beta
        cs = c0 + cr
        cm = cs < cpg
        ch = g * cpg + cs
        wr = (tl.load(W + ch, mask=cm, other=0.0).to(CT) * rstd)[:, None]
        b = tl.load(B + ch, mask=cm, other=0.0).to(CT)[:, None]
        if VARIANT == 0:
            v = tl.load(V + ch, mask=cm, other=0.0).to(CT)[:, None]
        for l0 in range(0, L, BLOCK_L):
            ls = l0 + lr
            m = cm[:, None] & (ls < L)[None, :]
            off = base + cs[:, None] * sc + ls[None, :] * sl
            x = tl.load(X + off, mask=m, other=0.0).to(CT)
            s = 1.0 / (1.0 + tl.exp(-(v * x if VARIANT == 0 else x)))
            tl.store(Y + off, (x * s * wr + b).to(Y.dtype.element_ty), mask=m)


@triton.jit
def _s_bwd(X, DY, DX, V, W, MEAN, RSTD, PART, N, C, L, G, sn, sc, sl, dsn, dsc, dsl,
           VARIANT: tl.constexpr, CT: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_L: tl.constexpr):
    """dx = dy gamma rstd f'(x) + kk (x - mean), kk = -rstd^3 / k sum_group(gamma dy f); PART gets the
    per-(sample, channel) terms of d gamma, d beta and d v (summed over the batch afterwards)."""
    pid = tl.program_id(0)
    n = (pid // G).to(tl.int64)
    g = pid % G
    cpg = C // G
    base = n * sn + (g * cpg).to(tl.int64) * sc
    dbase = n * dsn + (g * cpg).to(tl.int64) * dsc
    k = cpg * L
    rstd = tl.load(RSTD + pid).to(CT)
    mean = 0.0 if VARIANT == 2 else tl.load(MEAN + pid).to(CT)
    cr = tl.arange(0, BLOCK_C)
    lr = tl.arange(0, BLOCK_L)
    nc = N * C
    p_total = tl.sum(tl.zeros([BLOCK_C], dtype=CT), axis=0)
    for c0 in range(0, cpg, BLOCK_C):  # pass 1: per-channel sums
        cs = c0 + cr
        cm = cs < cpg
        ch = g * cpg + cs
        w = tl.load(W + ch, mask=cm, other=0.0).to(CT)
        if VARIANT == 0:
            v = tl.load(V + ch, mask=cm, other=0.0).to(CT)[:, None]
        a_dyf = tl.zeros([BLOCK_C, BLOCK_L], dtype=CT)
        a_dy = tl.zeros([BLOCK_C, BLOCK_L], dtype=CT)
        a_dv = tl.zeros([BLOCK_C, BLOCK_L], dtype=CT)
        for l0 in range(0, L, BLOCK_L):
            ls = l0 + lr
            m = cm[:, None] & (ls < L)[None, :]
            x = tl.load(X + base + cs[:, None] * sc + ls[None, :] * sl, mask=m, other=0.0).to(CT)
            dy = tl.load(DY + dbase + cs[:, None] * dsc + ls[None, :] * dsl, mask=m, other=0.0).to(CT)
            s = 1.0 / (1.0 + tl.exp(-(v * x if VARIANT == 0 else x)))
            a_dyf += dy * x * s
            a_dy += dy
            if VARIANT == 0:
                a_dv += dy * x * x * s * (1.0 - s)
        dyf = tl.sum(a_dyf, axis=1)
        p_total += tl.sum(w * dyf, axis=0)
        row = n * C + ch
        tl.store(PART + row, dyf * rstd, mask=cm)
        tl.store(PART + nc + row, tl.sum(a_dy, axis=1), mask=cm)
        if VARIANT == 0:
            tl.store(PART + 2 * nc + row, w * rstd * tl.sum(a_dv, axis=1), mask=cm)
    kk = -p_total * rstd * rstd * rstd / k
    for c0 in range(0, cpg, BLOCK_C):  # pass 2: dx
        cs = c0 + cr
        cm = cs < cpg
        ch = g * cpg + cs
        wr = (tl.load(W + ch, mask=cm, other=0.0).to(CT) * rstd)[:, None]
        if VARIANT == 0:
            v = tl.load(V + ch, mask=cm, other=0.0).to(CT)[:, None]
        for l0 in range(0, L, BLOCK_L):
            ls = l0 + lr
            m = cm[:, None] & (ls < L)[None, :]
            off = base + cs[:, None] * sc + ls[None, :] * sl
            x = tl.load(X + off, mask=m, other=0.0).to(CT)
            dy = tl.load(DY + dbase + cs[:, None] * dsc + ls[None, :] * dsl, mask=m, other=0.0).to(CT)
            if VARIANT == 0:
                s = 1.0 / (1.0 + tl.exp(-v * x))
                df = s + v * x * s * (1.0 - s)
            else:
                s = 1.0 / (1.0 + tl.exp(-x))
                df = s + x * s * (1.0 - s)
            dx = dy * wr * df + kk * (x - mean)
            tl.store(DX + off, dx.to(DX.dtype.element_ty), mask=m)


class EvoNormSTriton(torch.autograd.Function):
    """EvoNorm-S{0,1,2} with the Triton kernels; `v` is None for S1 and S2."""

    @staticmethod
    def forward(ctx, x, v, weight, bias, groups: int, eps: float, variant: int):
        _check_device(x)
        xd, sn, sc, sl = _layout(x)
        n, c = x.shape[:2]
        length = xd[0, 0].numel() if n and c else 0
        ct = _compute_dtype(x.dtype)
        y = torch.empty_like(xd)
        mean = torch.empty(n, groups, device=x.device, dtype=ct)
        rstd = torch.empty(n, groups, device=x.device, dtype=ct)
        block_c, block_l = _tile(c // groups, length, sc)
        if y.numel():
            _s_fwd[(n * groups,)](xd, y, weight if v is None else v, weight, bias, mean, rstd, c, length, groups,
                                  sn, sc, sl, eps, VARIANT=variant, CT=_compute_type(x.dtype), BLOCK_C=block_c,
                                  BLOCK_L=block_l, num_warps=4)
        ctx.save_for_backward(x, v, weight, bias, mean, rstd)
        ctx.groups, ctx.eps, ctx.variant = groups, eps, variant
        return y

    @staticmethod
    def backward(ctx, dy):
        x, v, weight, bias, mean, rstd = ctx.saved_tensors
        groups, variant = ctx.groups, ctx.variant
        if torch.is_grad_enabled():  # create_graph=True: differentiate the plain formula instead
            grads = differentiable_grads(s_formula, (x, v, weight, bias), (groups, ctx.eps, variant), dy)
            return (*grads, None, None, None)
        xd, sn, sc, sl = _layout(x)
        dyd, dsn, dsc, dsl = _layout(dy)
        n, c = x.shape[:2]
        length = xd[0, 0].numel() if n and c else 0
        dx = torch.empty_like(xd)
        part = torch.zeros(3, n, c, device=x.device, dtype=mean.dtype)
        block_c, block_l = _tile(c // groups, length, sc)
        if dx.numel():
            _s_bwd[(n * groups,)](xd, dyd, dx, weight if v is None else v, weight, mean, rstd, part, n, c, length,
                                  groups, sn, sc, sl, dsn, dsc, dsl, VARIANT=variant, CT=_compute_type(x.dtype),
                                  BLOCK_C=block_c, BLOCK_L=block_l, num_warps=4)
        sums = part.sum(1)
        dv = sums[2].to(v.dtype) if v is not None else None
        return dx, dv, sums[0].to(weight.dtype), sums[1].to(bias.dtype), None, None, None


# ---------------------------------------------------------------- B layers: two-phase batch reduction

@triton.jit
def _b_inst_stats(X, MEAN_NC, VAR_NC, C, L, CB, sn, sc, sl,
                  CT: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_L: tl.constexpr):
    """Phase 1: mean and biased variance over positions, per (sample, channel); program per (sample, c-block)."""
    pid = tl.program_id(0)
    n = (pid // CB).to(tl.int64)
    cs = (pid % CB) * BLOCK_C + tl.arange(0, BLOCK_C)
    cm = cs < C
    lr = tl.arange(0, BLOCK_L)
    base = n * sn + cs[:, None].to(tl.int64) * sc
    acc = tl.zeros([BLOCK_C, BLOCK_L], dtype=CT)
    for l0 in range(0, L, BLOCK_L):
        ls = l0 + lr
        m = cm[:, None] & (ls < L)[None, :]
        acc += tl.load(X + base + ls[None, :] * sl, mask=m, other=0.0).to(CT)
    mean = tl.sum(acc, axis=1) / L
    acc = tl.zeros([BLOCK_C, BLOCK_L], dtype=CT)
    for l0 in range(0, L, BLOCK_L):
        ls = l0 + lr
        m = cm[:, None] & (ls < L)[None, :]
        x = tl.load(X + base + ls[None, :] * sl, mask=m, other=0.0).to(CT)
        d = tl.where(m, x - mean[:, None], 0.0)
        acc += d * d
    tl.store(MEAN_NC + n * C + cs, mean, mask=cm)
    tl.store(VAR_NC + n * C + cs, tl.sum(acc, axis=1) / L, mask=cm)


@triton.jit
def _b_batch_stats(MEAN_NC, VAR_NC, RUNNING_VAR, MEAN_C, BSTD, N, C, momentum, unbiased, eps,
                   TRAINING: tl.constexpr, CT: tl.constexpr, BLOCK_C: tl.constexpr):
    """Phase 2, per channel block: batch mean and variance from the per-sample moments (exact), the running
    variance update (BatchNorm's rule, unbiased); in eval mode the batch std comes from the running variance."""
    cs = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    cm = cs < C
    rv = tl.load(RUNNING_VAR + cs, mask=cm, other=1.0)
    if TRAINING:
        acc = tl.zeros([BLOCK_C], dtype=CT)
        for i in range(0, N):
            acc += tl.load(MEAN_NC + i * C + cs, mask=cm, other=0.0)
        mean_c = acc / N
        acc = tl.zeros([BLOCK_C], dtype=CT)
        for i in range(0, N):
            d = tl.load(MEAN_NC + i * C + cs, mask=cm, other=0.0) - mean_c
            acc += tl.load(VAR_NC + i * C + cs, mask=cm, other=0.0) + d * d
        var_c = acc / N
        new_rv = (1.0 - momentum) * rv.to(CT) + (momentum * unbiased) * var_c
        tl.store(RUNNING_VAR + cs, new_rv.to(rv.dtype), mask=cm)
        tl.store(MEAN_C + cs, mean_c, mask=cm)
    else:
        var_c = rv.to(CT)
    tl.store(BSTD + cs, tl.sqrt(var_c + eps), mask=cm)


@triton.jit
def _b_pq(V, MEAN_NC, VAR_NC, row, cs, cm, eps, VARIANT: tl.constexpr, CT: tl.constexpr):
    """Slope p and offset q of the instance branch p x + q, per channel of one sample."""
    var = tl.load(VAR_NC + row, mask=cm, other=1.0).to(CT)
    if VARIANT == 0:
        p = tl.load(V + cs, mask=cm, other=0.0).to(CT)
        q = tl.sqrt(var + eps)
    else:
        mean = tl.load(MEAN_NC + row, mask=cm, other=0.0).to(CT)
        q = tl.sqrt(var + mean * mean + eps)
        p = q if VARIANT == 1 else q * 0.0 - 1.0
    return p, q


@triton.jit
def _b_fwd(X, Y, V, W, B, MEAN_NC, VAR_NC, BSTD, C, L, CB, sn, sc, sl, eps,
           VARIANT: tl.constexpr, CT: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_L: tl.constexpr):
    """Phase 3: y = x / max(batch_std, p x + q) * gamma + beta; program per (sample, c-block)."""
    pid = tl.program_id(0)
    n = (pid // CB).to(tl.int64)
    cs = (pid % CB) * BLOCK_C + tl.arange(0, BLOCK_C)
    cm = cs < C
    row = n * C + cs
    p, q = _b_pq(V, MEAN_NC, VAR_NC, row, cs, cm, eps, VARIANT, CT)
    p, q = p[:, None], q[:, None]
    bstd = tl.load(BSTD + cs, mask=cm, other=1.0).to(CT)[:, None]
    w = tl.load(W + cs, mask=cm, other=0.0).to(CT)[:, None]
    b = tl.load(B + cs, mask=cm, other=0.0).to(CT)[:, None]
    base = n * sn + cs[:, None].to(tl.int64) * sc
    lr = tl.arange(0, BLOCK_L)
    for l0 in range(0, L, BLOCK_L):
        ls = l0 + lr
        m = cm[:, None] & (ls < L)[None, :]
        off = base + ls[None, :] * sl
        x = tl.load(X + off, mask=m, other=0.0).to(CT)
        den = tl.maximum(p * x + q, bstd)
        tl.store(Y + off, (x / den * w + b).to(Y.dtype.element_ty), mask=m)


@triton.jit
def _b_bwd_sums(X, DY, V, W, MEAN_NC, VAR_NC, BSTD, PART, N, C, L, CB, sn, sc, sl, dsn, dsc, dsl, eps,
                VARIANT: tl.constexpr, CT: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_L: tl.constexpr):
    """Backward phase 1, per (sample, c-block): sums over positions of dy, dy x r, D = dy x r^2, D mask and
    D mask x (r = 1 / den, mask: the instance branch won the max)."""
    pid = tl.program_id(0)
    n = (pid // CB).to(tl.int64)
    cs = (pid % CB) * BLOCK_C + tl.arange(0, BLOCK_C)
    cm = cs < C
    row = n * C + cs
    p, q = _b_pq(V, MEAN_NC, VAR_NC, row, cs, cm, eps, VARIANT, CT)
    p, q = p[:, None], q[:, None]
    bstd = tl.load(BSTD + cs, mask=cm, other=1.0).to(CT)[:, None]
    base = n * sn + cs[:, None].to(tl.int64) * sc
    dbase = n * dsn + cs[:, None].to(tl.int64) * dsc
    lr = tl.arange(0, BLOCK_L)
    a_dy = tl.zeros([BLOCK_C, BLOCK_L], dtype=CT)
    a_dyrx = tl.zeros([BLOCK_C, BLOCK_L], dtype=CT)
    a_d = tl.zeros([BLOCK_C, BLOCK_L], dtype=CT)
    a_dm = tl.zeros([BLOCK_C, BLOCK_L], dtype=CT)
    a_dmx = tl.zeros([BLOCK_C, BLOCK_L], dtype=CT)
    for l0 in range(0, L, BLOCK_L):
        ls = l0 + lr
        m = cm[:, None] & (ls < L)[None, :]
        x = tl.load(X + base + ls[None, :] * sl, mask=m, other=0.0).to(CT)
        dy = tl.load(DY + dbase + ls[None, :] * dsl, mask=m, other=0.0).to(CT)
        inst = p * x + q
        r = 1.0 / tl.maximum(inst, bstd)
        dyr = dy * r
        d = dyr * x * r
        dm = tl.where(inst > bstd, d, 0.0)
        a_dy += dy
        a_dyrx += dyr * x
        a_d += d
        a_dm += dm
        a_dmx += dm * x
    nc = N * C
    tl.store(PART + row, tl.sum(a_dy, axis=1), mask=cm)
    tl.store(PART + nc + row, tl.sum(a_dyrx, axis=1), mask=cm)
    tl.store(PART + 2 * nc + row, tl.sum(a_d, axis=1), mask=cm)
    tl.store(PART + 3 * nc + row, tl.sum(a_dm, axis=1), mask=cm)
    tl.store(PART + 4 * nc + row, tl.sum(a_dmx, axis=1), mask=cm)


@triton.jit
def _b_bwd_chan(PART, W, BSTD, GRADS, N, C, L, TRAINING: tl.constexpr, CT: tl.constexpr, BLOCK_C: tl.constexpr):
    """Backward phase 2, per channel block: d beta, d gamma, d v and the batch-std coefficient
    coef = d bstd / (bstd N L) (training), sums over the batch."""
    cs = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    cm = cs < C
    nc = N * C
    dy = tl.zeros([BLOCK_C], dtype=CT)
    dyrx = tl.zeros([BLOCK_C], dtype=CT)
    dbatch = tl.zeros([BLOCK_C], dtype=CT)
    dmx = tl.zeros([BLOCK_C], dtype=CT)
    for i in range(0, N):
        row = i * C + cs
        dy += tl.load(PART + row, mask=cm, other=0.0)
        dyrx += tl.load(PART + nc + row, mask=cm, other=0.0)
        dbatch += tl.load(PART + 2 * nc + row, mask=cm, other=0.0) - tl.load(PART + 3 * nc + row, mask=cm,
                                                                                other=0.0)
        dmx += tl.load(PART + 4 * nc + row, mask=cm, other=0.0)
    w = tl.load(W + cs, mask=cm, other=0.0).to(CT)
    tl.store(GRADS + cs, dyrx, mask=cm)  # d gamma
    tl.store(GRADS + C + cs, dy, mask=cm)  # d beta
    tl.store(GRADS + 2 * C + cs, -w * dmx, mask=cm)  # d v (B0)
    if TRAINING:
        bstd = tl.load(BSTD + cs, mask=cm, other=1.0).to(CT)
        tl.store(GRADS + 3 * C + cs, -w * dbatch / (bstd * N * L), mask=cm)
    else:
        tl.store(GRADS + 3 * C + cs, tl.zeros([BLOCK_C], dtype=CT), mask=cm)


@triton.jit
def _b_bwd_dx(X, DY, DX, V, W, MEAN_NC, VAR_NC, BSTD, MEAN_C, PART, GRADS, N, C, L, CB, sn, sc, sl,
              dsn, dsc, dsl, eps, VARIANT: tl.constexpr, CT: tl.constexpr, BLOCK_C: tl.constexpr,
              BLOCK_L: tl.constexpr):
    """Backward phase 3: dx = dy gamma r - gamma p D mask + lin x + off, where lin and off carry the gradient
    through the instance statistic (per sample and channel) and the batch std (per channel)."""
    pid = tl.program_id(0)
    n = (pid // CB).to(tl.int64)
    cs = (pid % CB) * BLOCK_C + tl.arange(0, BLOCK_C)
    cm = cs < C
    row = n * C + cs
    nc = N * C
    p, q = _b_pq(V, MEAN_NC, VAR_NC, row, cs, cm, eps, VARIANT, CT)
    w = tl.load(W + cs, mask=cm, other=0.0).to(CT)
    dq = -w * tl.load(PART + 3 * nc + row, mask=cm, other=0.0)
    mean_nc = tl.load(MEAN_NC + row, mask=cm, other=0.0).to(CT)
    if VARIANT == 0:  # q = instance std: dx += dq / (q L) (x - mean_nc)
        lin = dq / (q * L)
        off = -lin * mean_nc
    else:  # q (and p for B1) = instance rms: dx += (dq + dp) / (q L) x
        if VARIANT == 1:
            dq -= w * tl.load(PART + 4 * nc + row, mask=cm, other=0.0)
        lin = dq / (q * L)
        off = tl.zeros([BLOCK_C], dtype=CT)
    coef = tl.load(GRADS + 3 * C + cs, mask=cm, other=0.0).to(CT)  # zero in eval mode
    lin += coef
    off -= coef * tl.load(MEAN_C + cs, mask=cm, other=0.0).to(CT)
    p, q, lin, off = p[:, None], q[:, None], lin[:, None], off[:, None]
    w = w[:, None]
    slope = -w * p
    bstd = tl.load(BSTD + cs, mask=cm, other=1.0).to(CT)[:, None]
    base = n * sn + cs[:, None].to(tl.int64) * sc
    dbase = n * dsn + cs[:, None].to(tl.int64) * dsc
    lr = tl.arange(0, BLOCK_L)
    for l0 in range(0, L, BLOCK_L):
        ls = l0 + lr
        m = cm[:, None] & (ls < L)[None, :]
        off_x = base + ls[None, :] * sl
        x = tl.load(X + off_x, mask=m, other=0.0).to(CT)
        dy = tl.load(DY + dbase + ls[None, :] * dsl, mask=m, other=0.0).to(CT)
        inst = p * x + q
        r = 1.0 / tl.maximum(inst, bstd)
        dyr = dy * r
        dx = dyr * w + tl.where(inst > bstd, slope * dyr * x * r, 0.0) + lin * x + off
        tl.store(DX + off_x, dx.to(DX.dtype.element_ty), mask=m)


class EvoNormBTriton(torch.autograd.Function):
    """EvoNorm-B{0,1,2} with the Triton kernels; updates `running_var` in place when training."""

    @staticmethod
    def forward(ctx, x, v, weight, bias, running_var, training: bool, momentum: float, eps: float, variant: int):
        _check_device(x)
        xd, sn, sc, sl = _layout(x)
        n, c = x.shape[:2]
        length = xd[0, 0].numel() if n and c else 0
        ct = _compute_dtype(x.dtype)
        ctype = _compute_type(x.dtype)
        mean_nc = torch.empty(n, c, device=x.device, dtype=ct)
        var_nc = torch.empty(n, c, device=x.device, dtype=ct)
        mean_c = torch.zeros(c, device=x.device, dtype=ct)
        bstd = torch.empty(c, device=x.device, dtype=ct)
        y = torch.empty_like(xd)
        block_c, block_l = _tile(c, length, sc)
        cb = triton.cdiv(c, block_c)
        vv = weight if v is None else v
        count = n * length
        if y.numel():
            _b_inst_stats[(n * cb,)](xd, mean_nc, var_nc, c, length, cb, sn, sc, sl, CT=ctype, BLOCK_C=block_c,
                                     BLOCK_L=block_l, num_warps=4)
            unbiased = count / (count - 1) if count > 1 else 1.0
            _b_batch_stats[(triton.cdiv(c, _CHAN_BLOCK),)](mean_nc, var_nc, running_var, mean_c, bstd, n, c, momentum,
                                                   unbiased, eps, TRAINING=training, CT=ctype, BLOCK_C=_CHAN_BLOCK)
            _b_fwd[(n * cb,)](xd, y, vv, weight, bias, mean_nc, var_nc, bstd, c, length, cb, sn, sc, sl, eps,
                              VARIANT=variant, CT=ctype, BLOCK_C=block_c, BLOCK_L=block_l, num_warps=4)
        ctx.save_for_backward(x, v, weight, bias, mean_nc, var_nc, bstd, mean_c)
        ctx.training, ctx.eps, ctx.variant = training, eps, variant
        ctx.running_var = None if training else running_var.clone()  # for a double backward in eval
        return y

    @staticmethod
    def backward(ctx, dy):
        x, v, weight, bias, mean_nc, var_nc, bstd, mean_c = ctx.saved_tensors
        variant, training = ctx.variant, ctx.training
        if torch.is_grad_enabled():  # create_graph=True: differentiate the plain formula instead
            grads = differentiable_grads(b_formula, (x, v, weight, bias),
                                         (ctx.running_var, training, ctx.eps, variant), dy)
            return (*grads, None, None, None, None, None)
        xd, sn, sc, sl = _layout(x)
        dyd, dsn, dsc, dsl = _layout(dy)
        n, c = x.shape[:2]
        length = xd[0, 0].numel() if n and c else 0
        ctype = _compute_type(x.dtype)
        dx = torch.empty_like(xd)
        part = torch.empty(5, n, c, device=x.device, dtype=mean_nc.dtype)
        grads = torch.zeros(4, c, device=x.device, dtype=mean_nc.dtype)
        block_c, block_l = _tile(c, length, sc)
        cb = triton.cdiv(c, block_c)
        vv = weight if v is None else v
        if dx.numel():
            _b_bwd_sums[(n * cb,)](xd, dyd, vv, weight, mean_nc, var_nc, bstd, part, n, c, length, cb, sn, sc, sl,
                                   dsn, dsc, dsl, ctx.eps, VARIANT=variant, CT=ctype, BLOCK_C=block_c,
                                   BLOCK_L=block_l, num_warps=4)
            _b_bwd_chan[(triton.cdiv(c, _CHAN_BLOCK),)](part, weight, bstd, grads, n, c, length, TRAINING=training,
                                                CT=ctype, BLOCK_C=_CHAN_BLOCK)
            _b_bwd_dx[(n * cb,)](xd, dyd, dx, vv, weight, mean_nc, var_nc, bstd, mean_c, part, grads, n, c, length,
                                 cb, sn, sc, sl, dsn, dsc, dsl, ctx.eps, VARIANT=variant, CT=ctype,
                                 BLOCK_C=block_c, BLOCK_L=block_l, num_warps=4)
        dv = grads[2].to(v.dtype) if v is not None else None
        return dx, dv, grads[0].to(weight.dtype), grads[1].to(bias.dtype), None, None, None, None, None
