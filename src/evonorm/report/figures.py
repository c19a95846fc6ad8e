"""The report's figures, each a function of plain data returning a matplotlib Figure.

They mirror the paper: search progress (Fig. 10), accuracy histogram of random layers (Fig. 2),
cross-architecture calibration (Fig. 4), plus the Pareto front of the population and the rejection
statistics. Every function draws something readable on empty or partial data (a figure that says
what is missing), because reports are made while a search is still running.
"""

from __future__ import annotations

import io
import itertools
import math
from typing import Any, Sequence

from evonorm.files import printable
from evonorm.report.data import RunData, reason_category
from evonorm.search.candidates import as_candidate
from evonorm.search.evaluation import STATUSES, finite
from evonorm.search.evolution import pareto_front  # the search's own definition of the front
from evonorm.stats import pearson


def pyplot():
    """matplotlib's pyplot on the Agg backend (no display needed); a clear error when absent."""
    try:
        import matplotlib
    except ImportError as err:  # optional extra
        raise ImportError(
            "reports need matplotlib, an optional extra: pip install -e '.[plots]' in the evonorm clone") from err
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def plain_text() -> Any:
    """A context in which figures draw their text as given: a `$` in a name read from a run (a score
    name) would otherwise be parsed as mathtext, and one that does not parse fails the whole report."""
    pyplot()
    import matplotlib

    return matplotlib.rc_context({"text.parse_math": False})


def png_bytes(fig: Any, dpi: int = 110) -> bytes:
    """The figure as PNG bytes; closes it (figures are built in loops, pyplot keeps them alive)."""
    plt = pyplot()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def formula_png(latex: str, dpi: int = 150) -> bytes | None:
    """The formula typeset by matplotlib's mathtext (no TeX install needed); None when mathtext
    cannot parse it, so the caller shows the plain-text formula alone."""
    pyplot()
    from matplotlib import mathtext

    buf = io.BytesIO()
    try:
        mathtext.math_to_image(f"${latex}$", buf, dpi=dpi, format="png")
    except Exception:
        return None
    return buf.getvalue()


def _message(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=11,
            color="0.35", wrap=True)
    ax.set_xticks([])
    ax.set_yticks([])


def progress_curve(run: RunData, top: int = 10, floor: float | None = None
                   ) -> tuple[list[int], list[float], list[float], list[float]]:
    """(candidates evaluated, best fitness so far, mean and std of the `top` best so far) after
    each valid arrival, and once more at the last candidate evaluated, so the curves span the
    whole search: the best-so-far curves of the paper's Fig. 10, over all candidates so far (the
    population window ages layers out; these do not). While fewer than `top` layers exist the
    missing ones count at `floor` (chance, on the built-in task: the curve then never falls);
    without one, the mean is of those there are. In a staged run only layers trained to the end
    count (a hurdle-stopped layer's fitness is an earlier one)."""
    stages = len(run.part("hurdles").get("stage_steps") or ()) + 1
    xs, best, means, stds = [], [], [], []
    fitness: list[float] = []
    evaluated = 0
    for c in run.candidates:
        if c.status not in STATUSES:
            continue
        evaluated += 1
        if c.status != "valid" or not finite(c.fitness) or c.stage < stages:
            continue
        fitness.append(float(c.fitness))
        ranked = sorted(fitness, reverse=True)[:top]
        if floor is not None:
            ranked += [floor] * (top - len(ranked))
        m = sum(ranked) / len(ranked)
        xs.append(evaluated)
        best.append(max(fitness))
        means.append(m)
        stds.append(math.sqrt(sum((v - m) ** 2 for v in ranked) / len(ranked)))
    if xs and xs[-1] < evaluated:  # the rest of the search found nothing better
        xs.append(evaluated)
        best.append(best[-1])
        means.append(means[-1])
        stds.append(stds[-1])
    return xs, best, means, stds


def score_label(run: RunData) -> str:
    """What a run's fitness is: held-out accuracy on the built-in task, the objective's score
    otherwise (which need not be an accuracy)."""
    return (f"score of {run.config['objective']}" if run.config.get("objective")
            else "mean held-out accuracy over the architectures")


