"""What `evonorm search` and `evonorm resume` share: the executor check and the closing summary."""

from __future__ import annotations

from pathlib import Path

from evonorm.cli import CommandError


def check_executor(cfg) -> None:
    """Refuse, in one line, an executor that cannot start (Ray not installed, stray --address)."""
    if cfg.executor == "ray":
        try:
            import ray  # noqa: F401
        except ImportError:
            raise CommandError("--executor ray needs ray: pip install 'evonorm[ray]'") from None
    elif cfg.address:
        raise CommandError("--address applies to --executor ray only")


def report_result(result, run: Path, top: int) -> None:
    """The search's closing lines: how far it got, its counts, and its top layers."""
    from evonorm.report.text import summary_table

    t = result.tally
    print(f"search {'complete' if result.complete else 'stopped'}: {result.done}/{result.budget} "
          f"candidates in {run} | {t.line()}")
    print(summary_table(run, top=top))
