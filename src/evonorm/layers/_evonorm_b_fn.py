"""Autograd kernel for the batch EvoNorms (B0, B1, B2).

y = x / max(batch_std, p * x + q) * gamma + beta, with (p, q) = (v, instance_std) for B0,
(instance_rms, instance_rms) for B1 and (-1, instance_rms) for B2. Only the input and per-(sample, channel)
and per-channel statistics are saved; the denominator, its branch mask and the rest are recomputed in
backward. Work runs over cache-sized chunks of samples, in place: forward reads x twice (statistics, output),
backward reads x and dy twice (sums, then dx), since the batch statistic couples the samples.
"""

from __future__ import annotations

import torch

from evonorm.layers._common import as_ncl, per_channel, restore, sample_chunks

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


def _den(xc, p, q, bstd3, out, want_mask: bool = False):
    """out = max(batch_std, p x + q); with want_mask, also the mask of where the instance branch wins."""
    if isinstance(p, float):
        torch.sub(q, xc, out=out)
    else:
        torch.addcmul(q, xc, p, out=out)
    mask = out > bstd3 if want_mask else None
    torch.maximum(out, bstd3, out=out)
    return mask


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
        for i, j in chunks:
            torch.mean(x3[i:j], -1, out=mean_nc[i:j])
            centred = torch.sub(x3[i:j], mean_nc[i:j].unsqueeze(-1), out=y[i:j])  # two-pass variance
            torch.linalg.vector_norm(centred, dim=-1, out=var_nc[i:j])
        var_nc.square_().div_(length)
        if training:
            mean_c = mean_nc.mean(0)
            var_c = (var_nc + (mean_nc - mean_c).square()).mean(0)  # law of total variance, biased
            count = n * length
            unbiased = count / (count - 1) if count > 1 else 1.0
            running_var.mul_(1.0 - momentum).add_(var_c.to(running_var.dtype), alpha=momentum * unbiased)
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
        ctx.save_for_backward(x, v, weight, mean_nc, var_nc, bstd, mean_c)
        ctx.training, ctx.eps, ctx.variant = training, eps, variant
        return restore(y, x)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dy):
        x, v, weight, mean_nc, var_nc, bstd, mean_c = ctx.saved_tensors
        variant, training = ctx.variant, ctx.training
        x3, dy3 = as_ncl(x), as_ncl(dy)
        n, c, length = x3.shape
        ct = x3.dtype
        w = weight.to(ct).view(1, c)
        bstd3 = bstd.view(1, c, 1)
        p, q = _p_q(variant, v, mean_nc, var_nc, ctx.eps, ct)
        dx = torch.empty_like(x3)
        chunks = sample_chunks(x3)
        tmp = x3.new_empty((chunks[0][1] - chunks[0][0], c, length))
        # pass 1: per-(sample, channel) sums; D = dy x r^2, so d loss / d den = -gamma D
        sums = {name: x3.new_empty(n, c) for name in ("dy", "dyrx", "d", "dm", "dmx")}
        for i, j in chunks:
            xc, dyc, r = x3[i:j], dy3[i:j], tmp[: j - i]
            mask = _den(xc, _rows(p, i, j), q[i:j], bstd3, out=r, want_mask=True)
            r.reciprocal_()
            torch.sum(dyc, -1, out=sums["dy"][i:j])
            d = torch.mul(dyc, r, out=dx[i:j]).mul_(xc)  # dy x r
            torch.sum(d, -1, out=sums["dyrx"][i:j])
            torch.sum(d.mul_(r), -1, out=sums["d"][i:j])
            torch.sum(d.mul_(mask), -1, out=sums["dm"][i:j])
            if variant != B2:
                torch.sum(d.mul_(xc), -1, out=sums["dmx"][i:j])
        dq = -w * sums["dm"]  # (N, C)
        alpha = torch.zeros_like(dq)  # dx += alpha * x + delta: the paths through the statistics
        delta = torch.zeros_like(dq)
        qq = q.squeeze(-1)
        dv = None
        if variant == B0:
            dv = (-w * sums["dmx"]).sum(0).to(v.dtype)
            alpha += dq / (qq * length)  # through instance_std
            delta -= dq / (qq * length) * mean_nc
            slope = -w.unsqueeze(-1) * p
        elif variant == B1:
            alpha += (dq - w * sums["dmx"]) / (qq * length)  # through instance_rms (p and q)
            slope = -w.unsqueeze(-1) * p
        else:
            alpha += dq / (qq * length)
            slope = w.unsqueeze(-1)
        if training:
            dbstd = (-w * (sums["d"] - sums["dm"])).sum(0, keepdim=True)  # the max took the batch branch
            coef = dbstd / (bstd.view(1, c) * n * length)
            alpha += coef
            delta -= coef * mean_c.view(1, c)
        # pass 2: dx = dy r (gamma + slope r x mask) + alpha x + delta
        w3 = w.unsqueeze(-1)
        for i, j in chunks:
            xc, dyc, r, dxc = x3[i:j], dy3[i:j], tmp[: j - i], dx[i:j]
            mask = _den(xc, _rows(p, i, j), q[i:j], bstd3, out=r, want_mask=True)
            r.reciprocal_()
            torch.mul(dyc, r, out=dxc)  # dy r
            r.mul_(xc).mul_(mask).mul_(_rows(slope, i, j)).add_(w3)  # gamma + slope r x [mask]
            dxc.mul_(r).addcmul_(xc, alpha[i:j].unsqueeze(-1)).add_(delta[i:j].unsqueeze(-1))
        dweight = sums["dyrx"].sum(0).to(weight.dtype)
        dbias = sums["dy"].sum(0).to(weight.dtype)
        return restore(dx, x), dv, dweight, dbias, None, None, None, None, None
