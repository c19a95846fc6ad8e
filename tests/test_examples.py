"""The runnable example of a search on one's own task (scikit-learn's digits), at a tiny budget."""

import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.extras
def test_digits_search_finds_layers_that_learn(tmp_path, monkeypatch, capsys):
    pytest.importorskip("sklearn", reason="scikit-learn is not installed (the `examples` extra)")
    monkeypatch.syspath_prepend(str(EXAMPLES))
    import digits_search

    result = digits_search.main(["--out", str(tmp_path / "run"), "--budget", "2", "--workers", "1"])
    assert result.complete and result.done == 2 and result.tally.stopped == 0  # no hurdle yet
    top = result.top(2)
    assert top and top[0].fitness > 0.5  # chance is 0.1: the textbook seed layers learn
    printed = capsys.readouterr().out.strip().splitlines()
    assert len(printed) == len(top) and printed[0].startswith(f"{top[0].fitness:.3f}")
    from evonorm.search import load

    assert load(tmp_path / "run").top(2) == top


def test_the_install_line_of_the_example_installs_what_it_imports():
    """The package is installed from its clone (it is not on PyPI): the example's install line names
    an extra of this pyproject.toml that brings scikit-learn, in the clone's form."""
    import re

    tomllib = pytest.importorskip("tomllib")
    doc = (EXAMPLES / "digits_search.py").read_text()
    extra = re.search(r"^\s*pip install -e '\.\[(\w+)\]'", doc, flags=re.M)
    assert extra, "no `pip install -e '.[EXTRA]'` line"
    project = tomllib.loads((EXAMPLES.parent / "pyproject.toml").read_text())["project"]
    assert any(dep.startswith("scikit-learn") for dep in project["optional-dependencies"][extra.group(1)])
