"""Plain-text tables for the terminal: a run's top layers (after `search` and `resume`) and its
rerank ranking (after `rerank`), each layer with its formula."""

from __future__ import annotations

from pathlib import Path

from evonorm.files import printable
from evonorm.measure.ledger import Row
from evonorm.report.data import formula, load_run
from evonorm.report.verdict import run_verdict
from evonorm.search.candidates import same_layer_keys, top_layers


def summary_table(run_dir: str | Path, top: int = 10) -> str:
    """The verdict sentence (see `report.verdict`), then the top valid layers as a plain-text table
    with formulas: one row per function (spellings that agree on both fingerprints, or that agree
    at the initial v0/v1 and trained identically, merged: `same_layer_keys`; their count in
    "spellings")."""
    run = load_run(Path(run_dir))
    archs = run.archs
    rows = top_layers(run.candidates, top, same=same_layer_keys())
    head_lines = "\n".join(line for line in (
        run_verdict(run),
        run.fidelity, run.setup) if line)
    if not rows:
        return _printable(head_lines + "\nno valid layer found")
    staged = len({row.best.stage for row in rows}) > 1  # some layer a hurdle stopped early
    head = ["rank", "id", "fitness"] + (["stage"] if staged else []) + archs + ["spellings", "layer"]
    lines = [head]
    for rank, row in enumerate(rows, 1):
        c = row.best
        lines.append([str(rank), str(c.id), f"{c.fitness:.4f}"] + ([str(c.stage)] if staged else [])
                     + [f"{c.scores.get(a, float('nan')):.4f}" for a in archs]
                     + [str(row.spellings), formula(c.graph)])
    widths = [max(len(r[i]) for r in lines) for i in range(len(head) - 1)]
    table = "\n".join("  ".join(r[i].ljust(widths[i]) for i in range(len(head) - 1)) + "  " + r[-1]
                      for r in lines)
    if staged:
        table += ("\nranked by the stage reached, then fitness: a layer a hurdle stopped early "
                  "was scored after shorter training, so its fitness does not compare with a "
                  "finished layer's")
    return _printable(head_lines + "\n" + table)


def _printable(text: str) -> str:
    """Each line of a table for the terminal with its control characters quoted (`printable`): names and
    reasons come from a run, and a raw escape sequence in one would act on the terminal."""
    return "\n".join(printable(line) for line in text.split("\n"))


def rerank_table(rows: list[Row], graphs: dict[int, dict]) -> str:
    """Plain-text ranking of a run's rerank rows (ledger `Row`s, best first), with formulas."""
    if not rows:
        return "no reranked layer"
    lines = []
    for rank, r in enumerate(rows, 1):
        mean = r.status if r.fitness is None else f"{r.fitness:.4f}"
        search = "-" if r.search_fitness is None else f"{r.search_fitness:.4f}"
        lines.append(f"{rank:>3}  id {r.candidate_id:<5} rerank {mean:<7} search {search:<7} "
                     f"{formula(graphs.get(r.candidate_id))}")
    return _printable("\n".join(lines))
