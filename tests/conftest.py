import os
import re

# OpenMP threads that wait for work sleep instead of spinning. Two torch processes of two threads
# each on two cores (pytest-xdist workers, or a test beside the worker pool it starts) otherwise
# spin against each other: a step then took 4 to 23 times as long, against 1.4 times passive
# (benchmarks/bench_omp_wait.py). Read when torch loads OpenMP, so set before torch is imported;
# subprocesses of the tests inherit it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pytest  # noqa: E402
import torch  # noqa: E402

# Triton's interpreter runs the impl="triton" kernels on CPU tensors (tests/test_layers_triton.py). Triton reads
# this when it is imported, so it is set here, before any test imports it; where CUDA is available the kernels
# run natively instead. Nothing else in the suite runs Triton code on CPU.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# 2-core machines: keep each test process to the cores we have, and deterministic; under
# pytest-xdist (`-n 2`) each worker takes one thread, as the workers share the cores.
torch.set_num_threads(1 if os.environ.get("PYTEST_XDIST_WORKER") else min(2, os.cpu_count() or 1))


NO_DATA_ENV = "EVONORM_TEST_HIDE_FASHION_MNIST"
"""Set to 1, the suite runs as on a machine without Fashion-MNIST (tests/test_no_data.py uses it)."""

FASHION_MISSING = ("Fashion-MNIST is not installed: run `apt-get install dataset-fashion-mnist` as root "
                   "(scripts/test.sh does where it can) or put its IDX files in $EVONORM_DATA/fashion-mnist")


def pytest_configure(config):
    if os.environ.get(NO_DATA_ENV) == "1":
        import evonorm.datafiles

        hidden = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"evonorm-no-data-{os.getpid()}")
        evonorm.datafiles.FASHION_MNIST_SYSTEM_DIR = evonorm.datafiles.Path(hidden, "absent")
        os.environ["EVONORM_DATA"] = hidden


def pytest_collection_modifyitems(config, items):
    import evonorm.data

    # The heavy tests first: two test processes split the list into halves and the one done first
    # takes tests from the end of the other's, so a minute-long test never runs alone at the end
    # while the other process waits (when the heavy and the fast tests run as one session).
    items.sort(key=lambda item: "slow" not in item.keywords)
    if evonorm.data.default_dataset_name() == "fashion_mnist":
        return
    skip = pytest.mark.skip(reason=FASHION_MISSING)
    for item in items:
        if "fashion_mnist" in item.keywords:
            item.add_marker(skip)


DEFAULT_EXTRAS = {"dev", "plots"}
"""The extras scripts/test.sh installs by default: a newcomer's run has them, so tests needing only these
run there; a test needing any other extra carries `@pytest.mark.extras`, which CI runs in its second
session with every extra installed."""


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A test that skips for a missing non-default extra but lacks the `extras` mark fails, naming the
    mark: CI's extras session selects by it, so such a test would otherwise run nowhere."""
    outcome = yield
    report = outcome.get_result()
    if not report.skipped or "extras" in item.keywords or not isinstance(report.longrepr, tuple):
        return
    extra = re.search(r"the `(\w+)` extra", str(report.longrepr[2]))
    if extra and extra.group(1) not in DEFAULT_EXTRAS:
        report.outcome = "failed"
        report.longrepr = (f"{item.nodeid} skips without the `{extra.group(1)}` extra: mark it "
                           "@pytest.mark.extras so that CI's extras session runs it")


@pytest.fixture(autouse=True)
def _seed():
    """Every test starts from seed 0 and leaves torch's thread count as it found it: a command run
    in-process (`main(["train", ...])`) sets its own, which otherwise changed the numbers and the
    speed of the tests after it in the same process."""
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)
