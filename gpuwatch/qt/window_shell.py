"""What the window's parts may use of the main window: one typed interface.

Actions, the view keys, kernel capture, the interpreter choice and replay mode act on the
window; ``MainWindow`` builds them, so they cannot import it (that would be an import circle,
``TYPE_CHECKING`` or not). They see the window through ``WindowShell`` instead, which
``MainWindow`` satisfies structurally (``tests/test_qt_actions.py`` checks the attributes).
"""

from __future__ import annotations

from typing import Protocol

from PySide6.QtGui import QAction
from PySide6.QtWidgets import QComboBox, QMenuBar, QStatusBar, QToolBar

from gpuwatch.core.run.session import LaunchSpec
from gpuwatch.qt.advisor_view import AdvisorView
from gpuwatch.qt.file_dialogs import FileDialogs
from gpuwatch.qt.knob_panel import KnobPanel
from gpuwatch.qt.log_pane import LogPane
from gpuwatch.qt.record_control import RecordControl
from gpuwatch.qt.run_session import RunSession
from gpuwatch.qt.run_toolbar import RunToolbar
from gpuwatch.qt.settings import Settings
from gpuwatch.qt.timeline_view import TimelineView
from gpuwatch.qt.tour_controller import TourController

__all__ = ["RunSession", "WindowShell"]


class WindowShell(Protocol):
    """The main window as its parts see it."""

    session: RunSession
    settings: Settings
    #: ``gpuwatch run SCRIPT``: what Start runs instead of a workload.
    script_spec: LaunchSpec | None
    #: The training interpreter of the next Start (None: gpuwatch's own Python).
    python: str | None
    workload_combo: QComboBox
    device_combo: QComboBox
    run_bar: RunToolbar
    timeline: TimelineView
    start_action: QAction
    follow_action: QAction
    record_action: QAction
    pause_view_action: QAction
    #: Visible window length while following, and whether the view is frozen (Space).
    window_s: float
    view_paused: bool
    files: FileDialogs
    recording: RecordControl
    tour: TourController
    knob_panel: KnobPanel
    advisor: AdvisorView
    log_pane: LogPane

    @property
    def follow(self) -> bool: ...

    def statusBar(self) -> QStatusBar: ...

    def menuBar(self) -> QMenuBar: ...

    def setWindowTitle(self, title: str) -> None: ...

    def addToolBar(self, toolbar: QToolBar) -> None: ...

    def addToolBarBreak(self) -> None: ...

    def redraw_now(self) -> None:
        """Redraw at once, even if no data changed."""

    def start_or_stop(self) -> None:
        """Start the selected run, or stop the one in progress."""

    def show_guide(self, section: str | None = None) -> None:
        """The built-in guide at ``section`` (None: the figure under the mouse, if any)."""

    def show_about(self) -> None:
        """Help → About."""