def robust_range(values: Sequence[float], k: float = 5.0) -> tuple[float, float] | None:
    """The range of the bulk of `values`: the quartiles widened by `k` interquartile ranges (by a
    tenth of the median's size where they coincide), within the values' own range. One wild value
    (a score of -1.7e20 among scores near 0.6) does not set an axis. None without finite values."""
    import numpy as np

    v = np.array([x for x in values if finite(x)], dtype=float)
    if not v.size:
        return None
    q1, q3 = np.percentile(v, [25, 75])
    spread = (q3 - q1) or abs(float(np.median(v))) * 0.1 or 1.0
    return max(float(v.min()), q1 - k * spread), min(float(v.max()), q3 + k * spread)


def padded(lo: float, hi: float, min_span: float = 0.0, pad: float = 0.06) -> tuple[float, float]:
    """Axis limits around [lo, hi], at least `min_span` wide (about the middle) and padded."""
    if hi - lo < min_span:
        mid = (lo + hi) / 2
        lo, hi = mid - min_span / 2, mid + min_span / 2
    span = (hi - lo) or abs(hi) * 0.1 or 1.0
    return lo - pad * span, hi + pad * span


def mark_outside(ax: Any, xs: Sequence[float], ys: Sequence[float],
                 color: Any = "0.3") -> list[tuple[float, float]]:
    """Points beyond the axes' limits, drawn at the edge they pass as open triangles pointing
    that way; returns them, for the figure to name (`outside_note`)."""
    (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
    notes = []
    for x, y in zip(xs, ys):
        if x0 <= x <= x1 and y0 <= y <= y1:
            continue
        cx, cy = min(max(x, x0), x1), min(max(y, y0), y1)
        marker = "<" if x < x0 else ">" if x > x1 else "v" if y < y0 else "^"
        ax.scatter([cx], [cy], marker=marker, s=60, facecolors="none", edgecolors=color,
                   linewidths=1.2, clip_on=False, zorder=6)
        notes.append((x, y))
    return notes


def outside_note(fig: Any, notes: Sequence[str], what: str = "point") -> None:
    """A line under the figure naming the values drawn at an axis edge (`mark_outside`)."""
    if notes:
        shown = ", ".join(notes[:4]) + (f" and {len(notes) - 4} more" if len(notes) > 4 else "")
        fig.text(0.01, -0.02, f"{len(notes)} {what}{'s' if len(notes) > 1 else ''} beyond the "
                 f"axes, drawn at the edge as open triangles: {shown}", fontsize=7, color="C3",
                 va="top", wrap=True)


def legend_outside(ax: Any) -> None:
    """The legend beside the axes, never over the data."""
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0,
              frameon=False)


def search_progress(runs: Sequence[RunData], *, top: int = 10, baseline: float | None = None,
                    baseline_label: str = "BN-ReLU") -> Any:
    """Fig. 10: the best fitness so far and the mean and spread of the `top` best so far, against
    candidates evaluated, on an axis at least a tenth of the fitness's scale wide (10 points of
    accuracy), so that a gain of 0.0005 looks like one; values beyond the bulk are marked at the
    edge rather than setting the axis."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.6))
    own = bool(runs[0].config.get("objective"))
    curves = []
    for i, run in enumerate(runs):
        floor = None if run.config.get("objective") else 1.0 / run.num_classes
        xs, b, m, s = progress_curve(run, top, floor)
        if xs:
            curves.append((i, run, xs, b, m, s))
    if baseline is None:
        baseline = _reference_mean(runs)
    ax.set_title(f"Search progress (best so far, and mean ± std of the top-{top} so far)",
                 fontsize=10)
    if not curves:
        _message(ax, "no layer trained to the end yet: nothing to plot")
        return fig
    values = [v for *_, b, m, _s in curves for v in (*b, *m)] + ([baseline] if baseline else [])
    lo, hi = robust_range(values, k=10.0) or (0.0, 1.0)  # a curve's early means are real
    scale = 1.0 if not own else max(abs(lo), abs(hi))
    edges = padded(lo, hi, min_span=0.1 * scale)
    notes = []
    for i, run, xs, b, m, s in curves:
        notes += _progress_curve(ax, f"C{i % 10}", run, xs, b, m, s, top, edges)
    if baseline is not None:
        ax.axhline(baseline, color="k", linestyle="--", linewidth=1, label=baseline_label)
    ax.set_ylim(*edges)
    ax.set_xlim(0, max(xs[-1] for *_, xs, _b, _m, _s in curves) * 1.03 + 0.5)
    ax.set_xlabel("candidates evaluated (valid, rejected and failed)")
    ax.set_ylabel("fitness")
    ax.grid(alpha=0.3)
    _progress_notes(fig, ax, runs[0], top, notes)
    return fig


def _reference_mean(runs: Sequence[RunData]) -> float | None:
    """The first run's BN-ReLU reference fitness (its mean over the references measured), if any has one."""
    for run in runs:
        ref = run.references.get("bn_relu")
        if ref:
            return sum(ref.values()) / len(ref)
    return None


