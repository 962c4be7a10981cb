"""Dense timeline lanes as one image: a column of pixels per pixel column of the view.

When a view holds more steps than pixels, each lane is drawn per pixel column as a bar whose
height is the share of the column the lane was active (stacked when a lane holds several
phases). As rectangles that is ~11,000 one-pixel bars a frame (~6 ms of ``drawRects`` plus
pyqtgraph's per-item bookkeeping here); as one RGBA image built with a few vectorised
``np.where`` per lane it is ~1 ms to draw. The colours are read from the lanes' bar items,
so the theme machinery, which re-colours those, re-colours this too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF
from PySide6.QtGui import QColor

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


class DenseLanesItem(pg.ImageItem):
    """The image of dense lanes, placed over ``[x0, x1]`` seconds and the lanes' y range."""

    def __init__(self) -> None:
        super().__init__(axisOrder="row-major")
        self.pixels = np.zeros((0, 0), np.uint32)

    def show_pixels(self, pixels: np.ndarray, x0_s: float, x1_s: float, n_lanes: int) -> None:
        """Draw ``pixels`` (from ``render``) with lane 0 at the top of ``n_lanes`` lanes."""
        self.pixels = pixels
        # Row 0 of an image is drawn at the bottom of a y-up view: flip, and view as RGBA.
        rgba_rows = (
            np.ascontiguousarray(pixels[::-1])
            .view(np.uint8)
            .reshape(pixels.shape[0], pixels.shape[1], 4)
        )
        self.setImage(rgba_rows, autoLevels=False, levels=None)
        self.setRect(QRectF(x0_s, -0.5, max(x1_s - x0_s, 1e-12), n_lanes))
        self.setVisible(True)
