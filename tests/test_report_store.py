"""Reports read from real run stores: hand-written ones, one still being written, a tiny search."""

import base64
import json
import re
import sqlite3
import time

import pytest

pytest.importorskip("matplotlib", reason="reports need the optional `plots` extra")

from evonorm.cli import main as cli_main  # noqa: E402
from evonorm.report import load_run, write_report  # noqa: E402
from evonorm.proxy.config import stored_task  # noqa: E402
from evonorm.search.evaluation import Evaluation  # noqa: E402
from evonorm.search.store import PendingProposal, Store  # noqa: E402

ARCHS = ["resnet50_cifar", "mobilenetv2_cifar"]
GRAPH = {"nodes": [["sigmoid", 0], ["mul", 0, 4]]}
PNG = b"\x89PNG\r\n\x1a\n"


def add(store, i, status, accs=None, reason=None, key=None, origin="random"):
    idx = store.add_proposal(GRAPH, None, origin, [3, [0], None])
    accs = accs or {}
    ev = Evaluation(status, reason, scores=accs,
                    fitness=sum(accs.values()) / len(accs) if status == "valid" else None)
    store.add_candidate(PendingProposal(idx, GRAPH, None, origin, time.time()), ev,
                        key=key or f"k{i}", fingerprint=None, seconds=1.0,
                        join_population=10 if status == "valid" else None)


def make_store(run, n=12):
    with Store(run) as s:
        s.set_config({"scores": ARCHS, "evolution": {"window": 10},
                      "task": {"archs": ARCHS, "dataset": "synthetic"}})
        s.set_meta("status", "running")
        for i in range(n):
            if i % 3 == 0:
                add(s, i, "rejected", {ARCHS[0]: 0.1}, f"quality:{ARCHS[0]}")
            elif i % 5 == 0:
                add(s, i, "rejected", reason="error: ValueError: bad")
            else:
                add(s, i, "valid", {ARCHS[0]: 0.3 + i / 50, ARCHS[1]: 0.5 - i / 60}, key=f"k{i % 4}")


def images(page):
    return [base64.b64decode(m) for m in re.findall(r'<figure id="[^"]+"><img alt="[^"]*" src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)]


def test_report_from_a_store(tmp_path):
    run = tmp_path / "run"
    make_store(run)
    (run / "references.json").write_text(json.dumps({"bn_relu": {ARCHS[0]: 0.6, ARCHS[1]: 0.55}}))
    assert cli_main(["report", str(run)]) == 0
    page = (run / "report.html").read_text()
    assert len(images(page)) == 5 and all(p.startswith(PNG) for p in images(page))
    assert sorted(p.name for p in (run / "report").glob("*.png")) == [
        "accuracy_histogram.png", "calibration.png", "pareto.png", "rejections.png", "search_progress.png"]
    top = page.split("Top layers of run", 1)[1].split("</table>", 1)[0]
    assert top.count("<tr>") == 1 + 1  # 4 distinct valid keys, one graph: one row with 4 spellings
    assert "bn_relu" in page and "error" in page and "quality:resnet50_cifar" in page
    data = load_run(run)
    assert data.status == "running" and data.in_flight == 0 and len(data.population) == 6


def test_compare_and_out(tmp_path):
    make_store(tmp_path / "a")
    make_store(tmp_path / "b", n=20)
    out = tmp_path / "cmp"
    assert cli_main(["report", str(tmp_path / "a"), "--compare", str(tmp_path / "b"), "--out", str(out)]) == 0
    page = (out / "report.html").read_text()
    assert "Top layers of a" in page and "Top layers of b" in page
    assert not (tmp_path / "a" / "report.html").exists()


def test_report_while_a_writer_holds_a_transaction(tmp_path):
    run = tmp_path / "run"
    make_store(run, n=6)
    with Store(run) as s:
        s.add_proposal(GRAPH, None, "random", [3, [0], None])  # handed to a worker, unfinished
    writer = sqlite3.connect(run / "store.sqlite", timeout=1)
    writer.execute("BEGIN IMMEDIATE")  # a search in the middle of recording a result
    writer.execute("INSERT INTO meta VALUES ('x', '1')")
    try:
        page = write_report([run]).read_text()
        data = load_run(run)
    finally:
        writer.rollback()
        writer.close()
    assert len(images(page)) == 5
    assert len(data.candidates) == 6 and data.in_flight == 1
    assert "<td>running</td>" in page


def test_store_without_candidates_or_config(tmp_path):
    run = tmp_path / "run"
    Store(run).close()  # a search that has only created its store
    page = write_report([run]).read_text()
    assert len(images(page)) == 5 and "No valid layer yet" in page


def test_report_of_a_driver_written_store(tmp_path):
    """The real driver, store, graphs and mutation; training replaced by a deterministic fake."""
    from _search_fakes import fake_objective
    from evonorm.search.driver import init_run, run_search
    from evonorm.proxy.presets import get_preset

    run = tmp_path / "fake"
    init_run(run, get_preset("tiny", workers=1, budget=30, initial_population=3))
    run_search(run, objective=fake_objective, progress=False)
    page = write_report([run]).read_text()
    data = load_run(run)
    assert len(data.candidates) == 30 and data.valid and data.population
    assert len(images(page)) == 5 and "No valid layer yet" not in page
    top = page.split("Top layers of fake", 1)[1].split("</table>", 1)[0]
    assert top.count('<code class="formula">') == min(10, len({c.key for c in data.valid}))


@pytest.mark.slow
def test_tiny_real_search_report(tmp_path):
    from evonorm.proxy.objective import ProxyObjective
    from evonorm.search.driver import init_run, run_search
    from evonorm.proxy.presets import get_preset

    run = tmp_path / "tiny"
    init_run(run, get_preset("tiny", workers=1, executor="local"))
    run_search(run, objective=ProxyObjective.for_run(get_preset("tiny", workers=1)), progress=False)
    page = write_report([run]).read_text()
    data = load_run(run)
    assert len(data.candidates) == data.part("evolution")["budget"] and len(images(page)) == 5
    if data.valid:
        assert "No valid layer yet" not in page


@pytest.mark.slow
def test_references_are_trained_once_with_the_runs_settings(tmp_path, capsys):
    from evonorm.search.driver import init_run
    from evonorm.proxy.presets import get_preset

    run = tmp_path / "refs"
    init_run(run, get_preset("tiny"))
    assert cli_main(["retrain", str(run), "--seeds", "0", "--references", "gn_relu"]) == 0
    refs = json.loads((run / "references.json").read_text())
    assert set(refs) == {"gn_relu"} and set(refs["gn_relu"]) == set(stored_task(get_preset("tiny")).archs)
    assert "references [1/1] gn_relu: " in capsys.readouterr().out  # trained: a line when done
    assert cli_main(["report", str(run)]) == 0
    assert "gn_relu" in (run / "report.html").read_text()
    capsys.readouterr()
    assert cli_main(["retrain", str(run), "--seeds", "0", "--references", "gn_relu"]) == 0  # kept
    assert "gn_relu" not in capsys.readouterr().out
