"""The suite on a machine without Fashion-MNIST: the tests that need it skip and say how to
install it (scripts/test.sh installs it where it can, a user's pytest may not)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import FASHION_MISSING, NO_DATA_ENV

ROOT = Path(__file__).resolve().parents[1]


def test_without_fashion_mnist_its_tests_skip_naming_the_install_command():
    env = {**os.environ, NO_DATA_ENV: "1"}
    # the files' other tests are collected (a module that needed the data to import would fail)
    # but not run: they run in the suite itself
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                          "-m", "fashion_mnist and not slow",
                          "tests/test_evolution_vs_random.py", "tests/test_real_data.py"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-3000:]
    assert "2 skipped" in out and "apt-get install dataset-fashion-mnist" in out, out[-3000:]
    assert FASHION_MISSING.split(":")[0] in out
