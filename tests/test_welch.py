"""Welch's t-test and the Student-t tail against closed forms and published values."""

import math

import pytest

from evonorm.stats import betainc, t_sf, welch_greater


def test_t_tail_matches_closed_forms():
    for t in (-3.0, -0.7, 0.0, 0.4, 1.0, 2.5, 12.0):
        assert t_sf(t, 1) == pytest.approx(0.5 - math.atan(t) / math.pi, abs=1e-12)  # Cauchy
        assert t_sf(t, 2) == pytest.approx(0.5 - t / (2 * math.sqrt(2 + t * t)), abs=1e-12)
    assert t_sf(2.0, 10) == pytest.approx(0.036694017385370, abs=1e-10)  # scipy.stats.t.sf(2, 10)
    assert t_sf(2.015048372669157, 5) == pytest.approx(0.05, abs=1e-9)  # t_{0.95, 5}
    assert t_sf(1.959963984540054, 1e7) == pytest.approx(0.025, abs=1e-6)  # ~normal


def test_betainc_symmetry_and_bounds():
    assert betainc(2.0, 3.0, 0.4) == pytest.approx(0.5248, abs=1e-12)  # 1 - sum binomial: 0.5248
    assert betainc(2.0, 3.0, 0.4) + betainc(3.0, 2.0, 0.6) == pytest.approx(1.0, abs=1e-12)
    assert betainc(1.0, 1.0, 0.3) == pytest.approx(0.3)
    with pytest.raises(ValueError):
        betainc(0.0, 1.0, 0.5)


def test_welch_on_a_published_example():
    # Wikipedia "Welch's t-test", example 1: t = -2.46, df = 24.9, two-sided p = 0.021
    a = [27.5, 21.0, 19.0, 23.6, 17.0, 17.9, 16.9, 20.1, 21.9, 22.6, 23.1, 19.6, 19.0, 21.7, 21.4]
    b = [27.1, 22.0, 20.8, 23.4, 23.4, 23.5, 25.8, 22.0, 24.8, 20.2, 21.9, 22.1, 22.9, 20.5, 24.4]
    r = welch_greater(b, a)
    assert r.t == pytest.approx(2.46, abs=0.01) and r.df == pytest.approx(24.9, abs=0.1)
    assert 2 * r.p == pytest.approx(0.021, abs=0.001)
    assert welch_greater(a, b).p == pytest.approx(1 - r.p)


def test_welch_edge_cases():
    assert welch_greater([0.5, 0.5], [0.4, 0.4]).p == 0.0
    assert welch_greater([0.4, 0.4], [0.5, 0.5]).p == 1.0
    with pytest.raises(ValueError):
        welch_greater([0.5], [0.4, 0.3])
