"""Timeline lanes: host phases (one lane each, or three merged on stage), and a device lane
with its idle gaps tinted.

One ``BarGraphItem`` per category with one shared brush and no pen, so pyqtgraph draws all
its rectangles in a single ``drawRects`` call (the fast path; per-bar brushes are ~50x
slower). The x axis is seconds since the session's origin; the caller sets the range.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF
from PySide6.QtGui import QPainterPath

from gpuwatch.core.analysis import gaps
from gpuwatch.core.gap_causes import CAUSES, CausedIdle
from gpuwatch.core.store import StepsView
from gpuwatch.protocol import ALL_PHASES
from gpuwatch.qt import palette
from gpuwatch.qt.gap_tint import CAUSE_COLORS, present_causes, tint_spans
from gpuwatch.qt.spans import clip_to_window, column_occupancy, is_dense, phase_spans

#: Host lanes as (name, phases drawn in it), top to bottom, above the device lane (which sits
#: next to the utilization plot below): one lane per phase at the desk...
PHASE_LANES: tuple[tuple[str, tuple[str, ...]], ...] = tuple((p, (p,)) for p in ALL_PHASES)
#: ...and fewer, taller ones on stage (presentation mode), grouped by what the loop waits on;
#: each phase keeps its colour inside its lane.
MERGED_LANES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("input", ("data", "h2d")),
    ("compute", ("forward", "backward", "optimizer")),
    ("sync · other", ("sync", "other")),
)
BAR_HEIGHT = 0.72
#: Left axis width shared with the utilization plot so both x axes line up pixel for pixel.
AXIS_WIDTH = 150

DEVICE_LABELS = {
    "cuda": "device stream active\n(upper bound)",
    "cpu": "compute spans\n(CPU)",
    None: "device",
}


class SpanBars(pg.BarGraphItem):
    """Bars of one category; ``shape`` is the bounding box so hovering stays cheap.

    The default shape is a path of every rectangle, rebuilt on each mouse move over the
    plot: with 30,000 spans that alone would stall the window.
    """

    def __init__(self, **opts: object) -> None:
        empty = np.empty(0)
        self._bounds = QRectF()
        super().__init__(x0=empty, x1=empty, y0=0.0, height=BAR_HEIGHT, pen=None, **opts)

    def shape(self) -> QPainterPath:
        path = QPainterPath()
        path.addRect(self.boundingRect())
        return path

    def boundingRect(self) -> QRectF:
        """The data rectangle, computed once per ``set_spans``. pyqtgraph's own pads it by a
        pixel it measures anew on every call (dozens of calls per frame, ~7 ms a frame here
        with 20 items); without a pen there is nothing to pad."""
        return QRectF(self._bounds)

    def set_spans(self, x0: np.ndarray, x1: np.ndarray, y0: float | np.ndarray,
                  height: float | np.ndarray) -> None:
        self.prepareGeometryChange()
        if np.size(x0):
            bottom = np.asarray(y0) + np.minimum(np.asarray(height), 0)
            top = np.asarray(y0) + np.maximum(np.asarray(height), 0)
            left, right = float(np.min(x0)), float(np.max(x1))
            low, high = float(np.min(bottom)), float(np.max(top))
            self._bounds = QRectF(left, low, right - left, high - low)
        else:
            self._bounds = QRectF()
        self.setOpts(x0=x0, x1=x1, y0=y0, height=height)

    def count(self) -> int:
        x0 = self.opts.get("x0")
        return 0 if x0 is None else int(np.size(x0))


def lane_y(row: int, n_lanes: int) -> float:
    """Bottom of the bar of lane ``row`` (counted from the top) of ``n_lanes``."""
    return n_lanes - 1 - row - BAR_HEIGHT / 2


class TimelineView(pg.PlotWidget):
    """Host phase lanes above a device lane, drawn from a ``StepsView``."""

    def __init__(self) -> None:
        super().__init__(background=palette.BACKGROUND)
        style_plot(self)
        self.plot_item = self.getPlotItem()
        self.host_lanes = PHASE_LANES
        self._shade = SpanBars(brush=palette.LANE_SHADE)
        self._shade.setZValue(-10)
        self.addItem(self._shade)
        self.phase_bars: dict[str, SpanBars] = {}
        #: Dense view only: a pale full-height band where the phase occurs at all, so the
        #: solid bar's height reads as "share of this pixel column".
        self.phase_backing: dict[str, SpanBars] = {}
        for name in ALL_PHASES:
            backing = SpanBars(brush=palette.pale(palette.PHASE_COLORS[name]))
            bars = SpanBars(brush=palette.PHASE_COLORS[name], name=name)
            bars.setZValue(1)
            self.phase_backing[name] = backing
            self.phase_bars[name] = bars
            self.addItem(backing)
            self.addItem(bars)
        self.gap_bars = SpanBars(brush=palette.GAP, name="idle gap")
        self.gap_bars.setZValue(1)
        self.device_bars = SpanBars(brush=palette.DEVICE_ACTIVE, name="device")
        self.device_bars.setZValue(2)
        self.addItem(self.gap_bars)
        self.addItem(self.device_bars)
        #: Idle gaps tinted by cause (``show_gap_causes``), drawn over the plain gap tint.
        self.cause_bars: dict[str, SpanBars] = {}
        for cause in CAUSES:
            bars = SpanBars(brush=CAUSE_COLORS[cause], name=f"idle: {cause}")
            bars.setZValue(1.5)
            self.cause_bars[cause] = bars
            self.addItem(bars)
        self.causes_shown: tuple[str, ...] = ()  # for the legend, most visible first
        self.dense = False  # last redraw aggregated per pixel column
        self._device_kind: str | None = "unset"
        self.set_device_kind(None)

    @property
    def n_lanes(self) -> int:
        return len(self.host_lanes) + 1  # the device lane at the bottom

    def set_merged(self, merged: bool) -> None:
        """Host phases in three lanes (``MERGED_LANES``, presentation) or one lane each."""
        self.host_lanes = MERGED_LANES if merged else PHASE_LANES
        self._set_ticks()

    def set_device_kind(self, kind: str | None) -> None:
        """Label the device lane for what it really shows on this device."""
        if kind == self._device_kind:
            return
        self._device_kind = kind
        self._set_ticks()

    def _set_ticks(self) -> None:
        n = self.n_lanes
        label = DEVICE_LABELS.get(self._device_kind, DEVICE_LABELS[None])
        ticks = [(n - 1 - i, name) for i, (name, _) in enumerate(self.host_lanes)]
        ticks.append((0, label))
        self.plot_item.getAxis("left").setTicks([ticks, []])
        self.plot_item.setYRange(-0.6, n - 0.4, padding=0)

    def show_steps(self, view: StepsView, active: tuple[np.ndarray, np.ndarray], t0_ns: int,
                   lo_ns: int, hi_ns: int) -> None:
        """Redraw every lane for the visible window ``[lo_ns, hi_ns]``.

        ``active`` are the merged device spans of ``view`` (``analysis.active_spans``).

        Sparse data is drawn span by span (each at least a pixel wide, so a 20 us sync
        phase stays visible). Dense data (more spans than half the pixels) is drawn as one
        bar per pixel column whose height is the share of the column the lane was active,
        so the duty cycle stays readable at any rate.
        """
        vb = self.plot_item.getViewBox()
        width_px = max(vb.width(), 100.0)
        px_ns = (hi_ns - lo_ns) / width_px
        n_lanes = self.n_lanes
        min_h = (n_lanes / max(vb.height(), 50.0)) * 1.5  # 1.5 px in lane units

        def to_s(t: np.ndarray) -> np.ndarray:
            return (t - t0_ns) / 1e9

        shade_y = np.arange(n_lanes - 1, -1, -2, dtype=np.float64) - 0.5
        self._shade.set_spans(np.full(len(shade_y), to_s(lo_ns)),
                              np.full(len(shade_y), to_s(hi_ns)), shade_y, 1.0)
        in_window = (view.host[:, -1] >= lo_ns) & (view.host[:, 0] <= hi_ns)
        self.dense = is_dense(int(in_window.sum()), width_px)

        def draw(bars: SpanBars, spans: tuple[np.ndarray, np.ndarray], y: float,
                 backing: SpanBars | None = None, below: np.ndarray | None = None
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            if self.dense:
                c0, c1, frac = column_occupancy(*spans, lo_ns, hi_ns, width_px)
                on = frac > 0
                x0, x1 = to_s(c0[on]), to_s(c1[on])
                # Phases sharing a lane stack: its height is their joint share of the column.
                y0 = y if below is None else y + below[on] * BAR_HEIGHT
                bars.set_spans(x0, x1, y0, np.maximum(frac[on] * BAR_HEIGHT, min_h))
                if backing is not None:
                    backing.set_spans(x0, x1, y, BAR_HEIGHT)
                return c0, c1, frac
            s, e = clip_to_window(*spans, lo_ns, hi_ns)
            bars.set_spans(to_s(s), to_s(np.maximum(e, s + px_ns)), y, BAR_HEIGHT)
            if backing is not None:
                backing.set_spans(np.empty(0), np.empty(0), y, BAR_HEIGHT)
            return s, e, np.ones(len(s))

        spans_of = phase_spans(view)
        for row, (_, phases) in enumerate(self.host_lanes):
            below = np.zeros(max(int(np.ceil(width_px)), 1))
            for name in phases:
                _, _, frac = draw(self.phase_bars[name], spans_of[name], lane_y(row, n_lanes),
                                  self.phase_backing[name], below)
                if self.dense:
                    below += frac
        y = lane_y(n_lanes - 1, n_lanes)
        s, e, frac = draw(self.device_bars, active, y)
        if self.dense:  # columns not fully active, between the first and last activity
            on = np.flatnonzero(frac > 0)
            idle = np.zeros(len(frac), bool)
            if len(on):
                idle[on[0]:on[-1] + 1] = frac[on[0]:on[-1] + 1] < 1.0
            g0, g1 = s[idle], e[idle]
        else:
            g0, g1 = gaps(s, e)
        pad = (1 - BAR_HEIGHT) / 4
        self.gap_bars.set_spans(to_s(g0), to_s(g1), y - pad, BAR_HEIGHT + 2 * pad)

    def show_gap_causes(self, idle: CausedIdle, t0_ns: int, lo_ns: int, hi_ns: int) -> None:
        """Tint the device lane's idle gaps by cause (call right after ``show_steps``).

        The tint takes the plain gap tint's place and geometry; dense views get one colour
        per pixel column, the cause with most idle time in it.
        """
        width_px = max(self.plot_item.getViewBox().width(), 100.0)
        spans = tint_spans(idle, lo_ns, hi_ns, dense=self.dense, width_px=width_px)
        y, height = self.gap_bars.opts["y0"], self.gap_bars.opts["height"]
        px_ns = (hi_ns - lo_ns) / width_px
        for cause, (s, e) in spans.items():
            self.cause_bars[cause].set_spans((s - t0_ns) / 1e9,
                                             (np.maximum(e, s + px_ns) - t0_ns) / 1e9,
                                             y, height)
        self.causes_shown = present_causes(spans)
        self.gap_bars.setVisible(not self.causes_shown)  # the tint replaces the plain one


def style_plot(widget: pg.PlotWidget) -> None:
    """Light background, 1 px, no auto-range or menu: the window owns the x range."""
    item = widget.getPlotItem()
    item.hideButtons()
    item.setMenuEnabled(False)
    item.disableAutoRange()
    vb = item.getViewBox()
    vb.setMouseEnabled(x=True, y=False)
    vb.setLimits(minXRange=1e-4, maxXRange=24 * 3600)
    for name in ("left", "bottom"):
        axis = item.getAxis(name)
        axis.setPen(palette.FOREGROUND)
        axis.setTextPen(palette.FOREGROUND)
    item.getAxis("left").setWidth(AXIS_WIDTH)

