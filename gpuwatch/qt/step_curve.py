"""A plot curve whose new points repaint only the part of the plot they changed: its
geometry is its view's extent (``view_extent.ViewExtent``), not its data's, so a new sample
at the right end of a still view repaints a few columns, not the whole plot.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF

from gpuwatch.qt.spans import step_series
from gpuwatch.qt.view_extent import ViewExtent

#: Pixels drawn beyond a changed point's x besides the pen's own half-width (antialiasing,
#: rounding of the pen to whole pixels).
PAD_PX = 2.0


class StepCurve(pg.PlotCurveItem):
    """A ``PlotCurveItem`` bounded by its view's extent (``ViewExtent``), so new points change
    no geometry; ``set_points`` repaints from the first point that differs from those drawn
    to the end of the series. Drawing, names, pens and ``getData`` are ``PlotCurveItem``'s.
    """

    def __init__(self, **kargs: object) -> None:
        #: Where the curve may draw: its geometry while its points change.
        self.extent = ViewExtent(self)
        super().__init__(**kargs)

    def boundingRect(self) -> QRectF:
        return self.extent.rect() or QRectF()

    def viewTransformChanged(self) -> None:
        """The base forgets its bounds and announces new geometry on every move of the view;
        here only when the view left the extent (or zoomed far inside it)."""
        pg.GraphicsItem.viewTransformChanged(self)  # forgets the cached view rectangle
        self.extent.view_changed()

    def show_samples(
        self, t0_ns: np.ndarray, t1_ns: np.ndarray, value: np.ndarray, origin_ns: int
    ) -> None:
        """Samples as a step line over each one's real period (seconds since
        ``origin_ns``), neighbours joined only where they touch (``spans.step_series``)."""
        w0, w1 = (t0_ns - origin_ns) / 1e9, (t1_ns - origin_ns) / 1e9
        tolerance = 0.2 * float(np.median(w1 - w0)) if len(w0) else 0.0
        self.set_points(*step_series(w0, w1, value, tolerance))

    def set_points(self, x: np.ndarray, y: np.ndarray, connect: np.ndarray) -> None:
        """Show ``x, y`` joined where ``connect`` (as ``setData(x=, y=, connect=)``),
        repainting only from the first point that differs from those drawn on."""
        first = self._first_change(x, y, connect)
        if first == -1:
            return  # the same points
        dirty = None if first is None else self._dirty_rect(x, first)
        # What ``updateData`` does, without announcing new geometry (the extent stays).
        self.xData, self.yData = x.view(np.ndarray), y.view(np.ndarray)
        self.opts["connect"] = connect
        self._boundsCache = [None, None]
        self.path = None
        self.fillPath = None
        self._fillPathList = None
        self._mouseShape = None
        self._lineSegmentsRendered = False
        self.informViewBoundsChanged()
        if dirty is None:
            self.update()
        elif not dirty.isEmpty():
            self.update(dirty)
        self.sigPlotChanged.emit(self)

    def _first_change(self, x: np.ndarray, y: np.ndarray, connect: np.ndarray) -> int | None:
        """The first point of ``x, y, connect`` that differs from those drawn (where the
        shorter series ends if they agree that far; -1: the same points), or None when
        there is nothing to compare with."""
        old_x, old_y, old_connect = self.xData, self.yData, self.opts["connect"]
        if old_x is None or old_y is None or not isinstance(old_connect, np.ndarray):
            return None
        if not len(old_connect) == len(old_x) == len(old_y):
            return None
        n = min(len(old_x), len(x))
        same = (old_x[:n] == x[:n]) & (old_y[:n] == y[:n]) & (old_connect[:n] == connect[:n])
        if not bool(same.all()):
            return int(np.argmin(same))
        return -1 if len(old_x) == len(x) else n

    def _dirty_rect(self, x: np.ndarray, first: int) -> QRectF | None:
        """The part of the plot that changes when the points from ``first`` on change (None:
        the whole curve's rectangle).

        A point's change moves the segments on either side of it, so the part runs from the
        point before ``first`` to the end of the old and the new series, over the view's
        height (the view box clips its curves to it), padded by the pen.
        """
        extent, view = self.extent.rect(), self.viewRect()
        if extent is None or view is None:
            return None
        start = max(first - 1, 0)
        xs = np.concatenate((self.xData[start:], x[start:]))
        if not len(xs):
            return QRectF()
        lo, hi = float(np.min(xs)), float(np.max(xs))
        if not (np.isfinite(lo) and np.isfinite(hi)):
            return None
        pad_px = self.pixelPadding() + PAD_PX
        pad_x, pad_y = pad_px * self.pixelWidth(), pad_px * self.pixelHeight()
        if not (pad_x > 0 and pad_y > 0):
            return None  # not laid out yet: no pixel size to pad by
        part = QRectF(
            lo - pad_x, view.top() - pad_y, hi - lo + 2 * pad_x, view.height() + 2 * pad_y
        )
        return part.intersected(extent)
