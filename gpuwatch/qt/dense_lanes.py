"""Dense timeline lanes as one image: a column of pixels per pixel column of the view.

When a view holds more steps than pixels, each lane is drawn per pixel column as a bar whose
height is the share of the column the lane was active (stacked when a lane holds several
phases). As rectangles that is ~11,000 one-pixel bars a frame (~6 ms of ``drawRects`` plus
pyqtgraph's per-item bookkeeping here); as one RGBA image built with a few vectorised
``np.where`` per lane it is ~1 ms to draw. The colours are read from the sparse lanes' span
layers (``lane_spans.SpanLayer``), so the theme machinery, which re-colours those, re-colours
this too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QColor, QImage, QPainter
from PySide6.QtWidgets import QStyleOptionGraphicsItem

#: Transparent pixel (RGBA packed little-endian into one uint32).
CLEAR = 0


def rgba(color: QColor) -> int:
    """A colour as one uint32 whose bytes in memory are R, G, B, A."""
    return (color.alpha() << 24) | (color.blue() << 16) | (color.green() << 8) | color.red()


@dataclass(frozen=True)
class Lane:
    """One lane's content per column: stacked shares (top to bottom in ``phases`` order is
    bottom to top on screen), their colours, and an optional backing/tint colour per column."""

    shares: Sequence[np.ndarray]  # each (n_columns,), 0..1
    colors: Sequence[int]
    backing: np.ndarray | None = None  # (n_columns,) uint32 behind the bars; CLEAR for none
    backing_pad: float = 0.0  # the backing reaches this far beyond the bar (lane units)


def render(
    lanes: Sequence[Lane], n_columns: int, rows_per_lane: int, bar_height: float
) -> np.ndarray:
    """Pixels ``(n_lanes * rows_per_lane, n_columns)`` uint32, lane 0 at the top.

    Each lane is a cell of ``rows_per_lane`` pixel rows; its bars fill the middle
    ``bar_height`` of the cell from the bottom up. A share above 0 is at least one pixel tall,
    so a short phase stays visible.
    """
    out = np.zeros((len(lanes) * rows_per_lane, n_columns), np.uint32)
    bar_px = max(round(bar_height * rows_per_lane), 1)
    margin = (rows_per_lane - bar_px) // 2
    up = np.arange(bar_px - 1, -1, -1)[:, None]  # rows of the bar, counted from its bottom
    for i, lane in enumerate(lanes):
        cell = out[i * rows_per_lane : (i + 1) * rows_per_lane]
        if lane.backing is not None:
            pad = min(round(lane.backing_pad * rows_per_lane), margin)
            cell[margin - pad : margin + bar_px + pad] = lane.backing[None, :]
        bar = cell[margin : margin + bar_px]
        top = np.zeros(n_columns)
        for share, color in zip(lane.shares, lane.colors, strict=True):
            bottom = top
            # at least one pixel for any share above zero
            top = np.maximum(top + share * bar_px, np.where(share > 0, np.floor(bottom) + 1, 0))
            inside = (up >= np.floor(bottom)[None, :]) & (up < np.round(top)[None, :])
            bar[...] = np.where(inside, np.uint32(color), bar)
    return out


class DenseLanesItem(pg.GraphicsObject):
    """The image of dense lanes, placed over ``[x0, x1]`` seconds and the lanes' y range.

    A followed view stands still between its strides, and then a frame changes only the
    newest columns: those are written into the image in place and only their strip of the
    plot is repainted. A whole-item repaint (a new ``pg.ImageItem`` image each frame) would
    repaint the whole plot, every item under and over the image included.
    """

    def __init__(self) -> None:
        super().__init__()
        # ``paint`` gets the exposed rectangle, to draw only the changed strip.
        self.setFlag(self.GraphicsItemFlag.ItemUsesExtendedStyleOption)
        #: The pixels last shown (``render``'s orientation: lane 0 in row 0).
        self.pixels = np.zeros((0, 0), np.uint32)
        #: The rows flipped for the y-up view (row 0 at the bottom): the memory ``_image``
        #: draws from, kept alive here as long as the image is.
        self._rows = np.zeros((0, 0), np.uint32)
        self._image = QImage()
        self._rect = QRectF()

    def show_pixels(
        self,
        pixels: np.ndarray,
        x0_s: float,
        x1_s: float,
        n_lanes: int,
        changed: np.ndarray | None = None,
    ) -> None:
        """Draw ``pixels`` (from ``render``) with lane 0 at the top of ``n_lanes`` lanes.

        ``changed``: the only columns that differ from the pixels shown before, if the
        columns are the same ones (``ScrollingColumns.last_fresh`` when ``same_grid``);
        ``None`` redraws all.
        """
        self.pixels = pixels
        rect = QRectF(x0_s, -0.5, max(x1_s - x0_s, 1e-12), n_lanes)
        if (
            changed is not None
            and self.isVisible()
            and rect == self._rect
            and pixels.shape == self._rows.shape
        ):
            if len(changed):
                self._rows[:, changed] = pixels[::-1, changed]
                self.update(self._columns_rect(int(changed.min()), int(changed.max()) + 1))
            return
        self._rows = np.ascontiguousarray(pixels[::-1], np.uint32)
        height, width = self._rows.shape
        self._image = QImage(
            self._rows.data, width, height, 4 * width, QImage.Format.Format_RGBA8888
        )
        if rect != self._rect:
            self.prepareGeometryChange()
            self._rect = rect
        self.update()
        self.setVisible(True)

    def _columns_rect(self, first: int, end: int) -> QRectF:
        """Columns ``first`` to ``end`` (excluded) of the image, a column wider either side
        (the edges of a column scaled to the screen round to either neighbouring pixel)."""
        col = self._rect.width() / max(self._rows.shape[1], 1)
        left = self._rect.left() + (first - 1) * col
        return QRectF(left, self._rect.top(), (end - first + 2) * col, self._rect.height())

    def boundingRect(self) -> QRectF:
        return QRectF(self._rect)

    def paint(self, painter: QPainter, option: QStyleOptionGraphicsItem, *_: object) -> None:
        """The whole image scaled onto the rectangle, clipped to the exposed part: the
        pixels of a strip are those a whole repaint draws there, and only the strip is
        drawn."""
        if self._image.isNull():
            return
        exposed = option.exposedRect  # type: ignore[attr-defined]
        if not exposed.isNull() and not exposed.contains(self._rect):
            painter.setClipRect(exposed, Qt.ClipOperation.IntersectClip)
        painter.drawImage(self._rect, self._image)


#: Two columns' inputs closer than this are the same (the visible range's edges move by a
#: nanosecond of rounding as it scrolls, which moves a share by ~1e-7: far below a pixel).
SAME_INPUT = 1e-6
#: A column grid shifted by less than this share of a column is the same grid.
SAME_GRID = 1e-3


@dataclass(frozen=True)
class _Drawn:
    key: tuple[object, ...]
    c0_ns: float  # where the first column starts
    col_ns: float  # the columns' width
    inputs: np.ndarray  # (n_inputs, n_columns): what each column's pixels were drawn from
    pixels: np.ndarray


class ScrollingColumns:
    """Dense pixels kept from frame to frame: a view that scrolled by whole columns keeps the
    pixels of every column whose inputs did not change and renders only the others (the
    newest few while following a run), instead of every column of the view each frame.

    A column's pixels depend on that column's inputs alone (``render`` works column by
    column), so the result equals a fresh render of the whole view.
    """

    def __init__(self) -> None:
        self._drawn: _Drawn | None = None
        #: Columns rendered by the last call (for tests and the bench).
        self.last_rendered = 0
        #: The indices of those columns: all that changed since the call before.
        self.last_fresh = np.zeros(0, np.intp)
        #: The last call drew the same columns as the one before (same key, place and count):
        #: its pixels differ from the previous ones at ``last_fresh`` only.
        self.same_grid = False

    def pixels(
        self,
        key: tuple[object, ...],
        c0_ns: float,
        col_ns: float,
        inputs: np.ndarray,
        render_columns: Callable[[np.ndarray], np.ndarray],
    ) -> np.ndarray:
        """The pixels of ``n`` columns from ``c0_ns`` on, ``col_ns`` wide each.

        ``key``: everything else the pixels depend on (sizes, colours, lanes); ``inputs``:
        per column, what its pixels are drawn from; ``render_columns(index)`` renders the
        columns at ``index`` (an int array) into ``(rows, len(index))`` pixels.
        """
        n = inputs.shape[1]
        keep = np.zeros(n, bool)
        overlap: tuple[int, int, int] | None = None  # new columns a..b were old a+shift...
        same_grid = False
        drawn = self._drawn
        if (
            drawn is not None
            and drawn.key == key
            and drawn.inputs.shape[0] == inputs.shape[0]
            and col_ns > 0
            and abs(drawn.col_ns - col_ns) <= SAME_GRID * col_ns / max(n, 1)
        ):
            shift = round((c0_ns - drawn.c0_ns) / col_ns)
            if abs(c0_ns - drawn.c0_ns - shift * col_ns) <= SAME_GRID * col_ns:
                a = max(0, -shift)
                b = min(n, drawn.inputs.shape[1] - shift)
                if b > a:
                    old, new = drawn.inputs[:, a + shift : b + shift], inputs[:, a:b]
                    # Most columns are equal to the bit: only the others are compared closely.
                    differ = np.flatnonzero((new != old).any(axis=0))
                    close = np.all(np.abs(new[:, differ] - old[:, differ]) <= SAME_INPUT, axis=0)
                    keep[a:b] = True
                    keep[a + differ[~close]] = False
                    overlap = (a, b, shift)
                same_grid = shift == 0 and drawn.inputs.shape[1] == n
        fresh = np.flatnonzero(~keep)
        if not keep.any():
            out = render_columns(fresh)
        elif same_grid:
            assert drawn is not None
            out = drawn.pixels  # the same columns: only the fresh ones are written, in place
            if len(fresh):
                out[:, fresh] = render_columns(fresh)
        else:
            assert drawn is not None and overlap is not None
            a, b, shift = overlap
            out = np.empty((drawn.pixels.shape[0], n), np.uint32)
            out[:, a:b] = drawn.pixels[:, a + shift : b + shift]  # the fresh ones follow
            if len(fresh):
                out[:, fresh] = render_columns(fresh)
        self.last_rendered = len(fresh)
        self.last_fresh = fresh
        self.same_grid = same_grid
        self._drawn = _Drawn(key, c0_ns, col_ns, inputs, out)
        return out
