"""The exact tests of the experiments (the Welch test is covered with the report's verdict)."""

import pytest

from evonorm.stats import mann_whitney_greater, paired_sign_flip_greater


def test_exact_mann_whitney_one_sided():
    u, p = mann_whitney_greater([5, 6, 7, 8, 9], [0, 1, 2, 3, 4])
    assert u == 25 and p == pytest.approx(1 / 252)  # the one most extreme split of 252
    u, p = mann_whitney_greater([0, 1, 2, 3, 4], [5, 6, 7, 8, 9])
    assert u == 0 and p == 1.0
    _, p = mann_whitney_greater([1, 1, 1], [1, 1, 1])  # all tied: no evidence
    assert p == 1.0
    # ties at chance: 36 of the 252 splits reach U = 18 (scipy's tie-blind "exact" says 39/252)
    u, p = mann_whitney_greater([0.1, 0.1, 0.5, 0.6, 0.7], [0.1, 0.1, 0.1, 0.2, 0.3])
    assert u == 18 and p == pytest.approx(36 / 252)
    assert mann_whitney_greater([1], [0, 2]) == (1.0, pytest.approx(2 / 3))  # a lone run: its rank


def test_exact_paired_sign_flip_one_sided():
    # five wins: only the observed signs reach the observed sum, 1 of 32
    assert paired_sign_flip_greater([1, 2, 3, 4, 5], [0, 1, 2, 3, 4]) == pytest.approx(1 / 32)
    # one tie: flipping its zero changes nothing, so two of 32 reach the sum
    assert paired_sign_flip_greater([1, 2, 3, 4, 4], [0, 1, 2, 3, 4]) == pytest.approx(2 / 32)
    # a loss as large as the wins: little evidence
    assert paired_sign_flip_greater([1, 1, 1, 0], [0, 0, 0, 3]) == pytest.approx(18 / 32)
    # every one of the 2^12 sign patterns is walked, not sampled
    assert paired_sign_flip_greater(list(range(12)), [0] * 12) == pytest.approx(2 / 4096)
    assert paired_sign_flip_greater([1], [0]) == 0.5 and paired_sign_flip_greater([0], [0]) == 1.0
    with pytest.raises(ValueError):
        paired_sign_flip_greater([1, 2], [1])
