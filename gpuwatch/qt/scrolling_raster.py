"""Plot items drawn through one image that scrolls with the view: the sparse timeline's
bars, the utilization curves.

Following a run, a 30 s view moves a few pixels a frame and gains a step or a sample, yet
pyqtgraph paints every item again (thousands of ``drawRects`` rectangles and the curves'
lines a frame). ``ScrollingRaster`` keeps its items' pixels in an image in device pixels: a
frame that scrolled by whole pixels shifts the image, paints only the columns that came into
view and those where an item changed (the items report where), and draws the image once.
Anything else (a zoom, a resize, a new theme colour, a hidden item) paints it all again.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRect, QRectF
from PySide6.QtGui import QColor, QImage, QPainter, QRegion, QTransform
from PySide6.QtWidgets import QGraphicsItem

#: A move within this much of a whole device pixel is a whole-pixel move.
WHOLE_PIXEL = 1e-3
#: Columns painted again either side of a changed stretch (an aliased edge rounds either way).
EDGE_PX = 2
#: More changed stretches than this before a paint: paint everything then.
MAX_DIRTY = 256


def _aligned(rect: QRectF) -> QRect:
    """The whole pixels ``rect`` touches, ignoring a rounding error of the mapping (the same
    view box must not come out a pixel wider every other frame)."""
    left, top = math.floor(rect.left() + WHOLE_PIXEL), math.floor(rect.top() + WHOLE_PIXEL)
    right = math.ceil(rect.right() - WHOLE_PIXEL)
    bottom = math.ceil(rect.bottom() - WHOLE_PIXEL)
    return QRect(left, top, right - left, bottom - top)


def _shifted(image: QImage, columns: int) -> QImage:
    """``image`` moved right by ``columns`` (logical) pixels, in place; the columns it left
    hold stale pixels (the caller paints them again)."""
    step = round(columns * image.devicePixelRatio())
    rows = np.frombuffer(image.bits(), np.uint32).reshape(image.height(), -1)
    width = image.width()
    if step > 0:
        rows[:, step:width] = rows[:, : width - step].copy()
    elif step < 0:
        rows[:, : width + step] = rows[:, -step:width].copy()
    return image


def _merge(strips: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Overlapping or touching column ranges joined, left to right."""
    out: list[tuple[int, int]] = []
    for a, b in sorted(strips):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


class Rastered(Protocol):
    """A plot item a ``ScrollingRaster`` paints: it says what it covers and how it looks,
    and tells its raster where it changed (``ScrollingRaster.changed``)."""

    raster: ScrollingRaster | None

    def raster_extent(self) -> QRectF:
        """What it draws covers this (data coordinates; empty: nothing)."""
        ...

    def raster_look(self) -> tuple[object, ...]:
        """Everything but its data its pixels depend on (colours, widths)."""
        ...

    def isVisible(self) -> bool: ...

    def zValue(self) -> float: ...

    def itemTransform(self, other: QGraphicsItem) -> tuple[QTransform, bool]: ...

    def setFlag(self, flag: QGraphicsItem.GraphicsItemFlag, enabled: bool = True) -> None: ...

    def paint(self, p: QPainter, opt: object, widget: object) -> None: ...


