import subprocess
import sys

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


def test_group_rule():
    assert [resolve_groups(c, 32) for c in (1, 3, 24, 48, 64, 96)] == [1, 3, 24, 24, 32, 32]
    assert resolve_groups(7, 32) == 7 and resolve_groups(14, 4) == 2
