"""README's code runs as written on a newcomer's install: the default extras only (no timm, torchvision,
triton, scikit-learn, onnx or ray), on the CPU."""

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
NOT_INSTALLED = ("timm", "torchvision", "triton", "sklearn", "onnx", "onnxruntime", "ray")


def _python_blocks(section: str) -> list[str]:
    text = README.read_text().split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_the_layer_sample_runs_without_any_extra(tmp_path):
    (block,) = _python_blocks("Using the layers")
    prelude = "import sys\n" + "".join(f"sys.modules[{m!r}] = None\n" for m in NOT_INSTALLED)
    done = subprocess.run([sys.executable, "-c", prelude + block], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, env={"PYTHONPATH": str(README.parent / "src"),
                                                       "PATH": "/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": ""})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "BatchNorm2d replaced" in done.stdout


class _Stop(Exception):
    """Stands for Ctrl-C reaching the worker mid-stage."""


def test_the_objective_pattern_resumes_from_its_last_stage(tmp_path):
    """README's objective, stopped during its third stage, trains only that stage again on resume."""
    import torch
    from torch import nn

    from evonorm.graph.library import resolve_graph
    from evonorm.search.objective import Trial

    (block,) = _python_blocks("A search on your own task")
    trained, stop_at = [], {2}

    class MyNet(nn.Module):
        def __init__(self, norm_act):
            super().__init__()
            self.conv, self.norm = nn.Conv2d(1, 8, 3), norm_act(8)

    def train_and_score(model, epoch, seed):
        if epoch in stop_at:
            stop_at.clear()
            raise _Stop
        trained.append(epoch)
        with torch.no_grad():
            model.conv.weight.add_(1.0)
        return 0.5 + epoch / 10

    space = {"MyNet": MyNet, "train_and_score": train_and_score, "__name__": "readme"}
    exec(block, space)
    ckpt = tmp_path / "candidate.pt"
    graph = resolve_graph("evonorm_s0")
    first = Trial(graph, checkpoint=str(ckpt))
    try:
        space["objective"](graph.to_module, first)
        raise AssertionError("the stop did not reach the objective")
    except _Stop:
        pass
    again = Trial(graph, checkpoint=str(ckpt))
    assert space["objective"](graph.to_module, again) == 0.5 + 3 / 10
    assert trained == [0, 1, 2, 3]  # each stage once: the stopped one had not finished
    assert [s["objective"] for _, s in again.reports] == [0.5, 0.6, 0.7, 0.8]
