"""The window's docks: scoreboard and log at the bottom, the advisor above the knobs on the
right (why the device waits, and the knob to flip)."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDockWidget, QMainWindow, QWidget

from gpuwatch.qt.advisor_view import AdvisorView
from gpuwatch.qt.knob_panel import KnobPanel
from gpuwatch.qt.log_pane import LogPane
from gpuwatch.qt.run_session import RunSession
from gpuwatch.qt.scoreboard_view import ScoreboardView
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
    return made


class WindowDocks:
    """Builds the four docks on ``window``; the knobs and the advisor lock while a tour runs."""

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
