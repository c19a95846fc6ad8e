"""convert_sync_norm_act: two gloo processes with DDP compute what one process computes on the whole batch
(outputs, gradients, running statistics on every rank); without it each rank uses its own statistics."""

import os
import socket
import time

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from evonorm.graph.library import get_graph
from evonorm.layers import convert_sync_norm_act, create_norm_act

WORLD, STEPS = 2, 2


def _model() -> nn.Module:
    """Every batch-statistic kind: EvoNorm-B0/B2, BN-ReLU, graph layers with batch_std and batch_mean."""
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), create_norm_act("evonorm_b0", 8),
        nn.Conv2d(8, 8, 3, padding=1), create_norm_act("bn_relu", 8),
        nn.Conv2d(8, 8, 3, padding=1), get_graph("b_top3").to_module(8),
        nn.Conv2d(8, 8, 1), get_graph("tanh_minus_batch_mean_relu").to_module(8),
        nn.Conv2d(8, 8, 1), create_norm_act("evonorm_b2", 8),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 3),
    )


def _batches() -> torch.Tensor:
    torch.manual_seed(1)
    return torch.randn(STEPS, 2 * WORLD, 3, 6, 6) * 2 + 0.5


def _train(model: nn.Module, forward, batches) -> dict:
    """STEPS of SGD; returns each step's output and gradients, and the final buffers."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    outs, grads = [], []
    for x in batches:
        y = forward(x)
        opt.zero_grad()
        y.square().mean().backward()
        outs.append(y.detach())
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
        opt.step()
    return {"outs": outs, "grads": grads, "buffers": {n: b.clone() for n, b in model.named_buffers()}}


def _worker(rank: int, port: int, out_dir: str, sync: bool) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        model = _model()
        if sync:
            model = convert_sync_norm_act(model)
        ddp = nn.parallel.DistributedDataParallel(model, broadcast_buffers=False)  # each rank keeps its own
        result = _train(model, ddp, [x.chunk(WORLD)[rank] for x in _batches()])
        torch.save(result, os.path.join(out_dir, f"rank{rank}.pt"))
        # Gloo aborts a process ("terminate called without an active exception") when it tears down
        # while the other rank still talks to it: both ranks drop DDP's reducer and meet here first.
        del ddp
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_ddp(tmp_path, sync: bool, timeout: float = 240.0) -> list[dict]:
    ctx = mp.start_processes(_worker, args=(_free_port(), str(tmp_path), sync), nprocs=WORLD, join=False,
                             start_method="spawn")
    deadline = time.monotonic() + timeout
    while not ctx.join(timeout=5):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                p.kill()
            pytest.fail(f"the {WORLD} gloo processes did not finish in {timeout:g}s")
    return [torch.load(tmp_path / f"rank{r}.pt") for r in range(WORLD)]


def _close(a, b):
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_ddp_with_synced_statistics_equals_one_process_on_the_whole_batch(tmp_path):
    model = _model()
    ref = _train(model, model, list(_batches()))
    ranks = _run_ddp(tmp_path, sync=True)
    for rank, res in enumerate(ranks):
        for step in range(STEPS):
            _close(res["outs"][step], ref["outs"][step].chunk(WORLD)[rank])
            for name, g in ref["grads"][step].items():
                _close(res["grads"][step][name], g)
        assert res["buffers"].keys() == ref["buffers"].keys()
        for name, b in ref["buffers"].items():
            _close(res["buffers"][name], b)


def test_ddp_default_uses_each_ranks_statistics(tmp_path):
    ref_model = _model()
    ref = _train(ref_model, ref_model, list(_batches()))
    ranks = _run_ddp(tmp_path, sync=False)
    out_gap = (ranks[0]["outs"][0] - ref["outs"][0].chunk(WORLD)[0]).abs().max()
    var_gap = (ranks[0]["buffers"]["1.running_var"] - ranks[1]["buffers"]["1.running_var"]).abs().max()
    assert out_gap > 1e-3 and var_gap > 1e-3


def test_convert_sync_marks_every_batch_layer_and_converts_torch_batchnorm():
    model = nn.Sequential(_model(), nn.BatchNorm2d(3), create_norm_act("evonorm_s0", 8))
    new = convert_sync_norm_act(model, process_group=None)
    assert new is model and isinstance(model[1], nn.SyncBatchNorm)
    synced = [type(m).__name__ for m in model.modules() if getattr(m, "sync", None) is not None]
    assert synced == ["EvoNormB0", "BatchNormReLU2d", "SyncedBatchStat", "SyncedBatchStat", "EvoNormB2"]
    assert getattr(model[2], "sync", None) is None  # sample-based: nothing to synchronise
    x = torch.randn(2, 3, 6, 6)  # no process group: the layers compute as before
    torch.testing.assert_close(model[0](x), _model()(x))


def test_convert_sync_refuses_a_batchnorm_subclass_it_cannot_sync():
    class Custom(nn.BatchNorm2d):
        pass

    model = nn.Sequential(create_norm_act("evonorm_b0", 4), Custom(4))
    with pytest.raises(ValueError, match=r"^1: Custom is a BatchNorm subclass"):
        convert_sync_norm_act(model)
    assert model[0].sync is None
