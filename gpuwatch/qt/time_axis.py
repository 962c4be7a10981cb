"""The plots' shared time axis, cheap to scroll: pyqtgraph's tick layout, drawn from a
picture that moves with the view instead of being recorded anew every frame.

pyqtgraph's ``AxisItem`` forgets its picture on every range change, so while a run is
followed the axis measured every label's text, recorded ticks and labels into a new
``QPicture`` and replayed it on every frame.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from math import ceil, inf

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QFont, QFontMetricsF, QPainter, QPen, QPicture
from PySide6.QtWidgets import QGraphicsItem, QStyleOptionGraphicsItem


class _LabelSizes:
    """What ``AxisItem.generateDrawSpecs`` measures its labels with, in place of a painter:
    each label's rectangle is measured once per font (by a painter on a picture, as
    pyqtgraph measures it), not on every frame."""

    def __init__(self) -> None:
        self._font = QFont()
        self._key = self._font.key()
        self._char_px = QFontMetricsF(self._font).maxWidth()
        self._sizes: dict[tuple[str, float, float, int, str], QRectF] = {}

    def setFont(self, font: QFont) -> None:
        if font.key() != self._key:
            self._font = QFont(font)
            self._key = font.key()
            self._char_px = QFontMetricsF(font).maxWidth()

    @property
    def font_key(self) -> str:
        return self._key

    def widest(self, texts: list[str]) -> float:
        """At least as wide as the widest of ``texts`` (its length in the widest glyph)."""
        return max((len(t) for t in texts), default=0) * self._char_px + 2.0

    def boundingRect(self, rect: QRectF, flags: Qt.AlignmentFlag, text: str) -> QRectF:
        key = (self._key, rect.width(), rect.height(), int(flags), text)
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
    marks: QPicture  # the tick marks
    labels: QPicture  # the labels' text
    labels_top: float  # where the highest label starts (the item's y)


@dataclass(frozen=True)
class _LevelEdges:
    """Of one tick level: which ticks lie inside the axis, which labels near its ends do
    not fit in it (pyqtgraph drops them), and whether every tick inside is near an end."""

    inside: bytes
    dropped: tuple[float, ...]
    all_near: bool


#: Tick levels as pyqtgraph's ``tickValues`` gives them: (spacing, values), from the top.
_Levels = tuple[tuple[float, tuple[float, ...]], ...]


@dataclass(frozen=True)
class _Seen:
    """What a layout of the ticks would be computed from now (``TimeAxis._seen``), but which
    ticks and labels the ends leave out (``TimeAxis._edges`` of ``bounds``, ``lo``, ``hi``):
    measured only when the rest equals a known layout's."""

    base: tuple[object, ...]  # size, span, style
    levels: _Levels
    px_per_unit: float
    bounds: QRectF
    lo: float
    hi: float


@dataclass(frozen=True)
class _Layout:
    """What a layout of the ticks was computed from, but where the range starts.

    The same tick values over the same span and size, in the same style, with the same
    ticks inside the axis and the same labels dropped at its ends, are the same ticks and
    labels moved by the change of the range's start.
    """

    base: tuple[object, ...]  # size, span, style
    levels: _Levels
    #: Which ticks and labels its ends left out (None: not measured yet; see ``_Seen``).
    edges: tuple[_LevelEdges, ...] | None
    text_levels: int  # levels up to the last one with a label drawn
    lo: float  # where the range started
    px_per_unit: float  # pixels per unit of the axis
    shift: float  # the picture's shift at that layout
    seen: _Seen  # what it was laid out from

    def same(self, seen: _Seen, edges: tuple[_LevelEdges, ...]) -> bool:
        """Whether a layout of what is ``seen`` now, whose ends leave out ``edges``, is this
        one moved (``self.edges`` known).

        Which labels fit matters only on the levels whose labels are drawn; a level above
        them stopped for crowding, which the levels below decide, unless all of its labels
        were dropped at the ends (then its ticks are all near one).
        """
        assert self.edges is not None
        if (seen.base, seen.levels) != (self.base, self.levels):
            return False
        if len(edges) != len(self.edges):
            return False
        for i, (now, then) in enumerate(zip(edges, self.edges, strict=True)):
            if now.inside != then.inside:
                return False
            checked = i < self.text_levels or now.all_near or then.all_near
            if checked and now.dropped != then.dropped:
                return False
        return True


