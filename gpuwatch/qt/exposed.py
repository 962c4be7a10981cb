"""Which x ranges of an item a paint shows, for items that draw only those.

A followed plot repaints a few columns at each end of its view box a frame
(``scroll_repaint``). Qt paints every item the repainted region touches, clipped to it, and
tells an item only the bounding rectangle of that region (both ends: the whole width). A
plot widget that is ``RegionPainted`` says which region its paint event repaints, and the
items that draw thousands of spans or a long curve draw only what falls in it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

from PySide6.QtCore import QRect
from PySide6.QtGui import QPainter, QPaintEvent, QRegion

#: The regions (viewport pixels) of the paint events being handled, innermost last.
_painting: list[QRegion] = []


class RegionPainted:
    """Mixed into a ``pg.PlotWidget``: its paint event's region is known to its items."""

    def paintEvent(self, event: QPaintEvent) -> None:
        _painting.append(QRegion(event.region()))
        try:
            super().paintEvent(event)  # type: ignore[misc]
        finally:
            _painting.pop()


def exposed_x(painter: QPainter, margin_px: float = 1.0) -> list[tuple[float, float]] | None:
    """The x ranges (item coordinates, sorted, each widened by ``margin_px`` pixels) that the
    paint shows, or None for all of it (a paint not from a ``RegionPainted`` widget's paint
    event, e.g. a screenshot, or a rotated item)."""
    if not _painting:
        return None
    world = painter.worldTransform()
    scale, offset = world.m11(), world.dx()
    if world.m12() != 0 or world.m21() != 0 or scale <= 0:
        return None
    ranges = sorted(
        ((r.left() - margin_px - offset) / scale, (r.right() + 1 + margin_px - offset) / scale)
        for r in cast(Iterable[QRect], _painting[-1])  # a QRegion iterates its rectangles
    )
    if not ranges:
        return None
    merged = [ranges[0]]
    for lo, hi in ranges[1:]:
        if lo <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged
