"""One self-contained HTML page: PNG figures embedded as data URIs, tables, formulas as text.

No scripts, no external assets, so the page opens offline and can be mailed as one file.
Formulas are the graph's plain-text rendering (KaTeX is not available offline); the LaTeX form
is kept in a collapsible line under each formula for pasting into a paper.
"""

from __future__ import annotations

import base64
import html
import time
from typing import Any, Sequence

from evonorm.files import printable
from evonorm.report.data import FINISHED, RunData, formula, reason_category
from evonorm.report.verdict import layer_stats, run_verdict, search_fitness_text
from evonorm.search.candidates import same_layer_keys, top_layers
from evonorm.search.evaluation import finite
from evonorm.report.figures import formula_png
from evonorm.report.prescreen import summarize, summary_lines

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2em auto;max-width:1400px;
color:#222;padding:0 1em}
h1{font-size:1.6em}h2{font-size:1.25em;border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:2em}
table{border-collapse:collapse;font-size:.9em;margin:.6em 0}
th,td{border:1px solid #ccc;padding:.25em .55em;text-align:left;vertical-align:top}
th{background:#f3f3f3}td.num{text-align:right;font-variant-numeric:tabular-nums}
code.formula{font-family:ui-monospace,Menlo,Consolas,monospace;white-space:pre-wrap}
details{font-size:.8em;color:#555}figure{margin:0}figure img{max-width:100%;height:auto;border:1px solid #eee}
.figures{display:grid;grid-template-columns:repeat(auto-fill,minmax(520px,1fr));gap:1.2em 1.5em;
align-items:start}
img.formula{max-width:100%}
figcaption{font-size:.85em;color:#555}.note{color:#666;font-size:.9em}
"""


def data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def esc(x: Any) -> str:
    """Text for the page: HTML-escaped, and with its control characters (NUL, ESC, ...) written as escapes,
    since text from a run (a reason, a score name, a phase) may hold any (`printable`)."""
    return html.escape(printable(str(x), keep="\n\t"), quote=True)


def table(header: Sequence[str], rows: Sequence[Sequence[Any]], *, cls: str = "") -> str:
    """An HTML table; float cells are formatted and right-aligned, strings are escaped unless
    they are already markup (wrapped in `Markup`)."""
    out = [f'<table class="{esc(cls)}"><thead><tr>'
           + "".join(f"<th>{esc(h)}</th>" for h in header) + "</tr></thead><tbody>"]
    for row in rows:
        cells = []
        for v in row:
            if isinstance(v, Markup):
                cells.append(f"<td>{v}</td>")
            elif isinstance(v, float):
                cells.append(f'<td class="num">{v:.4f}</td>')
            elif isinstance(v, int) and not isinstance(v, bool):
                cells.append(f'<td class="num">{v}</td>')
            else:
                cells.append(f"<td>{esc('' if v is None else v)}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


class Markup(str):
    """A string that is already HTML."""


def formula_cell(graph_json: Any) -> Markup:
    """The formula typeset as an embedded PNG (mathtext) above its plain text; LaTeX on demand."""
    text = formula(graph_json)
    latex = formula(graph_json, latex=True)
    if latex == text:  # the graph could not be parsed: its JSON only
        return Markup(f'<code class="formula">{esc(text)}</code>')
    png = formula_png(latex)
    img = f'<img class="formula" alt="{esc(text)}" src="{data_uri(png)}"><br>' if png else ""
    return Markup(f'{img}<code class="formula">{esc(text)}</code>'
                  f"<details><summary>LaTeX</summary><code>{esc(latex)}</code></details>")


def summary_rows(runs: Sequence[RunData]) -> list[list[Any]]:
    rows = []
    for r in runs:
        st = {s: 0 for s in (*FINISHED, "pending")}
        for c in r.candidates:
            st[c.status if c.status in FINISHED else "pending"] += 1
        st["pending"] += r.in_flight
        best = max((c.fitness for c in r.valid), default=None)
        hits = sum(1 for c in r.candidates if getattr(c, "cache_hit", False))
        secs = sum(float(c.seconds or 0) for c in r.candidates if finite(c.seconds))
        rows.append([r.name, r.status or "?", len(r.candidates), st["valid"], st["rejected"], st["failed"],
                     st["pending"], hits, best, f"{secs / 60:.1f} min", ", ".join(r.archs)])
    return rows


def top_table(run: RunData, n: int = 10) -> str:
    archs = run.archs
    rows = []
    for i, row in enumerate(top_layers(run.candidates, n, same=same_layer_keys()), 1):
        c = row.best
        rows.append([i, formula_cell(c.graph), *[(c.scores or {}).get(a) for a in archs],
                     c.fitness, row.spellings, row.found, c.id, c.origin])
    if not rows:
        return '<p class="note">No valid layer yet.</p>'
    return table(["#", "layer", *archs, "fitness", "spellings", "found", "first best id", "origin"], rows)


# what a rerank row shows, in this order (a row's layer, kind and graph are its candidate's)
RERANK_COLUMNS = ("candidate_id", "setting", "split", "scores", "fitness", "status", "reason", "search_fitness",
                  "seconds", "created_at")


def rerank_table(run: RunData) -> str:
    if not run.reranks:
        return '<p class="note">No reranking recorded for this run (<code>evonorm rerank RUN</code>).</p>'
    keys = list(RERANK_COLUMNS)
    rows = []
    for rank, r in enumerate(run.reranks, 1):
        cells: list[Any] = [rank]
        for k in keys:
            v = getattr(r, k)
            cells.append(", ".join(f"{a}: {x:.4f}" if finite(x) else f"{a}: {x}" for a, x in v.items())
                         if isinstance(v, dict) else v)
        rows.append(cells)
    return table(["rank", *keys], rows)


def reasons_table(runs: Sequence[RunData]) -> str:
    cats: dict[str, list[int]] = {}
    for i, r in enumerate(runs):
        for c in r.candidates:
            cats.setdefault(reason_category(c), [0] * len(runs))[i] += 1
    rows = [[k, *v] for k, v in sorted(cats.items(), key=lambda kv: (kv[0] != "valid", -sum(kv[1])))]
    return table(["outcome", *[r.name for r in runs]], rows) if rows else '<p class="note">No candidate yet.</p>'


def reference_table(run: RunData) -> str:
    if not run.references:
        return ('<p class="note">No reference evaluations in this run: the Pareto figure shows the '
                'population only (add them with <code>evonorm retrain RUN --seeds 0 --references</code>).</p>')
    archs = run.archs
    rows = [[name, *[acc.get(a) for a in archs],
             (sum(acc.get(a, 0.0) for a in archs) / len(archs)) if archs and all(finite(acc.get(a)) for a in archs) else None]
            for name, acc in sorted(run.references.items())]
    return table(["reference layer", *archs, "mean"], rows)


def retrain_table(run: RunData) -> str:
    stats = layer_stats(run.retrain)
    if not stats:
        return ('<p class="note">No multi-seed re-training yet (<code>evonorm retrain RUN --seeds 3</code>): '
                f"the fitness above is {search_fitness_text(run.train_seeds)}.</p>")
    rows = [[formula_cell(s.graph) if s.graph is not None else s.layer, s.kind, s.layer,
             f"{100 * s.mean:.1f} +- {100 * s.std:.1f}" if s.values else "-", len(s.values), s.failed]
            for s in stats]
    return table(["layer", "kind", "name", "fitness % (mean +- std)", "seeds", "failed"], rows)


def prescreen_table(run: RunData) -> str:
    """The prescreen's predictions against what training measured (a run searched with it)."""
    s = summarize(run.candidates, float(run.part("evolution").get("prescreen_threshold", 0.05)))
    if s is None:
        return ""
    rows = [[rng, n, passed, f"{100 * passed / n:.0f}%" if n else "-"] for rng, n, passed in s.bins]
    return (f"<h3>Prescreen: predicted against measured ({esc(run.name)})</h3>"
            + "".join(f'<p class="note">{esc(line)}</p>'
                      for line in summary_lines(s, run.prescreen_prior))
            + table(["predicted P(passes rejection)", "trained", "passed", "measured share"], rows))


def render_page(runs: Sequence[RunData], figures: Sequence[tuple[str, str, bytes]],
                refresh: float | None = None) -> str:
    """The page: summary, figures (title, caption, PNG bytes), outcome table, and per run its
    top layers, references and reranks. With `refresh` (seconds), a browser showing the page
    reloads it that often (`evonorm report --watch` rewrites it as the search goes)."""
    title = "evonorm report: " + ", ".join(r.name for r in runs)
    reload = f'<meta http-equiv="refresh" content="{max(1, round(refresh))}">' if refresh else ""
    live = (f'<p class="note live">Live: this page is rewritten every {refresh:g} s while the '
            "search runs, and reloads itself.</p>" if refresh else "")
    parts = [f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8>{reload}<title>{esc(title)}</title>"
             f"<style>{CSS}</style></head><body><h1>{esc(title)}</h1>{live}",
             *[f'<p class="verdict"><b>{esc(r.name)}:</b> {esc(run_verdict(r))}</p>'
               + (f'<p class="note">{esc(r.fidelity)}</p>' if r.fidelity else "")
               + f'<p class="note">{esc(r.name)}: {esc(r.setup)}</p>' for r in runs],
             f'<p class="note">Written {esc(time.strftime("%Y-%m-%d %H:%M:%S %Z"))} from the run store(s); '
             "a search still running shows what had finished by then.</p>",
             "<h2>Runs</h2>",
             table(["run", "status", "finished", "valid", "rejected", "failed", "in flight", "cache hits",
                    "best fitness", "compute",
                    "scores" if runs[0].config.get("objective") else "architectures"],
                   summary_rows(runs))]
    parts.append('<h2>Figures</h2><div class="figures">')
    for name, caption, png in figures:
        parts.append(f'<figure id="{esc(name)}"><img alt="{esc(caption)}" src="{data_uri(png)}">'
                     f"<figcaption>{esc(caption)}</figcaption></figure>")
    parts.append("</div>")
    parts.append("<h2>Outcomes by reason</h2>" + reasons_table(runs))
    for r in runs:
        parts.append(f"<h2>Top layers of {esc(r.name)}</h2>"
                     '<p class="note">One row per function: spellings that agree on two fingerprints '
                     '(fixed random inputs and v0/v1) are merged, and so are layers that agree at v0 = 0, '
                     "v1 = 1 (their initial values) and trained to exactly the same accuracies (such as "
                     "x - v0^2 and x: v0 gets no gradient at 0 and never moves); \"spellings\" counts them "
                     'and "found" counts the candidates that were any of them.</p>' + top_table(r))
        parts.append(prescreen_table(r))
        if r.config.get("objective"):  # re-training, references and reranking are the built-in task's
            continue
        parts.append(f"<h3>Multi-seed re-training ({esc(r.name)})</h3>"
                     '<p class="note">The top distinct found layers, the reference layers of the space and the '
                     "run's seed layers, each trained again with fresh training seeds on the run's own data split "
                     "and setting; the first sentence of this page compares the best found layer with the best "
                     "reference or seed layer by a one-sided Welch t-test over these seeds.</p>" + retrain_table(r))
        parts.append(f"<h3>Reference layers ({esc(r.name)})</h3>" + reference_table(r))
        parts.append(f"<h3>Reranking ({esc(r.name)})</h3>" + rerank_table(r))
    parts.append("</body></html>\n")
    return "\n".join(parts)
