"""The status bar's fixed fields: run state, device, timing source, gpuwatch's own footprint
(the window's CPU share and the runner's instrumentation share of step time) and the visible
window.

Every field has a fixed size (wide enough for its longest usual text), so a new number
repaints that label alone and never lays the status bar, or the window, out again.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import psutil
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
#: The own-CPU figure covers about this much of the recent past (seconds).
CPU_WINDOW_S = 3.0
#: ...and is recomputed this often (seconds); the label repaints only when its text changes.
CPU_PERIOD_S = 1.0


class CpuShare:
    """This process's CPU time as a share of one core over the last ``CPU_WINDOW_S``."""

    def __init__(self) -> None:
        self._process = psutil.Process()
        self._history: list[tuple[float, float]] = []  # (wall, cpu) seconds

    def _cpu_s(self) -> float:
        times = self._process.cpu_times()
        return float(times.user + times.system)

    def sample(self, now: float) -> float | None:
        """Record a reading at ``now`` (``time.monotonic``); the share in percent since the
        oldest reading kept (None until two readings ``CPU_PERIOD_S`` apart exist)."""
        self._history.append((now, self._cpu_s()))
        while len(self._history) > 2 and now - self._history[1][0] >= CPU_WINDOW_S:
            self._history.pop(0)
        wall0, cpu0 = self._history[0]
        if now - wall0 < CPU_PERIOD_S:
            return None
        return 100.0 * (self._history[-1][1] - cpu0) / (now - wall0)


def fix_width(label: QLabel, widest: str) -> None:
    """Size ``label`` for ``widest`` once: its text may change, its geometry never does."""
    metrics = label.fontMetrics()
    label.setFixedSize(
        metrics.horizontalAdvance(widest) + 2 * label.margin() + 4, label.sizeHint().height()
    )


class StatusLine:
    """Labels on the left (state, device, timing) and the own CPU and the visible window on
    the right; the middle stays free for the window's passing messages."""

    def __init__(self, status: QStatusBar) -> None:
        self.state_label = QLabel()
        self.device_label = QLabel()
        self.timing_label = QLabel()
        #: "gpuwatch: 3 % CPU": what this window costs the machine the run trains on.
        self.cpu_label = QLabel()
        self.cpu_label.setToolTip(
            "CPU time of the gpuwatch window's process (all its threads) over the last "
            f"{CPU_WINDOW_S:g} s, in % of one core. The training run is another process."
        )
        #: "· instrumentation 0.3 % of step time": what the runner's instruments cost the
        #: run (shown once the runner has said: a watched script or a built-in workload).
        self.instrument_label = QLabel()
        self.instrument_label.setToolTip(
            "Share of step time the runner's instruments (a script's hooks, the step marks "
            "and their bookkeeping) spent over the last seconds, as the runner timed them."
        )
        self.instrument_label.hide()
        self.window_label = QLabel()
        for label in (self.state_label, self.device_label, self.timing_label):
            status.addWidget(label)
        status.addPermanentWidget(self.cpu_label)
        status.addPermanentWidget(self.instrument_label)
        status.addPermanentWidget(self.window_label)
        fix_width(self.state_label, "  stopping…  ")
        fix_width(self.timing_label, f"  timing: {TIMING_TEXT['cpu']}  ")
        fix_width(self.cpu_label, "gpuwatch: 100 % CPU  ")
        fix_width(self.instrument_label, "· instrumentation 10.0 % of step time  ")
        fix_width(self.window_label, "showing 100,000.0–100,000.0 s (30 s)  ")
        self._cpu = CpuShare()
        self._cpu_due = 0.0
        self._device_text = ""

    def show_run(self, state: SessionState, device: str | None, kind: str | None) -> None:
        """The run's state, its device's name and where its timestamps come from."""
        _set_text(self.state_label, f"  {STATE_TEXT.get(state, state.name.lower())}  ")
        device_text = f"  device: {device}  " if device else "  device: —  "
        if device_text != self._device_text:  # a device name's length is not known before
            self._device_text = device_text
            fix_width(self.device_label, device_text)
            self.device_label.setText(device_text)
        _set_text(self.timing_label, f"  timing: {TIMING_TEXT.get(kind or '', '—')}  ")

    def show_window(self, lo_s: float, hi_s: float, *, following: bool = False) -> None:
        """The visible time range, in seconds since the session's origin; while following
        "now", only its length (a text that changed every frame would repaint every frame)."""
        span = hi_s - lo_s
        text = (
            f"showing the last {span:,.3g} s  "
            if following
            else f"showing {lo_s:,.1f}–{hi_s:,.1f} s ({span:,.3g} s)  "
        )
        _set_text(self.window_label, text)

    def show_cpu(
        self, now: float | None = None, instrumentation: Callable[[], float | None] | None = None
    ) -> None:
        """The window's own CPU share and, when ``instrumentation()`` knows it, the runner's
        instruments' share of step time (0..1), re-read at most every ``CPU_PERIOD_S``."""
        now = time.monotonic() if now is None else now
        if now < self._cpu_due:
            return
        self._cpu_due = now + CPU_PERIOD_S
        share = self._cpu.sample(now)
        if share is not None:
            _set_text(self.cpu_label, f"gpuwatch: {share:.0f} % CPU  ")
        step_share = instrumentation() if instrumentation is not None else None
        if step_share is not None:
            text = f"· instrumentation {100 * step_share:.1f} % of step time  "
            _set_text(self.instrument_label, text)
        self.instrument_label.setVisible(step_share is not None)


def _set_text(label: QLabel, text: str) -> None:
    if label.text() != text:
        label.setText(text)
