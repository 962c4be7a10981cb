"""Compare mode: a replay window showing a second recording (B) beside its own (A).

Everything is in the window a user screenshots or projects: one sentence stating B relative
to A above the plots, B's timeline under A's plots with the x axes linked, and a bottom dock
with both scoreboards and the per-phase breakdown. ``close`` takes all of it out again and
leaves the plain replay.
"""

from __future__ import annotations

import html

from PySide6.QtCore import QEvent, QObject, Qt, QTimer
from PySide6.QtWidgets import (
    QDockWidget,
    QFrame,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QPushButton,
    QScrollArea,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from gpuwatch.core.files.replay import ReplaySession
from gpuwatch.qt.compare_summary import REFERENCE_ROW, RunComparison, compare_rows, describe
from gpuwatch.qt.compare_timeline import CompareTimeline
from gpuwatch.qt.compare_view import CompareView
from gpuwatch.qt.docks import dock
from gpuwatch.qt.plots_redraw import PlotsRedraw
from gpuwatch.qt.theme import theme_manager
from gpuwatch.qt.timeline_view import MERGED_LANES, TimelineView

#: The comparison dock's height around the scoreboards' rows (titles, hint, header, scroll
#: bar), and its most: two scoreboards of a whole tour.
DOCK_CHROME_PX = 135
MAX_DOCK_HEIGHT = 240
#: The plots' titles (A's and B's names): small, left, so the lanes keep their height.
TITLE_STYLE: dict[str, str] = {"size": "9pt", "justify": "left"}


class CompareMode(QObject):
    """Installs the comparison of ``a`` (the window's replay) with ``b`` into ``window``."""

    def __init__(
        self, window: QMainWindow, plots: PlotsRedraw, a: ReplaySession, b: ReplaySession
    ) -> None:
        super().__init__(window)
        self.window = window
        self.plots = plots
        self.a, self.b = a, b
        # The comparison is of the two whole runs, wherever A's play position is.
        whole_a = a if a.at_end else ReplaySession(a.recording)
        self.result = compare_rows(whole_a.scoreboard(), b.scoreboard())
        self._title_before = window.windowTitle()
        window.setWindowTitle(
            f"gpuwatch — {a.recording.path.name} vs {b.recording.path.name} (replay)"
        )
        self.header = self._header()
        column = plots.caption_box.parentWidget()
        layout = column.layout() if column is not None else None
        assert isinstance(layout, QVBoxLayout), "the caption sits in the window's column"
        layout.insertWidget(layout.indexOf(plots.caption_box), self.header)
        self.header.show()  # at once: a widget added to a shown window appears only later
        plots.timeline.plot_item.setTitle(f"A · {describe(a)}", **TITLE_STYLE)
        # Two timelines share the plots' height: lanes grouped by what the loop waits on (as
        # on stage), so each lane stays readable at 1280×800.
        self._a_was_merged = plots.timeline.host_lanes is MERGED_LANES
        plots.timeline.set_merged(True)
        plots.last_key = None  # A is drawn again with its lanes grouped at the next frame
        self.timeline = CompareTimeline(b, plots.timeline)
        self.timeline.plot_item.setTitle(f"B · {describe(b)}", **TITLE_STYLE)
        self._place_timeline(plots.splitter, plots.utilization)
        self.view = CompareView(whole_a, b)
        # Scrolls rather than widening the window (on stage, beside the plots, it is narrow).
        scroll = QScrollArea()
        scroll.setWidget(self.view)
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        self.dock = dock(window, "Compare A · B", "compare", scroll)
        window.addDockWidget(Qt.DockWidgetArea.BottomDockWidgetArea, self.dock)
        scoreboard = window.findChild(QDockWidget, "scoreboard")
        if scoreboard is not None:  # A's scoreboard at the play position stays one tab away
            window.tabifyDockWidget(scoreboard, self.dock)
        # The log and the docks tabbed with it (kernel ops, runs) give their width to the
        # comparison while it is shown (back on close): hiding the log alone would bring an
        # empty kernel table to the front in its place.
        self._log = window.findChild(QDockWidget, "log")
        group = [self._log, *window.tabifiedDockWidgets(self._log)] if self._log else []
        self._made_room = [d for d in group if d.isVisible()]
        for widget in self._made_room:
            widget.hide()
        self.dock.show()
        self.dock.raise_()
        window.resizeDocks([self.dock], [self._dock_height()], Qt.Orientation.Vertical)
        theme_manager().style(window)  # B's plot and the new panels in the window's look
        self._share_the_height()
        # Whenever the plots' height changes (the new panels laid out, a resized window):
        # the splitter takes the room from its first plot first, squeezing A's lanes.
        plots.splitter.installEventFilter(self)
        self.timeline.redraw()

    def _place_timeline(self, splitter: QSplitter, utilization: QWidget) -> None:
        """B's timeline under A's utilization plot."""
        self._sizes_before = splitter.sizes()
        splitter.insertWidget(splitter.indexOf(utilization) + 1, self.timeline)
        self.timeline.show()

    def _share_the_height(self) -> None:
        """A's and B's lanes the same height; the utilization plot between them a fifth of
        the room, or as little as it can have."""
        splitter = self.plots.splitter
        lanes = [splitter.indexOf(self.plots.timeline), splitter.indexOf(self.timeline)]
        middle = splitter.indexOf(self.plots.utilization)
        if min(*lanes, middle) < 0:
            return  # closed before this deferred call
        sizes = splitter.sizes()
        room = sizes[lanes[0]] + sizes[lanes[1]] + sizes[middle]
        utilization = self.plots.utilization
        floor = max(utilization.minimumSizeHint().height(), utilization.minimumHeight())
        sizes[middle] = max(floor, room // 5)
        # Equal lanes, not equal widgets: B's plot also carries the time axis under it.
        a_extra, b_extra = (_around_lanes(plot) for plot in (self.plots.timeline, self.timeline))
        both = room - sizes[middle]
        sizes[lanes[0]] = (both + a_extra - b_extra) // 2
        sizes[lanes[1]] = both - sizes[lanes[0]]
        splitter.setSizes(sizes)

    def _dock_height(self) -> int:
        """Room for the longer scoreboard's rows (a tour's seven at most), no more: the rest
        goes to the two timelines."""
        rows = max(board.model.rowCount() for board in self.view.scoreboards)
        row_px = self.view.scoreboards[0].table.verticalHeader().defaultSectionSize()
        return min(MAX_DOCK_HEIGHT, DOCK_CHROME_PX + max(rows, 2) * row_px)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.plots.splitter and event.type() == QEvent.Type.Resize:
            QTimer.singleShot(0, self._share_the_height)
        return False

    @property
    def comparison(self) -> RunComparison | None:
        return self.result if isinstance(self.result, RunComparison) else None

    def statement(self) -> str:
        """The sentence on screen: B relative to A, and which rows it compares."""
        if isinstance(self.result, str):
            return self.result
        return (
            f"{self.result.sentence()} — {REFERENCE_ROW} "
            f"(A: {self.result.a.label}; B: {self.result.b.label})"
        )

    def _header(self) -> QWidget:
        header = QWidget()
        row = QHBoxLayout(header)
        row.setContentsMargins(0, 0, 0, 0)
        self.statement_label = QLabel(f"<b>{html.escape(self.statement(), quote=False)}</b>")
        self.statement_label.setWordWrap(True)
        self.statement_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.statement_label.setToolTip(
            f"A: {describe(self.a)}\nB: {describe(self.b)}\n"
            "Each recording's own scoreboard (the Compare dock) has its own 1.00× baseline; "
            "this line compares the two runs with each other."
        )
        row.addWidget(self.statement_label, 1)
        self.close_button = QPushButton("Close comparison")
        self.close_button.setToolTip("Back to the plain replay of A")
        row.addWidget(self.close_button, 0, Qt.AlignmentFlag.AlignTop)
        return header

    def close(self) -> None:
        """Take the comparison out of the window: the plain replay of A remains."""
        window = self.window
        self.plots.splitter.removeEventFilter(self)
        self.timeline.setXLink(None)
        for widget in (self.header, self.timeline):
            widget.hide()
            widget.setParent(None)
            widget.deleteLater()
        window.removeDockWidget(self.dock)
        self.dock.setParent(None)  # out of the window now, deleted at the next event loop
        self.dock.deleteLater()
        for widget in self._made_room:
            widget.show()
        if self._log is not None and self._log in self._made_room:
            self._log.raise_()  # in front of its tabs again, as before the comparison
        if len(self._sizes_before) == self.plots.splitter.count():
            self.plots.splitter.setSizes(self._sizes_before)
        self.plots.timeline.plot_item.setTitle(None)
        if not self._a_was_merged:
            self.plots.timeline.set_merged(False)
            self.plots.last_key = None
        window.setWindowTitle(self._title_before)
        self.setParent(None)  # the window no longer keeps this comparison alive


def _around_lanes(plot: TimelineView) -> int:
    """Pixels of ``plot`` outside its lanes (title, axis)."""
    return max(0, plot.height() - round(plot.plot_item.getViewBox().height()))
