"""The rank lanes under the timeline: where each rank's step time goes, side by side.

The timeline draws rank 0; this lane group draws every rank of a run of many ranks on the same
x axis (linked to the timeline's range while shown), one row per rank, each step's host phases
in their timeline colours (when steps are too narrow for that, each step in the colour of its
longest phase). The straggler reads at a glance: its row is the colour of its slow
phase (input, say) while every other row is backward's, the time they wait for it in the
all-reduce. A click on a rank's row or label expands its group into one row per phase (and
collapses it again); the context menu expands or collapses them all; the expanded ranks are
kept across redraws. Beyond ``MAX_LANES`` ranks the group is one merged row per phase for all
of them: at each step number the spread over the ranks, pale, and the median rank's span; the
hover names the slowest rank (``rank_lane_rows``). Rows that do not fit ``MAX_HEIGHT`` scroll.
Every rank is drawn on rank 0's clock (``Session.rank_steps``: another machine's ranks are
moved by their measured clock offset); the ranks of the job not drawn yet (not connected, or
their clock not measured yet) are counted in the last row's label. Redrawn with the
scoreboard (a few times a second), not every frame: the rows scroll with the timeline in
between.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, Qt
from PySide6.QtGui import QAction, QPainter
from PySide6.QtWidgets import QGraphicsSceneWheelEvent, QScrollBar, QSplitter

from gpuwatch.core.figures.rank_figures import RankSteps
from gpuwatch.protocol import PHASES
from gpuwatch.qt import palette
from gpuwatch.qt.lane_spans import LaneSpans, SpanLayer
from gpuwatch.qt.rank_lane_rows import (
    MAX_LANES,
    MERGED,
    PHASE,
    RANK,
    MergedSteps,
    Row,
    merge_steps,
    merged_rows,
    note_row,
    one_phase_spans,
    phase_spans,
    rank_rows,
)
from gpuwatch.qt.timeline_view import AXIS_WIDTH, style_plot

__all__ = ["MAX_LANES", "RankLanes", "RankLanesControls", "RankedSource"]

#: A row's bar height (the row is 1 tall).
BAR_HEIGHT = 0.7
#: Pixels a row takes, and the lane group's height bounds: beyond ``MAX_HEIGHT`` the rows
#: scroll (a scroll bar at the labels' left edge, or the wheel over the labels).
ROW_PX = 18
MIN_HEIGHT, MAX_HEIGHT = 48, 320
#: Rows that fit in ``MAX_HEIGHT``.
ROWS_FIT = (MAX_HEIGHT - 12) // ROW_PX
SCROLLBAR_PX = 10

TOOLTIP = (
    "Each rank's steps, one row per rank, in the timeline's phase colours: the straggler's "
    "row shows its slow phase, the others' the backward in which they wait for it (DDP's "
    "all-reduce). Click a rank to see its phases one per row; right-click to expand or "
    "collapse them all."
)
MERGED_TOOLTIP = (
    "Every rank's steps, one row per phase: pale from the earliest start to the latest end "
    "over the ranks at each step, solid where the median rank ran it. Hover a step to see "
    "its slowest rank."
)


#: A group's header label sits this far left of its phases' labels, which read as indented
#: under it (the labels are right-aligned against the plot; Qt trims trailing spaces).
HEADER_INDENT_PX = 22


class RowAxis(pg.AxisItem):
    """The rows' labels: the left axis's ticks, as the timeline labels its lanes, with the
    labels in ``headers`` moved left to head their group. The wheel over them scrolls the rows
    when they do not all fit (``on_wheel``, given the wheel's steps up; it returns whether it
    scrolled)."""

    def __init__(self) -> None:
        super().__init__("left")
        self.on_wheel: Callable[[int], bool] | None = None
        self.headers: frozenset[str] = frozenset()

    def generateDrawSpecs(self, p: QPainter) -> tuple[object, object, list[object]] | None:
        specs = super().generateDrawSpecs(p)
        if specs is None or not self.headers:
            return specs
        axis, ticks, texts = specs
        for rect, _, text in texts:
            if text in self.headers:
                rect.translate(-HEADER_INDENT_PX, 0)
        return axis, ticks, texts

    def wheelEvent(self, event: QGraphicsSceneWheelEvent) -> None:
        notches = round(event.delta() / 120) or (1 if event.delta() > 0 else -1)
        if self.on_wheel is not None and self.on_wheel(notches):
            event.accept()
            return
        super().wheelEvent(event)


class RankLanes(pg.PlotWidget):
    """The lane group: rank rows with their phases (see the module docstring)."""

    def __init__(self) -> None:
        axis = RowAxis()
        super().__init__(background=palette.BACKGROUND, axisItems={"left": axis})
        style_plot(self)
        item = self.getPlotItem()
        axis.setWidth(AXIS_WIDTH)
        axis.on_wheel = self._wheel
        item.getAxis("bottom").hide()
        self.spans = LaneSpans()
        self.addItem(self.spans)
        #: The merged rows' spread over the ranks, pale, under the median rank's span.
        self.spread_layers: dict[str, SpanLayer] = {
            phase: self.spans.add_layer(
                palette.pale(palette.PHASE_COLORS[phase]), f"{phase} spread"
            )
            for phase in PHASES
        }
        self.layers: dict[str, SpanLayer] = {
            phase: self.spans.add_layer(palette.PHASE_COLORS[phase], phase) for phase in PHASES
        }
        #: The ranks drawn, top row first (tests read them); every rank in merged rows.
        self.ranks: tuple[int, ...] = ()
        #: The rows drawn, top to bottom.
        self.rows: tuple[Row, ...] = ()
        #: Ranks whose group is expanded: kept while the window lives, whatever is drawn.
        self.expanded: set[int] = set()
        #: The merged rows' steps (a run of more than ``MAX_LANES`` ranks), else None.
        self.merged: MergedSteps | None = None
        self._top = 0  # the first row in view when they do not all fit
        self._drawn: tuple[Sequence[RankSteps], int, float] = ((), 0, 1.0)
        self.scrollbar = QScrollBar(Qt.Orientation.Vertical, self)
        self.scrollbar.hide()
        self.scrollbar.valueChanged.connect(self._scrolled)
        self.expand_all = QAction("Expand all", self)
        self.expand_all.triggered.connect(lambda: self.set_expanded(self._rank_ids(), True))
        self.collapse_all = QAction("Collapse all", self)
        self.collapse_all.triggered.connect(lambda: self.set_expanded(self._rank_ids(), False))
        self.addActions([self.expand_all, self.collapse_all])
        self.setContextMenuPolicy(Qt.ContextMenuPolicy.ActionsContextMenu)
        self.scene().sigMouseClicked.connect(self._clicked)
        self.scene().sigMouseMoved.connect(self._hovered)
        self.setToolTip(TOOLTIP)
        self.spans.setToolTip(TOOLTIP)

    def show_ranks(self, ranks: Sequence[RankSteps], t0_ns: int, px_s: float) -> None:
        """Draw ``ranks`` (their steps in view), each span at least a pixel (``px_s``) wide."""
        self._drawn = (ranks, t0_ns, px_s)
        drawn = list(ranks)
        world = max((r.info.world_size for r in drawn), default=0)
        left_out = max(0, world - len(drawn))  # not connected yet, or its clock not known yet
        steps = {r.info.rank: r.steps for r in drawn}
        if len(drawn) > MAX_LANES:
            rows = merged_rows(len(drawn))
            self.merged = merge_steps([r.steps for r in drawn], list(steps), t0_ns)
        else:
            rows = rank_rows(list(steps), self.expanded)
            self.merged = None
        if left_out:
            rows.append(note_row(left_out))
        n = len(rows)
        x0: dict[SpanLayer, list[np.ndarray]] = {}
        x1: dict[SpanLayer, list[np.ndarray]] = {}
        y0: dict[SpanLayer, list[np.ndarray]] = {}

        def paint(layer: SpanLayer, spans: tuple[np.ndarray, np.ndarray], row: int) -> None:
            x0.setdefault(layer, []).append(spans[0])
            x1.setdefault(layer, []).append(spans[1])
            y = n - 1 - row + (1 - BAR_HEIGHT) / 2
            y0.setdefault(layer, []).append(np.full(len(spans[0]), y))

        for row, line in enumerate(rows):
            phase = line.phase
            if line.kind == RANK and line.rank is not None:
                for i, spans in enumerate(phase_spans(steps[line.rank], t0_ns, px_s)):
                    paint(self.layers[PHASES[i]], spans, row)
            elif line.kind == PHASE and line.rank is not None and phase is not None:
                spans = one_phase_spans(steps[line.rank], phase, t0_ns, px_s)
                paint(self.layers[PHASES[phase]], spans, row)
            elif line.kind == MERGED and self.merged is not None and phase is not None:
                paint(self.spread_layers[PHASES[phase]], self.merged.spread(phase, px_s), row)
                paint(self.layers[PHASES[phase]], self.merged.median(phase, px_s), row)
        for layer in self.spans.layers:
            if sum(len(x) for x in x0.get(layer, ())):
                layer.set_rects(
                    np.concatenate(x0[layer]),
                    np.concatenate(x1[layer]),
                    np.concatenate(y0[layer]),
                    BAR_HEIGHT,
                )
            else:
                layer.clear()
        ticks = [(n - 1 - row + 0.5, line.label) for row, line in enumerate(rows)]
        axis = self.getPlotItem().getAxis("left")
        if isinstance(axis, RowAxis):
            axis.headers = frozenset(line.label for line in rows if line.is_header)
        axis.setTicks([ticks, []])
        self.rows = tuple(rows)
        self.ranks = tuple(steps)
        self.expand_all.setEnabled(self.merged is None)
        self.collapse_all.setEnabled(self.merged is None)
        tip = TOOLTIP if self.merged is None else MERGED_TOOLTIP
        if self.toolTip() != tip:
            self.setToolTip(tip)
            self.spans.setToolTip(tip)
        height = min(MAX_HEIGHT, max(MIN_HEIGHT, ROW_PX * n + 12))
        if self.maximumHeight() != height:
            self.setMinimumHeight(height)
            self.setMaximumHeight(height)
        self._set_rows_in_view()

    @property
    def labels(self) -> tuple[str, ...]:
        """The rows' labels, top to bottom."""
        return tuple(row.label for row in self.rows)

    def toggle(self, rank: int) -> None:
        """Expand ``rank``'s group if collapsed, else collapse it, and redraw now."""
        self.set_expanded([rank], rank not in self.expanded)

    def set_expanded(self, ranks: Sequence[int], expanded: bool) -> None:
        """Expand (or collapse) the groups of ``ranks`` and redraw now; an expanded group is
        scrolled into view."""
        if expanded:
            self.expanded.update(ranks)
        else:
            self.expanded.difference_update(ranks)
        self.show_ranks(*self._drawn)
        if expanded and len(ranks) == 1:
            first = next((i for i, r in enumerate(self.rows) if r.rank == ranks[0]), None)
            if first is not None:
                self._reveal(first, first + len(PHASES))

    def row_at(self, y: float) -> Row | None:
        """The row at ``y`` (the view's units: row ``i`` from the top spans ``n-1-i..n-i``)."""
        i = len(self.rows) - 1 - int(np.floor(y))
        return self.rows[i] if 0 <= i < len(self.rows) else None

    def hover_text(self, x: float, y: float) -> str | None:
        """What the merged row under ``(x, y)`` says about the step there (its slowest rank),
        or None off the merged rows."""
        row = self.row_at(y)
        if self.merged is None or row is None or row.kind != MERGED or row.phase is None:
            return None
        px_s = self._drawn[2]
        i = self.merged.at(row.phase, x, px_s)
        return None if i is None else self.merged.describe(row.phase, i)

    # ---- Mouse -------------------------------------------------------------------------

    def _to_view(self, scene_pos: QPointF) -> QPointF:
        return self.getPlotItem().getViewBox().mapSceneToView(scene_pos)

    def _clicked(self, event: Any) -> None:
        """A click on a rank's row or its label toggles its group (``event``: pyqtgraph's
        ``MouseClickEvent``)."""
        if event.button() != Qt.MouseButton.LeftButton or event.double():
            return
        row = self.row_at(self._to_view(event.scenePos()).y())
        if row is not None and row.kind == RANK and row.rank is not None:
            self.toggle(row.rank)

    def _hovered(self, scene_pos: QPointF) -> None:
        if self.merged is None:
            return
        at = self._to_view(scene_pos)
        tip = self.hover_text(at.x(), at.y()) or MERGED_TOOLTIP
        if self.spans.toolTip() != tip:
            self.spans.setToolTip(tip)

    # ---- Scrolling the rows ------------------------------------------------------------

    def _rank_ids(self) -> list[int]:
        return list(self.ranks) if self.merged is None else []

    def _set_rows_in_view(self) -> None:
        n = len(self.rows)
        overflow = max(0, n - ROWS_FIT)
        self._top = min(self._top, overflow)
        shown = n - overflow
        self.getPlotItem().setYRange(n - self._top - shown, n - self._top, padding=0)
        self.scrollbar.blockSignals(True)
        self.scrollbar.setRange(0, overflow)
        self.scrollbar.setPageStep(shown)
        self.scrollbar.setValue(self._top)
        self.scrollbar.blockSignals(False)
        self.scrollbar.setVisible(bool(overflow))
        self._place_scrollbar()

    def _place_scrollbar(self) -> None:
        # At the labels' left edge: the plot keeps its width, and the x axis the timeline's.
        bar = getattr(self, "scrollbar", None)  # not yet while pyqtgraph lays out the plot
        if bar is not None:
            bar.setGeometry(0, 0, SCROLLBAR_PX, self.height())

    def resizeEvent(self, event: object) -> None:
        super().resizeEvent(event)
        self._place_scrollbar()

    def _scrolled(self, top: int) -> None:
        self._top = top
        self._set_rows_in_view()

    def _wheel(self, steps: int) -> bool:
        if not self.scrollbar.maximum():
            return False  # every row is in view: the wheel zooms time, as over the plot
        self.scrollbar.setValue(self.scrollbar.value() - steps)
        return True

    def _reveal(self, first: int, last: int) -> None:
        """Scroll so rows ``first..last`` are in view (``first`` at least)."""
        if last >= self._top + ROWS_FIT:
            self._top = max(0, min(first, last - ROWS_FIT + 1))
        elif first < self._top:
            self._top = first
        self._set_rows_in_view()


