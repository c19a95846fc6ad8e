"""Report figures and the HTML page from hand-made candidate records (no store, no training)."""

import base64
import random
import re
import sys

import pytest

pytest.importorskip("matplotlib", reason="reports need the optional `plots` extra")

from evonorm.cli import main as cli_main  # noqa: E402
from evonorm.report import build_report, make_figures  # noqa: E402
from evonorm.report.data import RunData, reason_category  # noqa: E402
from evonorm.search.candidates import top_layers  # noqa: E402
from evonorm.report.figures import progress_curve, random_accuracies  # noqa: E402

ARCHS = ["resnet50_cifar", "mobilenetv2_cifar", "efficientnet_b0_cifar"]
B0 = {"nodes": [["instance_std", 0], ["mul", 3, 0], ["add", 5, 4], ["batch_std", 0],
                ["max", 7, 6], ["div", 0, 8]]}
PNG = b"\x89PNG\r\n\x1a\n"


def fake_candidates(n=60, seed=0):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        status = ["valid", "rejected", "rejected", "failed"][i % 4]
        acc = {a: rng.uniform(0.2, 0.9) for a in ARCHS} if status == "valid" else {ARCHS[0]: 0.1}
        if status == "failed":
            acc = {}
        out.append({"id": i, "graph": B0, "key": f"k{i % 7}", "origin": "random" if i % 2 else "mutation",
                    "status": status,
                    "reason": {"valid": None, "rejected": f"quality:{ARCHS[0]}", "failed": "error: boom"}[status],
                    "scores": acc, "fitness": sum(acc.values()) / 3 if status == "valid" else None,
                    "seconds": 1.5})
    out.append({"id": n, "status": "pending"})  # an evaluation still in flight
    return out


