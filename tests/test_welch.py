"""The Welch verdict (report/verdict.py; the long search's words too) against a published example."""

import pytest

from evonorm.report.verdict import welch_verdict


def test_welch_on_a_published_example():
    # Wikipedia "Welch's t-test", example 1: t = -2.46, df = 24.9, two-sided p = 0.021
    a = [27.5, 21.0, 19.0, 23.6, 17.0, 17.9, 16.9, 20.1, 21.9, 22.6, 23.1, 19.6, 19.0, 21.7, 21.4]
    b = [27.1, 22.0, 20.8, 23.4, 23.4, 23.5, 25.8, 22.0, 24.8, 20.2, 21.9, 22.1, 22.9, 20.5, 24.4]
    word, up, down = welch_verdict(b, a)
    assert 2 * up == pytest.approx(0.021, abs=0.001)
    # Welch's df (24.99), not Student's pooled 28 (which gives 0.01027)
    assert up == pytest.approx(0.0106890007314, abs=1e-9)
    assert word == "beats" and down == pytest.approx(1 - up)
    assert welch_verdict(a, b) == ("below", pytest.approx(down), pytest.approx(up))


def test_verdict_words():
    high, low = [0.50, 0.52, 0.51, 0.49, 0.53], [0.30, 0.32, 0.31, 0.29, 0.33]
    assert welch_verdict(high, low)[0] == "beats"
    assert welch_verdict(low, high)[0] == "below"
    word, up, down = welch_verdict([0.40, 0.45, 0.35, 0.42, 0.38], [0.41, 0.39, 0.44, 0.36, 0.40])
    assert word == "cannot be told apart from" and up >= 0.05 and down >= 0.05


@pytest.mark.filterwarnings("ignore:Precision loss:RuntimeWarning")  # scipy's, on constant groups
def test_welch_edge_cases():
    assert welch_verdict([0.5, 0.5], [0.4, 0.4])[1:] == (0.0, 1.0)  # no spread: t is +-inf
    # no spread and no difference: scipy's p is nan, which the verdict reads as no evidence
    word, up, down = welch_verdict([0.5, 0.5], [0.5, 0.5])
    assert word == "cannot be told apart from" and up != up and down != down
    with pytest.raises(ValueError):
        welch_verdict([0.5], [0.4, 0.3])
