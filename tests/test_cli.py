import os
import subprocess
import sys
from pathlib import Path

import pytest

import evonorm
from evonorm.cli import COMMANDS, main
from evonorm.layers import resolve_groups


def test_help_lists_every_command(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in COMMANDS:
        assert name in out


def test_unknown_command_exits_2_with_one_line():
    proc = subprocess.run([sys.executable, "-m", "evonorm.cli", "frobnicate"],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "frobnicate" in proc.stderr


def test_list_starts_without_torch():
    """`evonorm list` prints names and settings only, so it must not wait seconds for torch (or numpy)
    to load: run in a fresh interpreter on this checkout's code, every section, text and JSON."""
    code = ("import sys\nfrom evonorm.cli import main\n"
            "rc = main(['list']) + main(['list', '--json'])\n"
            "print('loaded:', [m for m in ('torch', 'numpy') if m in sys.modules], file=sys.stderr)\n"
            "sys.exit(rc)")
    env = {**os.environ, "PYTHONPATH": str(Path(evonorm.__file__).resolve().parents[1])}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "loaded: []" in proc.stderr
    assert "unavailable" not in proc.stdout  # a section that failed to import would also load nothing
    for name in ("evonorm_s0", "s_top1", "resnet50_cifar (width 0.25, CIFAR strides)", "paper-b:", "demo",
                 "fashion_mnist"):
        assert name in proc.stdout


def test_group_rule():
    assert [resolve_groups(c, 32) for c in (1, 3, 24, 48, 64, 96)] == [1, 3, 24, 24, 32, 32]
    assert resolve_groups(7, 32) == 7 and resolve_groups(14, 4) == 2


@pytest.mark.parametrize("argv", [
    ["train", "--layer", "evnorm_s0", "--arch", "resnet50_cifar"],
    ["search", "--seed-layers", "evnorm_s0", "--dataset", "synthetic", "--preset", "tiny", "--out", "RUN"],
])
def test_a_mistyped_layer_is_one_short_line_with_a_suggestion(argv, tmp_path, capsys):
    run = tmp_path / "run"
    assert main([str(run) if a == "RUN" else a for a in argv]) == 2
    err = capsys.readouterr().err.strip()
    assert "did you mean evonorm_s0" in err and "\n" not in err and len(err) < 250, err
    assert not run.exists()


def test_show_loads_no_more_than_the_graph_package_needs():
    """`evonorm show` costs torch's import (the fingerprint evaluates the graph) and little more: it loads
    neither the search engine nor the task, the trainer, the models, the data or the reports
    (benchmarks/bench_start.py times it against a bare `import torch`)."""
    code = ("import sys; from evonorm.cli import main; main(['show', 'evonorm_s0']); "
            "print(sorted({m.split('.')[1] for m in sys.modules if m.startswith('evonorm.')} & "
            "{'search', 'proxy', 'train', 'models', 'data', 'report', 'layers'}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(Path(evonorm.__file__).parents[1])})
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[]"
