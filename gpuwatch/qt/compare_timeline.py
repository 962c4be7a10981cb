"""B's timeline under A's: the same lanes, x linked to A's timeline.

Both x axes are seconds since each run's own start, so linking them shows the same stretch of
each run (the first 30 s of A over the first 30 s of B). B is drawn whole (its play position
is not followed) from its own ``FramePresenter``, and redrawn a moment after A's view moves:
a playing or scrolling A costs B one frame per ``REDRAW_MS``, not one per tick.
"""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import QTimer

from gpuwatch.core.figures.frame import FramePresenter, RunData
from gpuwatch.core.files.replay import ReplaySession
from gpuwatch.qt.change_markers import ChangeMarkers
from gpuwatch.qt.timeline_view import MERGED_LANES, TimelineView, settle_before_paint

#: Delay of B's redraw after A's view moved (ms): follows a pan, skips intermediate ranges.
REDRAW_MS = 100


class CompareTimeline(TimelineView):
    """Lanes of ``session`` (B) over the x range of ``leader`` (A's timeline)."""

    def __init__(self, session: ReplaySession, leader: TimelineView) -> None:
        super().__init__()
        self.session = session
        self.leader = leader
        self.presenter = FramePresenter()
        self.frames_drawn = 0
        self.plot_item.showAxis("bottom")  # the lowest plot: it carries the time axis
        self.plot_item.setLabel("bottom", "seconds since each run's start")
        self.setXLink(leader)
        #: B's configuration changes, labelled, as A's timeline shows A's.
        self.markers = ChangeMarkers(self, labels=True)
        self.markers.update(
            session.hello,
            session.config_changes(),
            session.scoreboard(),
            session.t0_ns,
            session.position_ns,
        )
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(REDRAW_MS)
        self._timer.timeout.connect(self.redraw)
        view_box: pg.ViewBox = self.plot_item.getViewBox()
        view_box.sigXRangeChanged.connect(self._soon)
        view_box.sigResized.connect(self._soon)

    def _soon(self, *_: object) -> None:
        if not self._timer.isActive():
            self._timer.start()

    def redraw(self) -> None:
        """Draw B over the x range on screen (the leader's, through the link)."""
        merged = self.leader.host_lanes is MERGED_LANES  # presentation groups lanes
        if (self.host_lanes is MERGED_LANES) != merged:
            self.set_merged(merged)
        lo_s, hi_s = self.plot_item.getViewBox().viewRange()[0]
        t0 = self.session.t0_ns
        lo_ns, hi_ns = t0 + int(max(lo_s, 0.0) * 1e9), t0 + int(max(hi_s, 0.0) * 1e9)
        if hi_ns <= lo_ns:
            return
        frame = self.presenter.plots(
            RunData.of(self.session), lo_ns, hi_ns, self.width_px(), final=True
        )
        if frame is None:
            return
        self.show_frame(frame.timeline)
        self.frames_drawn += 1
        settle_before_paint(self)
