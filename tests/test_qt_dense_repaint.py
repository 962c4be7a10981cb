"""A dense timeline whose view stands still repaints only the columns a frame changed, and
looks exactly as a whole repaint would draw it; a view that moved is repainted whole.

Steps here are SIMULATED (jittered synthetic marks, as in ``tests/test_timeline_bins.py``).
"""

from __future__ import annotations

import numpy as np
from backing_store import WAIT_MS, PaintedRects, on_screen, repainted_whole, view_box_rect
from jittered_steps import MS, ORIGIN, marks
from PySide6.QtCore import QRect
from test_qt_frame_cost import timeline

from gpuwatch.core.figures.frame import TimelineFrame, dense_lanes
from gpuwatch.core.figures.timeline_bins import TimelineBins
from gpuwatch.core.model.store import StepStore

#: A 2 s view of 1 ms steps (dense at 700 px), its left half full at first.
VIEW_NS, STEP_NS, FIRST_STEPS, BATCH = 2_000 * MS, 1 * MS, 1_000, 40


class Run:
    """Steps appended a batch at a time, drawn as a dense frame of a fixed view."""

    def __init__(self) -> None:
        self.store = StepStore()
        self.store.set_device_is_host(True)
        self.bins = TimelineBins()
        self.host = marks(FIRST_STEPS + 20 * BATCH, STEP_NS)
        self.steps = 0

    def append(self, n: int) -> None:
        ids = list(range(self.steps, self.steps + n))
        self.store.append(ids, [0] * n, [8] * n, self.host[ids].tolist())
        self.steps += n

    def frame(self, view, lo_ns: int) -> TimelineFrame:
        hi_ns = lo_ns + VIEW_NS
        width = view.width_px()
        self.bins.update(self.store, (), ORIGIN, lo_ns=lo_ns, hi_ns=hi_ns, px_ns=VIEW_NS / width)
        lanes, shown = dense_lanes(self.bins.columns(lo_ns, hi_ns, int(np.ceil(width))))
        return TimelineFrame(ORIGIN, lo_ns, hi_ns, width, "cpu", dense=lanes, causes_shown=shown)


def _show(qtbot, view, paints: PaintedRects, frame: TimelineFrame) -> list[QRect]:
    """Show ``frame`` at its range and wait for the repaint it causes; its paint regions."""
    before = len(paints.rects)
    lo_s, hi_s = (frame.lo_ns - ORIGIN) / 1e9, (frame.hi_ns - ORIGIN) / 1e9
    box = view.getPlotItem().getViewBox()
    if box.viewRange()[0] != [lo_s, hi_s]:  # the window sets a range that moved only
        box.setXRange(lo_s, hi_s, padding=0)
    view.show_frame(frame)
    qtbot.waitUntil(lambda: len(paints.rects) > before, timeout=WAIT_MS)
    return paints.rects[before:]


def _drawn_fresh(qtbot, frame: TimelineFrame) -> np.ndarray:
    """``frame`` as a new view draws it."""
    fresh = timeline(qtbot)
    _show(qtbot, fresh, PaintedRects(fresh.viewport()), frame)
    return on_screen(fresh.viewport())


def _started(qtbot) -> tuple[object, PaintedRects, Run]:
    view = timeline(qtbot)
    paints = PaintedRects(view.viewport())
    run = Run()
    run.append(FIRST_STEPS)
    _show(qtbot, view, paints, run.frame(view, ORIGIN))
    assert view.dense and view.dense_lanes.isVisible()
    # The first update after the window is shown repaints the whole viewport (Qt's own
    # first pass); from the second on, an item's update repaints its rectangle only.
    run.append(BATCH)
    _show(qtbot, view, paints, run.frame(view, ORIGIN))
    return view, paints, run


def test_a_still_dense_view_repaints_only_the_newest_columns(qtbot) -> None:
    """New steps at the right end of a still view: each frame repaints a strip a few dozen
    pixels wide there, and the plot then looks exactly as a whole repaint draws it."""
    view, paints, run = _started(qtbot)
    plot = view_box_rect(view)
    strips = []
    for _ in range(8):
        run.append(BATCH)  # 40 ms: ~14 columns
        strips += _show(qtbot, view, paints, run.frame(view, ORIGIN))
    assert all(r.width() < 0.1 * plot.width() for r in strips), [r.getRect() for r in strips]
    # at the new steps: right of the first 1 s of the 2 s view
    middle = plot.left() + 0.45 * plot.width()
    assert all(r.left() > middle for r in strips), [r.getRect() for r in strips]
    partial = on_screen(view.viewport())
    np.testing.assert_array_equal(partial, repainted_whole(qtbot, paints))
    np.testing.assert_array_equal(partial, _drawn_fresh(qtbot, run.frame(view, ORIGIN)))


def test_a_moved_dense_view_is_repainted_whole_as_a_fresh_view_draws_it(qtbot) -> None:
    """A view that moved on (a stride of a thirtieth of its width) draws every column again:
    the whole plot is repainted, and looks as a fresh view drawing that frame."""
    view, paints, run = _started(qtbot)
    run.append(BATCH)
    _show(qtbot, view, paints, run.frame(view, ORIGIN))
    run.append(BATCH)
    moved = run.frame(view, ORIGIN + VIEW_NS // 30)
    rects = _show(qtbot, view, paints, moved)
    plot = view_box_rect(view)
    assert any(r.contains(plot.adjusted(1, 1, -1, -1)) for r in rects), [r.getRect() for r in rects]
    np.testing.assert_array_equal(on_screen(view.viewport()), _drawn_fresh(qtbot, moved))
