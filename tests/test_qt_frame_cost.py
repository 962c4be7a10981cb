"""A cheaper frame, same picture: what a frame keeps from the one before is what a fresh
drawing of the same data would draw.

Steps here are SIMULATED (jittered synthetic marks, as in ``tests/test_timeline_bins.py``).
"""

from __future__ import annotations

import math

import numpy as np

from gpuwatch.core.figures.frame import TimelineFrame, dense_lanes
from gpuwatch.core.figures.timeline_bins import TimelineBins
from gpuwatch.core.model.store import StepStore
from gpuwatch.protocol import N_MARKS
from gpuwatch.qt.dense_lanes import ScrollingColumns

MS = 1_000_000
ORIGIN = 10_000 * MS
SHARES = np.array([0.30, 0.05, 0.20, 0.30, 0.10, 0.04, 0.01])


def marks(n: int, step_ns: float, seed: int = 0) -> np.ndarray:
    """Host marks of ``n`` consecutive jittered steps from ``ORIGIN``."""
    rng = np.random.default_rng(seed)
    lengths = np.maximum((step_ns * SHARES * rng.uniform(0.5, 1.5, (n, 7))).astype(np.int64), 1)
    ends = ORIGIN + np.cumsum(lengths.sum(axis=1))
    starts = np.concatenate(([ORIGIN], ends[:-1]))
    out = np.empty((n, N_MARKS), np.int64)
    out[:, 0] = starts
    out[:, 1:] = starts[:, None] + np.cumsum(lengths[:, :-1], axis=1)
    return out


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
    window puts it): each frame renders and paints only the columns whose data changed; its
    pixels are those of a fresh view drawing the same frame, and it looks as the image
    painted by pyqtgraph does."""
    followed, fresh = timeline(qtbot), timeline(qtbot)
    unrasterized(fresh)
    width = followed.width_px()
    assert width == fresh.width_px()
    store = StepStore()
    store.set_device_is_host(True)
    bins = TimelineBins()
    host = marks(6000, 1 * MS)
    window_s = 2.0
    px_s = window_s / width
    rendered, painted = [], []
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
        followed.getPlotItem().getViewBox().setXRange(hi_s - window_s, hi_s, padding=0)
        followed.show_frame(shown_frame)
        got = _pixels(followed)  # a paint a frame, as the window's
        if hi_s <= window_s:
            continue  # the view is full from here on
        rendered.append(followed.dense_pixels.last_rendered)
        painted.append(followed.lane_raster.painted_columns)
        if frame % 10:
            continue
        fresh.dense_pixels = ScrollingColumns()  # nothing kept: every column rendered
        fresh.getPlotItem().getViewBox().setXRange(hi_s - window_s, hi_s, padding=0)
        fresh.show_frame(shown_frame)
        assert fresh.dense_pixels.last_rendered == followed.dense_lanes.pixels.shape[1]
        np.testing.assert_array_equal(followed.dense_lanes.pixels, fresh.dense_lanes.pixels)
        assert_close_within_a_column(got, _pixels(fresh), f"frame {frame}")
    assert len(rendered) >= 50
    # A batch of 60 ms is ~21 columns of ~3.6 ms: a few more re-rendered, never the view.
    assert max(rendered) < 0.1 * width, rendered
    assert max(painted) < 0.1 * width, painted


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


def test_the_scrolling_time_axis_draws_what_pyqtgraphs_axis_draws(qtbot):
    """Scrolled by whole pixels, the time axis moves its recorded ticks instead of laying
    them out and recording them anew, and looks exactly like pyqtgraph's own axis; a zoom
    records them again."""
    import pyqtgraph as pg

    from gpuwatch.qt.time_axis import TimeAxis
    from gpuwatch.qt.timeline_view import style_plot

    ours = pg.PlotWidget(axisItems={"bottom": TimeAxis()})
    theirs = pg.PlotWidget()
    for plot in (ours, theirs):
        qtbot.addWidget(plot)
        style_plot(plot)
        plot.resize(900, 200)
        plot.show()
        qtbot.waitExposed(plot)
    axis = ours.getPlotItem().getAxis("bottom")
    assert isinstance(axis, TimeAxis)
    frames = 40
    for frame in range(frames):
        width = ours.getPlotItem().getViewBox().width()
        px_s = 30.0 / width
        lo = 100 * px_s + frame * 5 * px_s  # five whole pixels a frame
        for plot in (ours, theirs):
            plot.getPlotItem().getViewBox().setXRange(lo, lo + 30.0, padding=0)
        assert_same_within_a_column(_pixels(ours), _pixels(theirs), f"frame {frame}")
    # A tick every ~25 px, five pixels a frame: one comes or goes every few frames only.
    assert 1 <= axis.recorded <= frames // 2, axis.recorded
    before = axis.recorded
    for plot in (ours, theirs):
        plot.getPlotItem().getViewBox().setXRange(0.0, 7.0, padding=0)
    assert_same_within_a_column(_pixels(ours), _pixels(theirs), "zoomed")
    assert axis.recorded == before + 1


def unrasterized(view) -> None:
    """``view`` painting its bars one item at a time, as pyqtgraph does (the reference)."""
    from PySide6.QtWidgets import QGraphicsItem

    for bars in view.lane_raster.items:
        bars.raster = None
        bars.setFlag(QGraphicsItem.GraphicsItemFlag.ItemHasNoContents, False)
    view.removeItem(view.lane_raster)


def assert_close_within_a_column(ours: np.ndarray, theirs: np.ndarray, what: str) -> None:
    """As ``assert_same_within_a_column``, each colour channel within 2 levels (translucent
    bars blended in an image first, then over the background, round differently)."""

    def channels(a: np.ndarray) -> np.ndarray:
        return a.view(np.uint8).reshape(*a.shape, 4).astype(np.int16)

    a, b = channels(ours), channels(theirs)
    bad = (np.abs(a - b) > 2).any(axis=-1)
    for r, c in zip(*np.nonzero(bad), strict=True):
        near = b[r, max(c - 1, 0) : c + 2]
        assert (np.abs(near - a[r, c]) <= 2).all(axis=-1).any(), f"{what}: ({r}, {c})"
    assert bad.sum() <= 0.002 * bad.size, f"{what}: {bad.sum()} pixels differ"


def test_a_followed_sparse_view_paints_only_new_columns_and_looks_the_same(qtbot):
    """Following a ~7 steps/s CUDA-like run (device marks a batch late, idle tinted by
    cause), the lane raster paints the columns that came into view or changed, and the
    timeline looks as it does with every bar painted by pyqtgraph."""
    from gpuwatch.core.figures.frame import steps_frame

    ours, theirs = timeline(qtbot), timeline(qtbot)
    unrasterized(theirs)
    width = ours.width_px()
    store = StepStore()
    store.set_device_is_host(False)
    host = marks(400, 150 * MS, seed=3)  # ~200 steps in view: sparse
    window_s = 30.0
    px_s = window_s / width
    painted = []
    for frame in range(len(host)):
        store.append([frame], [0], [8], host[[frame]].tolist())
        if frame:
            store.set_device_marks([frame - 1], (host[[frame - 1]] + 300_000).tolist())
        hi_s = max(((int(host[frame, -1]) - ORIGIN) / 1e9), window_s)
        hi_s = math.ceil(hi_s / px_s) * px_s
        lo_ns, hi_ns = ORIGIN + int((hi_s - window_s) * 1e9), ORIGIN + int(hi_s * 1e9)
        shown = steps_frame(
            store.snapshot(since_ns=lo_ns),
            (),
            t0_ns=ORIGIN,
            lo_ns=lo_ns,
            hi_ns=hi_ns,
            width_px=width,
            device_kind="cuda",
            tint=True,
        )
        tinted = ours.gap_bars.isVisible()
        for view in (ours, theirs):
            view.getPlotItem().getViewBox().setXRange(hi_s - window_s, hi_s, padding=0)
            view.show_frame(shown)
        got = _pixels(ours)  # a paint a frame, as the window's
        if frame > 20 and tinted == ours.gap_bars.isVisible():
            painted.append(ours.lane_raster.painted_columns)  # (a new tint: all columns)
        if frame % 7 == 0 or frame == len(host) - 1:
            assert_close_within_a_column(got, _pixels(theirs), f"frame {frame}")
    assert not ours.dense and len(painted) > 100
    # ~3 px of new columns a frame, the newest step's and the late device marks' columns,
    # and the few where a step left the view on the left.
    assert max(painted) < 0.1 * width, painted


def test_changed_between_finds_what_left_and_what_changed_or_came() -> None:
    from gpuwatch.qt.spans import changed_between

    def spans(*pairs: tuple[float, float]) -> tuple[np.ndarray, np.ndarray]:
        return np.array([a for a, _ in pairs]), np.array([b for _, b in pairs])

    old = spans((1, 2), (3, 4), (5, 6), (7, 8))
    assert changed_between(old, old) == []
    # One left on the left, the last one grew, one came.
    got = changed_between(old, spans((3, 4), (5, 6), (7, 9), (10, 11)))
    assert got == [(1.0, 2.0), (7.0, np.inf)]
    # The first span cut differently by the view's new start: it and what left.
    got = changed_between(old, spans((3.5, 4), (5, 6), (7, 8)))
    assert got == [(1.0, 4.0)]
    # Nothing in common, or all gone: everything they cover.
    assert changed_between(old, spans((20, 21))) == [(1.0, np.inf)]
    assert changed_between(old, spans()) == [(1.0, 8.0)]


def test_followed_utilization_curves_paint_only_new_columns_and_look_the_same(qtbot):
    """NVML-like samples every 1/6 s and a busy % known a few samples late (NaN until
    then), followed over 30 s: the curves' raster paints the columns that came into view or
    changed, and the plot looks as it does with pyqtgraph painting each curve."""
    from PySide6.QtWidgets import QGraphicsItem

    from gpuwatch.core.figures.frame import choose_coarse
    from gpuwatch.core.model.metrics import NVML_GPU_UTIL
    from gpuwatch.core.model.store import MetricStatus, SeriesView
    from gpuwatch.qt.utilization_view import UtilizationView

    views = []
    for _ in range(2):
        view = UtilizationView()
        qtbot.addWidget(view)
        view.resize(700, 240)
        view.show()
        qtbot.waitExposed(view)
        views.append(view)
    ours, theirs = views
    for curve in (theirs.coarse_curve, theirs.busy_curve):
        curve.raster = None
        curve.setFlag(QGraphicsItem.GraphicsItemFlag.ItemHasNoContents, False)
    theirs.plot.removeItem(theirs.curve_raster)
    choice = choose_coarse({NVML_GPU_UTIL: MetricStatus(NVML_GPU_UTIL, "n", "%", True)}, "cuda")
    period = 1_000_000_000 // 6
    rng = np.random.default_rng(4)
    t0 = np.arange(600, dtype=np.int64) * period
    values = rng.uniform(20, 95, len(t0))
    busy = rng.uniform(10, 90, len(t0))
    width = ours.plot.getPlotItem().getViewBox().width()
    px_s = 30.0 / width
    painted = []
    for n in range(1, len(t0)):
        hi_s = math.ceil(max(n * period / 1e9, 30.0) / px_s) * px_s
        keep = t0[:n] + period >= int((hi_s - 30.0) * 1e9)
        known = np.where(np.arange(n) < n - 3, busy[:n], np.nan)[keep]  # final a bit later
        shown = SeriesView(t0[:n][keep], t0[:n][keep] + period, values[:n][keep])
        for view in (ours, theirs):
            view.plot.getPlotItem().getViewBox().setXRange(hi_s - 30.0, hi_s, padding=0)
            view.show_data(choice, shown, known, 0)
        got = _pixels(ours.plot)
        if n > 200:
            painted.append(ours.curve_raster.painted_columns)
        if n % 11 == 0:
            assert_close_within_a_column(got, _pixels(theirs.plot), f"sample {n}")
    assert max(painted) < 0.1 * width, painted
