"""Kernel capture in the window: the "Capture kernels" action and a lane of captured windows.

The lane sits under the timeline, on the same x axis (seconds since the session's origin). Each
captured window is shaded as *profiled* (its steps are left out of the scoreboard) and shows
its events: kernels, memcpys and memsets on a GPU; the outermost CPU ops on a CPU (labelled
so, never called kernels). A short summary sits at each window; the lane's tooltip has the
whole line for the latest one. The lane shows only while a capture runs or a captured window
is in view, so an empty lane never takes the plots' room. The ops of a window (calls, total
and self time) are in the "Kernel ops" table (``kernel_table``): the latest window's, or the
one clicked in the lane.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QObject
from PySide6.QtGui import QAction, QActionGroup, QGuiApplication
from PySide6.QtWidgets import QDockWidget, QMenu, QSplitter, QToolButton

from gpuwatch.commands.nsight_command import gpuwatch_argv, nsight_command
from gpuwatch.core.figures.kernel_window import KernelWindow, describe
from gpuwatch.core.run.session import LaunchSpec, SessionError, SessionState
from gpuwatch.protocol import KERNEL_KINDS
from gpuwatch.qt import palette
from gpuwatch.qt.kernel_table import KernelTable
from gpuwatch.qt.session_signals import SessionSignals
from gpuwatch.qt.timeline_view import AXIS_WIDTH, SpanBars, style_plot

if TYPE_CHECKING:
    from gpuwatch.qt.run_session import RunSession
    from gpuwatch.qt.window_shell import WindowShell

#: Step counts the toolbar's menu offers; the first one is the default.
STEP_CHOICES: tuple[int, ...] = (10, 5, 20)
#: Height of the event bars inside the lane (the window shading is full height).
EVENT_HEIGHT = 0.6
KIND_COLORS: dict[str, str] = {
    "kernel": palette.DEVICE_ACTIVE,
    "memcpy": palette.PHASE_COLORS["h2d"],
    "memset": palette.PHASE_COLORS["other"],
    "cpu_op": palette.DEVICE_ACTIVE,
}
LANE_LABELS = {"cuda": "kernels\n(profiled)", "cpu": "CPU ops\n(profiled)"}
#: The window labels are text items, which the theme does not re-colour: a grey that reads on
#: the light and the dark plot background alike.
LABEL_COLOR = palette.KERNEL_LABEL


def short_summary(window: KernelWindow) -> str:
    """The label at a window: busy share and how many kernels (or CPU ops)."""
    s = window.summary()
    what = "kernels" if window.device == "cuda" else "CPU ops"
    busy = "n/a" if s.busy_fraction is None else f"{100 * s.busy_fraction:.0f}%"
    text = f"profiled: busy {busy}, {s.kernels} {what}"
    if window.device == "cuda" and s.geometry_known:
        text += f", {s.underfilled} under-filled"
    return text


class KernelLane(pg.PlotWidget):
    """The captured windows as one lane: shaded window, event bars and a summary label."""

    def __init__(self) -> None:
        super().__init__(background=palette.BACKGROUND)
        style_plot(self)
        item = self.getPlotItem()
        item.getAxis("left").setWidth(AXIS_WIDTH)
        item.getAxis("bottom").hide()
        item.setYRange(-0.1, 1.1, padding=0)
        self.setMinimumHeight(56)
        self.setMaximumHeight(110)
        self.window_bars = SpanBars(brush=palette.pale(palette.MARKER, 35))
        self.window_bars.setZValue(-5)
        self.addItem(self.window_bars)
        self.event_bars: dict[str, SpanBars] = {}
        for kind in KERNEL_KINDS:
            bars = SpanBars(brush=KIND_COLORS[kind], name=kind)
            self.event_bars[kind] = bars
            self.addItem(bars)
        self.labels: list[pg.TextItem] = []
        self.summary = ""  # the latest window's full summary (also the tooltip)
        #: Each drawn window's x extent (seconds since the origin), for ``window_at``.
        self.extents = np.empty((0, 2))
        self.set_device_kind(None)

    def set_device_kind(self, kind: str | None) -> None:
        label = LANE_LABELS.get(kind or "", "kernels /\nCPU ops")
        self.getPlotItem().getAxis("left").setTicks([[(0.5, label)], []])

    def show_windows(self, windows: list[KernelWindow], t0_ns: int) -> None:
        """Draw every window (each at most ``kernel_capture.MAX_EVENTS`` events)."""
        for text in self.labels:
            self.removeItem(text)
        self.labels = []
        y0 = (1 - EVENT_HEIGHT) / 2
        spans: dict[str, tuple[list[np.ndarray], list[np.ndarray]]] = {
            k: ([], []) for k in KERNEL_KINDS
        }
        for window in windows:
            for index, kind in enumerate(KERNEL_KINDS):
                sel = window.device_mask() & (window.kind == index)
                spans[kind][0].append((window.start[sel] - t0_ns) / 1e9)
                spans[kind][1].append((window.end[sel] - t0_ns) / 1e9)
            label = pg.TextItem(short_summary(window), color=LABEL_COLOR, anchor=(0, 0))
            label.setPos((window.t0_ns - t0_ns) / 1e9, 1.1)
            self.addItem(label)
            self.labels.append(label)
        for kind, (s, e) in spans.items():
            x0 = np.concatenate(s) if s else np.empty(0)
            x1 = np.concatenate(e) if e else np.empty(0)
            self.event_bars[kind].set_spans(x0, x1, y0, EVENT_HEIGHT)
        w0 = np.array([(w.t0_ns - t0_ns) / 1e9 for w in windows])
        w1 = np.array([(w.t1_ns - t0_ns) / 1e9 for w in windows])
        self.window_bars.set_spans(w0, w1, -0.1, 1.2)
        self.extents = np.column_stack([w0, w1]) if windows else np.empty((0, 2))
        if windows:
            latest = windows[-1]
            self.set_device_kind(latest.device)
            steps = f"steps {latest.steps[0]}–{latest.steps[-1]}" if latest.steps else ""
            top = "; ".join(f"{name[:60]} ×{calls}" for name, calls, _ in latest.top_names(3))
            self.summary = (
                f"Kernel window over {steps} (profiled: left out of the "
                f"scoreboard)\n{describe(latest.summary(), latest.device)}"
                + (f"\nmost time: {top}" if top else "")
            )
        else:
            self.summary = ""
        self.setToolTip(self.summary)

    def window_at(self, x_s: float) -> int | None:
        """Index of the drawn window whose extent holds ``x_s`` (the latest if several)."""
        hits = np.flatnonzero((self.extents[:, 0] <= x_s) & (x_s <= self.extents[:, 1]))
        return int(hits[-1]) if hits.size else None

    def any_in(self, lo_s: float, hi_s: float) -> bool:
        """Whether a drawn window reaches into ``[lo_s, hi_s]``."""
        e = self.extents
        return bool(((e[:, 0] <= hi_s) & (e[:, 1] >= lo_s)).any())


class KernelCaptureControls(QObject):
    """The "Capture kernels" toolbar button (steps menu), the lane, and Help ▸ Nsight command.

    The lane goes under the timeline in ``splitter``. The action is enabled only while a run
    is connected and no capture runs; a refused or failed capture is shown in the status bar
    (the log has it too). A new window, a failed capture or a new run state arrive as
    ``signals``; the window also calls ``sync`` a few times a second (a replay's windows
    appear as it plays).
    """

    def __init__(
        self,
        window: WindowShell,
        splitter: QSplitter,
        signals: SessionSignals,
        table_dock: QDockWidget | None = None,
    ) -> None:
        """``table_dock`` holds a ``KernelTable``: it is filled (and shown) with the ops of
        the latest window, or of the window clicked in the lane."""
        super().__init__(splitter)
        self.window = window
        self.session: RunSession = window.session
        self.steps = STEP_CHOICES[0]
        self.lane = KernelLane()
        self._timeline = window.timeline
        self.lane.hide()  # and not linked to the timeline's range until shown (_show_lane)
        splitter.insertWidget(1, self.lane)
        splitter.setStretchFactor(1, 0)
        self.table_dock = table_dock
        table = table_dock.widget() if table_dock is not None else None
        self.table = table if isinstance(table, KernelTable) else None
        self._raise_table = False  # a capture asked for here: its table comes to the front
        self.lane.scene().sigMouseClicked.connect(self._on_lane_clicked)
        #: The timeline's x range (the lane's too): a window coming into view shows the lane.
        self._view_box = window.timeline.getPlotItem().getViewBox()
        self._view_box.sigXRangeChanged.connect(lambda *_: self._sync_visible())
        self.action = QAction("Capture kernels", self)
        self.action.triggered.connect(self._on_triggered)
        menu = QMenu(splitter)
        group = QActionGroup(menu)
        self.step_actions: dict[int, QAction] = {}
        for steps in sorted(STEP_CHOICES):
            choice = menu.addAction(f"{steps} steps")
            choice.setCheckable(True)
            choice.setChecked(steps == self.steps)
            choice.triggered.connect(lambda _=False, n=steps: self._choose(n))
            group.addAction(choice)
            self.step_actions[steps] = choice
        menu.addSeparator()
        self.nsight_action = QAction("Copy Nsight Systems command", self)
        self.nsight_action.setToolTip(
            "Copy an `nsys profile` command that traces this workload "
            "or script with CUDA, NVTX phase ranges and OS runtime"
        )
        self.nsight_action.triggered.connect(self.copy_nsight_command)
        menu.addAction(self.nsight_action)
        self.button = QToolButton()
        self.button.setDefaultAction(self.action)
        self.button.setMenu(menu)
        self.button.setPopupMode(QToolButton.ToolButtonPopupMode.MenuButtonPopup)
        window.run_bar.addWidget(self.button)
        self._shown: tuple[int, int, int] | None = None  # (count, last t0, session t0)
        self._error_shown: str | None = None
        self._update_tooltip()
        for signal in (
            signals.sig_kernel_window,
            signals.sig_capture_failed,
            signals.sig_state_changed,
        ):
            signal.connect(lambda *_: self.sync())
        self.sync()

    def _on_triggered(self, _checked: bool = False) -> None:
        self.capture()

    def _choose(self, steps: int) -> None:
        self.steps = steps
        self._update_tooltip()

    def _update_tooltip(self) -> None:
        self.action.setToolTip(
            f"Profile the next {self.steps} steps with torch.profiler (plus one warm-up step): "
            "kernels, copies and launch gaps on a GPU, CPU ops on a CPU. Those steps are "
            "marked and left out of the scoreboard. The arrow picks the step count."
        )

    def capture(self, steps: int | None = None) -> bool:
        """Ask for a window; a refusal goes to the status bar. True if it was sent."""
        try:
            self.session.request_capture(self.steps if steps is None else steps)
        except SessionError as exc:
            self.window.statusBar().showMessage(f"Kernel capture: {exc}", 15_000)
            return False
        self._raise_table = True
        self._show_lane(True)
        self.sync()
        return True

    def launch_spec(self) -> LaunchSpec:
        """What the Nsight command should run: the current run, else what Start would run."""
        if self.session.spec is not None:
            return self.session.spec
        if self.window.script_spec is not None:
            return self.window.script_spec
        return LaunchSpec(
            workload=self.window.workload_combo.currentText(),
            device=str(self.window.device_combo.currentData()),
            python=self.window.python,
        )

    def copy_nsight_command(self) -> str:
        command = nsight_command(self.launch_spec(), gpuwatch_argv())
        QGuiApplication.clipboard().setText(command)
        self.window.statusBar().showMessage(f"Copied: {command}", 20_000)
        return command

    def sync(self) -> None:
        """Enable the action when a capture can start; redraw the lane when windows change."""
        session = self.session
        capturing = session.capturing
        self.action.setEnabled(
            session.state is SessionState.RUNNING
            and not capturing
            and not hasattr(session, "recording")
        )
        self.action.setText("Capturing…" if capturing else "Capture kernels")
        error = session.capture_error
        if error and error != self._error_shown:
            self.window.statusBar().showMessage(f"Kernel capture: {error}", 20_000)
        self._error_shown = error
        windows = session.kernel_windows()
        key = (len(windows), windows[-1].t0_ns if windows else 0, session.t0_ns)
        if key != self._shown:
            self._shown = key
            self.lane.show_windows(windows, session.t0_ns)
            self._show_table(windows[-1] if windows else None)
        self._sync_visible()

    def _sync_visible(self) -> None:
        """The lane while a capture runs or a captured window is in view; hidden otherwise."""
        lo_s, hi_s = self._view_box.viewRange()[0]
        self._show_lane(self.session.capturing or self.lane.any_in(lo_s, hi_s))

    def _show_lane(self, visible: bool) -> None:
        """Show the lane on the timeline's x range, or hide it and let that range go: a
        linked view follows every scrolled frame (its items' geometry too) even hidden."""
        if visible == self.lane.isVisible():
            return
        self.lane.setXLink(self._timeline if visible else None)
        self.lane.setVisible(visible)

    def _show_table(self, kernel_window: KernelWindow | None) -> None:
        table, dock = self.table, self.table_dock
        if table is None or dock is None:
            return
        table.show_window(kernel_window)
        if kernel_window is not None and self._raise_table:
            self._raise_table = False
            dock.raise_()

    def _on_lane_clicked(self, event: object) -> None:
        """A click on a window in the lane shows that window's ops in the table."""
        pos = event.scenePos()  # type: ignore[attr-defined]
        x_s = self.lane.getPlotItem().getViewBox().mapSceneToView(pos).x()
        index = self.lane.window_at(x_s)
        windows = self.session.kernel_windows()
        if index is not None and index < len(windows):
            self._raise_table = True
            self._show_table(windows[index])
