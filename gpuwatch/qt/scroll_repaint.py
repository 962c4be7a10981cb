"""A followed plot scrolls by moving its pixels, and repaints only what is new.

While a live run is followed, each frame moves the view by a few whole pixels and adds a few
steps at its right end. pyqtgraph moves the view by changing the view box's transform, which
marks every item in it dirty: each frame repainted both plots whole (their spans, curves and
images; ~8 ms of a ~16 ms frame here). Nearly all of those pixels were on screen already, a
few pixels to the right.

``ScrollRepaint`` holds a plot's viewport updates while a frame changes its items
(``QGraphicsView.NoViewportUpdate``: the items' own update requests are dropped), then moves
the view box's pixels in the window's backing store (``QWidget.scroll``: a copy, no paint)
and repaints only the columns that are new or changed (the right end, from the leftmost
change the caller found in its data), a margin at both ends, and any items outside the view
box that changed (the time axis). Pixels are those of a full repaint: every item in a view
box is drawn in data coordinates and the view moves by whole device pixels (its right edge
sits on one), so a moved pixel is the pixel the full repaint would draw there.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QMetaObject, QRect
from PySide6.QtWidgets import QGraphicsView

from gpuwatch.qt.time_axis import TimeAxis

#: Pixels repainted at each end of a moved view box, beyond the columns that changed: the
#: view box clips its items at a rectangle that need not sit on whole pixels, and a 2 px
#: curve pen (antialiased) reaches a pixel or two beyond its points.
MARGIN_PX = 3
#: A move over more than this share of the view box repaints it whole (little to keep).
MAX_SHIFT_SHARE = 0.5
#: How far (pixels) a time axis's first or last label may reach past the axis's ends
#: (pyqtgraph lets labels overflow its bounding rectangle by 15 px).
LABEL_OVERFLOW_PX = 16


class ScrollRepaint:
    """The viewport updates of one plot widget, held while a frame changes it (``hold``),
    then given as a move of its view box's pixels and the repaint of the rest (``release``).

    Pixels are moved only from the view range they were drawn at: the range a ``release``
    left. Any other change of the range (a frame that was not held, a jump of the view)
    makes the next release repaint the whole plot.
    """

    def __init__(self, widget: pg.PlotWidget) -> None:
        self.widget = widget
        plot = widget.getPlotItem()
        self.view_box = plot.getViewBox()
        #: The plot's axes: their ticks reach into the view box and stay where they are
        #: while its pixels move, so their part of it is repainted.
        self.axes = [plot.getAxis(name) for name in ("left", "bottom", "right", "top")]
        self.held = False
        #: The x range the pixels on screen were drawn for, as the last release left it
        #: (None: unknown, e.g. after a frame that was not held).
        self.drawn_range: tuple[float, float] | None = None
        self._held_range: tuple[float, float] | None = None
        #: Frames released as a move (for tests and the bench), and as a full repaint.
        self.moved = 0
        self.repainted = 0

    def _x_range(self) -> tuple[float, float]:
        lo, hi = self.view_box.viewRange()[0]
        return float(lo), float(hi)

    def forget(self) -> None:
        """The plot is drawn without a hold: its pixels are not known to be any range's."""
        self.drawn_range = None

    def hold(self) -> None:
        """From now until ``release``, the items' changes do not repaint the plot."""
        if not self.held:
            self.held = True
            self._settled = False
            self._held_range = self._x_range()
            self.widget.setViewportUpdateMode(QGraphicsView.ViewportUpdateMode.NoViewportUpdate)

    def settle(self) -> None:
        """The items told the scene they changed; the scene tells the views only when it
        processes them (a queued call): now, while this view still drops what it is told.
        (Settle every held plot before releasing any: a scene's processing can paint
        another view's pending updates at once.)"""
        if self.held and not self._settled:
            self._settled = True
            QMetaObject.invokeMethod(self.widget.scene(), "_q_processDirtyItems")

    def release(
        self,
        changed_from_s: float | None = None,
        *,
        whole: bool = False,
        time_axis: TimeAxis | None = None,
    ) -> None:
        """End the hold: the view box's items changed from x ``changed_from_s`` on (data
        coordinates; None: nothing changed but the view's range), or in ways only a repaint
        of the ``whole`` plot shows. ``time_axis``: the axis under the view box that scrolls
        with it (its ticks and labels move with the view's pixels unless they changed)."""
        if not self.held:
            return
        self.settle()
        widget = self.widget
        widget.setViewportUpdateMode(QGraphicsView.ViewportUpdateMode.MinimalViewportUpdate)
        self.held = False
        was, now = self._held_range, self._x_range()
        drawn, self.drawn_range = self.drawn_range, now
        viewport = widget.viewport()
        box = widget.mapFromScene(self.view_box.sceneBoundingRect()).boundingRect()
        box = box.intersected(viewport.rect())
        width = float(self.view_box.width())  # the scene is the viewport, pixel for pixel
        shift = self._shift(was, now, width) if was == drawn and not whole else None
        if shift is None:
            self.repainted += 1
            viewport.update()
            return
        self.moved += 1
        # The rows whose pixels move: the view box's, and the time axis's ticks and labels
        # when they only moved with it (its title below them stays).
        moving = box
        axis_rect = None
        if time_axis is not None and time_axis.isVisible():
            axis_rect = self._axis_rect(time_axis)
            if time_axis.lay_out_now() == -shift:
                title = widget.mapFromScene(time_axis.label.sceneBoundingRect()).boundingRect()
                bottom = min(axis_rect.bottom(), title.top() - 1)
                moving = box.united(
                    QRect(box.left(), box.top(), box.width(), bottom - box.top() + 1)
                )
                axis_rect = None
        if shift:
            viewport.scroll(-shift, 0, moving)
        # The left end, where the axes' ticks reach in and the time axis's first label may
        # reach out, and the right end from the first change on.
        reach = max((self._tick_reach(a) for a in self.axes if a.isVisible()), default=0)
        left = QRect(moving.left(), moving.top(), MARGIN_PX + reach, moving.height())
        if moving is not box:
            left = left.united(
                QRect(
                    box.left() - LABEL_OVERFLOW_PX,
                    box.bottom() + 1,
                    LABEL_OVERFLOW_PX,
                    moving.bottom() - box.bottom(),
                )
            )
        viewport.update(left)
        first = moving.right() + 1 - shift - MARGIN_PX
        if changed_from_s is not None:
            x = self.view_box.mapViewToDevice(pg.Point(changed_from_s, 0.0))
            if x is not None and math.isfinite(x.x()):
                first = min(first, math.floor(x.x()) - MARGIN_PX)
        first = max(first, moving.left())
        right_end = moving.right() + 1 + (LABEL_OVERFLOW_PX if moving is not box else 0)
        viewport.update(QRect(first, moving.top(), right_end - first, moving.height()))
        if axis_rect is not None:
            viewport.update(axis_rect)

    @staticmethod
    def _tick_reach(axis: pg.AxisItem) -> int:
        """How far (pixels) an axis's ticks reach into the plot (pyqtgraph: a negative
        tick length)."""
        return math.ceil(max(0.0, -float(axis.style["tickLength"]))) + 1

    def _axis_rect(self, axis: pg.AxisItem) -> QRect:
        """Where ``axis`` paints in the viewport: pyqtgraph's bounding rectangle (its own,
        its ticks reaching into the plot, labels reaching past its ends)."""
        return self.widget.mapFromScene(axis.sceneBoundingRect()).boundingRect()

    @staticmethod
    def _shift(
        was: tuple[float, float] | None, now: tuple[float, float], width: float
    ) -> int | None:
        """How many whole pixels left the view moved from ``was`` to ``now`` over ``width``
        pixels; None if it did not move by whole pixels to the right at the same scale, or
        by too much to keep."""
        if was is None or width <= 4 * MARGIN_PX:
            return None
        span = now[1] - now[0]
        if span <= 0 or abs((was[1] - was[0]) - span) > 1e-9 * span:
            return None
        moved = (now[0] - was[0]) / span * width
        shift = round(moved)
        if shift < 0 or abs(moved - shift) > 1e-3 or shift > MAX_SHIFT_SHARE * width:
            return None
        return shift


