"""The experiment scripts' shared table writer: summarizing again without new results keeps the
time the results were finished, so a rerun leaves the committed files as they were."""

import json
from pathlib import Path

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
    import pytest

    # as a script calls it: the script puts experiments/ on the path its workers import from
    map_jobs = load_script("random_layers").map_jobs
    assert sorted(map_jobs(pow, [(2, 3), (3, 2), (5, 1)], 2)) == [5, 8, 9]
    assert list(map_jobs(pow, [(2, 2)], 1)) == [4]  # one worker: in this process
    with pytest.raises(RuntimeError, match="divmod job 0 error: ZeroDivisionError"):
        list(map_jobs(divmod, [(1, 0)], 2))


def test_the_search_flags_are_typed_and_a_data_seed_of_seed_is_each_searchs_own():
    import argparse

    import pytest

    p = argparse.ArgumentParser()
    _common.add_search_flags(p)
    args = p.parse_args(["--data-seed", "seed", "--train-runs", "2", "--prescreen"])
    assert _common.search_settings(args) == {"train_runs": 2, "data_seed": "seed", "prescreen": True}
    assert _common.search_settings(args, 7)["data_seed"] == 7
    assert _common.search_settings(p.parse_args([])) == {}
    with pytest.raises(SystemExit):
        p.parse_args(["--data-seed", "x"])
