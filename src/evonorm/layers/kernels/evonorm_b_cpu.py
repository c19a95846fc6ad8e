"""Autograd kernel for the batch EvoNorms (B0, B1, B2).

y = x / max(batch_std, p * x + q) * gamma + beta, with (p, q) = (v, instance_std) for B0,
(instance_rms, instance_rms) for B1 and (-1, instance_rms) for B2. Only the input and per-(sample, channel)
and per-channel statistics are saved; the denominator, its branch mask and the rest are recomputed in
backward. Work runs over cache-sized chunks of samples, in place: forward reads x twice (statistics, output);
backward reads x and dy once, then adds the batch-std path (the one term coupling the samples) to dx.
On CPU the instance statistics come from torch's fused group-norm kernel (one group per channel), the branch
mask is a float tensor (a bool one is several times slower to write and multiply by) and the batch-std
term is added chunk by chunk, so its second op finds dx in cache.
"""

from __future__ import annotations

import torch

from evonorm.runtime.common import (as_ncl, differentiable_grads, per_channel, restore, sample_chunks,
                                    update_running_var)
from evonorm.layers._formula import b_formula

B0, B1, B2 = 0, 1, 2  # variants


def _p_q(variant: int, v, mean_nc, var_nc, eps: float, ct):
    """Slope p and offset q of the instance branch p * x + q: (1|N, C, 1) tensors, or the float -1 for B2."""
    if variant == B0:
        return per_channel(v, ct), (var_nc + eps).sqrt_().unsqueeze(-1)
    rms = (var_nc + mean_nc.square()).add_(eps).sqrt_().unsqueeze(-1)
    return (rms, rms) if variant == B1 else (-1.0, rms)


def _rows(t, i: int, j: int):
    """Rows i:j of a per-sample (N, C, 1) tensor; a per-channel (1, C, 1) tensor or a float as is."""
    return t[i:j] if isinstance(t, torch.Tensor) and t.shape[0] != 1 else t


def _den(xc, p, q, bstd3, out, mask=None):
    """out = max(batch_std, p x + q); `mask`, if given, gets 1.0 where the instance branch wins, else 0.0
    (a float mask: on CPU a bool one is several times slower to write and to multiply by)."""
    if isinstance(p, float):
        torch.sub(q, xc, out=out)
    else:
        torch.addcmul(q, xc, p, out=out)
    if mask is not None:
        torch.gt(out, bstd3, out=mask)
    torch.maximum(out, bstd3, out=out)


