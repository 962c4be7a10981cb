"""Config-change markers on a plot: a labelled vertical line at each change, its
transition stretch shaded, so "transition excluded" is visible where it happened.

The items live in data coordinates (seconds since the session's origin), so scrolling
costs nothing; they are only touched when a change arrives or a transition grows.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyqtgraph as pg
from PySide6.QtCore import Qt

from gpuwatch.core.figures.segments import SegmentStats
from gpuwatch.core.model.messages import ConfigChange
from gpuwatch.qt import palette
from gpuwatch.qt.theme import style_plot_item, theme_manager

LABEL_CHARS = 28


def short_label(change: ConfigChange) -> str:
    """The change's label (or ``config N``), cut to ``LABEL_CHARS`` so a marker's text stays
    short."""
    text = change.label or f"config {change.id}"
    return text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 1] + "…"


def transition_range(
    change: ConfigChange, row: SegmentStats | None, now_ns: int
) -> tuple[int, int]:
    """``[change, first steady step)``; still growing (to ``now_ns``) while unknown."""
    if row is not None and row.steady_since_ns is not None:
        return change.t_ns, max(change.t_ns, row.steady_since_ns)
    if row is not None and row.transition_s is not None:
        return change.t_ns, change.t_ns + int(row.transition_s * 1e9)
    if row is not None and not row.live:
        return change.t_ns, change.t_ns  # ended before it was steady: nothing to shade
    return change.t_ns, max(change.t_ns, now_ns)


class ChangeMarkers:
    """Markers of one run's config changes on ``plot`` (labels only where ``labels``)."""

    def __init__(self, plot: pg.PlotWidget, *, labels: bool) -> None:
        self.plot = plot
        self.labels = labels
        self.lines: dict[int, pg.InfiniteLine] = {}
        self.regions: dict[int, pg.LinearRegionItem] = {}
        self._run: object = None
        self._last: dict[int, tuple[float, float, str]] = {}

    def update(
        self,
        run: object,
        changes: Sequence[ConfigChange],
        rows: Sequence[SegmentStats],
        t0_ns: int,
        now_ns: int,
    ) -> None:
        """Show ``changes`` of ``run`` (any identity of the run, e.g. its hello)."""
        if run is not self._run:
            self.clear()
            self._run = run
        by_id = {row.config_id: row for row in rows}
        for change in changes:
            lo_ns, hi_ns = transition_range(change, by_id.get(change.id), now_ns)
            lo, hi = (lo_ns - t0_ns) / 1e9, (hi_ns - t0_ns) / 1e9
            text = short_label(change)
            if self._last.get(change.id) == (lo, hi, text):
                continue
            self._last[change.id] = (lo, hi, text)
            self._draw(change.id, lo, hi, text)

    def _draw(self, config_id: int, lo: float, hi: float, text: str) -> None:
        line = self.lines.get(config_id)
        if line is None:
            pen = pg.mkPen(palette.MARKER, width=1, style=Qt.PenStyle.DashLine)
            opts = {
                "position": 0.97,
                "color": palette.MARKER,
                "anchors": [(0, 0), (0, 0)],
                "fill": pg.mkBrush(255, 255, 255, 210),
            }
            line = pg.InfiniteLine(
                pos=lo,
                angle=90,
                movable=False,
                pen=pen,
                label=text if self.labels else None,
                labelOpts=opts if self.labels else None,
            )
            line.setZValue(5)
            self.plot.addItem(line)
            style_plot_item(line, theme_manager().colors)  # a marker born after a theme switch
            self.lines[config_id] = line
        else:
            line.setPos(lo)
            if self.labels and line.label is not None:
                line.label.setFormat(text)
        region = self.regions.get(config_id)
        if region is None:
            region = pg.LinearRegionItem(
                values=(lo, hi), movable=False, brush=palette.TRANSITION, pen=pg.mkPen(None)
            )
            region.setZValue(-5)
            self.plot.addItem(region)
            style_plot_item(region, theme_manager().colors)
            self.regions[config_id] = region
        else:
            region.setRegion((lo, hi))

    def clear(self) -> None:
        for item in (*self.lines.values(), *self.regions.values()):
            self.plot.removeItem(item)
        self.lines.clear()
        self.regions.clear()
        self._last.clear()

    def marker_texts(self) -> list[str]:
        """The label of each marker, in config order (for tests)."""
        return [self._last[i][2] for i in sorted(self._last)]
