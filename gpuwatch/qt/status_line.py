"""The status bar's fixed fields: run state, device, timing source and the visible window."""

from __future__ import annotations

from PySide6.QtWidgets import QLabel, QStatusBar

from gpuwatch.core.run.session import SessionState

STATE_TEXT = {
    SessionState.IDLE: "idle",
    SessionState.STARTING: "starting…",
    SessionState.RUNNING: "running",
    SessionState.STOPPING: "stopping…",
    SessionState.FINISHED: "finished",
    SessionState.FAILED: "FAILED",
}
TIMING_TEXT = {"cuda": "CUDA events", "cpu": "host timestamps (CPU)"}


class StatusLine:
    """Labels on the left (state, device, timing) and the visible window on the right; the
    middle stays free for the window's passing messages."""

    def __init__(self, status: QStatusBar) -> None:
        self.state_label = QLabel()
        self.device_label = QLabel()
        self.timing_label = QLabel()
        self.window_label = QLabel()
        for label in (self.state_label, self.device_label, self.timing_label):
            status.addWidget(label)
        status.addPermanentWidget(self.window_label)

    def show_run(self, state: SessionState, device: str | None, kind: str | None) -> None:
        """The run's state, its device's name and where its timestamps come from."""
        self.state_label.setText(f"  {STATE_TEXT.get(state, state.name.lower())}  ")
        self.device_label.setText(f"  device: {device}  " if device else "  device: —  ")
        self.timing_label.setText(f"  timing: {TIMING_TEXT.get(kind or '', '—')}  ")

    def show_window(self, lo_s: float, hi_s: float) -> None:
        """The visible time range, in seconds since the session's origin."""
        span = hi_s - lo_s
        self.window_label.setText(f"showing {lo_s:,.1f}–{hi_s:,.1f} s ({span:,.3g} s)  ")