class EvoNormBFunction(torch.autograd.Function):
    """Forward/backward of EvoNorm-B{0,1,2}; updates `running_var` in place when training."""

    @staticmethod
    def forward(ctx, x, v, weight, bias, running_var, training: bool, momentum: float, eps: float, variant: int):
        x3 = as_ncl(x)
        n, c, length = x3.shape
        ct = x3.dtype
        y = torch.empty_like(x3)
        mean_nc, var_nc = x3.new_empty(n, c), x3.new_empty(n, c)
        chunks = sample_chunks(x3)
        for i, j in chunks:  # torch's fused group norm, one group per channel: mean and 1 / sqrt(var + eps)
            _, mean_nc[i:j], var_nc[i:j] = torch.ops.aten.native_group_norm(x3[i:j], None, None, j - i, c,
                                                                            length, c, eps)
        var_nc.pow_(-2).sub_(eps).clamp_min_(0.0)  # back from 1 / sqrt(var + eps) to var
        if training:
            mean_c = mean_nc.mean(0)
            var_c = (var_nc + (mean_nc - mean_c).square()).mean(0)  # law of total variance, biased
            update_running_var(running_var, var_c, n * length, momentum)
        else:
            mean_c = None
            var_c = running_var.to(ct)
        bstd = (var_c + eps).sqrt_()
        bstd3 = bstd.view(1, c, 1)
        p, q = _p_q(variant, v, mean_nc, var_nc, eps, ct)
        w, b = per_channel(weight, ct), per_channel(bias, ct)
        for i, j in chunks:
            xc, yc = x3[i:j], y[i:j]
            _den(xc, _rows(p, i, j), q[i:j], bstd3, out=yc)
            torch.addcmul(b, torch.div(xc, yc, out=yc), w, out=yc)
        ctx.save_for_backward(x, v, weight, bias, mean_nc, var_nc, bstd, mean_c)
        ctx.training, ctx.eps, ctx.variant = training, eps, variant
        ctx.running_var = None if training else running_var.clone()  # for a double backward in eval
        return restore(y, x)

    @staticmethod
    def backward(ctx, dy):
        x, v, weight, bias, mean_nc, var_nc, bstd, mean_c = ctx.saved_tensors
        variant, training = ctx.variant, ctx.training
        if torch.is_grad_enabled():  # create_graph=True: differentiate the plain formula instead
            grads = differentiable_grads(b_formula, (x, v, weight, bias),
                                         (ctx.running_var, training, ctx.eps, variant), dy)
            return (*grads, None, None, None, None, None)
        x3, dy3 = as_ncl(x), as_ncl(dy)
        n, c, length = x3.shape
        ct = x3.dtype
        w = weight.to(ct).view(1, c)
        bstd3 = bstd.view(1, c, 1)
        p, q = _p_q(variant, v, mean_nc, var_nc, ctx.eps, ct)
        dx = torch.empty_like(x3)
        chunks = sample_chunks(x3)
        rows = chunks[0][1] - chunks[0][0]
        r_buf, t_buf, m_buf = (x3.new_empty((rows, c, length)) for _ in range(3))
        sums = {name: x3.new_empty(n, c) for name in ("dy", "dyrx", "d", "dm", "dmx")}
        w3 = w.unsqueeze(-1)
        slope = w3 if variant == B2 else -w3 * p  # d loss / d x along the instance branch, per D * mask
        lin, off = x3.new_empty(n, c), x3.new_zeros(n, c)  # dx += lin * x + off, through the statistics
        # one pass: everything but the batch-std path, which needs sums over the whole batch
        for i, j in chunks:
            xc, dyc, dxc = x3[i:j], dy3[i:j], dx[i:j]
            r, t, mask = r_buf[: j - i], t_buf[: j - i], m_buf[: j - i]
            _den(xc, _rows(p, i, j), q[i:j], bstd3, out=r, mask=mask)
            r.reciprocal_()  # r = 1 / den
            torch.sum(dyc, -1, out=sums["dy"][i:j])
            torch.mul(dyc, r, out=dxc)  # dy r
            torch.sum(torch.mul(dxc, xc, out=t), -1, out=sums["dyrx"][i:j])  # dy r x: for gamma
            torch.sum(t.mul_(r), -1, out=sums["d"][i:j])  # D = dy x r^2; d loss / d den = -gamma D
            torch.sum(t.mul_(mask), -1, out=sums["dm"][i:j])
            dxc.mul_(w3).addcmul_(t, _rows(slope, i, j))  # gamma r dy + slope D mask
            if variant != B2:
                torch.sum(t.mul_(xc), -1, out=sums["dmx"][i:j])
            dq = -w * sums["dm"][i:j]  # (rows, C): d loss / d q
            qq = q[i:j].squeeze(-1)
            if variant == B0:  # q = instance_std: dx += dq / (q L) * (x - mean_nc)
                lin[i:j] = dq / (qq * length)
                off[i:j] = -lin[i:j] * mean_nc[i:j]
            else:  # q (and p for B1) = instance_rms: dx += (dp + dq) / (rms L) * x
                lin[i:j] = (dq - w * sums["dmx"][i:j] if variant == B1 else dq) / (qq * length)
            if not training:
                dxc.addcmul_(xc, lin[i:j].unsqueeze(-1)).add_(off[i:j].unsqueeze(-1))
        if training:  # the max took the batch branch: dx += dbstd / (bstd N L) * (x - mean_c)
            dbstd = (-w * (sums["d"] - sums["dm"])).sum(0)
            coef = dbstd / (bstd * n * length)
            lin, off = (lin + coef).unsqueeze(-1), (off - coef * mean_c).unsqueeze(-1)
            for i, j in chunks:  # with the instance-statistic terms: two ops, the second finds dx in cache
                dx[i:j].addcmul_(x3[i:j], lin[i:j]).add_(off[i:j])
        dv = (-w * sums["dmx"]).sum(0).to(v.dtype) if variant == B0 else None
        dweight = sums["dyrx"].sum(0).to(weight.dtype)
        dbias = sums["dy"].sum(0).to(weight.dtype)
        return restore(dx, x), dv, dweight, dbias, None, None, None, None, None
