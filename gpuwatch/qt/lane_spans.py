"""Every sparse lane's spans as one plot item: a layer of rectangles per colour.

A ``BarGraphItem`` per phase, idle cause, gap tint and device lane would each be re-set every
frame (``setOpts`` → ``_prepareData``, its bounds, a geometry announcement and a view-bounds
notice) and painted as an item of its own (transform, clip and a Python ``paint`` apiece) for
one ``drawRects`` of a few hundred rectangles. Here each category is a ``SpanLayer`` (its colour
and an ``(n, 4)`` array of rectangles); the one item paints them all in one ``paint``, a
``drawRects`` per non-empty layer straight from the array's memory, in layer order, and
announces its geometry at most once per frame. The pixels are those of the bars it stands for:
the same rectangles, brushes and transform, with no pen.

Made with ``follows_view``, the item's geometry is its view's extent
(``view_extent.ViewExtent``) and a new set of spans repaints only the part of each layer that
differs from the rectangles it replaces: following a run with a view that stands still between
strides, that is the newest steps at the right end, not the whole plot.
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

from gpuwatch.qt.dense_lanes import rgba
from gpuwatch.qt.view_extent import ViewExtent


class SpanLayer:
    """One category's spans (x in seconds) in a ``LaneSpans`` item, all in one colour."""

    def __init__(self, owner: LaneSpans, color: QColor | str, name: str) -> None:
        self._owner = owner
        self.name = name
        #: The colour before any theme; the theme's colour for it is ``brush``'s.
        self.base = QColor(color)
        #: ``brush``'s colour as a packed RGBA pixel (what the dense image is drawn with).
        self.pixel = 0
        self.brush = QBrush(self.base)
        #: ``(n, 4)`` float64 rows of x, y, width, height (what ``drawRects`` reads).
        self.rects = np.zeros((0, 4))
        self.y0 = 0.0
        self.height = 0.0
        self._visible = True
        #: The rectangles are sorted by their left edge (painting can skip to the exposed
        #: part), and the widest one's width (how far left of it a rectangle can reach).
        self.sorted = True
        self.widest = 0.0

    @property
    def brush(self) -> QBrush:
        """The layer's fill (the theme's colour for ``base``)."""
        return self._brush

    @brush.setter
    def brush(self, brush: QBrush) -> None:
        self._brush = brush
        self.pixel = rgba(brush.color())

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
        if np.size(x0) == 0 and not len(self.rects):
            return  # empty stays empty
        self._replace(_rects(x0, x1, y0, height), float(y0), float(height))

    def _replace(self, rects: np.ndarray, y0: float, height: float) -> None:
        """Hold ``rects`` (rows spanning ``y0`` up by ``height``) and repaint what changed."""
        old, old_rows = self.rects, (self.y0, self.y0 + self.height)
        self.rects, self.y0, self.height = rects, y0, height
        self.sorted = bool(len(rects) < 2 or (rects[1:, 0] >= rects[:-1, 0]).all())
        self.widest = float(rects[:, 2].max()) if len(rects) else 0.0
        self._owner.layer_changed(self, old, old_rows)

    def set_rects(self, x0: np.ndarray, x1: np.ndarray, y0: np.ndarray, height: float) -> None:
        """As ``set_spans``, each span on its own row: ``y0`` per span (rank lanes)."""
        if not np.size(x0):
            self.clear()
            return
        low, high = float(np.min(y0)), float(np.max(y0))
        self._replace(_rects(x0, x1, y0, height), low, high - low + float(height))

    def clear(self) -> None:
        self.set_spans(np.empty(0), np.empty(0), self.y0, self.height)


