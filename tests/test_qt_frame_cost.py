"""A cheaper frame, same picture: what a frame keeps from the one before is what a fresh
drawing of the same data would draw.

Steps here are SIMULATED (jittered synthetic marks, as in ``tests/test_timeline_bins.py``).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from jittered_steps import MS, ORIGIN, marks

from gpuwatch.core.figures.frame import TimelineFrame, dense_lanes
from gpuwatch.core.figures.timeline_bins import TimelineBins
from gpuwatch.core.model.store import StepStore
from gpuwatch.qt.dense_lanes import ScrollingColumns


def timeline(qtbot):
    from gpuwatch.qt.timeline_view import TimelineView

    view = TimelineView()
    qtbot.addWidget(view)
    view.resize(700, 360)
    view.show()
    qtbot.waitExposed(view)
    return view


def test_a_followed_dense_view_renders_only_new_columns_and_matches_a_fresh_drawing(qtbot):
    """Following a 1,000 steps/s run (2 s visible, the right edge on a whole pixel as the
    window puts it): each frame renders only the columns whose data changed, and its pixels
    are those of a fresh view drawing the same frame."""
    followed, fresh = timeline(qtbot), timeline(qtbot)
    width = followed.width_px()
    assert width == fresh.width_px()
    store = StepStore()
    store.set_device_is_host(True)
    bins = TimelineBins()
    host = marks(6000, 1 * MS)
    window_s = 2.0
    px_s = window_s / width
    rendered = []
    for frame, lo in enumerate(range(0, len(host), 60)):  # a batch per frame
        ids = list(range(lo, lo + 60))
        store.append(ids, [0] * 60, [8] * 60, host[ids].tolist())
        hi_s = math.ceil(((int(host[ids[-1], -1]) - ORIGIN) / 1e9) / px_s) * px_s
        lo_ns, hi_ns = ORIGIN + int((hi_s - window_s) * 1e9), ORIGIN + int(hi_s * 1e9)
        bins.update(store, (), ORIGIN, lo_ns=lo_ns, hi_ns=hi_ns, px_ns=(hi_ns - lo_ns) / width)
        lanes, shown = dense_lanes(bins.columns(lo_ns, hi_ns, int(np.ceil(width))))
        shown_frame = TimelineFrame(
            ORIGIN, lo_ns, hi_ns, width, "cpu", dense=lanes, causes_shown=shown
        )
        followed.show_frame(shown_frame)
        if hi_s <= window_s or frame % 10:
            continue  # the view is full from here on; compare every 10th frame
        rendered.append(followed.dense_pixels.last_rendered)
        fresh.dense_pixels = ScrollingColumns()  # nothing kept: every column rendered
        fresh.show_frame(shown_frame)
        assert fresh.dense_pixels.last_rendered == followed.dense_lanes.pixels.shape[1]
        np.testing.assert_array_equal(followed.dense_lanes.pixels, fresh.dense_lanes.pixels)
    assert len(rendered) >= 5
    # A batch of 60 ms is ~21 columns of ~2.9 ms: a few more re-rendered, never the view.
    assert max(rendered) < 0.1 * width, rendered


def test_scrolling_columns_keep_only_unchanged_columns_on_the_same_grid() -> None:
    """Kept: a column whose inputs are the same at the same place in time. Rendered: a
    changed or new column, and every column after a move off the column grid."""
    calls: list[list[int]] = []

    def render_columns(index: np.ndarray) -> np.ndarray:
        calls.append(index.tolist())
        return np.tile(np.asarray(index, np.uint32) + 100 * len(calls), (3, 1))

    cache = ScrollingColumns()
    inputs = np.arange(12, dtype=np.float64).reshape(2, 6)
    first = cache.pixels(("k",), 1000.0, 10.0, inputs, render_columns)
    assert calls == [[0, 1, 2, 3, 4, 5]]
    # Two columns on, the last two new and one old column changed.
    moved = np.hstack([inputs[:, 2:], [[50.0, 51.0], [60.0, 61.0]]])
    moved[1, 1] += 0.5
    second = cache.pixels(("k",), 1020.0, 10.0, moved, render_columns)
    assert calls[-1] == [1, 4, 5]
    np.testing.assert_array_equal(second[:, [0, 2, 3]], first[:, [2, 4, 5]])
    # Half a column off the grid, or another key: everything again.
    cache.pixels(("k",), 1025.0, 10.0, moved, render_columns)
    assert calls[-1] == list(range(6))
    cache.pixels(("other",), 1025.0, 10.0, moved, render_columns)
    assert calls[-1] == list(range(6)) and cache.last_rendered == 6
    # Panned back left by one column: the overlap is kept, the new first column rendered.
    cache.pixels(
        ("other",), 1015.0, 10.0, np.hstack([[[9.0], [9.0]], moved[:, :-1]]), render_columns
    )
    assert calls[-1] == [0]


def _pixels(widget) -> np.ndarray:
    """The widget as drawn: (rows, columns) of packed pixels."""
    image = widget.grab().toImage()
    bits = np.frombuffer(image.constBits(), np.uint32)[: image.sizeInBytes() // 4]
    return bits.reshape(image.height(), image.bytesPerLine() // 4)[:, : image.width()].copy()


def assert_same_within_a_column(ours: np.ndarray, theirs: np.ndarray, what: str) -> None:
    """Every pixel of ``ours`` is in ``theirs`` at the same place or one column aside: a
    line on a pixel boundary falls on either side of it by a rounding error of the range."""
    assert ours.shape == theirs.shape
    rows, cols = np.nonzero(ours != theirs)
    for r, c in zip(rows, cols, strict=True):
        near = theirs[r, max(c - 1, 0) : c + 2]
        assert (near == ours[r, c]).any(), f"{what}: pixel ({r}, {c}) not within a column"
    assert len(rows) <= 0.001 * ours.size, f"{what}: {len(rows)} pixels differ"


@pytest.mark.parametrize(("width", "px_per_frame"), [(900, 5), (1234, 3)])
def test_the_scrolling_time_axis_draws_what_pyqtgraphs_axis_draws(qtbot, width, px_per_frame):
    """Scrolled by whole pixels, the time axis moves its recorded ticks instead of laying
    them out and recording them anew (ticks and labels coming and going at its ends
    included), and looks exactly like pyqtgraph's own axis; a zoom records them again."""
    import pyqtgraph as pg

    from gpuwatch.qt.time_axis import TimeAxis
    from gpuwatch.qt.timeline_view import style_plot

    ours = pg.PlotWidget(axisItems={"bottom": TimeAxis()})
    theirs = pg.PlotWidget()
    for plot in (ours, theirs):
        qtbot.addWidget(plot)
        style_plot(plot)
        plot.resize(width, 200)
        plot.show()
        qtbot.waitExposed(plot)
    axis = ours.getPlotItem().getAxis("bottom")
    assert isinstance(axis, TimeAxis)
    frames = 40
    for frame in range(frames):
        width = ours.getPlotItem().getViewBox().width()
        px_s = 30.0 / width
        lo = 100 * px_s + frame * px_per_frame * px_s  # whole pixels a frame
        for plot in (ours, theirs):
            plot.getPlotItem().getViewBox().setXRange(lo, lo + 30.0, padding=0)
        assert_same_within_a_column(_pixels(ours), _pixels(theirs), f"frame {frame}")
    # A tick every ~25 px, a few pixels a frame: one comes or goes every few frames only, and
    # only then are the ticks laid out again.
    assert 1 <= axis.recorded <= frames // 2, axis.recorded
    assert axis.recorded <= axis.laid_out <= frames // 2, axis.laid_out
    before = axis.recorded
    for plot in (ours, theirs):
        plot.getPlotItem().getViewBox().setXRange(0.0, 7.0, padding=0)
    assert_same_within_a_column(_pixels(ours), _pixels(theirs), "zoomed")
    assert axis.recorded == before + 1


