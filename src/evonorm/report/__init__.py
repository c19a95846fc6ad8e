"""Reports of layer searches: the paper's figures as PNG files and one self-contained HTML page.

`write_report([RUN, RUN2, ...])` reads each run's store read-only (a search may still be writing)
and writes `RUN/report/*.png` and `RUN/report.html` (or into `out_dir`); the first run is the
subject, the others are overlaid where a figure compares runs (search progress, outcomes).

The figures module is imported where the figures are drawn: it loads matplotlib, which reading a run does not need.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from evonorm.files import check_folder, write_atomic
from evonorm.report.data import RunData, load_run, run_folder
from evonorm.report.html import render_page

__all__ = ["RunData", "build_report", "load_run", "make_figures", "write_report"]


def make_figures(runs: Sequence[RunData]) -> list[tuple[str, str, bytes]]:
    """(file stem, caption, PNG bytes) for every figure of the report; `runs[0]` is the subject."""
    from evonorm.report import figures as F

    run = runs[0]
    archs = run.archs
    chance = 1.0 / run.num_classes
    bn = run.references.get("bn_relu")
    bn_mean = sum(bn.values()) / len(bn) if bn else None
    randoms = [c for c in run.candidates if c.origin == "random"]
    # With no random-origin candidate (e.g. a search seeded from a population), fall back to all.
    hist_origin = "random" if randoms else None
    own = bool(run.config.get("objective"))  # the user's objective: scores, not accuracies
    out = [("search_progress", "Search progress: the best fitness so far and the mean ± std of the "
            "10 best so far vs candidates evaluated, one curve per run (paper Fig. 10).",
            F.png_bytes(F.search_progress(runs, baseline=bn_mean)))]
    if not own:  # accuracies against chance, of the proxy task's architectures
        out += [
            ("accuracy_histogram", "Accuracies of the random layers on each architecture, log "
             "count axis; a layer that failed before training on an architecture counts at chance "
             "(paper Fig. 2).",
             F.png_bytes(F.accuracy_histogram(run.candidates, archs, chance=chance,
                                              reference=bn_mean, origin=hist_origin))),
            ("calibration", "Cross-architecture calibration: each finished candidate's accuracy "
             "on one architecture against another (paper Fig. 4).",
             F.png_bytes(F.calibration(run.candidates, archs, chance=chance,
                                       references=run.references)))]
    if not own or len(archs) >= 2:  # a front needs two scores (the proxy task has two archs)
        out.append(("pareto", f"{'Scores' if own else 'Accuracies'} of the population's layers on "
                    f"the first two {'score names' if own else 'architectures'}; red: Pareto front "
                    "over all of them; large markers: reference layers.", F.png_bytes(F.pareto(run))))
    out.append(("rejections", "Outcomes of the evaluated candidates: valid, or the reason for "
                "rejection or failure.", F.png_bytes(F.rejections(runs))))
    return out


def build_report(runs: Sequence[RunData], out_dir: Path, refresh: float | None = None) -> Path:
    """Write `out_dir/report/*.png` and `out_dir/report.html` from loaded runs; returns the page.
    Files are written to a temporary name and renamed, so a reader never sees half a file.
    `refresh`: the page reloads itself that often (a live view)."""

    if not runs:
        raise ValueError("no run to report")
    from evonorm.report.figures import plain_text

    out_dir = Path(out_dir)
    with plain_text():  # before anything is written: a report that fails leaves no empty folder
        figs = make_figures(runs)
    out_dir.mkdir(parents=True, exist_ok=True)
    fig_dir = check_folder(out_dir / "report", create=True)  # a link there would take the figures elsewhere
    for stem, _, png in figs:
        write_atomic(fig_dir / f"{stem}.png", png)
    page = out_dir / "report.html"
    write_atomic(page, render_page(runs, figs, refresh).encode("utf-8"))
    return page


def write_report(run_dirs: list[Path], out_dir: Path | None = None,
                 refresh: float | None = None) -> Path:
    """Load every run (read-only) and write the report for `run_dirs[0]`; returns the HTML path.
    `refresh`: the page reloads itself that often (a live view)."""
    if not run_dirs:
        raise ValueError("no run to report")
    runs = _named([Path(p) for p in run_dirs])
    out = Path(out_dir) if out_dir is not None else run_folder(Path(run_dirs[0]))
    return build_report(runs, out, refresh)


def _named(paths: list[Path]) -> list[RunData]:
    """Runs labelled by folder name, made unique with the parent folder when two names clash."""
    names = [run_folder(p).name or str(p) for p in paths]
    out = []
    for p, n in zip(paths, names):
        if names.count(n) > 1:
            n = f"{run_folder(p).parent.name}/{n}"
        out.append(load_run(p, name=n))
    return out
