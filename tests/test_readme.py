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
