"""The window's docks: scoreboard and log at the bottom (the log shares its place with the
kernel ops table), the advisor above the knobs on the right (why the device waits, and the
knob to flip).

The docks' widths never follow their contents: a scoreboard column that widens as its
numbers grow, or a longer hint, would otherwise move the dock separators and with them the
plots' edges (the window would re-lay-out a few times a second while a run goes on). And the
docks give way to the plots, never the other way round (``PlotsFloor``).
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtWidgets import QDockWidget, QMainWindow, QSizePolicy, QWidget

from gpuwatch.qt.advisor_view import AdvisorView
from gpuwatch.qt.kernel_table import KernelTable
from gpuwatch.qt.knob_panel import KnobPanel
from gpuwatch.qt.log_pane import LogPane
from gpuwatch.qt.ranks_view import RanksView
from gpuwatch.qt.run_session import RunSession
from gpuwatch.qt.scoreboard_view import ScoreboardView
from gpuwatch.qt.timeline_view import TimelineView
from gpuwatch.qt.tour_controller import TourController

TOUR_LOCK_HINT = "The tour is driving the knobs: Stop tour to change them yourself."


def dock(window: QMainWindow, title: str, name: str, widget: QWidget) -> QDockWidget:
    """A movable, floatable dock (never closable by its own button: View → Panels is)."""
    made = QDockWidget(title, window)
    made.setObjectName(name)
    made.setWidget(widget)
    made.setFeatures(
        QDockWidget.DockWidgetFeature.DockWidgetMovable
        | QDockWidget.DockWidgetFeature.DockWidgetFloatable
    )
    steady_width(widget)
    return made


#: The narrowest a dock's contents may ask to be: what fits beside 1280×720 plots.
MIN_DOCK_WIDTH = 120
#: Text lines of height the utilization plot keeps: its 0-100 ticks and its time axis.
UTILIZATION_LINES = 5


def steady_width(widget: QWidget) -> None:
    """Let ``widget`` be as narrow as the user drags it, whatever its contents ask for.

    A dock's minimum width is its contents' minimum size hint: a label's whole line or a
    table's columns. When that grows (a wider number, a longer hint) the dock layout moves its
    separators at once, and the timeline's edges with them. A fixed small minimum and an
    ignored width hint keep the separators where the layout or the user put them.
    """
    widget.setMinimumWidth(MIN_DOCK_WIDTH)
    policy = widget.sizePolicy()
    policy.setHorizontalPolicy(QSizePolicy.Policy.Ignored)
    widget.setSizePolicy(policy)


class PlotsFloor(QObject):
    """The least height the timeline and the utilization plot keep, so docks shrink first.

    A dock area keeps its size when the window is short (a 1280×720 projector, a recording
    whose headline wraps onto more lines) and the central plots take what is left: eight
    lanes in 100 px overlap their labels, and the utilization curves become a line. This
    floor, a text line per lane and a few for the utilization's ticks and axis, follows the
    font (presentation mode doubles it) and the lane count (three merged lanes on stage).
    """

    def __init__(self, timeline: TimelineView, utilization: QWidget) -> None:
        super().__init__(timeline)
        self.timeline = timeline
        self.utilization = utilization
        for plot in (timeline, utilization):
            plot.installEventFilter(self)  # a font change or a resize: their own events only
        self.apply()

    def apply(self) -> None:
        line = self.timeline.fontMetrics().height() + 2
        floors = (
            (self.timeline, self.timeline.n_lanes * line + 6),
            (self.utilization, UTILIZATION_LINES * line + 12),
        )
        for plot, floor in floors:
            if plot.minimumHeight() != floor:
                plot.setMinimumHeight(floor)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() in (QEvent.Type.FontChange, QEvent.Type.Resize):
            self.apply()  # the lane count changes with presentation mode, as the font does
        return False


class WindowDocks:
    """Builds the docks on ``window``; the knobs and the advisor lock while a tour runs."""

    def __init__(self, window: QMainWindow, session: RunSession, tour: TourController) -> None:
        self.log_pane = LogPane()
        log_dock = dock(window, "Log", "log", self.log_pane)
        window.addDockWidget(Qt.DockWidgetArea.BottomDockWidgetArea, log_dock)
        self.scoreboard = ScoreboardView(session)
        score_dock = dock(window, "Scoreboard", "scoreboard", self.scoreboard)
        window.addDockWidget(Qt.DockWidgetArea.BottomDockWidgetArea, score_dock)
        window.splitDockWidget(score_dock, log_dock, Qt.Orientation.Horizontal)
        window.resizeDocks([score_dock, log_dock], [3, 1], Qt.Orientation.Horizontal)
        window.resizeDocks([score_dock], [190], Qt.Orientation.Vertical)
        #: Every rank of a torchrun job, a tab behind the scoreboard (raised when ranks come).
        self.ranks = RanksView(session)
        self.ranks_dock = dock(window, "Ranks", "ranks", self.ranks)
        window.addDockWidget(Qt.DockWidgetArea.BottomDockWidgetArea, self.ranks_dock)
        window.tabifyDockWidget(score_dock, self.ranks_dock)
        score_dock.raise_()
        #: The ops of a kernel window, a tab behind the log (it says how to get a window).
        self.kernel_table = KernelTable()
        self.kernel_dock = dock(window, "Kernel ops", "kernel_ops", self.kernel_table)
        window.addDockWidget(Qt.DockWidgetArea.BottomDockWidgetArea, self.kernel_dock)
        window.tabifyDockWidget(log_dock, self.kernel_dock)
        log_dock.raise_()
        self.knob_panel = KnobPanel(session)
        self.knob_dock = dock(window, "Knobs", "knobs", self.knob_panel)
        window.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, self.knob_dock)
        window.resizeDocks([self.knob_dock], [290], Qt.Orientation.Horizontal)
        self.advisor = AdvisorView(session)
        advisor_dock = dock(window, "Advisor", "advisor", self.advisor)
        window.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, advisor_dock)
        window.splitDockWidget(advisor_dock, self.knob_dock, Qt.Orientation.Vertical)
        for view in (self.knob_panel, self.advisor):
            view.status_message.connect(lambda text: window.statusBar().showMessage(text, 15_000))
            tour.active_changed.connect(
                lambda on, v=view: v.set_locked(TOUR_LOCK_HINT if on else None)
            )
