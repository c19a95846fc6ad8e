"""The shipped prior's script keeps a prior it would write again unchanged (a queue's rerun), so
that its provenance says when it was built, not when the queue last passed."""

from _scripts import load_script

from evonorm.proxy.prior import Prior

_same = load_script("prescreen_prior")._same


def test_a_prior_of_the_same_rows_and_setting_is_the_same_whenever_built():
    rows = [{"features": [0.1, 0.2], "valid": True, "fitness": 0.6}]
    a = Prior({"task": {"n_train": 4000}}, rows, {"created": "2026-11-28 21:00 UTC"})
    assert _same(a, Prior(a.setting, [dict(r) for r in rows], {"created": "2026-11-29 09:00 UTC"}))
    assert not _same(a, Prior(a.setting, [{**rows[0], "fitness": 0.5}], a.provenance))
    assert not _same(a, Prior({"task": {"n_train": 12000}}, rows, a.provenance))


def test_a_prior_file_reads_back_as_written_one_line_per_row(tmp_path):
    from evonorm.proxy.prior import read_prior, write_prior

    rows = [{"features": {"a": 0.5, "b": 1.0}, "valid": v, "fitness": 0.6 if v else None}
            for v in (True, False, False)]
    prior = Prior({"task": {"n_train": 4000}, "stages": [150]}, rows, {"runs": [], "rows": 3})
    path = tmp_path / "demo-s.json"
    write_prior(path, prior)
    assert read_prior(path) == prior
    assert sum("\"features\"" in line for line in path.read_text().splitlines()) == 3  # a line a row
