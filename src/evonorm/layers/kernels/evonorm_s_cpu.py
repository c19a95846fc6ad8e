"""Autograd kernel for the sample-based EvoNorms (S0, S1, S2).

y = x * sigmoid(v * x) / den * gamma + beta, with den the group std (S0, S1; v = 1 for S1) or the group rms (S2).
Only the input and the per-group mean / reciprocal std are saved; sigmoid and the rest are recomputed in
backward. Work runs over cache-sized chunks of samples (every statistic is per sample), in place, so each
pass reads the input and writes the output about once. On CPU the group statistics come from torch's fused
group-norm kernel (one pass, faster than mean + centred norm), and backward uses the fused sigmoid_backward:
fewer full-size passes is what the time is made of. S0 uses f = x sigmoid(v x) = silu(v x) / v, so its forward
is silu plus one multiply-add and its backward takes f' = silu'(v x) from the fused silu_backward.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from evonorm.runtime.common import (as_ncl, differentiable_grads, groups_to_channels, per_channel, restore,
                                    sample_chunks)
from evonorm.layers._formula import s_formula

S0, S1, S2 = 0, 1, 2  # variants
_MIN_V = 1e-3  # below this |v|, S0's forward takes x * sigmoid(v x) rather than silu(v x) / v


def _dot(a: torch.Tensor, b: torch.Tensor, buf: torch.Tensor, out: torch.Tensor) -> None:
    """out = sum_L a * b, through a preallocated buffer."""
    torch.sum(torch.mul(a, b, out=buf), -1, out=out)


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
        # S0 as silu(v x) / v (one pass fewer than x * sigmoid(v x)) unless some |v| is too small to divide by
        via_silu = variant != S0 or bool(vv.abs().min() > _MIN_V)
        scale = w if variant != S0 else (w / vv.squeeze(-1) if via_silu else w)
        for i, j in sample_chunks(x3):
            xc, yc = x3[i:j], y[i:j]
            if variant == S2:
                ms = torch.linalg.vector_norm(xc.view(j - i, groups, k), dim=-1).square_().div_(k)
                torch.rsqrt(ms.add_(eps), out=rstd[i:j])
            else:  # torch's fused group-norm kernel: mean and 1 / sqrt(var + eps) in one pass, output unused
                _, m, r = torch.ops.aten.native_group_norm(xc, None, None, j - i, c, length, groups, eps)
                mean[i:j], rstd[i:j] = m, r
            if variant != S0:
                torch.ops.aten.silu.out(xc, out=yc)
            elif via_silu:
                F.silu(torch.mul(xc, vv, out=yc), inplace=True)
            else:
                torch.mul(xc, vv, out=yc).sigmoid_().mul_(xc)
            torch.addcmul(b, yc, (scale * groups_to_channels(rstd[i:j], c)).unsqueeze(-1), out=yc)
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
        rows = chunks[0][1] - chunks[0][0]
        tmp = x3.new_empty((rows, c, length))
        tmp2 = x3.new_empty((rows, c, length)) if variant == S0 else None
        prod = x3.new_empty((rows, c, length)) if variant == S0 else None  # for sums of products (no vecdot:
        # it allocates a product tensor per call)
        # per-(sample, channel) coefficients for all chunks at once: fewer small ops in the loop
        rstd_all = groups_to_channels(rstd, c)
        wr = (w * rstd_all).unsqueeze(-1)  # gamma / den
        mean_c = None if mean is None else groups_to_channels(mean, c).unsqueeze(-1)
        r3k = rstd.pow(3).div_(-k)
        for i, j in chunks:
            xc, dyc, dxc = x3[i:j], dy3[i:j], dx[i:j]
            torch.sum(dyc, -1, out=dy_sum[i:j])
            if variant == S0:  # f = x sigmoid(v x) = silu(v x) / v, df/dx = silu'(v x)
                z = torch.mul(xc, vv, out=tmp[: j - i])
                torch.ops.aten.silu_backward.grad_input(dyc, z, grad_input=dxc)  # dy df/dx
                s = z.sigmoid_()
                u = torch.mul(dyc, xc, out=tmp2[: j - i])  # dy x
                _dot(u, s, prod[: j - i], p_sum[i:j])  # sum dy f
                g = torch.ops.aten.sigmoid_backward.grad_input(u, s, grad_input=u)  # dy x s (1 - s)
                _dot(g, xc, prod[: j - i], r_sum[i:j])  # sum dy df/dv
            else:
                torch.sum(torch.ops.aten.silu.out(xc, out=tmp[: j - i]).mul_(dyc), -1, out=p_sum[i:j])
                torch.ops.aten.silu_backward.grad_input(dyc, xc, grad_input=dxc)  # dy * silu'(x)
            # through the statistic: kk = -rstd^3 / k * sum_group(gamma * sum_L dy f), per (sample, channel)
            kk = groups_to_channels((p_sum[i:j] * w).view(j - i, groups, c // groups).sum(-1).mul_(r3k[i:j]), c)
            kk = kk.unsqueeze(-1)
            dxc.mul_(wr[i:j]).addcmul_(xc, kk)  # dx = dy f'(x) gamma / den + kk * (x - mean)
            if mean_c is not None:
                dxc.sub_(kk * mean_c[i:j])
        dweight = (p_sum * rstd_all).sum(0).to(weight.dtype)
        dv = (w * rstd_all * r_sum).sum(0).to(v.dtype) if variant == S0 else None
        dbias = dy_sum.sum(0).to(weight.dtype)
        return restore(dx, x), dv, dweight, dbias, None, None, None
