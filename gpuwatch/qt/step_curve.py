"""A plot curve whose new points repaint only the part of the plot they changed.

``pg.PlotCurveItem``'s bounding rectangle is its data's, padded by the pen in pixels, so every
new point changes its geometry: Qt then repaints the union of the old and new rectangles (for
a series that spans the view, the whole plot with its grid and every other curve) although
only the newest few pixels at the right end changed. A followed view stands still between its
strides, so most new samples change a few columns of a plot that is otherwise as it was.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF

#: Pixels drawn beyond a changed point's x besides the pen's own half-width (antialiasing,
#: rounding of the pen to whole pixels).
PAD_PX = 2.0


class StepCurve(pg.PlotCurveItem):
    """A ``PlotCurveItem`` bounded by a fixed extent around the view (the view and a view's
    width and height on each side), so new points change no geometry; ``set_points`` repaints
    from the first point that differs from those drawn to the end of the series.

    The extent moves only when the view leaves it (or it is far larger than the view), which
    repaints the whole plot as any move of the view does. Drawing, names, pens and
    ``getData`` are ``PlotCurveItem``'s.
    """

    def __init__(self, **kargs: object) -> None:
        #: Where the curve may draw, in data coordinates; None: computed on the next ask.
        self._extent: QRectF | None = None
        super().__init__(**kargs)

    def boundingRect(self) -> QRectF:
        if self._extent is None:
            view = self._view_rect()
            if view is None:
                return QRectF()
            self._extent = view.adjusted(-view.width(), -view.height(), view.width(), view.height())
        return QRectF(self._extent)

    def viewTransformChanged(self) -> None:
        """The base forgets its bounds and announces new geometry on every move of the view;
        here only when the view left the extent (or zoomed far inside it)."""
        pg.GraphicsItem.viewTransformChanged(self)  # forgets the cached view rectangle
        extent, view = self._extent, self._view_rect()
        if (
            extent is not None
            and view is not None
            and extent.contains(view)
            and extent.width() <= 5 * view.width()
            and extent.height() <= 5 * view.height()
        ):
            return
        self.prepareGeometryChange()
        self._extent = None

    def _view_rect(self) -> QRectF | None:
        view = self.viewRect()
        if view is None or not view.isValid():
            return None
        return QRectF(view)

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
        extent, view = self._extent, self._view_rect()
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