class TimeAxis(pg.AxisItem):
    """The scrolling time axis: its ticks and labels are laid out as pyqtgraph lays them
    out, but drawn from a picture recorded when they last changed, moved by whole pixels
    while the view scrolls (a 30 s view gains or loses a tick about once a second).

    A frame asks only which tick values the range shows (each level's first tick and count:
    a little arithmetic) and which ticks and labels its ends leave out; the full layout
    (``generateDrawSpecs``: every tick and label placed and measured) runs only when
    one of those, the span, the size or the style changes, and it records text anew only
    when a tick or label appears or leaves, or the move is not a whole number of pixels.
    """

    def __init__(self, orientation: str = "bottom") -> None:
        super().__init__(orientation)
        # ``paint`` is told which part is exposed (by default: the whole bounding rect).
        self.setFlag(QGraphicsItem.GraphicsItemFlag.ItemUsesExtendedStyleOption)
        self._sizes = _LabelSizes()
        self._ticks: _TickPicture | None = None
        self._axis_line: tuple[QPen, QPointF, QPointF] | None = None
        self._shift = 0.0
        self._layout: _Layout | None = None
        self._values: tuple[object, _Levels] | None = None
        #: The range and length ``_tick_values`` was last asked for, and its answer.
        self._asked: tuple[tuple[float, float, float], _Levels] | None = None
        self._label_cache: dict[tuple[object, ...], tuple[list[str], float]] = {}
        #: Times the ticks and labels were recorded anew, and laid out (for tests and the
        #: bench).
        self.recorded = 0
        self.laid_out = 0

    def paint(self, p: QPainter, opt: QStyleOptionGraphicsItem, widget: object) -> None:
        """The axis line, the tick marks and, where the exposed part reaches them, the
        labels: the marks reach into the plot above, so a plot repainting a strip along its
        bottom edge repaints them too, and the labels' text costs most of a paint."""
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
        ticks.marks.play(p)
        if opt.exposedRect.bottom() >= ticks.labels_top:
            ticks.labels.play(p)
        p.restore()

    def _lay_out(self) -> None:
        seen = self._seen()
        known = self._layout
        edges = None
        # Other tick values (a followed view's every stride) are another layout: the ends
        # are measured only when they could decide it is the same one moved.
        if (
            seen is not None
            and known is not None
            and (seen.base, seen.levels) == (known.base, known.levels)
        ):
            edges = self._edges_of(seen)
            if known.edges is None:
                known = self._layout = replace(known, edges=self._edges_of(known.seen))
            if known.same(seen, edges):
                shift = known.shift - (self.range[0] - known.lo) * known.px_per_unit
                if abs(shift - round(shift)) <= 1e-6:
                    self._shift = round(shift)
                    self.picture = QPicture()  # laid out: pyqtgraph resets it on the next change
                    return
        texts = self._lay_out_anew()
        self._layout = (
            None
            if seen is None
            else _Layout(
                seen.base,
                seen.levels,
                edges,
                _text_levels(self, texts, seen.levels),
                self.range[0],
                seen.px_per_unit,
                self._shift,
                seen,
            )
        )

    def _seen(self) -> _Seen | None:
        """What ``generateDrawSpecs`` lays the ticks out from, but the range's start: size,
        span, tick values and style, and which ticks and labels the ends of the axis leave
        out; and the pixels per unit. None where it would not be computed this way (explicit
        ticks, a log scale, another orientation, a range or size of nothing)."""
        if self.orientation != "bottom" or self._tickLevels is not None:
            return None
        bounds = self.mapRectFromParent(self.geometry())
        lo, hi = self.range
        span = hi - lo
        ends = [
            self.mapToDevice(bounds.topLeft() + QPointF(-1.0, 1.0)),
            self.mapToDevice(bounds.topRight() + QPointF(1.0, 1.0)),
        ]
        if span <= 0 or bounds.width() <= 0 or None in ends:
            return None
        length = (ends[1] - ends[0]).manhattanLength()  # a horizontal axis: its width
        levels = self._tick_values(lo, hi, length)
        if levels is None:
            return None
        font = self.style["tickFont"]
        style = tuple(
            (k, v.key() if isinstance(v, QFont) else repr(v)) for k, v in self.style.items()
        )
        pens = (
            self.pen().color().rgba(),
            self.pen().widthF(),
            self.textPen().color().rgba(),
            self.tickPen().color().rgba(),
            None if font is None else font.key(),
            self.grid,
        )
        # A span that differs in its last bits (the range's ends are sums) is the same span.
        base = (bounds.width(), bounds.height(), length, f"{span:.12g}", style, pens)
        return _Seen(base, levels, bounds.width() / span, QRectF(bounds), lo, hi)

    def _edges_of(self, seen: _Seen) -> tuple[_LevelEdges, ...]:
        """Which ticks and labels the ends of the axis leave out in what was ``seen`` (the
        same size and style as now)."""
        return self._edges(seen.levels, seen.bounds, seen.lo, seen.hi)

    def _tick_values(self, lo: float, hi: float, length: float) -> _Levels | None:
        """``tickValues`` (which filters each level against the others in Python), computed
        only when a level's first tick or tick count changes: each level's ticks are found by
        the arithmetic of ``AxisItem.tickValues``, done here for its two numbers."""
        if self.logMode:
            return None
        low, high = sorted((lo * self.scale, hi * self.scale))
        spacings = self.tickSpacing(low, high, length)
        where = []
        for spacing, offset in spacings:
            first = ceil((low - offset) / spacing)
            start = first * spacing + offset
            where.append((spacing, offset, first, int((high - start) / spacing) + 1))
        key = (self.scale, tuple(where))
        if self._values is None or self._values[0] != key:
            found = super().tickValues(lo, hi, length)
            self._values = (key, tuple((spacing, tuple(v)) for spacing, v in found))
        self._asked = ((lo, hi, length), self._values[1])
        return self._values[1]

    def tickValues(
        self, minVal: float, maxVal: float, size: float
    ) -> list[tuple[float, list[float]]]:
        """pyqtgraph's tick values; a layout right after ``_tick_values`` (the same range
        and length) gets the values it found, not computed again."""
        asked = self._asked
        if asked is not None and asked[0] == (minVal, maxVal, size):
            return [(spacing, list(values)) for spacing, values in asked[1]]
        found: list[tuple[float, list[float]]] = super().tickValues(minVal, maxVal, size)
        return found

    def _labels(self, spacing: float, values: tuple[float, ...]) -> tuple[list[str], float]:
        """A level's labels, and how near an end a tick must be for its label to be able
        to stick out (half the widest label), kept while the level's ticks stay."""
        key = (spacing, values, self.autoSIPrefixScale * self.scale, self._sizes.font_key)
        found = self._label_cache.get(key)
        if found is None:
            if len(self._label_cache) > 16:
                self._label_cache.clear()
            texts = self.tickStrings(list(values), self.autoSIPrefixScale * self.scale, spacing)
            found = self._label_cache[key] = (texts, self._sizes.widest(texts) / 2)
        return found

    def _edges(
        self, levels: _Levels, bounds: QRectF, lo: float, hi: float
    ) -> tuple[_LevelEdges, ...]:
        """Per tick level, which ticks lie inside the axis and which labels near its ends
        do not fit in it, decided as ``generateDrawSpecs`` decides them."""
        scale = bounds.width() / (hi - lo)
        offset = lo * scale
        x_min, x_max = sorted((lo * scale - offset, hi * scale - offset))
        box = self.boundingRect()
        top = bounds.top() + max(0, self.style["tickLength"]) + self.style["tickTextOffset"][1]
        font = self.style["tickFont"]
        self._sizes.setFont(font if font is not None else QFont())
        out = []
        for i, (spacing, values) in enumerate(levels):
            x = np.asarray(values, np.float64) * scale - offset
            inside = (x >= x_min) & (x <= x_max)
            dropped: list[float] = []
            all_near = False
            if i <= self.style["maxTextLevel"] and inside.any():
                # Only a label whose tick is within half its width of an end can stick out.
                texts, reach = self._labels(spacing, values)
                near = inside & ((x - box.left() < reach) | (box.right() - x < reach))
                all_near = bool(np.all(near[inside]))
                for j in np.flatnonzero(near).tolist():
                    size = self._sizes.boundingRect(
                        QRectF(0, 0, 100, 100), Qt.AlignmentFlag.AlignCenter, texts[j]
                    )
                    rect = QRectF(x[j] - size.width() / 2, top, size.width(), size.height() * 0.8)
                    if box & rect != rect:
                        dropped.append(values[j])
            out.append(_LevelEdges(inside.tobytes(), tuple(dropped), all_near))
        return tuple(out)

    def _lay_out_anew(self) -> set[str]:
        """Lay the ticks out with pyqtgraph; returns the labels drawn."""
        self.laid_out += 1
        font = self.style["tickFont"]
        self._sizes.setFont(font if font is not None else QFont())
        specs = self.generateDrawSpecs(self._sizes)
        self.picture = QPicture()  # laid out: pyqtgraph resets it on the next change
        if specs is None:
            self._ticks = self._axis_line = None
            return set()
        axis_spec, tick_specs, text_specs = specs
        self._axis_line = axis_spec
        texts = {t for _, _, t in text_specs}
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
                return texts
        labels_top = min((r.top() for r, _, _ in text_specs), default=inf)
        self._ticks = _TickPicture(
            look, xs, *self._record(tick_specs, text_specs), labels_top=labels_top
        )
        self._shift = 0.0
        self.recorded += 1
        return texts

    def _record(self, tick_specs: list, text_specs: list) -> tuple[QPicture, QPicture]:
        """Tick marks and labels as ``AxisItem.drawPicture`` draws them, in two pictures,
        without the axis line (it does not move) and the clip (the painter sets it where the
        axis is)."""
        marks, labels = QPicture(), QPicture()
        p = QPainter(marks)
        try:
            p.setRenderHint(QPainter.RenderHint.Antialiasing, False)
            for pen, a, b in tick_specs:
                p.setPen(pen)
                p.drawLine(a, b)
        finally:
            p.end()
        p = QPainter(labels)
        try:
            p.setRenderHint(QPainter.RenderHint.TextAntialiasing, True)
            if self.style["tickFont"] is not None:
                p.setFont(self.style["tickFont"])
            p.setPen(self.textPen())
            for rect, flags, text in text_specs:
                p.drawText(rect, int(flags), text)
        finally:
            p.end()
        return marks, labels


def _text_levels(axis: pg.AxisItem, texts: set[str], levels: _Levels) -> int:
    """How many of the tick ``levels``, from the top, reach the last one with a label in
    ``texts`` (a level's values are never in the levels above it)."""
    reached = 0
    for i, (spacing, values) in enumerate(levels):
        strings = axis.tickStrings(list(values), axis.autoSIPrefixScale * axis.scale, spacing)
        if texts.intersection(strings):
            reached = i + 1
    return reached
