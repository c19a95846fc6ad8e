import os

import pytest
import torch

# 2-core machines: keep each test process to the cores we have, and deterministic.
torch.set_num_threads(min(2, os.cpu_count() or 1))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
