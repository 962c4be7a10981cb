"""What a plot shows on screen, and which parts of it were repainted.

A still followed view repaints only what a frame changed, so a test of it must read the
pixels the window holds (its backing store, through the offscreen platform's
``grabWindow``: partial repaints included), not ``grab()``, which paints the widget anew.
"""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QEvent, QObject, QPoint, QRect
from PySide6.QtGui import QImage, QPaintEvent
from PySide6.QtWidgets import QWidget

WAIT_MS = 10_000


class PaintedRects(QObject):
    """The bounding rectangle of each paint event ``widget`` receives (a plot's viewport)."""

    def __init__(self, widget: QWidget) -> None:
        super().__init__()
        self.widget = widget
        self.rects: list[QRect] = []
        widget.installEventFilter(self)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.Paint:
            assert isinstance(event, QPaintEvent)
            self.rects.append(event.region().boundingRect())
        return False


def on_screen(widget: QWidget) -> np.ndarray:
    """``widget``'s pixels (uint32 rows) as its window's backing store holds them."""
    at = widget.mapTo(widget.window(), QPoint(0, 0))
    pixmap = widget.screen().grabWindow(
        widget.window().winId(), at.x(), at.y(), widget.width(), widget.height()
    )
    image = pixmap.toImage().convertToFormat(QImage.Format.Format_RGB32)
    assert (image.width(), image.height()) == (widget.width(), widget.height())
    bits = np.frombuffer(image.constBits(), np.uint32)[: image.sizeInBytes() // 4]
    return bits.reshape(image.height(), image.bytesPerLine() // 4)[:, : image.width()].copy()


def repainted_whole(qtbot, paints: PaintedRects) -> np.ndarray:
    """The pixels of ``paints.widget`` after a repaint of all of it."""
    widget = paints.widget
    before = len(paints.rects)
    widget.update()
    whole = widget.rect()
    qtbot.waitUntil(lambda: any(r.contains(whole) for r in paints.rects[before:]), timeout=WAIT_MS)
    return on_screen(widget)


def view_box_rect(plot) -> QRect:
    """Where a plot's data area (its view box) lies in its viewport."""
    box = plot.getPlotItem().getViewBox()
    return plot.mapFromScene(box.sceneBoundingRect()).boundingRect()
