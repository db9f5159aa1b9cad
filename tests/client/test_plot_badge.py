"""The "SYNTHETIC DATA" badge of a chart stays clear of its title (issue 50: it covered
the end of the accuracy chart's title), measured on matplotlib's own boxes."""

import pytest

pytest.importorskip("matplotlib")

from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402

from mlbench_worker.shared import plots  # noqa: E402
from tests.client.test_plots import TARGET, stats  # noqa: E402


def _boxes(chart: str, title: str = ""):
    fig, _ = plots.figure(chart, stats(), title)
    canvas = FigureCanvasAgg(fig)  # what savefig draws a PNG with
    canvas.draw()  # lays the figure out
    renderer = canvas.get_renderer()
    [badge] = [t for t in fig.texts if t.get_gid() == "synthetic-badge"]
    title_box = fig._suptitle.get_window_extent(renderer)
    badge_box = badge.get_bbox_patch().get_window_extent(renderer)
    axes = [ax.get_tightbbox(renderer) for ax in fig.axes]
    return title_box, badge_box, axes, fig.bbox


@pytest.mark.parametrize("chart", ["accuracy", "time-split", "speedup"])
@pytest.mark.parametrize("title", ["", "a rather long title that a user gave their series"])
def test_the_badge_overlaps_neither_the_title_nor_the_axes(chart, title):
    assert TARGET["synthetic"]
    title_box, badge_box, axes, page = _boxes(chart, title)
    assert not badge_box.overlaps(title_box), (badge_box, title_box)
    for box in axes:
        assert not badge_box.overlaps(box), (badge_box, box)
    assert page.x0 <= badge_box.x0 and badge_box.x1 <= page.x1
    assert page.y0 <= badge_box.y0 and badge_box.y1 <= page.y1
