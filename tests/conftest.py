import os

import pytest
import torch

# Triton's interpreter runs the impl="triton" kernels on CPU tensors (tests/test_layers_triton.py). Triton reads
# this when it is imported, so it is set here, before any test imports it; where CUDA is available the kernels
# run natively instead. Nothing else in the suite runs Triton code on CPU.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# 2-core machines: keep each test process to the cores we have, and deterministic.
torch.set_num_threads(min(2, os.cpu_count() or 1))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
