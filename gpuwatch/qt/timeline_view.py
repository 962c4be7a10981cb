"""Timeline lanes: host phases (one lane each, or three merged on stage), and a device lane
with its idle gaps tinted, drawn from a ``TimelineFrame`` (``gpuwatch.core.figures.frame``
computes what is drawn; this module only draws it).

A sparse view's spans are one item (``lane_spans.LaneSpans``): a layer per category with one
brush and no pen, each drawn with a single ``drawRects`` call (per-bar brushes are ~50x
slower), all layers in one paint. The x axis is seconds since the session's origin; the
caller sets the range.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF
from PySide6.QtGui import QPainterPath

from gpuwatch.core.figures.analysis import Spans
from gpuwatch.core.figures.frame import (
    DenseLanes,
    SparseLanes,
    TimelineFrame,
    dense_lanes,
    idle_in_view,
    present_causes,
    steps_frame,
)
from gpuwatch.core.figures.gap_causes import CAUSES, CausedIdle
from gpuwatch.core.figures.timeline_bins import ROW, Columns
from gpuwatch.core.model.messages import ConfigChange
from gpuwatch.core.model.store import StepsView
from gpuwatch.protocol import ALL_PHASES
from gpuwatch.qt import palette
from gpuwatch.qt.dense_lanes import (
    CLEAR,
    DenseLanesItem,
    Lane,
    ScrollingColumns,
    render,
)
from gpuwatch.qt.gap_tint import CAUSE_COLORS
from gpuwatch.qt.lane_spans import LaneSpans, SpanLayer

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
    """Bars of one category (the lane shade, the kernel lane's events; a sparse timeline's
    spans are one ``LaneSpans``); ``shape`` is the bounding box so hovering stays cheap.

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

    def set_spans(
        self, x0: np.ndarray, x1: np.ndarray, y0: float | np.ndarray, height: float | np.ndarray
    ) -> None:
        if np.size(x0) == 0 and self.count() == 0:
            return  # empty stays empty
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
        # The plots share one scrolling time axis, drawn once under the lowest one (the
        # utilization plot): a second copy re-lays out its ticks on every scrolled frame.
        self.plot_item.hideAxis("bottom")
        self.host_lanes = PHASE_LANES
        self._shade = SpanBars(brush=palette.LANE_SHADE)
        self._shade.setZValue(-10)
        self.addItem(self._shade)
        #: The x range (seconds) the shade covers and the lane count it was drawn for.
        self._shaded: tuple[float, float, int] | None = None
        #: Every sparse lane's spans, one layer per colour, painted as one item; layers are
        #: added bottom to top.
        self.spans = LaneSpans(follows_view=True)  # new steps repaint only themselves
        self.spans.setZValue(1)
        self.addItem(self.spans)
        #: Dense view only: a pale full-height band where the phase occurs at all, so the
        #: solid bar's height reads as "share of this pixel column" (the dense image's colour).
        self.phase_backing: dict[str, SpanLayer] = {
            name: self.spans.add_layer(palette.pale(palette.PHASE_COLORS[name]), f"{name} backing")
            for name in ALL_PHASES
        }
        self.phase_bars: dict[str, SpanLayer] = {
            name: self.spans.add_layer(palette.PHASE_COLORS[name], name) for name in ALL_PHASES
        }
        self.gap_bars = self.spans.add_layer(palette.GAP, "idle gap")
        #: Idle gaps tinted by cause (``show_gap_causes``), drawn over the plain gap tint.
        self.cause_bars: dict[str, SpanLayer] = {
            cause: self.spans.add_layer(CAUSE_COLORS[cause], f"idle: {cause}") for cause in CAUSES
        }
        self.device_bars = self.spans.add_layer(palette.DEVICE_ACTIVE, "device")
        #: Dense windows: every lane as one image (``show_columns``).
        self.dense_lanes = DenseLanesItem()
        self.dense_lanes.setZValue(1)
        self.dense_lanes.setVisible(False)
        self.addItem(self.dense_lanes)
        #: The dense image's pixels, kept while the view scrolls (only new columns rendered).
        self.dense_pixels = ScrollingColumns()
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

    def show_frame(self, frame: TimelineFrame) -> None:
        """Draw the timeline of ``frame``: per pixel column (dense) or span by span."""
        self.set_device_kind(frame.device_kind)
        if frame.dense is not None:
            self._draw_dense(frame.dense, frame.t0_ns, frame.lo_ns, frame.hi_ns)
        elif frame.sparse is not None:
            self._draw_sparse(frame.sparse, frame.t0_ns, frame.lo_ns, frame.hi_ns, frame.px_ns)
        if frame.causes_shown is not None:
            self.causes_shown = frame.causes_shown

    def show_steps(
        self,
        view: StepsView,
        active: Spans,
        t0_ns: int,
        lo_ns: int,
        hi_ns: int,
        *,
        changes: Sequence[ConfigChange] = (),
    ) -> None:
        """Redraw every lane for the visible window ``[lo_ns, hi_ns]`` from ``view`` (a
        one-off drawing: the window draws the frames of its ``FramePresenter``).

        ``active`` are the merged device spans of ``view`` (``analysis.active_spans``);
        ``changes`` the run's knob changes (their transitions tint as *reconfigure*). Dense
        data (more spans than half the pixels) is drawn per pixel column.
        """
        self.show_frame(
            steps_frame(
                view,
                changes,
                t0_ns=t0_ns,
                lo_ns=lo_ns,
                hi_ns=hi_ns,
                width_px=self.width_px(),
                device_kind=self._device_kind,
                active=active,
            )
        )

    def show_gap_causes(self, idle: CausedIdle, t0_ns: int, lo_ns: int, hi_ns: int) -> None:
        """Tint the sparse device lane's idle gaps by cause (call right after ``show_steps``;
        a dense view was tinted per pixel column already)."""
        if self.dense:
            return
        spans = idle_in_view(idle, lo_ns, hi_ns)
        self._tint(spans, t0_ns, (hi_ns - lo_ns) / self.width_px())
        self.causes_shown = present_causes(spans)

    def show_columns(self, cols: Columns, t0_ns: int, lo_ns: int, hi_ns: int) -> None:
        """Draw dense data given per pixel column (``TimelineBins.columns``)."""
        lanes, shown = dense_lanes(cols)
        self._draw_dense(lanes, t0_ns, lo_ns, hi_ns)
        self.causes_shown = shown

    def _draw_sparse(
        self, lanes: SparseLanes, t0_ns: int, lo_ns: int, hi_ns: int, px_ns: float
    ) -> None:
        """Span by span, each at least a pixel wide (so a 20 us sync phase stays visible)."""
        self.dense = False
        self.dense_lanes.setVisible(False)
        self.shade_lanes(t0_ns, lo_ns, hi_ns)
        for row, (_, phases) in enumerate(self.host_lanes):
            for name in phases:
                s, e = lanes.phases[name]
                self.phase_bars[name].set_spans(
                    _to_s(s, t0_ns),
                    _to_s(np.maximum(e, s + px_ns), t0_ns),
                    lane_y(row, self.n_lanes),
                    BAR_HEIGHT,
                )
        s, e = lanes.active
        y = lane_y(self.n_lanes - 1, self.n_lanes)
        self.device_bars.set_spans(
            _to_s(s, t0_ns), _to_s(np.maximum(e, s + px_ns), t0_ns), y, BAR_HEIGHT
        )
        g0, g1 = lanes.gaps
        pad = (1 - BAR_HEIGHT) / 4
        self.gap_bars.set_spans(_to_s(g0, t0_ns), _to_s(g1, t0_ns), y - pad, BAR_HEIGHT + 2 * pad)
        if lanes.idle is not None:
            self._tint(lanes.idle, t0_ns, px_ns)

    def _draw_dense(self, lanes: DenseLanes, t0_ns: int, lo_ns: int, hi_ns: int) -> None:
        """Dense data: per pixel column and lane, a bar whose height is the share of the
        column the lane was active, so the duty cycle stays readable at any rate.

        Phases sharing a lane stack, over the pale colour of the lane's first phase present;
        the device lane's idle columns are tinted by their main cause. All of it is one
        image (``DenseLanesItem``): far cheaper to paint than a bar per column. Its columns
        are kept from the frame before where their inputs did not change
        (``ScrollingColumns``): following a run renders only the newest few.
        """
        self.dense = True
        self.shade_lanes(t0_ns, lo_ns, hi_ns)
        self.spans.clear()
        cols = lanes.columns
        n = len(cols.c0)
        rows = max(int(self.plot_item.getViewBox().height() / (self.n_lanes + 0.2)), 4)
        host = [
            (
                [_color(self.phase_bars[name]) for name in phases],
                [_color(self.phase_backing[name]) for name in phases],
            )
            for _, phases in self.host_lanes
        ]
        tints = (
            _color(self.gap_bars),
            _color(self.device_bars),
            tuple(_color(self.cause_bars[c]) for c in CAUSES),
        )
        key = (rows, self.host_lanes, repr(host), tints)
        # Step counts are not drawn: a column is drawn from its time shares and idle flags.
        inputs = np.vstack([cols.share[: ROW["steps"]], lanes.device_idle, lanes.idle_cause])

        def render_columns(index: np.ndarray) -> np.ndarray:
            return render(self._image_lanes(lanes, index), len(index), rows, BAR_HEIGHT)

        col_ns = float(cols.c1[0] - cols.c0[0]) if n else 0.0
        pixels = self.dense_pixels.pixels(
            key, float(cols.c0[0]) if n else 0.0, col_ns, inputs, render_columns
        )
        self.dense_lanes.show_pixels(
            pixels,
            (cols.c0[0] - t0_ns) / 1e9 if n else 0.0,
            (cols.c1[-1] - t0_ns) / 1e9 if n else 0.0,
            self.n_lanes,
            self.dense_pixels.last_fresh if self.dense_pixels.same_grid else None,
        )

    def _image_lanes(self, lanes: DenseLanes, index: np.ndarray) -> list[Lane]:
        """The dense image's lanes for the columns at ``index``, top to bottom."""
        cols = lanes.columns
        image_lanes = []
        for _, phases in self.host_lanes:
            backing = np.full(len(index), CLEAR, np.uint32)
            for name in reversed(phases):  # the first phase present wins
                backing = np.where(
                    cols[name][index] > 0, np.uint32(_color(self.phase_backing[name])), backing
                )
            image_lanes.append(
                Lane(
                    [cols[name][index] for name in phases],
                    [_color(self.phase_bars[name]) for name in phases],
                    backing,
                )
            )
        idle_cause = lanes.idle_cause[index]
        tint = np.where(
            lanes.device_idle[index], np.uint32(_color(self.gap_bars)), np.uint32(CLEAR)
        )
        for i, cause in enumerate(CAUSES):
            tint = np.where(idle_cause == i, np.uint32(_color(self.cause_bars[cause])), tint)
        image_lanes.append(
            Lane(
                [cols["active"][index]],
                [_color(self.device_bars)],
                tint,
                backing_pad=(1 - BAR_HEIGHT) / 4,
            )
        )
        return image_lanes

    def _tint(self, spans: dict[str, Spans], t0_ns: int, px_ns: float) -> None:
        """Cause bars at the gap tint's place (each at least ``px_ns`` wide); the plain gap
        tint shows only where no cause is drawn."""
        y, height = self.gap_bars.y0, self.gap_bars.height
        for cause, (s, e) in spans.items():
            self.cause_bars[cause].set_spans(
                _to_s(s, t0_ns), _to_s(np.maximum(e, s + px_ns), t0_ns), y, height
            )
        # the tint replaces the plain one
        self.gap_bars.setVisible(not any(len(s) for s, _ in spans.values()))

    def dense_share(self, row: int, bars: SpanLayer) -> np.ndarray:
        """Per column of the dense image, the share of lane ``row``'s bar drawn in ``bars``'s
        colour (what a user sees: for checks and tests)."""
        pixels = self.dense_lanes.pixels
        rows = pixels.shape[0] // self.n_lanes
        bar_px = max(round(BAR_HEIGHT * rows), 1)
        margin = (rows - bar_px) // 2
        cell = pixels[row * rows + margin : row * rows + margin + bar_px]
        return (cell == np.uint32(_color(bars))).sum(axis=0) / bar_px

    def width_px(self) -> float:
        """Plot width in pixels (at least 100: a window not laid out yet)."""
        return max(self.plot_item.getViewBox().width(), 100.0)

    def shade_lanes(self, t0_ns: int, lo_ns: int, hi_ns: int) -> None:
        """Every other lane lightly shaded across the window and a window's width either
        side, so a view that scrolls on leaves the shade as it is for a while."""
        lo_s, hi_s = (lo_ns - t0_ns) / 1e9, (hi_ns - t0_ns) / 1e9
        shaded = self._shaded
        if (
            shaded is not None
            and shaded[2] == self.n_lanes
            and shaded[0] <= lo_s <= hi_s <= shaded[1]
        ):
            return
        width = hi_s - lo_s
        shade_y = np.arange(self.n_lanes - 1, -1, -2, dtype=np.float64) - 0.5
        self._shaded = (lo_s - width, hi_s + width, self.n_lanes)
        self._shade.set_spans(
            np.full(len(shade_y), lo_s - width), np.full(len(shade_y), hi_s + width), shade_y, 1.0
        )


