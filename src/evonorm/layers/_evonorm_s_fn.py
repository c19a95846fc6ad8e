"""Autograd kernel for the sample-based EvoNorms (S0, S1, S2).

y = x * sigmoid(v * x) / den * gamma + beta, with den the group std (S0, S1; v = 1 for S1) or the group rms (S2).
Only the input and the per-group mean / reciprocal std are saved; sigmoid and the rest are recomputed in
backward. Work runs over cache-sized chunks of samples (every statistic is per sample), in place, so each
pass reads the input and writes the output about once. On CPU the group statistics come from torch's fused
group-norm kernel (one pass, faster than mean + centred norm), and backward uses the fused sigmoid_backward:
fewer full-size passes is what the time is made of.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from evonorm.layers._common import as_ncl, per_channel, restore, sample_chunks
from evonorm.layers._formula import differentiable_grads, s_formula

S0, S1, S2 = 0, 1, 2  # variants


def _to_channels(t: torch.Tensor, channels: int) -> torch.Tensor:
    """Per-group (N, G) values expanded to per-channel (N, C)."""
    return t.repeat_interleave(channels // t.shape[1], dim=1)


class EvoNormSFunction(torch.autograd.Function):
    """Forward/backward of EvoNorm-S{0,1,2}; `v` is None for S1 and S2."""

    @staticmethod
    def forward(ctx, x, v, weight, bias, groups: int, eps: float, variant: int):
        x3 = as_ncl(x)
        n, c, length = x3.shape
        ct = x3.dtype
        k = (c // groups) * length
        y = torch.empty_like(x3)
        rstd = x3.new_empty(n, groups)
        mean = None if variant == S2 else x3.new_empty(n, groups)
        w, b = weight.to(ct).view(1, c), per_channel(bias, ct)
        vv = per_channel(v, ct) if variant == S0 else None
        for i, j in sample_chunks(x3):
            xc, yc = x3[i:j], y[i:j]
            if variant == S2:
                ms = torch.linalg.vector_norm(xc.view(j - i, groups, k), dim=-1).square_().div_(k)
                torch.rsqrt(ms.add_(eps), out=rstd[i:j])
            else:  # torch's fused group-norm kernel: mean and 1 / sqrt(var + eps) in one pass, output unused
                _, m, r = torch.ops.aten.native_group_norm(xc, None, None, j - i, c, length, groups, eps)
                mean[i:j], rstd[i:j] = m, r
            if variant == S0:
                torch.mul(xc, vv, out=yc).sigmoid_().mul_(xc)
            else:
                yc.copy_(xc)
                F.silu(yc, inplace=True)
            torch.addcmul(b, yc, (w * _to_channels(rstd[i:j], c)).unsqueeze(-1), out=yc)
        ctx.save_for_backward(x, v, weight, bias, mean, rstd)
        ctx.variant, ctx.groups, ctx.eps = variant, groups, eps
        return restore(y, x)

    @staticmethod
    def backward(ctx, dy):
        x, v, weight, bias, mean, rstd = ctx.saved_tensors
        variant, groups = ctx.variant, ctx.groups
        if torch.is_grad_enabled():  # create_graph=True: differentiate the plain formula instead
            grads = differentiable_grads(s_formula, (x, v, weight, bias), (groups, ctx.eps, variant), dy)
            return (*grads, None, None, None)
        x3, dy3 = as_ncl(x), as_ncl(dy)
        n, c, length = x3.shape
        ct = x3.dtype
        k = (c // groups) * length
        w = weight.to(ct).view(1, c)
        vv = per_channel(v, ct) if variant == S0 else None
        dx = torch.empty_like(x3)
        p_sum = x3.new_empty(n, c)  # sum_L dy * f  (f = x * sigmoid(v x))
        r_sum = x3.new_empty(n, c) if variant == S0 else None  # sum_L dy * df/dv
        dy_sum = x3.new_empty(n, c)
        chunks = sample_chunks(x3)
        tmp = x3.new_empty((chunks[0][1] - chunks[0][0], c, length)) if variant == S0 else None
        # per-(sample, channel) coefficients for all chunks at once: fewer small ops in the loop
        rstd_all = _to_channels(rstd, c)
        wr = (w * rstd_all).unsqueeze(-1)  # gamma / den
        wrv = wr * vv if variant == S0 else None
        mean_c = None if mean is None else _to_channels(mean, c).unsqueeze(-1)
        r3k = rstd.pow(3).div_(-k)
        for i, j in chunks:
            xc, dyc, dxc = x3[i:j], dy3[i:j], dx[i:j]
            torch.sum(dyc, -1, out=dy_sum[i:j])
            if variant == S0:
                t = torch.mul(xc, vv, out=tmp[: j - i]).sigmoid_()  # s = sigmoid(v x)
                u = torch.mul(dyc, xc, out=dxc)  # dy x
                torch.linalg.vecdot(u, t, out=p_sum[i:j])  # sum dy * f  (f = x s)
                g = torch.ops.aten.sigmoid_backward.grad_input(u, t, grad_input=dxc)  # dy x s (1 - s)
                torch.linalg.vecdot(g, xc, out=r_sum[i:j])  # sum dy * df/dv
                core = t.mul_(dyc)  # dy s; dy * df/dx = dy s + v g, the v g part is added below
            else:
                torch.sum(F.silu(xc).mul_(dyc), -1, out=p_sum[i:j])
                core = torch.ops.aten.silu_backward.grad_input(dyc, xc, grad_input=dxc)  # dy * silu'(x)
            # through the statistic: kk = -rstd^3 / k * sum_group(gamma * sum_L dy f), per (sample, channel)
            kk = _to_channels((p_sum[i:j] * w).view(j - i, groups, c // groups).sum(-1).mul_(r3k[i:j]), c)
            kk = kk.unsqueeze(-1)
            if variant == S0:  # dx = (dy s + v g) gamma / den + kk * (x - mean); g is in dx
                dxc.mul_(wrv[i:j]).addcmul_(core, wr[i:j])
            else:  # dx = dy silu'(x) gamma / den + kk * (x - mean); core is dx
                dxc.mul_(wr[i:j])
            dxc.addcmul_(xc, kk)
            if mean_c is not None:
                dxc.sub_(kk * mean_c[i:j])
        dweight = (p_sum * rstd_all).sum(0).to(weight.dtype)
        dv = (w * rstd_all * r_sum).sum(0).to(v.dtype) if variant == S0 else None
        dbias = dy_sum.sum(0).to(weight.dtype)
        return restore(dx, x), dv, dweight, dbias, None, None, None
