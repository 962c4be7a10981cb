"""Every sparse lane's spans as one plot item: a layer of rectangles per colour.

A ``BarGraphItem`` per phase, idle cause, gap tint and device lane would each be re-set every
frame (``setOpts`` → ``_prepareData``, its bounds, a geometry announcement and a view-bounds
notice) and painted as an item of its own (transform, clip and a Python ``paint`` apiece) for
one ``drawRects`` of a few hundred rectangles. Here each category is a ``SpanLayer`` (its colour
and an ``(n, 4)`` array of rectangles); the one item paints them all in one ``paint``, a
``drawRects`` per non-empty layer straight from the array's memory, in layer order, and
announces its geometry at most once per frame. The pixels are those of the bars it stands for:
the same rectangles, brushes and transform, with no pen.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import cast

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QBrush, QColor, QPainter, QPainterPath
from PySide6.QtWidgets import QStyleOptionGraphicsItem, QWidget
from shiboken6 import Shiboken


class SpanLayer:
    """One category's spans (x in seconds) in a ``LaneSpans`` item, all in one colour."""

    def __init__(self, owner: LaneSpans, color: QColor | str, name: str) -> None:
        self._owner = owner
        self.name = name
        #: The colour before any theme; the theme's colour for it is ``brush``'s.
        self.base = QColor(color)
        self.brush = QBrush(self.base)
        #: ``(n, 4)`` float64 rows of x, y, width, height (what ``drawRects`` reads).
        self.rects = np.zeros((0, 4))
        self.y0 = 0.0
        self.height = 0.0
        self._visible = True

    @property
    def x0(self) -> np.ndarray:
        return self.rects[:, 0]

    @property
    def x1(self) -> np.ndarray:
        return self.rects[:, 0] + self.rects[:, 2]

    def count(self) -> int:
        return len(self.rects)

    def isVisible(self) -> bool:
        return self._visible

    def setVisible(self, visible: bool) -> None:
        if visible != self._visible:
            self._visible = visible
            self._owner.update()

    def set_spans(self, x0: np.ndarray, x1: np.ndarray, y0: float, height: float) -> None:
        """Spans ``[x0, x1]`` (``x1 >= x0``) as bars from ``y0`` up by ``height`` (``>= 0``)."""
        n = int(np.size(x0))
        if n == 0 and not len(self.rects):
            return  # empty stays empty
        self._owner.geometry_will_change()
        rects = np.empty((n, 4))
        rects[:, 0] = x0
        rects[:, 1] = y0
        rects[:, 2] = np.asarray(x1) - rects[:, 0]
        rects[:, 3] = height
        self.rects, self.y0, self.height = rects, float(y0), float(height)

    def set_rects(self, x0: np.ndarray, x1: np.ndarray, y0: np.ndarray, height: float) -> None:
        """As ``set_spans``, each span on its own row: ``y0`` per span (rank lanes)."""
        if not np.size(x0):
            self.clear()
            return
        self.set_spans(x0, x1, 0.0, height)
        self.rects[:, 1] = y0
        low, high = float(np.min(y0)), float(np.max(y0))
        self.y0, self.height = low, high - low + float(height)

    def clear(self) -> None:
        self.set_spans(np.empty(0), np.empty(0), self.y0, self.height)


class LaneSpans(pg.GraphicsObject):
    """The layers of spans of every lane, painted bottom to top in the order they were added.

    ``shape`` is the bounding box (the default would be a path of every rectangle, built for
    each mouse move over the plot).
    """

    def __init__(self) -> None:
        super().__init__()
        self.layers: list[SpanLayer] = []
        self._bounds = QRectF()
        #: The layers changed since the bounds were computed (announced to Qt already).
        self._stale = False

    def add_layer(self, color: QColor | str, name: str) -> SpanLayer:
        layer = SpanLayer(self, color, name)
        self.layers.append(layer)
        return layer

    def geometry_will_change(self) -> None:
        """A layer is about to change its rectangles: announce it once, then repaint."""
        if not self._stale:
            self._stale = True
            self.prepareGeometryChange()
        self.update()

    def clear(self) -> None:
        for layer in self.layers:
            layer.clear()

    def recolor(self, color: Callable[[QColor], QColor]) -> None:
        """Each layer in ``color(its base colour)`` (a theme's colour for it)."""
        for layer in self.layers:
            layer.brush = QBrush(color(layer.base))
        self.update()

    def boundingRect(self) -> QRectF:
        if self._stale:
            self._stale = False
            self._bounds = _bounds(self.layers)
        return QRectF(self._bounds)

    def shape(self) -> QPainterPath:
        path = QPainterPath()
        path.addRect(self.boundingRect())
        return path

    def paint(
        self,
        painter: QPainter,
        option: QStyleOptionGraphicsItem | None = None,
        widget: QWidget | None = None,
    ) -> None:
        painter.setPen(Qt.PenStyle.NoPen)
        for layer in self.layers:
            rects = layer.rects
            if len(rects) and layer._visible:
                painter.setBrush(layer.brush)
                # The array's memory as a C array of QRectF: no Python object per rectangle.
                first = cast(QRectF, Shiboken.wrapInstance(rects.ctypes.data, QRectF))
                painter.drawRects(first, len(rects))


def _bounds(layers: Sequence[SpanLayer]) -> QRectF:
    """The rectangle holding every layer's rectangles (visible or not)."""
    shown = [layer for layer in layers if len(layer.rects)]
    if not shown:
        return QRectF()
    left = min(float(layer.rects[:, 0].min()) for layer in shown)
    right = max(float(layer.x1.max()) for layer in shown)
    low = min(layer.y0 for layer in shown)
    high = max(layer.y0 + layer.height for layer in shown)
    return QRectF(left, low, right - left, high - low)
