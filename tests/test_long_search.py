"""The long search's verdict words: beats, below, or cannot be told apart (one-sided Welch each way)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
from long_search import verdict  # noqa: E402


def test_verdict_words():
    high, low = [0.50, 0.52, 0.51, 0.49, 0.53], [0.30, 0.32, 0.31, 0.29, 0.33]
    assert verdict(high, low)[0] == "beats"
    assert verdict(low, high)[0] == "below"
    word, up, down = verdict([0.40, 0.45, 0.35, 0.42, 0.38], [0.41, 0.39, 0.44, 0.36, 0.40])
    assert word == "cannot be told apart from" and up >= 0.05 and down >= 0.05
