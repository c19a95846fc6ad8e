"""The `evonorm` command line.

Each subcommand lives in its own module `evonorm.commands.<name>` with a `main(argv) -> int`;
this file only routes, so `evonorm --help` answers without importing torch.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import NoReturn, Sequence

from evonorm import __version__
from evonorm.files import printable

COMMANDS: dict[str, str] = {
    "search": "run a layer search (regularized evolution or random search) into a run folder",
    "resume": "continue a stopped or killed search from its run folder",
    "rerank": "retrain a search's top layers in a larger setting and rank them",
    "retrain": "re-train a run's top, reference and seed layers with fresh seeds (for the verdict)",
    "report": "write figures and an HTML report for one or more runs (only reads)",
    "calibrate": "check that a preset's proxy task ranks reference layers above random ones",
    "train": "train one layer on one architecture and print its accuracy",
    "show": "print a layer (registry name or graph JSON) as formula and code",
    "list": "list the registered layers, architectures, presets and datasets",
}


class ArgumentParser(argparse.ArgumentParser):
    """argparse that reports a bad argument in one line and exits 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {one_line(message)}\n")


def one_line(message: str) -> str:
    """A message as one line, with nothing a terminal would act on (user input or text from a run quoted
    in it may hold a line break, ESC or NUL: `printable`)."""
    return printable(message)


class CommandError(Exception):
    """A user-facing failure: printed as one line, exit status 2, no traceback."""


def _one_line_errors() -> tuple[type[Exception], ...]:
    """What a command's failure prints as one line (exit 2): its own refusal, a damaged or linked
    run-folder file, workers that cannot start, an objective's hook that fails. Imported once one is
    raised, so that a command that needs no search engine (`list`, `show`, `--help`) loads none."""
    from evonorm.files import DamagedFile, UnsafePath
    from evonorm.search.executors import WorkerStartError
    from evonorm.search.outcome import HookFailed

    return CommandError, DamagedFile, UnsafePath, WorkerStartError, HookFailed


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        width = max(map(len, COMMANDS))
        lines = [f"  {name:<{width}}  {text}" for name, text in COMMANDS.items()]
        print("usage: evonorm COMMAND [options]\n\ncommands:\n" + "\n".join(lines)
              + "\n\n`evonorm COMMAND --help` describes each command.")
        return 0 if argv else 2
    if argv[0] in ("-V", "--version"):
        print(__version__)
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"evonorm: error: unknown command {name!r} (choose from {', '.join(COMMANDS)})",
              file=sys.stderr)
        return 2
    module = importlib.import_module(f"evonorm.commands.{name}")
    try:
        return int(module.main(rest) or 0)
    except Exception as err:
        if not isinstance(err, _one_line_errors()):
            raise
        print(f"evonorm {name}: error: {one_line(str(err))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as err:  # a stopped search has printed the line that resumes it
        driver = sys.modules.get("evonorm.search.driver")  # loaded wherever a search ran
        if driver is None or not driver.told_how_to_resume(err):
            print(f"evonorm {name}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `evonorm show ... | head`: the reader has what it wanted
        sys.stdout = None  # type: ignore[assignment]  (no flush of the closed pipe at exit)
        return 0


if __name__ == "__main__":
    # Route through the package module so `CommandError` is the class the commands raise
    # (run as a script, this file is also loaded as `__main__`, a second copy).
    from evonorm.cli import main as _main

    sys.exit(_main())
