"""Tensor plumbing shared by the hand-written kernels: compute dtype, (N, C, L) views, per-channel shapes."""

from __future__ import annotations

import torch

def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """Statistics and arithmetic run in float32 for half/bfloat16 inputs (their variance would lose
    precision), else in the input dtype."""
    return torch.float32 if dtype == torch.float16 or dtype == torch.bfloat16 else dtype


def check_input(x: torch.Tensor, num_features: int, layer: str) -> None:
    """A clear message for a tensor the layer cannot normalize (instead of a shape error deep inside)."""
    if x.dim() < 2 or x.shape[1] != num_features:
        raise ValueError(
            f"{layer} expects input of shape (N, {num_features}, ...), got {list(x.shape)}"
        )


def as_ncl(x: torch.Tensor) -> torch.Tensor:
    """The input as a contiguous (N, C, L) tensor in the compute dtype (no copy when already so)."""
    x = x.to(compute_dtype(x.dtype)).contiguous()
    return x.view(x.shape[0], x.shape[1], -1)


def restore(y: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """`y` (N, C, L) back to the shape, dtype and memory format of `like`."""
    y = y.view(like.shape).to(like.dtype)
    if like.dim() == 4 and like.is_contiguous(memory_format=torch.channels_last) and not like.is_contiguous():
        y = y.contiguous(memory_format=torch.channels_last)
    return y


def per_channel(p: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A (C,) parameter as a (1, C, 1) tensor in the compute dtype, for broadcasting against (N, C, L)."""
    return p.to(dtype).view(1, -1, 1)


def affine(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """gamma * x + beta per channel, for any (N, C, ...) input; the output keeps the input dtype."""
    shape = [1, -1] + [1] * (x.dim() - 2)
    return torch.addcmul(bias.to(x.dtype).view(shape), x, weight.to(x.dtype).view(shape))


# Working-set size for the kernels' sample chunks: on CPU each chunk's temporaries stay in the core's cache,
# so a layer reads its input and writes its output about once per pass instead of once per elementwise op.
CPU_CHUNK_BYTES = 2 << 20  # the L2 size of this 2-core VM; measured a bit faster than 1 MiB here


def sample_chunks(x3: torch.Tensor, chunk_bytes: int | None = None) -> list[tuple[int, int]]:
    """[start, stop) sample ranges covering the batch: cache-sized on CPU, the whole batch elsewhere."""
    n = x3.shape[0]
    if x3.device.type != "cpu":
        return [(0, n)]
    per_sample = max(1, x3[0].numel() * x3.element_size())
    step = max(1, (chunk_bytes or CPU_CHUNK_BYTES) // per_sample)
    return [(i, min(i + step, n)) for i in range(0, n, step)]


def update_running_var(running_var: torch.Tensor, batch_var: torch.Tensor, count: int, momentum: float) -> None:
    """BatchNorm's rule: running = (1 - m) running + m * unbiased batch variance (count values per channel)."""
    unbiased = count / (count - 1) if count > 1 else 1.0
    with torch.no_grad():
        running_var.mul_(1.0 - momentum).add_(batch_var.to(running_var.dtype), alpha=momentum * unbiased)


def groups_to_channels(t: torch.Tensor, channels: int) -> torch.Tensor:
    """Per-(sample, group) values (N, G) repeated to per-channel (N, C), each group's value on its
    C / G channels. Expand + reshape: repeat_interleave costs about 0.1 ms a call on CPU, much of a
    small layer's time."""
    n, g = t.shape
    return t if g == channels else t.view(n, g, 1).expand(n, g, channels // g).reshape(n, channels)


def resolve_groups(num_channels: int, groups: int, group_size: int | None = None) -> int:
    """The group count actually used: the largest divisor of C that is <= `groups`; or, given
    `group_size` (timm's argument), C / group_size groups of that many channels (C must be a multiple).

    Example: C=24, groups=32 -> 24; C=48, groups=32 -> 24; C=3 -> 3; C=1 -> 1; C=48, group_size=16 -> 3.
    """
    if group_size:
        if group_size < 1 or num_channels % group_size:
            raise ValueError(f"group_size must divide num_channels, got {group_size} for {num_channels}")
        return num_channels // group_size
    if num_channels < 1 or groups < 1:
        raise ValueError(f"need num_channels >= 1 and groups >= 1, got {num_channels}, {groups}")
    for g in range(min(groups, num_channels), 0, -1):
        if num_channels % g == 0:
            return g
    return 1


def differentiable_grads(formula, tensors, args, dy):
    """d(formula(*tensors, *args)) / d(tensors) . dy with a graph (create_graph), None where not needed."""
    with torch.enable_grad():
        wanted = [t for t in tensors if t is not None and t.requires_grad]
        y = formula(*tensors, *args)
        y = y[0] if isinstance(y, tuple) else y
        grads = iter(torch.autograd.grad(y, wanted, dy, create_graph=True, allow_unused=True))
    return [next(grads) if t is not None and t.requires_grad else None for t in tensors]