@runtime_checkable
class RankedSource(Protocol):
    """What the lanes read of a session: its origin and its ranks' steps (a live Session
    or a replay)."""

    @property
    def t0_ns(self) -> int: ...

    def rank_steps(self, since_ns: int) -> list[RankSteps]: ...


class RankLanesControls:
    """The lane group under the timeline in ``splitter``: shown (and linked to the timeline's
    x range) while the session has ranks and the window is not presenting; ``sync`` redraws it
    for the timeline's visible range."""

    def __init__(self, splitter: QSplitter, timeline: pg.PlotWidget, index: int) -> None:
        self.lanes = RankLanes()
        self.lanes.hide()
        self._timeline = timeline
        splitter.insertWidget(index, self.lanes)
        splitter.setStretchFactor(index, 0)

    def sync(self, session: object, presenting: bool) -> None:
        ranks = (
            session.rank_steps(self._since_ns(session))
            if isinstance(session, RankedSource) and not presenting
            else []
        )
        shown = len(ranks) > 1
        if shown != self.lanes.isVisible():
            self.lanes.setVisible(shown)
            self.lanes.setXLink(self._timeline if shown else None)
        if shown and isinstance(session, RankedSource):
            lo, hi = self._timeline.getPlotItem().getViewBox().viewRange()[0]
            width = max(1.0, float(self._timeline.getPlotItem().getViewBox().width()))
            self.lanes.show_ranks(ranks, session.t0_ns, (hi - lo) / width)

    def _since_ns(self, session: object) -> int:
        lo, _ = self._timeline.getPlotItem().getViewBox().viewRange()[0]
        t0 = session.t0_ns if isinstance(session, RankedSource) else 0
        return t0 + int(lo * 1e9)