def _to_s(t: np.ndarray, t0_ns: int) -> np.ndarray:
    """ns on the host axis → seconds since the session's origin (the x axis)."""
    return (np.asarray(t) - t0_ns) / 1e9


def _color(bars: SpanLayer) -> int:
    """The layer's current (theme's) colour as a packed RGBA pixel."""
    return bars.pixel


#: Items whose bounding rectangle depends on the view's scale and is recomputed lazily (the
#: others' rectangles do not change when the view scrolls).
_SIZED_IN_PIXELS = (pg.PlotCurveItem, pg.InfiniteLine, pg.ScatterPlotItem, pg.TextItem)


def settle_before_paint(widget: pg.PlotWidget) -> None:
    """Apply a changed view range to every item now, in the redraw tick, not in the paint.

    pyqtgraph updates a view's transform when it paints, and then curves (bounds padded in
    pixels) and infinite lines (grid lines, change markers: rectangles spanning the view)
    recompute their geometry lazily, calling ``prepareGeometryChange`` *inside* the paint,
    which queues another full repaint: 3-4 paints of each plot per scrolled frame here. Done
    before the paint, those changes land in the one paint that follows.
    """
    scene = widget.scene()
    scene.prepareForPaint()  # view boxes update their transforms: items are told now
    for item in scene.items():
        if isinstance(item, _SIZED_IN_PIXELS):
            item.boundingRect()  # lazily invalidated: computed (and announced) now


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
    for name in ("left", "bottom", "right", "top"):
        # Seconds and percent need no SI prefix; pyqtgraph would re-set every axis label's
        # HTML, hidden axes' too, on each range change (each frame while following "now").
        item.getAxis(name).enableAutoSIPrefix(False)
    item.getAxis("left").setWidth(AXIS_WIDTH)
