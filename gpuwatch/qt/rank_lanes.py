"""One lane per rank under the timeline: where each rank's step time goes, side by side.

The timeline draws rank 0; this lane group draws every rank of a run of many ranks on the same
x axis (linked to the timeline's range while shown), one row per rank, each step's host phases
in their timeline colours (when steps are too narrow for that, each step in the colour of its
longest phase). The straggler reads at a glance: its row is the colour of its slow
phase (input, say) while every other row is backward's, the time they wait for it in the
all-reduce. Ranks of one machine share its clock; a rank of another machine keeps its own, so
only ranks on rank 0's node are drawn (the Ranks tab has every rank's figures). At most
``MAX_LANES`` rows; the rest are counted in the axis label. Redrawn with the scoreboard
(a few times a second), not every frame: the rows scroll with the timeline in between.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np
import pyqtgraph as pg
from PySide6.QtWidgets import QSplitter

from gpuwatch.core.figures.rank_figures import RankSteps
from gpuwatch.core.model.store import StepsView
from gpuwatch.protocol import PHASES
from gpuwatch.qt import palette
from gpuwatch.qt.lane_spans import LaneSpans, SpanLayer
from gpuwatch.qt.timeline_view import AXIS_WIDTH, style_plot

#: Rows drawn at most; a job with more ranks shows the first ones.
MAX_LANES = 16
#: A row's bar height (the row is 1 tall).
BAR_HEIGHT = 0.7
#: Pixels a row takes, and the lane group's height bounds.
ROW_PX = 18
MIN_HEIGHT, MAX_HEIGHT = 48, 320


class RankLanes(pg.PlotWidget):
    """The lane group: rank rows with their phases (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__(background=palette.BACKGROUND)
        style_plot(self)
        item = self.getPlotItem()
        item.getAxis("left").setWidth(AXIS_WIDTH)
        item.getAxis("bottom").hide()
        self.spans = LaneSpans()
        self.addItem(self.spans)
        self.layers: dict[str, SpanLayer] = {
            phase: self.spans.add_layer(palette.PHASE_COLORS[phase], phase) for phase in PHASES
        }
        #: The ranks drawn, top row first (tests read them).
        self.ranks: tuple[int, ...] = ()
        self.setToolTip(
            "Each rank's steps, one row per rank, in the timeline's phase colours: the "
            "straggler's row shows its slow phase, the others' the backward in which they "
            "wait for it (DDP's all-reduce)"
        )

    def show_ranks(self, ranks: Sequence[RankSteps], t0_ns: int, px_s: float) -> None:
        """Draw ``ranks`` (their steps in view), each span at least a pixel (``px_s``) wide."""
        home = ranks[0].info.node if ranks else ""
        drawn = [r for r in ranks if r.info.node == home][:MAX_LANES]
        left_out = len(ranks) - len(drawn)
        n = len(drawn)
        spans = [_phase_spans(r.steps, t0_ns, px_s) for r in drawn]
        for i, phase in enumerate(PHASES):
            x0 = [spans[row][i][0] for row in range(n)]
            x1 = [spans[row][i][1] for row in range(n)]
            y0 = [np.full(len(x0[row]), n - 1 - row + (1 - BAR_HEIGHT) / 2) for row in range(n)]
            layer = self.layers[phase]
            if n and sum(len(x) for x in x0):
                layer.set_rects(
                    np.concatenate(x0), np.concatenate(x1), np.concatenate(y0), BAR_HEIGHT
                )
            else:
                layer.clear()
        ticks = [(n - 1 - row + 0.5, f"rank {r.info.rank}") for row, r in enumerate(drawn)]
        if left_out:
            ticks.append((-0.5, f"+{left_out} more (Ranks tab)"))
        axis = self.getPlotItem().getAxis("left")
        axis.setTicks([ticks, []])
        self.getPlotItem().setYRange(-1.0 if left_out else 0.0, max(n, 1), padding=0)
        height = min(MAX_HEIGHT, max(MIN_HEIGHT, ROW_PX * (n + (1 if left_out else 0)) + 12))
        if self.maximumHeight() != height:
            self.setMinimumHeight(height)
            self.setMaximumHeight(height)
        self.ranks = tuple(r.info.rank for r in drawn)


#: Below this many pixels a step, a row shows each step in the colour of its longest phase:
#: phases a pixel wide each would paint over one another.
DOMINANT_BELOW_PX = 6.0


def _phase_spans(steps: StepsView, t0_ns: int, px_s: float) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per phase, the ``(x0, x1)`` seconds a rank's row paints in that phase's colour: each
    phase where it ran (a pixel wide at least) when steps are wide enough, else each whole
    step in the colour of its longest phase."""
    host = steps.host
    if not len(host):
        return [(np.empty(0), np.empty(0)) for _ in PHASES]
    start, end = (host[:, 0] - t0_ns) / 1e9, (host[:, -1] - t0_ns) / 1e9
    if float(np.median(end - start)) < DOMINANT_BELOW_PX * px_s:
        longest = np.argmax(np.diff(host, axis=1), axis=1)
        return [(start[longest == i], end[longest == i]) for i in range(len(PHASES))]
    spans = []
    for i in range(len(PHASES)):
        s = (host[:, i] - t0_ns) / 1e9
        spans.append((s, np.maximum((host[:, i + 1] - t0_ns) / 1e9, s + px_s)))
    return spans


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