class LaneSpans(pg.GraphicsObject):
    """The layers of spans of every lane, painted bottom to top in the order they were added.

    ``shape`` is the bounding box (the default would be a path of every rectangle, built for
    each mouse move over the plot).
    """

    def __init__(self, *, follows_view: bool = False) -> None:
        """``follows_view``: the geometry is the view's extent, and new spans repaint only
        what changed (for layers sorted by x); else it is the spans' bounds."""
        super().__init__()
        self.layers: list[SpanLayer] = []
        self._bounds = QRectF()
        #: The layers changed since the bounds were computed (announced to Qt already).
        self._stale = False
        self._extent = ViewExtent(self) if follows_view else None
        # Paint learns the exposed rectangle: a repaint of the newest steps draws only those.
        self.setFlag(self.GraphicsItemFlag.ItemUsesExtendedStyleOption, True)

    def add_layer(self, color: QColor | str, name: str) -> SpanLayer:
        layer = SpanLayer(self, color, name)
        self.layers.append(layer)
        return layer

    def viewTransformChanged(self) -> None:
        super().viewTransformChanged()  # forgets the cached view rectangle
        if self._extent is not None:
            self._extent.view_changed()

    def layer_changed(
        self, layer: SpanLayer, old: np.ndarray, old_rows: tuple[float, float]
    ) -> None:
        """``layer`` now holds new rectangles in place of ``old`` (which spanned ``old_rows``
        in y): repaint the part that differs, or, without an extent, announce the new
        geometry once and repaint all of it."""
        extent = self._extent.rect() if self._extent is not None else None
        if extent is None or not layer.sorted:
            if not self._stale:
                self._stale = True
                self.prepareGeometryChange()
            self.update()
            return
        changed = _changed_x(old, layer.rects)
        if changed is not None:
            low = min(old_rows[0], layer.y0)
            high = max(old_rows[1], layer.y0 + layer.height)
            self.update(QRectF(changed[0], low, changed[1] - changed[0], high - low))

    def clear(self) -> None:
        for layer in self.layers:
            layer.clear()

    def recolor(self, color: Callable[[QColor], QColor]) -> None:
        """Each layer in ``color(its base colour)`` (a theme's colour for it)."""
        for layer in self.layers:
            layer.brush = QBrush(color(layer.base))
        self.update()

    def boundingRect(self) -> QRectF:
        extent = self._extent.rect() if self._extent is not None else None
        if extent is not None:
            return extent
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
        exposed = option.exposedRect if option is not None else None
        for layer in self.layers:
            rects = layer.rects
            if exposed is not None and layer.sorted and len(rects):
                rects = _within(rects, exposed.left() - layer.widest, exposed.right())
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


def _rects(x0: np.ndarray, x1: np.ndarray, y0: float | np.ndarray, height: float) -> np.ndarray:
    """``(n, 4)`` rows of x, y, width, height for spans ``[x0, x1]`` from ``y0`` up."""
    rects = np.empty((int(np.size(x0)), 4))
    rects[:, 0] = x0
    rects[:, 1] = y0
    rects[:, 2] = np.asarray(x1) - rects[:, 0]
    rects[:, 3] = height
    return rects


def _within(rects: np.ndarray, left: float, right: float) -> np.ndarray:
    """The rows of ``rects`` (sorted by left edge) whose left edge lies in ``[left, right]``,
    contiguous in memory as ``drawRects`` reads them."""
    starts = rects[:, 0]
    a, b = np.searchsorted(starts, left, "left"), np.searchsorted(starts, right, "right")
    return rects[a:b] if a or b < len(rects) else rects


def _changed_x(old: np.ndarray, new: np.ndarray) -> tuple[float, float] | None:
    """The x range where ``new`` rectangles differ from ``old`` (both sorted by left edge):
    from the first row that differs to the right end of either; None if they are equal."""
    n = min(len(old), len(new))
    same = (old[:n] == new[:n]).all(axis=1)
    first = n if same.all() else int(np.argmin(same))
    if first == len(old) == len(new):
        return None
    tails = [rects[first:] for rects in (old, new) if first < len(rects)]
    left = min(float(tail[0, 0]) for tail in tails)
    right = max(float((tail[:, 0] + tail[:, 2]).max()) for tail in tails)
    return left, right