class ScrollingRaster(pg.GraphicsObject):
    """Paints ``items`` (their own ``paint``, in z order) into a cached image of the view."""

    def __init__(self, items: Sequence[Rastered]) -> None:
        super().__init__()
        order = {id(item): i for i, item in enumerate(items)}
        #: Stacking order as the scene's: z value, then the order the items were added.
        self.items = sorted(items, key=lambda item: (item.zValue(), order[id(item)]))
        for item in self.items:
            item.raster = self
            item.setFlag(QGraphicsItem.GraphicsItemFlag.ItemHasNoContents)
        #: What the items cover now (None: to be worked out) and at the last paint.
        self._extent: QRectF | None = QRectF()
        self._painted_extent = QRectF()
        self._image: QImage | None = None
        self._key: tuple[object, ...] | None = None
        self._m11 = 0.0
        self._dx = 0.0
        self._dirty: list[tuple[float, float]] = []
        #: Device columns painted by the last paint (for tests and the bench).
        self.painted_columns = 0

    def changed(self, intervals: Sequence[tuple[float, float]]) -> None:
        """Items changed over ``intervals`` (x in data units; ``inf`` ends allowed: nothing
        reaches past the items' extents before or after the change)."""
        if not intervals:
            return
        self._dirty.extend(intervals)
        if len(self._dirty) > MAX_DIRTY:  # not painted for a while: all of it, once
            self._dirty = [(-math.inf, math.inf)]
        if self._extent is not None:  # worked out again when asked (once a frame)
            self.prepareGeometryChange()
            self._extent = None
        self.update()

    def changed_everywhere(self) -> None:
        self.changed([(-math.inf, math.inf)])

    def boundingRect(self) -> QRectF:
        if self._extent is None:
            extent = QRectF()
            for item in self.items:
                covers = item.raster_extent()
                if item.isVisible() and not covers.isEmpty():
                    extent = extent.united(covers)
            self._extent = extent
        return QRectF(self._extent)

    def paint(self, p: QPainter, *args: object) -> None:
        view_box = self.getViewBox()
        extent = self.boundingRect()
        if view_box is None or extent.isEmpty():
            return
        t = p.transform()
        # The view box's whole rectangle (what it clips its items to), in device pixels.
        area = _aligned(t.mapRect(self.mapRectFromItem(view_box, view_box.boundingRect())))
        if area.isEmpty():
            return
        dpr = p.device().devicePixelRatioF()
        looks = tuple((item.isVisible(), item.raster_look()) for item in self.items)
        key = (area.y(), area.width(), area.height(), t.m22(), t.dy(), dpr, looks)
        m11, dx = t.m11(), t.dx() - area.x()
        old = self._image
        shift = dx - self._dx
        reuse = (
            old is not None
            and key == self._key
            and abs(m11 - self._m11) * area.width() <= WHOLE_PIXEL
            and abs(shift - round(shift)) <= WHOLE_PIXEL
            and abs(shift) < area.width()
        )
        width, height = area.width(), area.height()
        strips: list[tuple[int, int]] = []
        if reuse:
            assert old is not None
            s = round(shift)
            image = old if s == 0 else _shifted(old, s)
            if s < 0:  # scrolled on: new columns on the right
                strips.append((width + s - EDGE_PX, width))
            elif s > 0:
                strips.append((0, s + EDGE_PX))
            # nothing was drawn, nor is to be, beyond both extents
            both = extent.united(self._painted_extent)
            for start, end in self._dirty:
                a, b = max(start, both.left()), min(end, both.right())
                left = math.floor(m11 * a + dx) - EDGE_PX
                right = math.ceil(m11 * b + dx) + EDGE_PX
                strips.append((left, right))
        else:
            image = QImage(
                round(width * dpr), round(height * dpr), QImage.Format.Format_ARGB32_Premultiplied
            )
            image.setDevicePixelRatio(dpr)
            image.fill(0)
            strips.append((0, width))
        self._dirty = []
        merged = _merge([(max(a, 0), min(b, width)) for a, b in strips if b > a])
        if merged:
            transform = t * QTransform.fromTranslate(-area.x(), -area.y())
            self._paint_items(image, merged, height, transform)
        self.painted_columns = sum(b - a for a, b in merged)
        self._image, self._key, self._m11, self._dx = image, key, m11, dx
        self._painted_extent = extent
        p.save()
        p.resetTransform()
        p.drawImage(QPointF(area.x(), area.y()), image)
        p.restore()

    def _paint_items(
        self, image: QImage, strips: list[tuple[int, int]], height: int, transform: QTransform
    ) -> None:
        """Paint every item into the columns ``strips`` of ``image`` (cleared first)."""
        region = QRegion()
        for a, b in strips:
            region += QRect(a, 0, b - a, height)
        painter = QPainter(image)
        try:
            painter.setClipRegion(region)
            painter.setCompositionMode(QPainter.CompositionMode.CompositionMode_Source)
            for a, b in strips:
                painter.fillRect(QRect(a, 0, b - a, height), QColor(0, 0, 0, 0))
            painter.setCompositionMode(QPainter.CompositionMode.CompositionMode_SourceOver)
            for item in self.items:
                if item.isVisible() and not item.raster_extent().isEmpty():
                    painter.save()
                    # the item's own transform (an image placed by setRect), then the view's
                    placed, _ = item.itemTransform(self)
                    painter.setTransform(placed * transform)
                    item.paint(painter, None, None)
                    painter.restore()
        finally:
            painter.end()
