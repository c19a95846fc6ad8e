"""Rank fidelity: how a proxy's fitness ranks layers against a reference panel of the same layers
trained long (`evonorm.measure.panel` writes the panel).

A search is only as good as what it optimizes: a precise proxy whose order of layers differs from
proper training's leads a search to the wrong layers. The panel file holds the reference runs and,
under `proxies`, what each proxy measured on the same layers; this module reads and checks it, and
compares the two orders (Spearman, Kendall, bootstrap intervals over layers, the pairs the proxy
orders wrongly).
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from evonorm.files import DamagedFile, UnsafePath, read_json, update_json
from evonorm.stats import bootstrap_ci, kendall, spearman

WRONG_PAIR_GAP = 0.03  # a pair of layers the reference separates by more than 3 points


@dataclass(frozen=True)
class PanelLayer:
    """One panel layer: its name, its graph JSON (None for a native layer with no graph), and
    its reference accuracy (mean over the panel's architectures and seeds) with the run count."""

    name: str
    graph: dict | None
    accuracy: float
    runs: int


def load_panel(path: str | Path) -> tuple[dict, list[PanelLayer]]:
    """The panel file's JSON and its layers; ValueError naming the file and field otherwise."""
    path = Path(path)
    try:
        data = read_json(path)
    except OSError as err:
        raise ValueError(f"cannot read the panel {path}: {err.strerror or err}") from None
    except (DamagedFile, UnsafePath) as err:
        raise ValueError(f"the panel {err}") from None
    if data is None:
        raise ValueError(f"cannot read the panel {path}: no such file")
    runs = data.get("reference", {}).get("runs") if isinstance(data, dict) and isinstance(
        data.get("reference"), dict) else None
    if not isinstance(runs, list):
        raise ValueError(f"the panel {path} has no list reference.runs")
    accs: dict[str, list[float]] = {}
    graphs: dict[str, dict | None] = {}
    for i, run in enumerate(runs):
        acc = run.get("test_accuracy") if isinstance(run, dict) else None
        name = run.get("layer") if isinstance(run, dict) else None
        graph = run.get("graph") if isinstance(run, dict) else None
        if (not isinstance(name, str) or not name or isinstance(acc, bool)
                or not isinstance(acc, (int, float)) or not 0.0 <= acc <= 1.0
                or not (graph is None or isinstance(graph, dict))):
            raise ValueError(f"the panel {path}: reference.runs[{i}] needs a layer name, a "
                             f"test_accuracy in [0, 1] and a graph that is an object or null")
        accs.setdefault(name, []).append(float(acc))
        graphs[name] = graph
    if len(accs) < 3:
        raise ValueError(f"the panel {path} has {len(accs)} layer(s); rank fidelity needs >= 3")
    layers = [PanelLayer(n, graphs[n], statistics.fmean(a), len(a)) for n, a in accs.items()]
    return data, layers


def seed_agreement(runs: list[dict]) -> float | None:
    """How well one reference seed ranks the panel's layers as the mean of its other seeds does:
    the Spearman of each seed's accuracy (mean over architectures) against the other seeds' mean,
    averaged over the seeds. A proxy that were the reference itself, trained once, would rank
    about this well, so it says how far a target on Spearman is reachable. None below two seeds
    or three layers. `runs` are the panel file's reference runs (layer, arch, seed, test_accuracy)."""
    cells: dict[str, dict[int, dict[str, float]]] = {}
    for r in runs:
        cells.setdefault(r["layer"], {}).setdefault(r["seed"], {})[r["arch"]] = r["test_accuracy"]
    archs = {r["arch"] for r in runs}
    acc = {layer: {s: statistics.fmean(v.values()) for s, v in seeds.items() if set(v) == archs}
           for layer, seeds in cells.items()}  # a seed counts once it is done on every arch
    values = []
    for seed in sorted({s for seeds in acc.values() for s in seeds}):
        pairs = [(by_seed[seed], statistics.fmean(v for s, v in by_seed.items() if s != seed))
                 for by_seed in acc.values() if seed in by_seed and len(by_seed) > 1]
        v = spearman([a for a, _ in pairs], [b for _, b in pairs]) if len(pairs) >= 3 else None
        if v is not None:
            values.append(v)
    return statistics.fmean(values) if values else None


@dataclass
class Fidelity:
    """How a proxy's per-layer fitness ranks against the reference's.

    A search scores each candidate once, at its own seed: `spearman` and `kendall` are the mean
    over the proxy's seeds of the correlation of one seed's fitness with the reference (what one
    search sees); `spearman_of_mean` is that of the fitness averaged over the seeds (what
    averaging that many evaluations would give). Intervals resample the layers.
    """

    layers: list[str]
    proxy: list[float]  # per layer, the mean over seeds
    reference: list[float]
    seeds: int
    spearman: float | None
    kendall: float | None
    spearman_ci95: tuple[float, float] | None
    kendall_ci95: tuple[float, float] | None
    spearman_of_mean: float | None
    wrong_pairs: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def rank_fidelity(proxy: dict[str, dict[int, float]], reference: dict[str, float], *,
                  rounds: int = 2000, seed: int = 0) -> Fidelity:
    """`proxy`: layer -> {search seed: fitness}; `reference`: layer -> accuracy. Correlations over
    the layers both scored (at each seed, those scored at that seed), percentile bootstrap 95%
    intervals over layers, and every pair the reference separates by more than WRONG_PAIR_GAP
    that the proxy's mean fitness orders the other way."""
    names = [n for n in reference if proxy.get(n)]
    seeds = sorted({s for n in names for s in proxy[n]})
    means = {n: statistics.fmean(proxy[n].values()) for n in names}

    def per_seed(stat, idx: list[int]) -> float | None:
        values = []
        for s in seeds:
            pairs = [(proxy[names[i]][s], reference[names[i]]) for i in idx if s in proxy[names[i]]]
            v = stat([p for p, _ in pairs], [r for _, r in pairs])
            if v is not None:
                values.append(v)
        return statistics.fmean(values) if values else None

    every = list(range(len(names)))

    def interval(stat) -> tuple[float, float] | None:
        if len(names) < 3:
            return None
        return bootstrap_ci(lambda idx: per_seed(stat, idx), len(names), rounds=rounds, seed=seed)

    wrong = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            hi, lo = (a, b) if reference[a] > reference[b] else (b, a)
            if reference[hi] - reference[lo] > WRONG_PAIR_GAP and means[hi] < means[lo]:
                wrong.append({"better": hi, "worse": lo,
                              "reference_gap": round(reference[hi] - reference[lo], 4),
                              "proxy_gap": round(means[hi] - means[lo], 4)})
    return Fidelity(names, [means[n] for n in names], [reference[n] for n in names], len(seeds),
                    per_seed(spearman, every), per_seed(kendall, every), interval(spearman),
                    interval(kendall),
                    spearman([means[n] for n in names], [reference[n] for n in names]),
                    sorted(wrong, key=lambda w: -w["reference_gap"]))


def format_fidelity(f: Fidelity, preset: str, seconds_per_candidate: float | None) -> str:
    """Lines for the calibration table: both correlations, their intervals, the cost, the pairs
    ordered wrongly."""
    def num(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}"

    def ci(v: tuple[float, float] | None) -> str:
        return "" if v is None else f" (95% bootstrap interval {v[0]:.2f} to {v[1]:.2f})"

    cost = "-" if seconds_per_candidate is None else f"{seconds_per_candidate:.0f}"
    lines = [f"rank fidelity of {preset} against the reference panel ({len(f.layers)} layers, "
             f"one evaluation per layer as a search makes it, mean over {f.seeds} search "
             f"seed(s)): Spearman {num(f.spearman)}{ci(f.spearman_ci95)}, Kendall "
             f"{num(f.kendall)}{ci(f.kendall_ci95)}; of the fitness averaged over the seeds: "
             f"Spearman {num(f.spearman_of_mean)}; {cost} worker-seconds per fully trained "
             f"candidate", "",
             "| layer | proxy fitness (mean over seeds) | reference accuracy |", "|---|---|---|"]
    order = sorted(range(len(f.layers)), key=lambda i: -f.reference[i])
    lines += [f"| {f.layers[i]} | {100 * f.proxy[i]:.1f} | {100 * f.reference[i]:.1f} |"
              for i in order]
    wrong = ", ".join(f"{w['better']} > {w['worse']} ({100 * w['reference_gap']:.1f} points)"
                      for w in f.wrong_pairs) or "none"
    lines += ["", f"pairs the reference separates by > {100 * WRONG_PAIR_GAP:.0f} points that the "
                  f"proxy orders the other way: {wrong}"]
    return "\n".join(lines)


def write_proxy(path: str | Path, key: str, entry: dict) -> None:
    """Store one proxy's measurement under `proxies[key]` of the panel file, atomically, keeping
    everything else in it (also what another process writes into it meanwhile)."""

    def change(data: dict) -> dict:
        data.setdefault("proxies", {})[key] = entry
        return data

    update_json(path, change)
