"""A new utilization sample repaints the plot's right end only, and the plot looks as if it
had been repainted whole.

A followed view stands still between its strides, so a new coarse sample changes only the
newest columns of the plot. The pixels compared are those the window shows (its backing
store, read through the offscreen platform's ``grabWindow``), not a fresh rendering of the
widget, so a part left unpainted would show.

Samples here are SIMULATED (a made-up CPU % every sixth of a second).
"""

from __future__ import annotations

import math

import numpy as np
from backing_store import PaintedRects, on_screen, repainted_whole, view_box_rect
from PySide6.QtCore import QRect
from PySide6.QtWidgets import QApplication

from gpuwatch.core.figures.frame import CoarseChoice
from gpuwatch.core.model.store import SeriesView
from gpuwatch.qt.timeline_view import settle_before_paint
from gpuwatch.qt.utilization_view import UtilizationView

S = 1_000_000_000
PERIOD_NS = S // 6
WINDOW_S = 30.0
#: The followed view's stride (``PlotsRedraw.visible_window``: a thirtieth of the width).
STRIDE_S = WINDOW_S / 30
CHOICE = CoarseChoice("proc.cpu", "runner CPU %", "busy %", "runner CPU", ())
#: A new sample's strip: the sample before it and the new one (~8 px at this size), padded.
STRIP_PX = 40


def samples(n: int, *, top: float = 97.0) -> tuple[SeriesView, np.ndarray]:
    """``n`` coarse samples from the origin on and the busy % beside them (a hole of NaN
    every 11th sample, as where no step overlapped a sample)."""
    t0 = np.arange(n, dtype=np.int64) * PERIOD_NS
    value = (np.arange(n) * 37 % 97).astype(np.float64) * top / 97.0
    busy = value * 0.6
    busy[5::11] = np.nan
    return SeriesView(t0, t0 + PERIOD_NS, value), busy


def shown_view(qtbot) -> tuple[UtilizationView, PaintedRects]:
    view = UtilizationView()
    qtbot.addWidget(view)
    view.resize(800, 300)
    paints = PaintedRects(view.plot.viewport())
    view.show()
    qtbot.waitExposed(view)
    qtbot.waitUntil(lambda: bool(paints.rects))  # shown: what follows is the data's
    return view, paints


def draw(qtbot, view: UtilizationView, paints: PaintedRects, data, hi_s: float) -> list[QRect]:
    """One frame as the window draws it (``PlotsRedraw.plots``): the range, the data, the
    view settled before its paint; returns the paints it caused."""
    coarse, busy = data
    paints.rects.clear()
    view.plot.getPlotItem().getViewBox().setXRange(hi_s - WINDOW_S, hi_s, padding=0)
    view.show_data(CHOICE, coarse, busy, 0)
    view.layout().activate()  # a legend that took another line has made room for it, now
    settle_before_paint(view.plot)
    qtbot.waitUntil(lambda: bool(paints.rects))
    QApplication.processEvents()  # anything queued behind the first paint
    return list(paints.rects)


def followed_hi(n: int) -> float:
    """The right edge of a followed view whose newest sample is the ``n``-th."""
    return math.ceil(n * PERIOD_NS / S / STRIDE_S) * STRIDE_S


def is_strip_at_right(rect: QRect, width: int) -> bool:
    return rect.width() <= STRIP_PX and rect.left() > width // 2


def covers_the_plot(view: UtilizationView, rects: list[QRect]) -> bool:
    """Whether a paint covered the whole width of the plot's view box (the curves' area)."""
    area = view_box_rect(view.plot)
    return any(r.left() <= area.left() + 1 and r.right() >= area.right() - 1 for r in rects)


def test_a_new_sample_in_a_still_view_repaints_a_strip_at_the_right(qtbot) -> None:
    view, paints = shown_view(qtbot)
    n = 300  # 50 s of samples: the curves span the whole 30 s view
    hi_s = followed_hi(n + 4)
    first = draw(qtbot, view, paints, samples(n), hi_s)
    width = view.plot.viewport().width()
    assert covers_the_plot(view, first)  # the first frame: everything
    for more in range(1, 5):
        rects = draw(qtbot, view, paints, samples(n + more), hi_s)
        assert all(is_strip_at_right(r, width) for r in rects), (more, rects, width)
    # The newest sample's value revised (a busy % whose steps came late): the same strip.
    coarse, busy = samples(n + 4)
    busy[-1] = 3.0
    rects = draw(qtbot, view, paints, (coarse, busy), hi_s)
    assert all(is_strip_at_right(r, width) for r in rects), rects