def embedded_pngs(page: str) -> list[bytes]:
    return [base64.b64decode(m) for m in re.findall(r'<figure id="[^"]+"><img alt="[^"]*" src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)]


def test_page_embeds_every_figure_and_fills_tables(tmp_path):
    runs = [RunData("evo", fake_candidates(), population=list(range(20, 60)), config={"scores": ARCHS},
                    references={"bn_relu": {a: 0.8 for a in ARCHS}}),
            RunData("rs", fake_candidates(seed=1), config={"scores": ARCHS})]
    page = build_report(runs, tmp_path)
    html = page.read_text()
    pngs = embedded_pngs(html)
    assert len(pngs) == 5 and all(p.startswith(PNG) and len(p) > 2000 for p in pngs)
    for stem in ("search_progress", "accuracy_histogram", "calibration", "pareto", "rejections"):
        assert (tmp_path / "report" / f"{stem}.png").read_bytes().startswith(PNG)
    assert "<script" not in html and "http" not in html.split("<body>", 1)[1]  # self-contained
    top = html.split("Top layers of evo", 1)[1].split("</table>", 1)[0]
    # the valid candidates have 7 keys (i%4==0 -> i%7 takes all 7) but one graph: one row, 7 spellings
    assert top.count("<tr>") == 1 + 1 and '<td class="num">7</td>' in top
    assert "quality:resnet50_cifar" in html and "bn_relu" in html
    formulas = re.findall(r'<img class="formula" alt="([^"]*)" src="data:image/png;base64,([A-Za-z0-9+/=]+)"', top)
    assert len(formulas) == 1 and all(base64.b64decode(b).startswith(PNG) for _, b in formulas)
    assert "x / max(sqrt(s^2_{b,w,h}(x))" in formulas[0][0]  # EvoNorm-B0's formula as alt text
    assert not list(tmp_path.glob("**/*.tmp"))


def test_empty_run_still_gives_a_page_that_says_so(tmp_path):
    page = build_report([RunData("fresh")], tmp_path)
    html = page.read_text()
    assert len(embedded_pngs(html)) == 5
    assert "No valid layer yet" in html


def test_top_layers_groups_by_key_and_counts_how_often_found():
    cands = [{"id": 0, "key": "a", "status": "valid", "fitness": 0.5, "scores": {"r": 0.5}},
             {"id": 1, "key": "a", "status": "valid", "fitness": 0.7, "scores": {"r": 0.7}},
             {"id": 2, "key": "a", "status": "rejected", "reason": "stability"},
             {"id": 3, "key": "b", "status": "valid", "fitness": 0.6, "scores": {"r": 0.6}},
             {"id": 4, "key": "c", "status": "failed", "reason": "nonfinite"}]
    rows = top_layers(cands)
    assert [(r.key, r.found, r.best.id) for r in rows] == [("a", 3, 1), ("b", 1, 3)]


def test_progress_curve_is_the_best_so_far_and_never_falls():
    cands = [{"id": i, "status": "valid", "fitness": f, "scores": {}} for i, f in
             enumerate([0.9, 0.1, 0.2, 0.95, 0.3])] + [{"id": 9, "status": "rejected"}]
    xs, b, m, s = progress_curve(RunData("r", cands), top=2, floor=0.0)
    # to the last candidate evaluated, the rejected one included
    assert xs == [1, 2, 3, 4, 5, 6] and b == [0.9, 0.9, 0.9, 0.95, 0.95, 0.95]
    # the top-2 mean over all layers so far (the population window ages layers out; the best so
    # far does not fall), the missing one at the floor until two exist
    assert m == pytest.approx([0.45, 0.5, 0.55, 0.925, 0.925, 0.925])
    assert s[1] == pytest.approx(0.4) and s[0] == pytest.approx(0.45)
    same = progress_curve(RunData("r", cands, config={"evolution": {"window": 2}}), top=2, floor=0.0)
    assert same[2] == m
    assert all(a <= b for a, b in zip(m, m[1:])) and all(a <= b for a, b in zip(b, b[1:]))
    # without a floor (an own objective's scores): the mean of those there are
    assert progress_curve(RunData("r", cands), top=2)[2][0] == pytest.approx(0.9)


def test_failures_count_at_chance_and_reasons_are_grouped():
    cands = [{"id": 0, "status": "failed", "reason": "error: ValueError: x", "origin": "random"},
             {"id": 1, "status": "rejected", "reason": "quality:m", "origin": "random",
              "scores": {"r": 0.3}},
             {"id": 2, "status": "valid", "origin": "mutation", "fitness": 0.5,
              "scores": {"r": 0.5, "m": 0.5}}]
    acc = random_accuracies(cands, ["r", "m"], 0.1)
    assert acc == {"r": [0.1, 0.3], "m": [0.1, 0.1]}
    from evonorm.report.data import as_candidate
    assert [reason_category(as_candidate(c)) for c in cands] == ["error", "quality:m", "valid"]


def test_figures_accept_runs_without_architectures():
    figs = make_figures([RunData("x", [{"id": 0, "status": "failed", "reason": "nonfinite"}])])
    assert [f[0] for f in figs] == ["search_progress", "accuracy_histogram", "calibration",
                                   "pareto", "rejections"]


def test_command_errors_are_one_line_exit_2(tmp_path, capsys):
    assert cli_main(["report", str(tmp_path / "missing")]) == 2
    assert "no such run" in capsys.readouterr().err
    assert cli_main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "store.sqlite" in err and err.count("\n") == 1


def test_missing_matplotlib_is_a_clear_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert cli_main(["report", str(tmp_path)]) == 2
    assert "pip install -e '.[plots]' in the evonorm clone" in capsys.readouterr().err


def test_figures_say_what_they_show():
    from evonorm.report.figures import accuracy_histogram, calibration, search_progress

    cands = [{"id": i, "status": "valid", "origin": "random", "fitness": 0.5,
              "scores": {ARCHS[0]: 0.2 + i / 100, ARCHS[1]: 0.3 + i / 90}} for i in range(30)]
    ax = accuracy_histogram(cands, ARCHS[:2]).axes[0]
    bars = [(round(p.get_x(), 6), round(p.get_x() + p.get_width(), 6)) for p in ax.patches if p.get_height() > 0]
    assert len(bars) >= 2 and all(a[1] <= b[0] or b[1] <= a[0] for i, a in enumerate(bars) for b in bars[i + 1:])
    fig = calibration(cands, ARCHS[:2])
    assert "above chance: n=30, r=1.00" in fig.axes[0].get_title()
    run = RunData("evo", cands, config={"scores": ARCHS[:2], "evolution": {"window": 16}})
    texts = " ".join(t.get_text() for t in search_progress([run]).texts)
    assert "line: mean fitness of the 10 best so far, band" in texts
    assert "mean held-out accuracy over the architectures" in texts
