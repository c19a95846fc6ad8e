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


def progress_curve(run: RunData, top: int = 10) -> tuple[list[int], list[float], list[float | None],
                                                           list[float | None]]:
    """(candidates evaluated, best fitness so far, mean and std of the `top` best so far) after
    each valid arrival: the best-so-far curves of the paper's Fig. 10, which never fall as
    candidates arrive. The top-`top` mean is None until `top` layers exist (a mean over fewer
    would fall whenever a weaker layer arrives). In a staged run only layers trained to the end
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
        ranked = sorted(fitness, reverse=True)
        xs.append(evaluated)
        best.append(ranked[0])
        if len(ranked) < top:
            means.append(None)
            stds.append(None)
            continue
        m = sum(ranked[:top]) / top
        means.append(m)
        stds.append(math.sqrt(sum((v - m) ** 2 for v in ranked[:top]) / top))
    return xs, best, means, stds


def score_label(run: RunData) -> str:
    """What a run's fitness is: held-out accuracy on the built-in task, the objective's score
    otherwise (which need not be an accuracy)."""
    return (f"score of {run.config['objective']}" if run.config.get("objective")
            else "mean held-out accuracy over the architectures")


def search_progress(runs: Sequence[RunData], *, top: int = 10, baseline: float | None = None,
                    baseline_label: str = "BN-ReLU") -> Any:
    """Fig. 10: the best fitness so far and the mean and spread of the `top` best so far, against
    candidates evaluated."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    drawn = 0
    for i, run in enumerate(runs):
        xs, b, m, s = progress_curve(run, top)
        if not xs:
            continue
        color = f"C{i % 10}"
        ax.step(xs, b, where="post", color=color, linewidth=0.9, linestyle=":", marker=".",
                label=f"{run.name}: best ({len(run.finished)} evaluated)")
        kx = [x for x, v in zip(xs, m) if v is not None]
        km = [v for v in m if v is not None]
        ks = [v for v in s if v is not None]
        if kx:
            ax.step(kx, km, where="post", color=color, label=f"{run.name}: top-{top} mean")
            ax.fill_between(kx, [a - d for a, d in zip(km, ks)], [a + d for a, d in zip(km, ks)],
                            color=color, alpha=0.2, linewidth=0, step="post")
        drawn += 1
    if baseline is None:
        for run in runs:
            ref = run.references.get("bn_relu")
            if ref:
                baseline = sum(ref.values()) / len(ref)
                break
    if not drawn:
        _message(ax, "no layer trained to the end yet: nothing to plot")
    else:
        if baseline is not None:
            ax.axhline(baseline, color="k", linestyle="--", linewidth=1, label=baseline_label)
        ax.set_xlabel("candidates evaluated")
        ax.set_ylabel("fitness")
        ax.legend(fontsize=8, loc="lower right")
        ax.grid(alpha=0.3)
        ax.margins(x=0.05)
    ax.set_title(f"Search progress (best so far, and mean ± std of the top-{top} so far)")
    fig.text(0.01, 0.01, f"Fitness: {score_label(runs[0])}. Dotted: the best valid layer so far; "
                         f"line: mean fitness of the {top} best so far (once there are {top}), "
                         "band: ± their std. x: candidates evaluated (valid, rejected and failed).",
             fontsize=7, color="0.3", wrap=True, va="bottom")
    fig.subplots_adjust(bottom=0.25)
    return fig


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


def _integer_counts(ax: Any) -> None:
    """A log count axis labelled in plain counts (1, 10, 100), without minor labels such as 6x10^0."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
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
        ax.hist([accs[a] for a in shown], bins=edges, color=[f"C{archs.index(a)}" for a in shown],
                log=True, histtype="bar", rwidth=0.9, label=labels)
        if reference is not None:
            ax.axvline(reference, color="k", linestyle="--", linewidth=1, label="BN-ReLU")
        ax.set_xlim(0, 1)
        ax.set_xlabel("accuracy")
        ax.set_ylabel("count (log scale)")
        _integer_counts(ax)
        ax.legend(fontsize=8)
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
        if references:
            ax.legend(fontsize=7, loc="upper left")
        ax.plot([0, 1], [0, 1], color="0.6", linewidth=0.8, linestyle=":")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_aspect("equal")
        ax.set_xlabel(f"{a} accuracy")
        ax.set_ylabel(f"{b} accuracy")
        ax.set_title(f"{short(a)} vs {short(b)}\n" + correlation_text(xs, ys, chance), fontsize=8)
    fig.suptitle("Cross-architecture calibration (failures count at chance)", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    return fig


def short(arch: str) -> str:
    """An architecture's name without the dataset suffix, for titles."""
    return arch.removesuffix("_cifar")


def correlation_text(xs: Sequence[float], ys: Sequence[float], chance: float) -> str:
    """Pearson's r over all layers and over the layers above chance on both architectures (the
    near-chance cluster alone makes r look high)."""
    r = pearson(xs, ys)
    above = [(x, y) for x, y in zip(xs, ys) if x > chance * 1.5 and y > chance * 1.5]
    r_above = pearson([x for x, _ in above], [y for _, y in above])
    fmt = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
    return f"all: n={len(xs)}, r={fmt(r)}; above chance: n={len(above)}, r={fmt(r_above)}"


def pareto(run: RunData) -> Any:
    """The population's accuracies on the first two architectures, its Pareto front over all
    architectures highlighted, and reference layers (EvoNorm, BN-ReLU) where the run has them."""
    plt = pyplot()
    archs = run.archs
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
    ax.scatter([p[0] for i, p in enumerate(pts) if i not in front],
               [p[1] for i, p in enumerate(pts) if i not in front],
               s=12, color="0.6", alpha=0.6, label="population")
    fr = sorted((pts[i] for i in front), key=lambda p: p[0])
    ax.scatter([p[0] for p in fr], [p[1] for p in fr], s=22, color="C3",
               label=f"Pareto front over {len(archs)} archs ({len(fr)})")
    if len(archs) == 2:  # with more objectives the front is not a line in this projection
        ax.plot([p[0] for p in fr], [p[1] for p in fr], color="C3", linewidth=0.8, alpha=0.6)
    markers = itertools.cycle("*^sDPX")
    for name, acc in sorted(run.references.items()):
        if finite(acc.get(a)) and finite(acc.get(b)):
            ax.scatter([acc[a]], [acc[b]], marker=next(markers), s=110, edgecolors="k",
                       label=name, zorder=5)
    unit = "score" if run.config.get("objective") else "accuracy"
    ax.set_xlabel(f"{a} {unit}")
    ax.set_ylabel(f"{b} {unit}")
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(alpha=0.3)
    ax.set_title(f"Pareto front of the population ({len(members)} layers)")
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