def test_a_still_view_updated_in_strips_shows_what_a_whole_repaint_shows(qtbot) -> None:
    view, paints = shown_view(qtbot)
    n = 300
    hi_s = followed_hi(n + 6)
    draw(qtbot, view, paints, samples(n), hi_s)
    width = view.plot.viewport().width()
    for more in range(1, 7):
        coarse, busy = samples(n + more)
        if more % 2:
            busy[-1] = np.nan  # the busy % not known yet: a hole, filled by the next frame
        rects = draw(qtbot, view, paints, (coarse, busy), hi_s)
        assert all(is_strip_at_right(r, width) for r in rects), (more, rects, width)
    shown = on_screen(view.plot.viewport())
    np.testing.assert_array_equal(shown, repainted_whole(qtbot, paints))
    # And what a new view draws from those samples at once: nothing of the curves went stale.
    fresh, fresh_paints = shown_view(qtbot)
    draw(qtbot, fresh, fresh_paints, (coarse, busy), hi_s)
    np.testing.assert_array_equal(shown, on_screen(fresh.plot.viewport()))


def test_a_moved_view_repaints_whole_and_strips_follow_again(qtbot) -> None:
    """A stride on, far on (past the curves' extent), and a taller y range each repaint the
    whole plot, drawn as a fresh view draws it; still frames after them repaint strips."""
    view, paints = shown_view(qtbot)
    fresh, fresh_paints = shown_view(qtbot)
    n = 300
    hi_s = followed_hi(n)
    draw(qtbot, view, paints, samples(n), hi_s)
    width = view.plot.viewport().width()
    far = followed_hi(n + 603)  # 100 s on: past a view's width either side of the last view
    steps = [  # (samples, right edge, the coarse values' top, whether the view moved)
        (n + 1, hi_s + STRIDE_S, 97.0, True),  # one stride on
        (n + 2, hi_s + STRIDE_S, 97.0, False),
        (n + 600, far, 97.0, True),
        (n + 601, far, 97.0, False),
        (n + 602, far, 250.0, True),  # runner CPU over 100 %: a taller y range
        (n + 603, far, 250.0, False),
    ]
    for count, hi, top, moved in steps:
        data = samples(count, top=top)
        rects = draw(qtbot, view, paints, data, hi)
        if moved:
            assert covers_the_plot(view, rects), (count, rects)
            draw(qtbot, fresh, fresh_paints, data, hi)
            np.testing.assert_array_equal(
                on_screen(view.plot.viewport()), on_screen(fresh.plot.viewport())
            )
        else:
            assert all(is_strip_at_right(r, width) for r in rects), (count, rects, width)
    np.testing.assert_array_equal(on_screen(view.plot.viewport()), repainted_whole(qtbot, paints))


class _Gpus:
    """A session's other-rank GPU series (``RankGpuSource``)."""

    def __init__(self, gpus: list) -> None:
        self.t0_ns = 0
        self.gpus = gpus

    def rank_gpu_series(self, since_ns: int) -> list:
        return self.gpus


def test_the_other_ranks_gpu_curves_repaint_a_strip_for_a_new_sample(qtbot) -> None:
    from gpuwatch.core.figures.rank_figures import GpuSeries
    from gpuwatch.qt.rank_gpu_curves import RankGpuCurves

    view, paints = shown_view(qtbot)
    curves = RankGpuCurves(view)
    n = 300
    hi_s = followed_hi(n + 3)
    draw(qtbot, view, paints, samples(n + 3), hi_s)
    width = view.plot.viewport().width()

    def gpus(count: int) -> _Gpus:
        series, _ = samples(count, top=60.0)
        return _Gpus([GpuSeries(1, "cuda:1 of rank 1", series)])

    curves.sync(gpus(n), presenting=False)
    view.layout().activate()  # the legend line shown: the plot made room for it, now
    settle_before_paint(view.plot)  # and its items know their new place before the paint
    repainted_whole(qtbot, paints)
    for more in range(1, 4):
        paints.rects.clear()
        curves.sync(gpus(n + more), presenting=False)
        qtbot.waitUntil(lambda: bool(paints.rects))
        QApplication.processEvents()
        assert all(is_strip_at_right(r, width) for r in paints.rects), (more, paints.rects)
    shown = on_screen(view.plot.viewport())
    np.testing.assert_array_equal(shown, repainted_whole(qtbot, paints))