def _progress_curve(ax: Any, color: str, run: RunData, xs: list, b: list, m: list, s: list, top: int,
                    edges: tuple[float, float]) -> list[str]:
    """One run's best-so-far steps and its top-`top` mean and band; a mean beyond the axis `edges`
    is a gap, marked at the edge and returned as a note."""
    gain = f"{b[0]:.4g} to {b[-1]:.4g}" + (f", +{b[-1] - b[0]:.2g}" if b[-1] > b[0] else "")
    ax.step(xs, b, where="post", color=color, linewidth=1.2, linestyle=":", marker=".",
            label=f"{run.name}: best ({gain})")
    fill = "" if run.config.get("objective") else ", missing at chance"
    y0, y1 = edges
    shown = [y0 <= v <= y1 for v in m]
    nan = float("nan")
    ax.step(xs, [v if ok else nan for v, ok in zip(m, shown)], where="post", color=color,
            label=f"{run.name}: top-{top} mean{fill}")
    ax.fill_between(xs, [a - d if ok else nan for a, d, ok in zip(m, s, shown)],
                    [a + d if ok else nan for a, d, ok in zip(m, s, shown)],
                    color=color, alpha=0.15, linewidth=0, step="post")
    out = [(x, v) for x, v, ok in zip(xs, m, shown) if not ok]
    for x, v in out:
        ax.scatter([x], [y0 if v < y0 else y1], marker="v" if v < y0 else "^", s=40,
                   facecolors="none", edgecolors=color, clip_on=False, zorder=6)
    return [f"top-{top} mean {v:.3g} at candidate {x}" for x, v in out]


def _progress_notes(fig: Any, ax: Any, run: RunData, top: int, notes: list[str]) -> None:
    """The legend below the axes (not beside: the labels are long, and a wider figure would be shrunk
    to fit the page's column), what the lines are, and the means beyond the axis."""
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=2, frameon=False)
    fig.text(0.01, 0.01, f"Fitness: {score_label(run)}. Dotted: the best valid layer so far; "
                         f"line: mean fitness of the {top} best so far, band: ± their std. The "
                         "axis spans at least a tenth of the fitness scale.",
             fontsize=7, color="0.3", wrap=True, va="bottom")
    fig.subplots_adjust(bottom=0.3)
    if notes:
        fig.text(0.01, -0.02, f"beyond the axis: {'; '.join(notes[:3])}"
                 + (f" and {len(notes) - 3} more" if len(notes) > 3 else ""), fontsize=7,
                 color="C3", va="top", wrap=True)


def random_accuracies(candidates: Sequence[Any], archs: Sequence[str], chance: float,
                      *, origin: str | None = "random") -> dict[str, list[float]]:
    """Per-architecture accuracies of the finished candidates of one origin (all when None).
    A candidate that stopped before an architecture was trained (non-finite loss, exception,
    an earlier quality failure) did not learn on it: it counts at chance, as in the paper."""
    out: dict[str, list[float]] = {a: [] for a in archs}
    for c in map(as_candidate, candidates):
        if c.status not in STATUSES:
            continue
        if origin is not None and c.origin != origin:
            continue
        for a in archs:
            acc = (c.scores or {}).get(a)
            out[a].append(float(acc) if finite(acc) else chance)
    return out