def first_change(old: np.ndarray, new: np.ndarray, kept_from: float, tol: float) -> float | None:
    """The smallest x where two lists of rectangles ``(n, 4)`` (x, y, width, height; sorted
    by x) differ, over the rectangles that end at or after ``kept_from`` (the others lie in
    the repainted margin at the left end, or left the view); None if they are the same.
    Values closer than ``tol`` are the same."""
    if old is new or (not len(old) and not len(new)):
        return None
    old = old[_first_ending_at(old, kept_from) :]
    new = new[_first_ending_at(new, kept_from) :]
    k = min(len(old), len(new))
    if k:
        differ = np.abs(old[:k] - new[:k]).max(axis=1) > tol
        j = int(differ.argmax())
        if differ[j]:
            return float(min(old[j, 0], new[j, 0]))
    if len(old) > k:
        return float(old[k, 0])
    if len(new) > k:
        return float(new[k, 0])
    return None


def _first_ending_at(rects: np.ndarray, x: float) -> int:
    """The first of ``rects`` (sorted by x) from which on every one ends at or after ``x``
    (the running rightmost edge reaches it)."""
    if not len(rects):
        return 0
    reach = np.maximum.accumulate(rects[:, 0] + rects[:, 2])
    return int(reach.searchsorted(x, "left"))


def first_point_change(old: Sequence[np.ndarray], new: Sequence[np.ndarray]) -> int | None:
    """The first index where two curves' arrays (x, y, ...; NaN equals NaN) differ, or their
    length where one is longer; None if they are the same."""
    n_old, n_new = len(old[0]), len(new[0])
    k = min(n_old, n_new)
    differ = np.zeros(k, bool)
    for whole_a, whole_b in zip(old, new, strict=True):
        a, b = whole_a[:k], whole_b[:k]
        if a.dtype.kind == "f" or b.dtype.kind == "f":
            differ |= ~((a == b) | (np.isnan(a) & np.isnan(b)))
        else:
            differ |= a != b
    if differ.any():
        return int(np.argmax(differ))
    return None if n_old == n_new else k