def test_the_time_axis_draws_what_pyqtgraphs_axis_draws_through_strides_and_small_moves(qtbot):
    """A followed view moves in strides (new tick values each time: a new layout, its ends
    not measured for a comparison that cannot match) and a user's pan by a few pixels (the
    same tick values: the layout is moved once its ends are measured): both look exactly
    like pyqtgraph's own axis."""
    import pyqtgraph as pg

    from gpuwatch.qt.time_axis import TimeAxis
    from gpuwatch.qt.timeline_view import style_plot

    ours = pg.PlotWidget(axisItems={"bottom": TimeAxis()})
    theirs = pg.PlotWidget()
    for plot in (ours, theirs):
        qtbot.addWidget(plot)
        style_plot(plot)
        plot.resize(1500, 200)
        plot.show()
        qtbot.waitExposed(plot)
    axis = ours.getPlotItem().getAxis("bottom")
    assert isinstance(axis, TimeAxis)
    lo_px = 100
    for frame in range(24):
        lo_px += 50 if frame % 4 == 0 else 2  # a stride, then a few small moves
        px_s = 30.0 / ours.getPlotItem().getViewBox().width()
        for plot in (ours, theirs):
            plot.getPlotItem().getViewBox().setXRange(lo_px * px_s, lo_px * px_s + 30.0, padding=0)
        assert_same_within_a_column(_pixels(ours), _pixels(theirs), f"frame {frame}")
    assert axis.laid_out < 24, "small moves between strides move the layout"