def _integer_counts(ax: Any, top: int) -> None:
    """A log count axis labelled in plain counts at 1, 2, 5, 10, 20, 50, ... up to `top`, not at
    the powers of ten alone (two ticks, 1 and 10, on a search's few dozen layers)."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter, NullLocator

    ticks = [m * 10 ** e for e in range(0, len(str(max(1, top))) + 1) for m in (1, 2, 5)]
    ax.set_ylim(0.7, max(2, top) * 1.6)
    ax.yaxis.set_major_locator(FixedLocator([t for t in ticks if t <= max(2, top) * 1.6]))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_minor_formatter(NullFormatter())


def accuracy_histogram(candidates: Sequence[Any], archs: Sequence[str], *, chance: float = 0.1,
                       reference: float | None = None, origin: str | None = "random",
                       bins: int = 40) -> Any:
    """Fig. 2: histogram of random layers' accuracies (one colour per architecture, log counts)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    accs = random_accuracies(candidates, archs, chance, origin=origin)
    n = max((len(v) for v in accs.values()), default=0)
    if n == 0:
        _message(ax, f"no finished {origin or ''} candidate yet".replace("  ", " "))
    else:
        edges = [i / bins for i in range(bins + 1)]
        shown = [a for a in archs if accs[a]]
        labels = [f"{a}: {sum(1 for v in accs[a] if v <= chance * 1.5)}/{len(accs[a])} near chance"
                  for a in shown]  # each bin's bars side by side, one per architecture
        counts, _, _ = ax.hist([accs[a] for a in shown], bins=edges, rwidth=0.9, label=labels,
                               color=[f"C{archs.index(a)}" for a in shown], log=True,
                               histtype="bar")
        if reference is not None:
            ax.axvline(reference, color="k", linestyle="--", linewidth=1, label="BN-ReLU")
        ax.set_xlim(0, 1)
        ax.set_xlabel("accuracy")
        ax.set_ylabel("count (log scale)")
        import numpy as np

        _integer_counts(ax, int(np.max(counts)))
        legend_outside(ax)
    kind = f"{n} {origin} layers" if origin else f"{n} layers"
    ax.set_title(f"Accuracy histogram of {kind} (failures count at chance)")
    return fig


