"""The experiment scripts' shared table writer: summarizing again without new results keeps the
time the results were finished, so a rerun leaves the committed files as they were."""

import json
import sys
from pathlib import Path

import pytest
from _scripts import load_script

_common = load_script("_common")


def _finished(d: Path) -> str:
    return json.loads((d / "t.json").read_text())["meta"]["finished"]


def _stamp(d: Path, when: str) -> None:
    table = json.loads((d / "t.json").read_text())
    table["meta"]["finished"] = when
    (d / "t.json").write_text(json.dumps(table))


def test_the_finished_time_is_kept_when_nothing_changed(tmp_path):
    rows = [{"layer": "s0", "accuracy": 0.5, "nan": float("nan")}]
    _common.write_table(tmp_path, "t", rows, {"seeds": [0, 1]})
    _stamp(tmp_path, "2000-01-01 00:00:00 UTC")
    _common.write_table(tmp_path, "t", [dict(r) for r in rows], {"seeds": [0, 1]})
    assert _finished(tmp_path) == "2000-01-01 00:00:00 UTC"
    _common.write_table(tmp_path, "t", [{**rows[0], "accuracy": 0.6}], {"seeds": [0, 1]})
    assert _finished(tmp_path) != "2000-01-01 00:00:00 UTC"
    _stamp(tmp_path, "2000-01-01 00:00:00 UTC")
    _common.write_table(tmp_path, "t", [{**rows[0], "accuracy": 0.6}], {"seeds": [0, 1, 2]})
    assert _finished(tmp_path) != "2000-01-01 00:00:00 UTC"


def test_an_unreadable_old_table_is_replaced(tmp_path):
    (tmp_path / "t.json").write_text("{not json")
    _common.write_table(tmp_path, "t", [{"a": 1}], {})
    assert json.loads((tmp_path / "t.json").read_text())["rows"] == [{"a": 1}]


def test_jobs_run_in_the_packages_executor_and_a_failed_one_stops_the_map():
    # as a script calls it: the script puts experiments/ on the path its workers import from
    map_jobs = load_script("random_layers").map_jobs
    assert sorted(map_jobs(pow, [(2, 3), (3, 2), (5, 1)], 2)) == [5, 8, 9]
    assert list(map_jobs(pow, [(2, 2)], 1)) == [4]  # one worker: in this process
    with pytest.raises(RuntimeError, match="divmod job 0 error: ZeroDivisionError"):
        list(map_jobs(divmod, [(1, 0)], 2))


def test_the_search_flags_are_typed_and_a_data_seed_of_seed_is_each_searchs_own():
    import argparse

    p = argparse.ArgumentParser()
    _common.add_search_flags(p)
    args = p.parse_args(["--data-seed", "seed", "--train-runs", "2", "--prescreen"])
    assert _common.search_settings(args) == {"train_runs": 2, "data_seed": "seed", "prescreen": True}
    assert _common.search_settings(args, 7)["data_seed"] == 7
    assert _common.search_settings(p.parse_args([])) == {}
    with pytest.raises(SystemExit):
        p.parse_args(["--data-seed", "x"])


SCRIPTS = sorted(p.stem for p in Path(__file__).resolve().parents[1].joinpath("experiments").glob("[a-z]*.py"))


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_flag_of_every_experiment_says_what_it_does_and_its_default(name, monkeypatch):
    """The parser each script builds (caught at parse_args, before anything runs): every flag has
    help, and its help states the default wherever there is one to state."""
    import argparse

    seen = []

    def caught(self, *args, **kwargs):
        seen.append(self)
        raise SystemExit(0)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", caught)
    monkeypatch.setattr(sys, "argv", [name])
    with pytest.raises(SystemExit):
        load_script(name).main()
    (parser,) = seen
    assert parser.formatter_class is _common.HelpFormatter
    formatter = parser.formatter_class(prog=name)
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        assert action.help, f"{name} {action.dest}: no help"
        stated = formatter._get_help_string(action)
        assert ("default" in stated or action.default is None or action.default is False
                or action.required or not action.option_strings), f"{name} {action.dest}: {stated}"
