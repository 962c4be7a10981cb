"""The plots' shared time axis, cheap to scroll: pyqtgraph's tick layout, drawn from a
picture that moves with the view instead of being recorded anew every frame.

pyqtgraph's ``AxisItem`` forgets its picture on every range change, so while a run is
followed the axis measured every label's text, recorded ticks and labels into a new
``QPicture`` and replayed it on every frame.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QFont, QPainter, QPen, QPicture


class _LabelSizes:
    """What ``AxisItem.generateDrawSpecs`` measures its labels with, in place of a painter:
    each label's rectangle is measured once per font (by a painter on a picture, as
    pyqtgraph measures it), not on every frame."""

    def __init__(self) -> None:
        self._font = QFont()
        self._sizes: dict[tuple[str, float, float, int, str], QRectF] = {}

    def setFont(self, font: QFont) -> None:
        self._font = QFont(font)

    def boundingRect(self, rect: QRectF, flags: Qt.AlignmentFlag, text: str) -> QRectF:
        key = (self._font.key(), rect.width(), rect.height(), int(flags), text)
        size = self._sizes.get(key)
        if size is None:
            if len(self._sizes) > 4096:
                self._sizes.clear()
            picture = QPicture()
            painter = QPainter(picture)
            try:
                painter.setFont(self._font)
                size = painter.boundingRect(rect, flags, text)
            finally:
                painter.end()
            self._sizes[key] = size
        return QRectF(size)  # the caller shrinks its copy


@dataclass(frozen=True)
class _TickPicture:
    """Ticks and labels recorded once, with what they look like and where they were."""

    look: tuple[object, ...]
    xs: np.ndarray  # the x of every tick and label when recorded
    picture: QPicture


class TimeAxis(pg.AxisItem):
    """The scrolling time axis: its ticks and labels are laid out as pyqtgraph lays them
    out, but drawn from a picture recorded when they last changed, moved by whole pixels
    while the view scrolls (a 30 s view gains or loses a tick about once a second).

    A frame still computes where the ticks go (cheap once the labels' sizes are known); it
    records and re-measures text only when a tick or label appears or leaves, the style
    changes, or the move is not a whole number of pixels.
    """

    def __init__(self, orientation: str = "bottom") -> None:
        super().__init__(orientation)
        self._sizes = _LabelSizes()
        self._ticks: _TickPicture | None = None
        self._axis_line: tuple[QPen, QPointF, QPointF] | None = None
        self._shift = 0.0
        #: Times the ticks and labels were recorded anew (for tests and the bench).
        self.recorded = 0

    def paint(self, p: QPainter, opt: object, widget: object) -> None:
        if self.picture is None:  # the range, size or style changed since the last paint
            self._lay_out()
        ticks, line = self._ticks, self._axis_line
        if ticks is None or line is None:
            return
        p.save()
        p.setRenderHint(QPainter.RenderHint.Antialiasing, False)
        p.setRenderHint(QPainter.RenderHint.TextAntialiasing, True)
        pen, p1, p2 = line
        p.setPen(pen)
        p.drawLine(p1, p2)
        p.setClipRect(self.boundingRect().toAlignedRect())
        p.translate(self._shift, 0)
        ticks.picture.play(p)
        p.restore()

    def _lay_out(self) -> None:
        font = self.style["tickFont"]
        self._sizes.setFont(font if font is not None else QFont())
        specs = self.generateDrawSpecs(self._sizes)
        self.picture = QPicture()  # laid out: pyqtgraph resets it on the next change
        if specs is None:
            self._ticks = self._axis_line = None
            return
        axis_spec, tick_specs, text_specs = specs
        self._axis_line = axis_spec
        look = (
            tuple((pen.color().rgba(), pen.widthF(), a.y(), b.y()) for pen, a, b in tick_specs),
            tuple((r.y(), r.width(), r.height(), int(f), t) for r, f, t in text_specs),
            self.textPen().color().rgba(),
            None if font is None else font.key(),
        )
        xs = np.array([a.x() for _, a, _ in tick_specs] + [r.x() for r, _, _ in text_specs])
        drawn = self._ticks
        if drawn is not None and drawn.look == look and len(xs) and len(xs) == len(drawn.xs):
            moved = xs - drawn.xs
            shift = round(float(moved[0]))
            if np.all(np.abs(moved - shift) <= 1e-6):
                self._shift = shift
                return
        self._ticks = _TickPicture(look, xs, self._record(tick_specs, text_specs))
        self._shift = 0.0
        self.recorded += 1

    def _record(self, tick_specs: list, text_specs: list) -> QPicture:
        """Ticks and labels as ``AxisItem.drawPicture`` draws them, without the axis line
        (it does not move) and the clip (the painter sets it where the axis is)."""
        picture = QPicture()
        p = QPainter(picture)
        try:
            p.setRenderHint(QPainter.RenderHint.Antialiasing, False)
            p.setRenderHint(QPainter.RenderHint.TextAntialiasing, True)
            for pen, a, b in tick_specs:
                p.setPen(pen)
                p.drawLine(a, b)
            if self.style["tickFont"] is not None:
                p.setFont(self.style["tickFont"])
            p.setPen(self.textPen())
            for rect, flags, text in text_specs:
                p.drawText(rect, int(flags), text)
        finally:
            p.end()
        return picture