def calibration(candidates: Sequence[Any], archs: Sequence[str], *, chance: float = 0.1,
                origin: str | None = None, references: dict[str, dict[str, float]] | None = None) -> Any:
    """Fig. 4: accuracy on one architecture against another, for every pair of architectures;
    `references` (layer -> {arch: accuracy}) are drawn as labelled markers."""
    plt = pyplot()
    pairs = list(itertools.combinations(archs, 2))
    fig, axes = plt.subplots(1, max(1, len(pairs)), figsize=(4.2 * max(1, len(pairs)), 4.0),
                             squeeze=False)
    accs = random_accuracies(candidates, archs, chance, origin=origin)
    if not pairs or not any(accs.values()):
        _message(axes[0][0], "need finished candidates on two architectures")
        return fig
    for ax, (a, b) in zip(axes[0], pairs):
        xs, ys = accs[a], accs[b]
        ax.scatter(xs, ys, s=9, alpha=0.5, color="C0", linewidths=0)
        markers = itertools.cycle("*^sDPX")
        for k, (name, acc) in enumerate(sorted((references or {}).items())):
            if finite(acc.get(a)) and finite(acc.get(b)):
                ax.scatter([acc[a]], [acc[b]], marker=next(markers), s=80, color=f"C{k + 1}",
                           edgecolors="k", label=name, zorder=5)
        if references and ax is axes[0][-1]:
            legend_outside(ax)
        ax.plot([0, 1], [0, 1], color="0.6", linewidth=0.8, linestyle=":")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_aspect("equal")
        ax.set_xlabel(printable(f"{a} accuracy"))  # names from the run, quoted as on the page
        ax.set_ylabel(printable(f"{b} accuracy"))
        ax.set_title(printable(f"{short(a)} vs {short(b)}") + "\n" + correlation_text(xs, ys, chance),
                     fontsize=8)
    fig.suptitle("Cross-architecture calibration (failures count at chance)", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    return fig


def short(arch: str) -> str:
    """An architecture's name without the dataset suffix, for titles."""
    return arch.removesuffix("_cifar")


def correlation_text(xs: Sequence[float], ys: Sequence[float], chance: float) -> str:
    """Pearson's r over all layers and over the layers above chance on both architectures (the
    near-chance cluster alone makes r look high)."""
    above = [(x, y) for x, y in zip(xs, ys) if x > chance * 1.5 and y > chance * 1.5]

    def part(n: int, r: float | None) -> str:  # r undefined (too few points, no spread): not "r=-"
        return f"n={n}, r={r:.2f}" if r is not None else f"n={n}, no correlation defined"

    return (f"all: {part(len(xs), pearson(xs, ys))}; above chance: "
            f"{part(len(above), pearson([x for x, _ in above], [y for _, y in above]))}")


def pareto(run: RunData) -> Any:
    """The population's scores on the first two names (the built-in task's architectures), its
    Pareto front over all of them highlighted, and reference layers (EvoNorm, BN-ReLU) where the
    run has them. The axes hold the bulk of the layers (`robust_range`): one beyond them is drawn
    at the edge and named under the figure, not allowed to flatten the rest."""
    plt = pyplot()
    archs = run.archs
    own = bool(run.config.get("objective"))
    fig, ax = plt.subplots(figsize=(5.6, 4.8))
    pop_ids = set(run.population)
    members = [c for c in run.valid if c.id in pop_ids] or run.valid
    members = [c for c in members if all(finite((c.scores or {}).get(a)) for a in archs)]
    if len(archs) < 2 or not members:
        _message(ax, "no valid layer with scores on two names yet")
        ax.set_title("Pareto front of the population")
        return fig
    a, b = archs[0], archs[1]
    pts = [[c.scores[x] for x in archs] for c in members]
    front = set(pareto_front(pts))
    refs = [(name, acc) for name, acc in sorted(run.references.items())
            if finite(acc.get(a)) and finite(acc.get(b))]
    xr = robust_range([p[0] for p in pts] + [acc[a] for _, acc in refs])
    yr = robust_range([p[1] for p in pts] + [acc[b] for _, acc in refs])
    ax.set_xlim(*padded(*xr))
    ax.set_ylim(*padded(*yr))
    ax.set_autoscale_on(False)
    ax.scatter([p[0] for i, p in enumerate(pts) if i not in front],
               [p[1] for i, p in enumerate(pts) if i not in front],
               s=12, color="0.6", alpha=0.6, label="population")
    fr = sorted((pts[i] for i in front), key=lambda p: p[0])
    kind = "scores" if own else "architectures"
    ax.scatter([p[0] for p in fr], [p[1] for p in fr], s=22, color="C3",
               label=f"Pareto front over {len(archs)} {kind} ({len(fr)})")
    if len(archs) == 2:  # with more objectives the front is not a line in this projection
        ax.plot([p[0] for p in fr], [p[1] for p in fr], color="C3", linewidth=0.8, alpha=0.6)
    markers = itertools.cycle("*^sDPX")
    for name, acc in refs:
        ax.scatter([acc[a]], [acc[b]], marker=next(markers), s=110, edgecolors="k",
                   label=name, zorder=5)
    outside = mark_outside(ax, [p[0] for p in pts], [p[1] for p in pts], color="C3")
    unit = "score" if own else "accuracy"
    ax.set_xlabel(printable(f"{a} {unit}"))  # score names from the run, quoted as on the page
    ax.set_ylabel(printable(f"{b} {unit}"))
    legend_outside(ax)
    ax.grid(alpha=0.3)
    ax.set_title(f"Pareto front of the population ({len(members)} layers)", fontsize=10)
    outside_note(fig, [f"{a} {x:.3g}, {b} {y:.3g}" for x, y in outside], "layer")
    return fig


def rejections(runs: Sequence[RunData]) -> Any:
    """Counts of candidates by outcome: valid, or the reason they were rejected or failed."""
    plt = pyplot()
    cats: list[str] = []
    counts: list[dict[str, int]] = []
    for run in runs:
        cnt: dict[str, int] = {}
        for c in run.candidates:
            k = reason_category(c)
            cnt[k] = cnt.get(k, 0) + 1
            if k not in cats:
                cats.append(k)
        counts.append(cnt)
    cats.sort(key=lambda k: (k != "valid", k == "pending", -sum(c.get(k, 0) for c in counts), k))
    fig, ax = plt.subplots(figsize=(6.4, 0.9 + 0.38 * max(1, len(cats)) * max(1, len(runs)) ** 0.5))
    if not cats:
        _message(ax, "no candidate yet")
        ax.set_title("Outcomes")
        return fig
    h = 0.8 / len(runs)
    for i, (run, cnt) in enumerate(zip(runs, counts)):
        ys = [j + i * h for j in range(len(cats))]
        vals = [cnt.get(k, 0) for k in cats]
        bars = ax.barh(ys, vals, height=h, color=f"C{i % 10}", label=run.name)
        total = sum(vals)
        for bar, v in zip(bars, vals):
            if v:
                ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2,
                        f" {v} ({100 * v / total:.0f}%)", va="center", fontsize=7)
    ax.set_yticks([j + 0.4 - h / 2 for j in range(len(cats))])
    ax.set_yticklabels(cats, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("candidates")
    ax.margins(x=0.2)
    if len(runs) > 1:
        ax.legend(fontsize=8)
    ax.set_title("Outcomes: valid, or rejection/failure reason")
    return fig
