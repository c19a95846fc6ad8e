"""Figures a reader can trust: the scale of a change shown, wild values marked rather than setting
an axis, legends beside the data, readable log ticks, only what applies to the run's objective,
and a page of figures side by side (a screenshot in headless Chromium)."""

import io
import shutil
import subprocess

import pytest

pytest.importorskip("matplotlib", reason="reports need the optional `plots` extra")

from evonorm.report import make_figures  # noqa: E402
from evonorm.report.data import RunData  # noqa: E402
from evonorm.report.figures import (accuracy_histogram, calibration, pareto,  # noqa: E402
                                    progress_curve, search_progress)
from evonorm.report.html import render_page  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
OWN = {"objective": "mine:objective", "scores": ["acc", "speed"], "evolution": {"window": 20}}


def valid(i, fitness, **scores):
    return {"id": i, "status": "valid", "fitness": fitness, "scores": scores or {"r": fitness},
            "origin": "random"}


def rejected(i):
    return {"id": i, "status": "rejected", "reason": "stability", "origin": "random"}


def texts(fig):
    return " ".join(t.get_text() for ax in [fig, *fig.axes] for t in ax.texts)


def test_progress_spans_the_search_and_its_axis_shows_the_scale_of_the_change():
    # two layers 0.0005 apart, then 58 rejections: as the demo search's 0.6135 and 0.6140
    cands = [valid(1, 0.6135), valid(2, 0.6140)] + [rejected(i) for i in range(3, 61)]
    run = RunData("demo", cands, config={"evolution": {"window": 20}})
    xs, best, means, _ = progress_curve(run, top=10, floor=0.1)
    assert xs == [1, 2, 60] and best == [0.6135, 0.6140, 0.6140]  # to the last candidate
    # the top-10 mean from the first layer on, the missing ones at chance: it never falls
    assert means[0] == pytest.approx((0.6135 + 9 * 0.1) / 10) and means[1] > means[0]
    ax = search_progress([run]).axes[0]
    lo, hi = ax.get_ylim()
    assert hi - lo >= 0.1  # ten points of accuracy, not 0.0005 filling the plot
    assert ax.get_xlim()[1] >= 60
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "demo: best (0.6135 to 0.614, +0.0005)" in labels
    assert "demo: top-10 mean, missing at chance" in labels


def test_one_wild_score_neither_flattens_the_pareto_plot_nor_hides():
    cands = [valid(i, 0.5, acc=0.6 + i / 1000, speed=0.3 + (i % 7) / 100) for i in range(1, 20)]
    cands.append(valid(20, -8.5e19, acc=-1.7e20, speed=0.4))
    fig = pareto(RunData("own", cands, config=OWN))
    ax = fig.axes[0]
    assert ax.get_xlim()[0] > 0.5  # the bulk of the layers sets the axis
    assert "1 layer beyond the axes" in texts(fig) and "acc -1.7e+20, speed 0.4" in texts(fig)
    edge = [c for c in ax.collections if c.get_offsets().shape[0] == 1 and not c.get_clip_on()]
    assert edge and edge[0].get_offsets()[0][0] == pytest.approx(ax.get_xlim()[0])
    # an own objective's names are scores, not architectures
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any(t.startswith("Pareto front over 2 scores") for t in labels), labels
    assert not any("arch" in t for t in labels)


def _legend_off_the_axes(fig):
    fig.canvas.draw()
    for ax in fig.axes:
        if ax.get_legend() is not None:
            box, axes = ax.get_legend().get_window_extent(), ax.get_window_extent()
            assert box.x0 >= axes.x1 or box.y1 <= axes.y0, "the legend covers the data"
            return True
    return False


