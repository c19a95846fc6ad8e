"""Small statistics without scipy (not a dependency): mean and sample standard deviation,
Welch's unequal-variance t-test, one-sided, for the report's verdict and the calibration's tables,
two exact tests for the experiments' few runs (Mann-Whitney U, and a paired sign-flip permutation
test), and rank correlations with a bootstrap interval, for how a proxy ranks layers.

The Student-t tail comes from the regularized incomplete beta function, evaluated with the
continued fraction of Numerical Recipes (Lentz's method) and `math.lgamma`.
"""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass
from typing import Callable, Sequence


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta I_x(a, b) for a, b > 0 and 0 <= x <= 1."""
    if not (a > 0 and b > 0 and 0.0 <= x <= 1.0):
        raise ValueError(f"betainc needs a, b > 0 and 0 <= x <= 1, got {a}, {b}, {x}")
    if x in (0.0, 1.0):
        return x
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                     + a * math.log(x) + b * math.log1p(-x))
    if x > (a + 1.0) / (a + b + 2.0):  # the fraction converges fast on this side only
        return 1.0 - betainc(b, a, 1.0 - x)
    return front * _beta_fraction(a, b, x) / a


def _beta_fraction(a: float, b: float, x: float, *, iterations: int = 300, tol: float = 1e-15) -> float:
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, iterations + 1):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < tol:
            break
    return h


def t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t with `df` (> 0, not necessarily whole) degrees of freedom."""
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return tail if t >= 0 else 1.0 - tail


@dataclass(frozen=True)
class WelchResult:
    """Welch's t for mean(a) - mean(b), its degrees of freedom and the one-sided p of a > b."""

    diff: float
    t: float
    df: float
    p: float


def mean_std(xs: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (n - 1; 0 for a single value)."""
    m = sum(xs) / len(xs)
    return m, (math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0)


def welch_greater(a: Sequence[float], b: Sequence[float]) -> WelchResult:
    """One-sided Welch test of H1 mean(a) > mean(b); both need >= 2 values."""
    if len(a) < 2 or len(b) < 2:
        raise ValueError(f"Welch's test needs >= 2 values per group, got {len(a)} and {len(b)}")
    (ma, sa), (mb, sb) = mean_std(a), mean_std(b)
    va, vb = sa * sa / len(a), sb * sb / len(b)
    diff = ma - mb
    se2 = va + vb
    if se2 == 0.0:  # no spread at all: the sign of the difference decides
        return WelchResult(diff, math.copysign(math.inf, diff) if diff else 0.0, math.inf,
                           0.0 if diff > 0 else (0.5 if diff == 0 else 1.0))
    t = diff / math.sqrt(se2)
    df = se2 * se2 / ((va * va / (len(a) - 1) if va else 0.0) + (vb * vb / (len(b) - 1) if vb else 0.0))
    return WelchResult(diff, t, df, t_sf(t, df))


def mann_whitney_greater(a: list[float], b: list[float]) -> tuple[float, float]:
    """(U, exact one-sided p) for H1: a tends to be larger than b (ties count one half).

    The exact null distribution enumerates every split of the pooled values into groups of
    len(a) and len(b) (252 splits for 5 vs 5)."""
    def u_stat(x, y):
        return sum((xi > yi) + 0.5 * (xi == yi) for xi in x for yi in y)

    u = u_stat(a, b)
    pooled = list(a) + list(b)
    splits = list(itertools.combinations(range(len(pooled)), len(a)))
    count = 0
    for idx in splits:
        chosen = set(idx)
        x = [pooled[i] for i in idx]
        y = [pooled[i] for i in range(len(pooled)) if i not in chosen]
        count += u_stat(x, y) >= u - 1e-12
    return u, count / len(splits)


def paired_sign_flip_greater(a: list[float], b: list[float]) -> float:
    """Exact one-sided p of a paired permutation test, H1: a[i] - b[i] tends to be positive.

    Under H0 each pair's difference is as likely negative as positive; the null distribution
    flips the signs of the differences in every one of the 2^n ways (32 for 5 pairs). A zero
    difference counts as no evidence either way, so 5 pairs reach p < 0.05 only when a wins all
    of them (p = 1/32)."""
    if len(a) != len(b) or not a:
        raise ValueError("paired test needs two equal-length non-empty lists")
    diffs = [x - y for x, y in zip(a, b)]
    observed = sum(diffs)
    flips = itertools.product((1, -1), repeat=len(diffs))  # walked, not stored: 4096 for 12 pairs
    return sum(sum(s * d for s, d in zip(f, diffs)) >= observed - 1e-12 for f in flips) / 2 ** len(diffs)


def pearson(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Pearson's r of two equally long samples; None below 3 points or for a constant sample."""
    n = len(xs)
    if n < 3:
        return None
    mx, my = sum(xs) / n, sum(ys) / n
    sx = math.sqrt(sum((x - mx) ** 2 for x in xs))
    sy = math.sqrt(sum((y - my) ** 2 for y in ys))
    if sx == 0 or sy == 0:
        return None
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / (sx * sy)


def ranks(v: Sequence[float]) -> list[float]:
    """Ranks from 1, ties sharing their mean rank."""
    order = sorted(range(len(v)), key=lambda i: v[i])
    out = [0.0] * len(v)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Spearman's rank correlation: Pearson's r of the ranks (ties share their mean rank)."""
    return pearson(ranks(xs), ranks(ys))


def kendall(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Kendall's tau-b (ties in either sample handled as in scipy.stats.kendalltau); None below 3
    points or for a constant sample."""
    n = len(xs)
    if n < 3:
        return None
    concordant = discordant = ties_x = ties_y = 0
    for i, j in itertools.combinations(range(n), 2):
        dx, dy = xs[i] - xs[j], ys[i] - ys[j]
        if dx == 0 and dy == 0:
            continue
        if dx == 0:
            ties_x += 1
        elif dy == 0:
            ties_y += 1
        elif (dx > 0) == (dy > 0):
            concordant += 1
        else:
            discordant += 1
    denom = math.sqrt((concordant + discordant + ties_x) * (concordant + discordant + ties_y))
    return None if denom == 0 else (concordant - discordant) / denom


def bootstrap_ci(stat: Callable[[list[int]], float | None], n: int, *, rounds: int = 2000,
                 level: float = 0.95, seed: int = 0) -> tuple[float, float] | None:
    """Percentile bootstrap interval of `stat` over `n` units: `stat(indices)` is computed on
    `rounds` resamples of range(n) with replacement (resamples where it is undefined are
    skipped); None when fewer than half of them give a value."""
    rng = random.Random(seed)
    values = sorted(v for v in (stat([rng.randrange(n) for _ in range(n)]) for _ in range(rounds))
                    if v is not None)
    if len(values) < rounds / 2:
        return None
    lo = values[int((1 - level) / 2 * (len(values) - 1))]
    hi = values[int(math.ceil((1 + level) / 2 * (len(values) - 1)))]
    return lo, hi