def test_the_time_axis_draws_its_labels_only_where_they_are_exposed(qtbot):
    """A plot repainting a strip along its bottom edge exposes the tick marks that reach up
    into it, not the labels below: the axis draws the marks there and leaves the labels'
    text, the most of what it costs to paint, for a paint that reaches them."""
    import pyqtgraph as pg
    from PySide6.QtCore import QRectF
    from PySide6.QtGui import QImage, QPainter, QPicture
    from PySide6.QtWidgets import QStyleOptionGraphicsItem

    from gpuwatch.qt.time_axis import TimeAxis
    from gpuwatch.qt.timeline_view import style_plot

    plot = pg.PlotWidget(axisItems={"bottom": TimeAxis()})
    qtbot.addWidget(plot)
    style_plot(plot)
    plot.resize(900, 200)
    plot.show()
    qtbot.waitExposed(plot)
    plot.getPlotItem().getViewBox().setXRange(10.0, 40.0, padding=0)
    axis = plot.getPlotItem().getAxis("bottom")
    plot.grab()  # laid out and recorded
    ticks = axis._ticks
    assert ticks is not None and ticks.labels_top > axis.boundingRect().top()

    played: list[str] = []

    class Counted(QPicture):
        def __init__(self, picture: QPicture, name: str) -> None:
            super().__init__(picture)
            self.name = name

        def play(self, painter: QPainter) -> bool:
            played.append(self.name)
            return super().play(painter)

    axis._ticks = dataclasses.replace(
        ticks, marks=Counted(ticks.marks, "marks"), labels=Counted(ticks.labels, "labels")
    )
    bounds = axis.boundingRect()
    image = QImage(int(bounds.width()) + 1, int(bounds.height()) + 1, QImage.Format.Format_ARGB32)
    option = QStyleOptionGraphicsItem()
    for exposed, expected in (
        (QRectF(bounds.left(), bounds.top(), bounds.width(), 3.0), ["marks"]),
        (bounds, ["marks", "labels"]),
    ):
        option.exposedRect = exposed
        painter = QPainter(image)
        painter.translate(-bounds.topLeft())
        try:
            axis.paint(painter, option, None)
        finally:
            painter.end()
        assert played == expected, exposed
        played.clear()