def test_legends_are_off_the_data():
    cands = [valid(i, 0.5 + i / 100, a=0.2 + i / 50, b=0.9 - i / 50) for i in range(1, 15)]
    run = RunData("r", cands, config={"task": {"archs": ["a", "b"]}, "evolution": {}},
                  references={"bn_relu": {"a": 0.5, "b": 0.5}})
    for fig in (search_progress([run]), pareto(run), accuracy_histogram(cands, ["a", "b"]),
                calibration(cands, ["a", "b"], references=run.references)):
        assert _legend_off_the_axes(fig)


def test_the_histograms_log_axis_has_ticks_between_the_powers_of_ten():
    cands = [valid(i, 0.5, a=0.1 if i < 30 else 0.5 + i / 200) for i in range(60)]
    ax = accuracy_histogram(cands, ["a"]).axes[0]
    ticks = [t for t in ax.get_yticks() if ax.get_ylim()[0] <= t <= ax.get_ylim()[1]]
    assert ticks == [1, 2, 5, 10, 20], ticks
    assert [t.get_text() for t in ax.get_yticklabels()][:5] == ["1", "2", "5", "10", "20"]


def test_the_calibration_title_says_when_no_correlation_is_defined():
    cands = [valid(1, 0.5, a=0.5, b=0.6)]
    title = calibration(cands, ["a", "b"]).axes[0].get_title()
    assert "r=-" not in title and "n=1, no correlation defined" in title


def test_an_own_objectives_page_shows_only_what_applies_to_it():
    cands = [valid(i, 0.5, acc=0.6 + i / 1000, speed=0.3) for i in range(1, 6)]
    run = RunData("own", cands, config=OWN)
    page = render_page([run], make_figures([run]))
    assert "<th>scores</th>" in page and "<th>architectures</th>" not in page
    # re-training, references and reranking are the built-in task's: their commands exit 2 here
    for command in ("evonorm retrain", "evonorm rerank", "--references", "Reranking"):
        assert command not in page, command


def _solid_png(rgb, size=(480, 640)):
    import matplotlib.image
    import numpy as np

    buf = io.BytesIO()
    matplotlib.image.imsave(buf, np.full((*size, 3), rgb, dtype=np.uint8), format="png")
    return buf.getvalue()


COLOURS = [(230, 20, 20), (20, 200, 20), (20, 20, 230), (230, 200, 0), (200, 0, 200)]


@pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium: apt-get install chromium "
                                             "(scripts/test.sh installs it where it can)")
def test_the_page_lays_its_figures_side_by_side_in_a_browser(tmp_path):
    import matplotlib.image
    import numpy as np

    figures = [(f"f{i}", f"figure {i}", _solid_png(c)) for i, c in enumerate(COLOURS)]
    (tmp_path / "page.html").write_text(render_page([RunData("r")], figures))
    shot = tmp_path / "shot.png"
    subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                    "--no-first-run", "--disable-background-networking", "--disable-component-update",
                    "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}",
                    "--hide-scrollbars", "--window-size=1400,3000", f"--screenshot={shot}",
                    (tmp_path / "page.html").as_uri()], check=True, capture_output=True, timeout=120)
    pixels = (matplotlib.image.imread(shot)[..., :3] * 255).astype(int)
    boxes = []
    for rgb in COLOURS:
        ys, xs = np.nonzero((np.abs(pixels - rgb) < 12).all(axis=-1))
        assert ys.size, f"figure {rgb} not on the page"
        boxes.append((ys.min(), ys.max(), xs.min(), xs.max()))
    # each figure wide enough to read, and beside another: two columns, not one long one
    assert all(x1 - x0 >= 500 for _, _, x0, x1 in boxes), boxes
    rows = {y0 // 20 for y0, *_ in boxes}
    assert len(rows) <= 3, boxes
    first, second = boxes[0], boxes[1]
    assert abs(first[0] - second[0]) < 20 and second[2] > first[3], boxes
    height = max(y1 for _, y1, _, _ in boxes) - min(y0 for y0, *_ in boxes)
    assert height < 0.7 * sum(y1 - y0 for y0, y1, _, _ in boxes), boxes
