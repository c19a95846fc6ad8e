"""The project's statistics, on scipy.stats: the tests and correlations its reports share.

Correlations are None where they are undefined (fewer than 3 points, a constant sample) rather
than scipy's nan, so that a caller averaging them over seeds or resamples skips those. The two
exact tests are for comparisons of few runs (5 seeds a side), where a normal approximation
would be a guess: both enumerate their whole null distribution, ties included.

scipy is imported in the functions: it takes seconds to load, which reading a store, a report's
text or `--help` does not need.
"""

from __future__ import annotations

import math
import statistics
import warnings
from typing import Callable, Sequence


def mean_std(xs: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (n - 1; 0 for a single value, so one seed still prints)."""
    return statistics.fmean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)


def _undefined(xs: Sequence[float], ys: Sequence[float]) -> bool:
    return len(xs) < 3 or len(set(xs)) < 2 or len(set(ys)) < 2


def pearson(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Pearson's r; None below 3 points or for a constant sample."""
    from scipy import stats

    return None if _undefined(xs, ys) else float(stats.pearsonr(xs, ys).statistic)


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Spearman's rank correlation (ties share their mean rank); None as for `pearson`."""
    from scipy import stats

    return None if _undefined(xs, ys) else float(stats.spearmanr(xs, ys).statistic)


def kendall(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Kendall's tau-b (ties in either sample corrected for); None as for `pearson`."""
    from scipy import stats

    return None if _undefined(xs, ys) else float(stats.kendalltau(xs, ys).statistic)


def mann_whitney_greater(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """(U, exact one-sided p) for H1: a tends to be larger than b (ties count one half).

    scipy's method="exact" assumes no ties, and searches that find nothing tie at chance: the
    permutation method walks every split of the pooled values instead (252 for 5 vs 5). It
    needs two values a group; for a lone value "exact" is its rank's uniform null."""
    from scipy import stats

    method = stats.PermutationMethod(n_resamples=math.inf) if min(len(a), len(b)) > 1 else "exact"
    res = stats.mannwhitneyu(a, b, alternative="greater", method=method)
    return float(res.statistic), float(res.pvalue)


def paired_sign_flip_greater(a: Sequence[float], b: Sequence[float]) -> float:
    """Exact one-sided p of a paired permutation test, H1: a[i] - b[i] tends to be positive.

    Under H0 each pair's difference is as likely negative as positive; the null distribution
    flips the signs of the differences in every one of the 2^n ways (32 for 5 pairs). A zero
    difference counts as no evidence either way, so 5 pairs reach p < 0.05 only when a wins all
    of them (p = 1/32)."""
    if len(a) != len(b) or not a:
        raise ValueError("paired test needs two equal-length non-empty lists")
    if len(a) == 1:  # scipy needs two pairs; one pair's null distribution is +-d, equally likely
        return 0.5 if a[0] > b[0] else 1.0
    import numpy as np
    from scipy import stats

    res = stats.permutation_test((a, b), lambda x, y, axis: np.mean(x - y, axis=axis),
                                 vectorized=True, permutation_type="samples",
                                 alternative="greater", n_resamples=math.inf)
    return float(res.pvalue)


def bootstrap_ci(stat: Callable[[list[int]], float | None], n: int, *, rounds: int = 2000,
                 level: float = 0.95, seed: int = 0) -> tuple[float, float] | None:
    """Percentile bootstrap interval of `stat(indices)` over `n` units resampled with replacement.

    A resample where `stat` is undefined (None: e.g. one unit drawn n times has no order) is
    left out, where scipy's own interval would be nan; None when fewer than half give a value."""
    import numpy as np
    from scipy import stats

    def value(idx) -> float:
        v = stat(idx.tolist())
        return math.nan if v is None else v

    with warnings.catch_warnings():  # scipy's warning of a nan interval: the values are read below
        warnings.simplefilter("ignore", stats.DegenerateDataWarning)
        res = stats.bootstrap((np.arange(n),), value, n_resamples=rounds, vectorized=False,
                              method="percentile", rng=np.random.default_rng(seed))
    values = res.bootstrap_distribution[~np.isnan(res.bootstrap_distribution)]
    if len(values) < rounds / 2:
        return None
    lo, hi = np.quantile(values, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)
