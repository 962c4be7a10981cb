"""Replay mode: a window showing a recording instead of a live run.

A replay bar moves the play position; everything that would start or change a run (Start,
the tour, Record, the knobs, the advisor's Apply) is off. Each frame the bar advances the
playback clock first, so the views draw the position it reached.
"""

from __future__ import annotations

from PySide6.QtWidgets import QDockWidget, QToolBar

from gpuwatch.core.files.replay import READ_ONLY, ReplaySession
from gpuwatch.qt.replay_bar import ReplayBar
from gpuwatch.qt.window_shell import WindowShell


class ReplayMode:
    """Sets a window up for ``replay`` and keeps its log in step with the play position."""

    def __init__(self, window: WindowShell, replay: ReplaySession, knob_dock: QDockWidget) -> None:
        self.window = window
        self.replay = replay
        self._log_generation = 0
        window.setWindowTitle(f"gpuwatch — {replay.recording.path.name} (replay)")
        self.bar = ReplayBar(replay)
        toolbar = QToolBar("Replay")
        toolbar.setObjectName("replay")
        toolbar.setMovable(False)
        toolbar.addWidget(self.bar)
        window.addToolBarBreak()
        window.addToolBar(toolbar)
        for action in (window.start_action, window.tour.action):
            action.setEnabled(False)
        window.recording.disable("A replay is already a recording")
        window.knob_panel.set_locked(READ_ONLY)
        window.advisor.set_locked(READ_ONLY)
        knob_dock.setWindowTitle(f"Knobs ({READ_ONLY})")
        # The toolbar names what was recorded (a built-in workload or a script's file name).
        hello = replay.recording.hello
        recorded = hello.workload if hello is not None else None
        combo = window.workload_combo
        if isinstance(recorded, str) and recorded:
            if combo.findText(recorded) < 0:
                combo.addItem(recorded)
            combo.setCurrentText(recorded)
        window.knob_panel.setEnabled(False)

    def before_frame(self) -> None:
        """Advance the playback clock; a seek back rebuilt the run, so the log starts over."""
        self.bar.advance()
        if self.replay.generation != self._log_generation:
            self._log_generation = self.replay.generation
            self.window.log_pane.clear()

    @property
    def now_ns(self) -> int:
        """The right edge of "now" when nothing is live: the play position."""
        return self.replay.position_ns
