"""The main window: toolbar, headline figures, timeline over utilization, knob panel,
scoreboard and log docks.

Data flow: the Session's threads fill ring buffers; this window polls them on ONE timer
(~30 fps) and redraws from snapshots. There are no data signals and no per-message
redraws, so a runner sending 10,000 steps/s costs the GUI the same as one sending 10.
"""

from __future__ import annotations

import contextlib
import dataclasses
import html
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import platformdirs
from PySide6.QtCore import QByteArray, QSettings, Qt, QTimer
from PySide6.QtGui import QAction, QActionGroup, QCloseEvent, QKeySequence
from PySide6.QtWidgets import (
    QComboBox,
    QDockWidget,
    QFileDialog,
    QLabel,
    QMainWindow,
    QMessageBox,
    QSplitter,
    QStyle,
    QToolBar,
    QVBoxLayout,
    QWidget,
)

from gpuwatch.core.figures.analysis import active_spans, busy_percent_over, headline
from gpuwatch.core.figures.gap_causes import caused_idle, reconfiguring_steps
from gpuwatch.core.figures.sample_busy import SampleBusy
from gpuwatch.core.figures.timeline_bins import TimelineBins
from gpuwatch.core.files.recording import SUFFIX, Recorder, RecordingError
from gpuwatch.core.files.recording_reader import open_recording
from gpuwatch.core.files.replay import READ_ONLY, ReplaySession
from gpuwatch.core.run.outcome import describe, facts_from
from gpuwatch.core.run.session import ACTIVE_STATES, LaunchSpec, LogLine, Session, SessionState
from gpuwatch.protocol import WORKLOADS
from gpuwatch.qt import palette
from gpuwatch.qt.advisor_view import AdvisorView
from gpuwatch.qt.change_markers import ChangeMarkers
from gpuwatch.qt.gap_tint import legend as gap_legend
from gpuwatch.qt.headline_bar import HeadlineBar, HeadlineFigures
from gpuwatch.qt.help_view import build_help_menu, open_help
from gpuwatch.qt.interpreter_picker import InterpreterChoice, needs_choice
from gpuwatch.qt.kernel_lane import KernelCaptureControls
from gpuwatch.qt.knob_panel import KnobPanel
from gpuwatch.qt.log_pane import LogPane
from gpuwatch.qt.presentation import PresentationMode
from gpuwatch.qt.replay_bar import ReplayBar
from gpuwatch.qt.scoreboard_view import ScoreboardView
from gpuwatch.qt.screenshot import save_screenshot
from gpuwatch.qt.settings import Settings, build_settings_menu, remember
from gpuwatch.qt.shortcuts import apply_shortcuts, build_run_menu, build_view_actions
from gpuwatch.qt.spans import is_dense, weighted_mean
from gpuwatch.qt.theme import MODES as THEME_MODES
from gpuwatch.qt.theme import theme_manager
from gpuwatch.qt.timeline_view import TimelineView, settle_before_paint
from gpuwatch.qt.tour_controller import TourController
from gpuwatch.qt.utilization_view import UtilizationView, choose_coarse

#: Redraw period: ~30 fps is smooth scrolling and leaves the CPU to the training run.
REDRAW_MS = 33
#: If a redraw costs more than half its period, the period stretches (up to this): on a CPU
#: device the GUI competes with the very run it measures, and input must stay responsive.
MAX_REDRAW_MS = 250
#: Width of the visible window while following "now".
WINDOW_S = 30.0
#: The headline figures cover this much of the recent past...
HEADLINE_WINDOW_S = 5.0
#: ...and are refreshed every this many redraws (~4 Hz: readable, not flickering).
HEADLINE_EVERY = 8
#: The headline's figures come from at most this many of the newest steps.
HEADLINE_MAX_STEPS = 10_000
#: The knob panel follows answers and values this often (seconds; a refused change snaps
#: back within it)...
KNOBS_PERIOD_S = 0.25
#: ...and the scoreboard, the knobs' costs and the change markers this often: ~2 Hz, since
#: ``session.scoreboard()`` recomputes the live row and table figures must stay readable.
SCOREBOARD_PERIOD_S = 0.5
#: The banner's look per outcome level: red only for a failure.
_BANNER_STYLES = {
    "error": palette.BANNER_STYLE,
    "warning": palette.BANNER_STYLE.replace("#C62828", "#8D6E00"),
    "info": palette.BANNER_STYLE.replace("#C62828", "#1E3A5F"),
}
TOUR_LOCK_HINT = "The tour is driving the knobs: Stop tour to change them yourself."
RECORDING_FILTER = f"gpuwatch recordings (*{SUFFIX});;All files (*)"


def recordings_dir() -> Path:
    """Where Record saves by default (tests point it at a temporary folder)."""
    return Path(platformdirs.user_documents_dir()) / "gpuwatch"


_STATE_TEXT = {
    SessionState.IDLE: "idle",
    SessionState.STARTING: "starting…",
    SessionState.RUNNING: "running",
    SessionState.STOPPING: "stopping…",
    SessionState.FINISHED: "finished",
    SessionState.FAILED: "FAILED",
}


class MainWindow(QMainWindow):
    """Watches one ``Session`` (injected: tests feed its stores without starting it)."""

    def __init__(self, session: Session, options: Any = None) -> None:
        super().__init__()
        self.session = session
        self._python: str | None = getattr(options, "python", None)
        #: Script mode (``gpuwatch run SCRIPT``): Start runs this script instead of a workload.
        self.script_spec: LaunchSpec | None = None
        if getattr(options, "script", None):
            self.script_spec = LaunchSpec(
                script=options.script,
                script_args=tuple(getattr(options, "script_args", ())),
                cwd=getattr(options, "cwd", None),
                seconds=getattr(options, "seconds", None),
            )
        self.setWindowTitle(
            f"gpuwatch — {self.script_spec.name}" if self.script_spec else "gpuwatch"
        )
        self._ticks = 0
        self._tick_cost_ms = 0.0
        self._last_key: tuple | None = None
        #: Lane occupancy per fine time bin and busy % per coarse sample, kept up to date
        #: incrementally (``_redraw_plots``).
        self.bins = TimelineBins()
        self.sample_busy = SampleBusy()
        self._closed = False
        self._knobs_due = 0.0
        self._scoreboard_due = 0.0
        #: Space: the plots and headline freeze while the run goes on (gpuwatch.qt.shortcuts).
        self.view_paused = False
        #: Visible window length while following; Ctrl+= / Ctrl+- step it.
        self.window_s = WINDOW_S

        self.settings = Settings()
        # An explicit --workload/--device wins; otherwise what the user last chose.
        self._build_toolbar(
            getattr(options, "workload", None) or self.settings.workload or "vision",
            getattr(options, "device", None) or self.settings.device or "auto",
        )
        central = QWidget()
        layout = QVBoxLayout(central)
        layout.setContentsMargins(6, 4, 6, 2)
        layout.setSpacing(4)
        self.banner = QLabel()
        self.banner.setStyleSheet(palette.BANNER_STYLE)
        self.banner.setTextFormat(Qt.TextFormat.PlainText)  # exception texts may hold "<"
        self.banner.setWordWrap(True)
        self.banner.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.banner.hide()
        layout.addWidget(self.banner)
        #: Run → Choose Python…, and the frozen app's search for a Python with torch.
        self.interpreter = InterpreterChoice(self)
        layout.addWidget(self.interpreter.banner)
        self.tour = TourController(session, self, self._log_gui)
        #: ``gpuwatch --tour``: begin the tour as soon as a run is up (for talks and demos).
        self._tour_pending = bool(getattr(options, "tour", False))
        #: A scripted ``--demo-seconds`` run: its window layout is not remembered.
        self.demo_run = bool(getattr(options, "demo_seconds", None))
        self.run_bar.addSeparator()
        self.run_bar.addAction(self.tour.action)
        layout.addWidget(self.tour.caption)
        self.headline = HeadlineBar()
        self.presentation = PresentationMode(self, self.headline)  # its sentence: a top dock
        layout.addWidget(self.headline)
        self.timeline_caption = QLabel()
        self.timeline_caption.setWordWrap(True)  # a long legend wraps, never widens the window
        layout.addWidget(self.timeline_caption)
        self.timeline = TimelineView()
        self.utilization = UtilizationView()
        self.utilization.plot.setXLink(self.timeline)
        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.addWidget(self.timeline)
        splitter.addWidget(self.utilization)
        splitter.setStretchFactor(0, 3)
        splitter.setStretchFactor(1, 2)
        splitter.setChildrenCollapsible(False)
        layout.addWidget(splitter, 1)
        self.setCentralWidget(central)
        self.timeline_markers = ChangeMarkers(self.timeline, labels=True)
        self.utilization_markers = ChangeMarkers(self.utilization.plot, labels=False)

        self.log_pane = LogPane()
        dock = self._dock("Log", "log", self.log_pane)
        self.addDockWidget(Qt.DockWidgetArea.BottomDockWidgetArea, dock)
        self.scoreboard = ScoreboardView(session)
        score_dock = self._dock("Scoreboard", "scoreboard", self.scoreboard)
        self.addDockWidget(Qt.DockWidgetArea.BottomDockWidgetArea, score_dock)
        self.splitDockWidget(score_dock, dock, Qt.Orientation.Horizontal)
        self.resizeDocks([score_dock, dock], [3, 1], Qt.Orientation.Horizontal)
        self.resizeDocks([score_dock], [190], Qt.Orientation.Vertical)
        self.knob_panel = KnobPanel(session)
        knob_dock = self._dock("Knobs", "knobs", self.knob_panel)
        self.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, knob_dock)
        self.resizeDocks([knob_dock], [290], Qt.Orientation.Horizontal)
        self.knob_panel.status_message.connect(
            lambda text: self.statusBar().showMessage(text, 15_000)
        )
        self.tour.active_changed.connect(
            lambda on: self.knob_panel.set_locked(TOUR_LOCK_HINT if on else None)
        )
        # The advisor sits above the knobs: why the device waits, and the knob to flip.
        self.advisor = AdvisorView(session)
        advisor_dock = self._dock("Advisor", "advisor", self.advisor)
        self.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, advisor_dock)
        self.splitDockWidget(advisor_dock, knob_dock, Qt.Orientation.Vertical)
        self.advisor.status_message.connect(lambda text: self.statusBar().showMessage(text, 15_000))
        self.tour.active_changed.connect(
            lambda on: self.advisor.set_locked(TOUR_LOCK_HINT if on else None)
        )

        self._build_status_bar()
        self._build_file_menu()
        self._build_view_menu()
        #: Replay mode: the session is a recording; the replay bar moves its play position.
        self.replay = session if isinstance(session, ReplaySession) else None
        self.replay_bar: ReplayBar | None = None
        self._log_generation = 0
        if self.replay is not None:
            self._enter_replay_mode(self.replay, knob_dock)
        for plot in (self.timeline, self.utilization.plot):
            plot.getPlotItem().getViewBox().sigRangeChangedManually.connect(self._on_manual_pan)
        self._set_caption(None, dense=False)
        self._sync_state()
        self._build_desk_menus()
        #: Toolbar "Capture kernels", the kernel lane under the timeline, Help ▸ Nsight command.
        self.kernel_capture = KernelCaptureControls(self, splitter)
        build_run_menu(self)  # the run toolbar's actions in the Run menu too

        self.timer = QTimer(self)
        self.timer.setInterval(REDRAW_MS)
        self.timer.timeout.connect(self._tick)
        self.timer.start()
        theme_manager().attach(self)

    # ---- Building ---------------------------------------------------------------------

    def _dock(self, title: str, name: str, widget: QWidget) -> QDockWidget:
        dock = QDockWidget(title, self)
        dock.setObjectName(name)
        dock.setWidget(widget)
        dock.setFeatures(
            QDockWidget.DockWidgetFeature.DockWidgetMovable
            | QDockWidget.DockWidgetFeature.DockWidgetFloatable
        )
        return dock

    def _build_toolbar(self, workload: str, device: str) -> None:
        bar = QToolBar("Run")
        self.run_bar = bar
        bar.setObjectName("run")
        bar.setMovable(False)
        bar.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.addToolBar(bar)
        self.workload_combo = QComboBox()
        self.workload_combo.addItems(WORKLOADS)
        if workload in WORKLOADS:
            self.workload_combo.setCurrentText(workload)
        self.workload_combo.setToolTip(
            "The built-in training workload to run: vision (JPEG decode + augmentation into a "
            "small ResNet; input-bound when naive), mlp (small feed-forward net on 28×28 "
            "digits; launch- and sync-bound on a GPU), gpt (small decoder-only transformer on "
            "random tokens). Applies at the next Start."
        )
        self.script_label: QLabel | None = None
        if self.script_spec is not None:
            # Script mode: the script takes the workload's place (the combo stays unshown).
            spec = self.script_spec
            bar.addWidget(QLabel(" Script "))
            self.script_label = QLabel(f"<b>{html.escape(spec.name)}</b>")
            args = " ".join(spec.script_args)
            self.script_label.setToolTip(
                f"{spec.script} {args}".rstrip() + f"\nrun from {spec.cwd}" * bool(spec.cwd)
            )
            bar.addWidget(self.script_label)
        else:
            bar.addWidget(QLabel(" Workload "))
            bar.addWidget(self.workload_combo)
        bar.addWidget(QLabel("  Device "))
        self.device_combo = QComboBox()
        for label, value in device_entries():
            self.device_combo.addItem(label, value)
        index = self.device_combo.findData(device)
        if index < 0:
            self.device_combo.addItem(device, device)
            index = self.device_combo.count() - 1
        self.device_combo.setCurrentIndex(index)
        self.device_combo.setToolTip(
            "Where the runner trains: auto picks CUDA when torch sees a GPU, else the CPU."
        )
        bar.addWidget(self.device_combo)
        bar.addSeparator()
        self.start_action = QAction("", self)
        self.start_action.triggered.connect(self._on_start_stop)
        bar.addAction(self.start_action)
        self.follow_action = QAction("Follow", self)
        self.follow_action.setCheckable(True)
        self.follow_action.setChecked(True)
        self.follow_action.setToolTip(
            "Keep the last 30 s in view (panning or zooming the plots turns this off)."
        )
        self.follow_action.toggled.connect(self._on_follow_toggled)
        bar.addAction(self.follow_action)

    def _build_desk_menus(self) -> None:
        """View keys, Settings and Help menus, the shortcut table; then the saved layout."""
        build_view_actions(self)
        self.interpreter.build_menu()
        build_settings_menu(self, self.settings)
        build_help_menu(self)
        apply_shortcuts(self)
        self.headline.sig_help_requested.connect(lambda section: open_help(self, section))
        self.settings.restore_window(self)
        self._show_docks_new_to_the_saved_layout()

    def _show_docks_new_to_the_saved_layout(self) -> None:
        """Restoring a layout saved before a dock existed (the Advisor) hides that dock: show
        it, so an upgrade does not hide it; a dock the user closed stays closed."""
        state = QSettings(str(self.settings.path), QSettings.Format.IniFormat).value("window/state")
        if not isinstance(state, QByteArray):
            return
        saved = bytes(state.data())  # Qt stores each dock's object name as UTF-16
        for dock in self.findChildren(QDockWidget):
            name = dock.objectName()
            if name in ("advisor",) and name.encode("utf-16-be") not in saved:
                dock.show()

    def _build_status_bar(self) -> None:
        status = self.statusBar()
        self.state_label = QLabel()
        self.device_label = QLabel()
        self.timing_label = QLabel()
        self.window_label = QLabel()
        for label in (self.state_label, self.device_label, self.timing_label):
            status.addWidget(label)
        status.addPermanentWidget(self.window_label)

    # ---- Actions ----------------------------------------------------------------------

    @property
    def follow(self) -> bool:
        return self.follow_action.isChecked()

    @property
    def python(self) -> str | None:
        """The training interpreter of the next Start (None: gpuwatch's own Python)."""
        return self._python

    @python.setter
    def python(self, value: str | None) -> None:
        self._python = value

    def start_run(self) -> None:
        """Start the selected workload (no-op while a run is in progress)."""
        if self.session.state in ACTIVE_STATES:
            return
        if needs_choice(self):  # the installed app has no Python: find one, then start
            self.interpreter.find_then(self.start_run)
            return
        device = self.device_combo.currentData() or "auto"
        if self.script_spec is not None:
            spec = dataclasses.replace(self.script_spec, device=device, python=self._python)
        else:
            spec = LaunchSpec(
                workload=self.workload_combo.currentText(), device=device, python=self._python
            )
        self.session.start(spec)
        self.follow_action.setChecked(True)
        self._sync_state()

    def _on_start_stop(self) -> None:
        if self.session.state in ACTIVE_STATES:
            self.session.stop()
            self._sync_state()
        else:
            self.start_run()

    def _on_follow_toggled(self, checked: bool) -> None:
        if checked:
            self._tick()

    def _on_manual_pan(self, *_: object) -> None:
        self.follow_action.setChecked(False)

    def closeEvent(self, event: QCloseEvent) -> None:
        """Stop the run with the window: no runner outlives the GUI."""
        self.timer.stop()
        self.tour.timer.stop()
        if not self._closed:
            self._closed = True
            remember(self, self.settings)
            self.session.close()
            self._stop_recording()
        event.accept()

    # ---- Redraw -----------------------------------------------------------------------

    def redraw_now(self) -> None:
        """Redraw at once even if no data changed (presentation regrouped lanes and captions)."""
        self._last_key = None
        self._tick()

    def _tick(self) -> None:
        started = time.perf_counter()
        self._redraw()
        cost_ms = (time.perf_counter() - started) * 1e3
        self._tick_cost_ms = 0.8 * self._tick_cost_ms + 0.2 * cost_ms
        interval = int(min(max(REDRAW_MS, 2 * self._tick_cost_ms), MAX_REDRAW_MS))
        if abs(interval - self.timer.interval()) > 5:
            self.timer.setInterval(interval)

    def _redraw(self) -> None:
        self._ticks += 1
        if self.replay is not None and self.replay.generation != self._log_generation:
            self._log_generation = self.replay.generation  # a seek back rebuilt the run
            self.log_pane.clear()
        lines = self.session.drain_log()
        if lines:
            self.log_pane.append_lines(lines, self.session.t0_ns)
        recorder = getattr(self, "recorder", None)
        if recorder is not None and recorder.error:  # e.g. a full disk: say so now
            self._stop_recording()
            self._show_error("Recording stopped", recorder.error)
        self._sync_state()
        live = self.session.state in ACTIVE_STATES
        now_ns = self._now_ns(live)
        lo_ns, hi_ns = self._visible_window(now_ns)
        self._redraw_plots(live, lo_ns, hi_ns)
        if self._ticks % HEADLINE_EVERY == 1 and not self.view_paused:
            self._redraw_headline(now_ns)
        self._redraw_knobs_and_scoreboard(now_ns)

    def _redraw_knobs_and_scoreboard(self, now_ns: int) -> None:
        """Knob panel at ~4 Hz; scoreboard, costs and change markers at ~2 Hz (by time, as
        the redraw period stretches under load)."""
        now = time.monotonic()
        if now >= self._scoreboard_due:
            self._scoreboard_due = now + SCOREBOARD_PERIOD_S
            self._knobs_due = now + KNOBS_PERIOD_S
            session = self.session
            rows = session.scoreboard()
            self.scoreboard.show_rows(rows)
            self.knob_panel.refresh(rows)
            self.advisor.refresh(rows)
            changes = session.config_changes()
            for markers in (self.timeline_markers, self.utilization_markers):
                markers.update(session.hello, changes, rows, session.t0_ns, now_ns)
            self._start_pending_tour()
            self.tour.sync()
        elif now >= self._knobs_due:
            self._knobs_due = now + KNOBS_PERIOD_S
            self.knob_panel.refresh()
            self.tour.sync()

    def _start_pending_tour(self) -> None:
        if self._tour_pending and self.session.state is SessionState.RUNNING and self.session.knobs:
            self._tour_pending = False
            self.tour.start()

    def _log_gui(self, level: str, text: str) -> None:
        """A line of the window's own (e.g. the tour's) in the log pane."""
        line = LogLine(time.perf_counter_ns(), level, "tour", text)
        self.log_pane.append_lines([line], self.session.t0_ns)

    def _now_ns(self, live: bool) -> int:
        """The right edge of "now": the clock while running, else where the data ends.

        After a run (or for data written straight into the stores) the view and the
        headline stay on the last data instead of scrolling into emptiness.
        """
        if live:
            return time.perf_counter_ns()
        if self.replay is not None:
            return self.replay.position_ns
        last = self.session.steps.snapshot(last=1)
        ends = [int(last.host[-1, -1])] if len(last) else []
        coarse = self.session.coarse
        for name in coarse.names():
            view = coarse.snapshot(name)
            if len(view):
                ends.append(int(view.t1[-1]))
        return max(ends) if ends else self.session.t0_ns

    def _visible_window(self, now_ns: int) -> tuple[int, int]:
        t0 = self.session.t0_ns
        vb = self.timeline.getPlotItem().getViewBox()
        if self.follow:
            hi_s = max((now_ns - t0) / 1e9, self.window_s)
            lo_s = hi_s - self.window_s
            vb.setXRange(lo_s, hi_s, padding=0)
        else:
            lo_s, hi_s = vb.viewRange()[0]
        span = hi_s - lo_s
        self.window_label.setText(f"showing {lo_s:,.1f}–{hi_s:,.1f} s ({span:,.3g} s)  ")
        return t0 + int(lo_s * 1e9), t0 + int(hi_s * 1e9)

    def _redraw_plots(self, live: bool, lo_ns: int, hi_ns: int) -> None:
        """Timeline and utilization for ``[lo_ns, hi_ns]``.

        Dense windows are drawn from ``self.bins`` (lane occupancy kept per fine time bin
        as steps arrive), so a frame costs the new steps and the visible pixels, not every
        visible step; a sparse window draws its few steps span by span.
        """
        session = self.session
        statuses = session.coarse.statuses()
        choice = choose_coarse(statuses, session.device_kind)
        coarse = session.coarse.snapshot(choice.metric, since_ns=lo_ns)
        if len(coarse):
            keep = coarse.t0 <= hi_ns
            coarse = type(coarse)(coarse.t0[keep], coarse.t1[keep], coarse.value[keep])
        width_px = self.timeline.width_px()
        key = (
            session.t0_ns,
            session.steps.count,
            session.device_kind,
            choice,
            len(coarse),
            int(coarse.t1[-1]) if len(coarse) else 0,
            lo_ns,
            hi_ns,
            width_px,
        )
        if not live and key == self._last_key:
            return  # nothing new to draw: an idle window costs (almost) nothing
        self._last_key = key
        changes = session.config_changes()
        # Nothing more will come: the run is over (a replay only once played to its end).
        final = not live and (self.replay is None or self.replay.at_end)
        self.bins.update(
            session.steps,
            changes,
            session.t0_ns,
            lo_ns=lo_ns,
            hi_ns=hi_ns,
            px_ns=(hi_ns - lo_ns) / width_px,
            final=final,
        )
        cols = self.bins.columns(lo_ns, hi_ns, int(np.ceil(width_px)))
        self.timeline.set_device_kind(session.device_kind)
        if is_dense(cols.n_steps, width_px):
            self.timeline.show_columns(cols, session.t0_ns, lo_ns, hi_ns)
        else:
            steps = session.steps.snapshot(since_ns=lo_ns)
            self.timeline.show_steps(
                steps, active_spans(steps), session.t0_ns, lo_ns, hi_ns, changes=changes
            )
            self.timeline.show_gap_causes(
                caused_idle(steps, None, reconfiguring_steps(steps, changes)),
                session.t0_ns,
                lo_ns,
                hi_ns,
            )
        busy = self.sample_busy.over(
            session.steps, coarse, self.bins.final_before_ns, key=(session.t0_ns, id(session.steps))
        )
        self.utilization.show_data(choice, coarse, busy, session.t0_ns)
        self._set_caption(session.device_kind, self.timeline.dense)
        for plot in (self.timeline, self.utilization.plot):
            settle_before_paint(plot)  # one paint per frame, not one per item that moved

    def _redraw_headline(self, now_ns: int) -> None:
        session = self.session
        window_ns = int(HEADLINE_WINDOW_S * 1e9)
        lo = now_ns - window_ns
        # At thousands of steps/s the window shrinks to the newest HEADLINE_MAX_STEPS steps
        # (the tooltips say over how long): plenty for a median, and a frame stays cheap.
        newest = session.steps.snapshot(last=HEADLINE_MAX_STEPS)
        if len(newest) == HEADLINE_MAX_STEPS and int(newest.host[0, 0]) > lo:
            lo = int(newest.host[0, 0])
            window_ns = now_ns - lo
        choice = choose_coarse(session.coarse.statuses(), session.device_kind)
        coarse = session.coarse.snapshot(choice.metric, since_ns=lo)
        since = min(lo, int(coarse.t0[0])) if len(coarse) else lo
        steps = session.steps.snapshot(since_ns=since)
        h = headline(steps, now_ns, window_ns)
        coarse_pct = coarse_same = busy_same = None
        if len(coarse):
            coarse_pct = weighted_mean(coarse.t0, coarse.t1, coarse.value, lo, now_ns)
            # The difference compares like with like: only periods our marks fully cover.
            busy = busy_percent_over(active_spans(steps), coarse.t0, coarse.t1)
            known = np.isfinite(busy)
            if known.any():
                w0, w1 = coarse.t0[known], coarse.t1[known]
                busy_same = weighted_mean(w0, w1, busy[known], lo, now_ns)
                coarse_same = weighted_mean(w0, w1, coarse.value[known], lo, now_ns)
        shares = sorted((h.phase_shares or {}).items(), key=lambda kv: -kv[1])
        self.headline.show_figures(
            HeadlineFigures(
                window_s=round(window_ns / 1e9, 1),
                samples_per_s=h.samples_per_s,
                step_ms_p50=h.step_ms_p50,
                step_ms_p95=h.step_ms_p95,
                busy_pct=None if h.busy_share is None else 100.0 * h.busy_share,
                coarse_pct=coarse_pct,
                coarse_short=choice.short,
                coarse_same_pct=coarse_same,
                busy_same_pct=busy_same,
                top_phases=tuple((n, s) for n, s in shares[:3] if s >= 0.005),
                device_kind=session.device_kind,
            )
        )

    # ---- State ------------------------------------------------------------------------

    def _sync_state(self) -> None:
        session = self.session
        state = session.state
        live = state in ACTIVE_STATES
        if self.start_action.text() != ("Stop" if live else "Start"):
            self.start_action.setText("Stop" if live else "Start")
            pixmaps = QStyle.StandardPixmap
            icon = pixmaps.SP_MediaStop if live else pixmaps.SP_MediaPlay
            self.start_action.setIcon(self.style().standardIcon(icon))
        self.start_action.setToolTip(
            "Stop the run (polite stop, then terminate, then kill)"
            if live
            else "Run the script again"
            if self.script_spec is not None
            else "Start the selected workload"
        )
        replay = getattr(self, "replay", None) is not None  # a recording starts nothing
        self.start_action.setEnabled(state is not SessionState.STOPPING and not replay)
        self.workload_combo.setEnabled(not live and not replay)
        self.device_combo.setEnabled(not live and not replay)
        self.state_label.setText(f"  {_STATE_TEXT.get(state, state.name.lower())}  ")
        hello = session.hello or {}
        device = hello.get("device") or {}
        name = device.get("name")
        self.device_label.setText(f"  device: {name}  " if name else "  device: —  ")
        kind = session.device_kind
        timing = {"cuda": "CUDA events", "cpu": "host timestamps (CPU)"}.get(kind or "", "—")
        self.timing_label.setText(f"  timing: {timing}  ")
        text, level = self._banner_text(state)
        if text:
            if self.banner.text() != text:
                self.banner.setText(text)
                self.banner.setStyleSheet(_BANNER_STYLES[level])
                if self.presentation.active:  # a new style sheet has the desk's font size
                    self.presentation.restyle()
            self.banner.show()
        else:
            self.banner.hide()

    def _banner_text(self, state: SessionState) -> tuple[str | None, str]:
        """A failure; in script mode also how the script ended, or a notice while it runs."""
        if self.script_spec is None or getattr(self.session, "spec", None) is None:
            if state is SessionState.FAILED:
                return (
                    f"Run failed: {self.session.error or 'the runner ended with an error'}",
                    "error",
                )
            notice = getattr(self.session, "notice", None)
            if state in ACTIVE_STATES and notice:  # e.g. no step for 30 s
                return notice, "warning"
            return None, "error"
        if state in ACTIVE_STATES and not getattr(self.session, "notice", None):
            return None, "info"
        outcome = describe(facts_from(self.session))
        return outcome.sentence, outcome.level

    def _set_caption(self, kind: str | None, dense: bool) -> None:
        device = (
            "CUDA stream active (upper bound)"
            if kind == "cuda"
            else "compute spans (CPU)"
            if kind == "cpu"
            else "device spans"
        )
        stage = self.presentation.active  # on stage: the legend only, so it fits 1280 px
        text = (
            "<b>Timeline</b> — "
            + ("" if stage else "host phases from perf_counter marks; device lane: ")
            + palette.swatch(palette.DEVICE_ACTIVE, device)
            + "&nbsp;&nbsp;"
            + gap_legend(self.timeline.causes_shown)
        )
        if dense and not stage:
            text += "&nbsp;&nbsp;<i>(dense: bar height = share of each pixel column)</i>"
        if self.timeline_caption.text() != text:
            self.timeline_caption.setText(text)

    # ---- View menu: presentation mode and theme ------------------------------------------

    def _build_view_menu(self) -> None:
        menu = self.menuBar().addMenu("&View")
        self.run_bar.addSeparator()
        self.run_bar.addAction(self.presentation.action)
        menu.addAction(self.presentation.action)
        panels = menu.addMenu("Panels")
        for dock in self.findChildren(QDockWidget):
            panels.addAction(dock.toggleViewAction())
        themes = menu.addMenu("Theme")
        group = QActionGroup(self)
        manager = theme_manager()
        self.theme_actions: dict[str, QAction] = {}
        for mode in THEME_MODES:
            action = themes.addAction(mode.capitalize())
            action.setCheckable(True)
            action.setChecked(mode == manager.mode)
            action.triggered.connect(lambda _=False, m=mode: self.choose_theme(m))
            group.addAction(action)
            self.theme_actions[mode] = action
        manager.sig_theme_changed.connect(self._sync_theme_actions)

    def choose_theme(self, mode: str) -> None:
        """View → Theme: apply ``mode`` and remember it for the next start."""
        theme_manager().set_mode(mode)
        settings = getattr(self, "settings", None)
        if settings is not None:
            settings.theme = mode

    def _sync_theme_actions(self, *_: object) -> None:
        mode = theme_manager().mode
        for name, action in self.theme_actions.items():
            action.setChecked(name == mode)

    # ---- File menu: recordings, replay, compare, export --------------------------------

    def _build_file_menu(self) -> None:
        menu = self.menuBar().addMenu("&File")
        self.open_action = menu.addAction("Open recording…")
        self.open_action.setShortcut(QKeySequence.StandardKey.Open)
        self.open_action.triggered.connect(self._ask_open)
        self.compare_action = menu.addAction("Compare with…")
        self.compare_action.setToolTip("Show this recording and another side by side")
        self.compare_action.triggered.connect(self._ask_compare)
        menu.addSeparator()
        self.record_action = menu.addAction("Record")
        self.record_action.setCheckable(True)
        self.record_action.setToolTip(f"Record the run to a {SUFFIX} file in {recordings_dir()}")
        self.record_action.toggled.connect(self._on_record_toggled)
        self.run_bar.addAction(self.record_action)
        export = menu.addMenu("Export")
        self.export_perfetto_action = export.addAction("Perfetto JSON…")
        self.export_perfetto_action.triggered.connect(lambda: self._ask_export("perfetto"))
        self.export_csv_action = export.addAction("CSV…")
        self.export_csv_action.triggered.connect(lambda: self._ask_export("csv"))
        self.export_png_action = export.addAction("PNG of the window…")
        self.export_png_action.triggered.connect(self._ask_export_png)
        self.recorder: Recorder | None = None
        self.last_recording: Path | None = None  # what Export writes from in a live window
        self._windows: list[QWidget] = []  # replay and compare windows opened from here
        self.error_box: QMessageBox | None = None

    def _enter_replay_mode(self, replay: ReplaySession, knob_dock: QDockWidget) -> None:
        """Show the recording: a replay bar; nothing that would start or change a run."""
        self.setWindowTitle(f"gpuwatch — {replay.recording.path.name} (replay)")
        self.replay_bar = ReplayBar(replay)
        bar = QToolBar("Replay")
        bar.setObjectName("replay")
        bar.setMovable(False)
        bar.addWidget(self.replay_bar)
        self.addToolBarBreak()
        self.addToolBar(bar)
        for action in (self.start_action, self.tour.action, self.record_action):
            action.setEnabled(False)
        self.record_action.setToolTip("A replay is already a recording")
        self.knob_panel.set_locked(READ_ONLY)
        self.advisor.set_locked(READ_ONLY)
        knob_dock.setWindowTitle(f"Knobs ({READ_ONLY})")
        # The toolbar names what was recorded (a built-in workload or a script's file name).
        recorded = (replay.recording.hello or {}).get("workload")
        if isinstance(recorded, str) and recorded:
            if self.workload_combo.findText(recorded) < 0:
                self.workload_combo.addItem(recorded)
            self.workload_combo.setCurrentText(recorded)
        self.knob_panel.setEnabled(False)

    def _ask_open(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self, "Open recording", str(recordings_dir()), RECORDING_FILTER
        )
        if path:
            self.open_recording_file(path)

    def open_recording_file(self, path: str | Path) -> MainWindow | None:
        """Show a recording in a new window; a bad file gets a message, this window stays."""
        try:
            replay = ReplaySession(open_recording(path))
        except RecordingError as exc:
            self._show_error("Cannot open the recording", str(exc))
            return None
        window = MainWindow(replay)
        window.resize(self.size())
        window.show()
        self._windows.append(window)
        return window

    def _ask_compare(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self, "Compare with recording", str(recordings_dir()), RECORDING_FILTER
        )
        if path:
            self.compare_with(path)

    def compare_with(self, path: str | Path) -> QWidget | None:
        """This recording and ``path`` side by side (in a live window: ask for both files)."""
        try:
            other = ReplaySession(open_recording(path))
        except RecordingError as exc:
            self._show_error("Cannot open the recording", str(exc))
            return None
        if self.replay is None:
            self._show_error(
                "Nothing to compare with yet",
                "Open a recording first (File → Open recording…), then compare it with another.",
            )
            return None
        return self.show_compare(other)

    def show_compare(self, other: ReplaySession) -> QWidget:
        """A window with this window's recording and ``other`` side by side."""
        from gpuwatch.qt.compare_view import CompareView

        assert self.replay is not None, "compare needs a recording in this window"
        view = CompareView(self.replay, other)
        view.resize(self.size())
        view.show()
        theme_manager().attach(view)  # follows View → Theme and the desktop's scheme too
        self._windows.append(view)
        return view

    def _on_record_toggled(self, on: bool) -> None:
        if not on:
            self._stop_recording()
            return
        if self.recorder is not None:
            return
        stamp = datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
        name = self.script_spec.name if self.script_spec else self.workload_combo.currentText()
        path = recordings_dir() / f"{Path(name).stem}-{stamp}{SUFFIX}"
        spec = self.script_spec
        recorder = Recorder(
            path,
            self.session,
            spec={
                "script": spec.script if spec else None,
                "args": list(spec.script_args) if spec else [],
                "workload": None if spec else self.workload_combo.currentText(),
                "device": self.device_combo.currentData() or "auto",
                "python": self._python,
            },
        )
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            recorder.start()
        except (RecordingError, OSError) as exc:
            self.record_action.setChecked(False)
            self._show_error("Cannot record", str(exc))
            return
        self.recorder = recorder
        self.statusBar().showMessage(f"recording to {path}")

    def _stop_recording(self) -> None:
        recorder, self.recorder = self.recorder, None
        if recorder is None:
            return
        recorder.close()
        self.last_recording = recorder.path
        text = (
            f"recording stopped: {recorder.error}"
            if recorder.error
            else f"recorded {recorder.steps_written:,} steps to {recorder.path}"
        )
        self.statusBar().showMessage(text, 30_000)
        if self.record_action.isChecked():
            self.record_action.setChecked(False)

    def _ask_export(self, kind: str) -> None:
        suffix, title = (".json", "Perfetto JSON") if kind == "perfetto" else (".csv", "CSV")
        source = self.replay.recording.path if self.replay is not None else self.last_recording
        default = recordings_dir() / f"{source.stem if source else 'gpuwatch'}{suffix}"
        path, _ = QFileDialog.getSaveFileName(
            self, f"Export {title}", str(default), f"{title} (*{suffix})"
        )
        if path:
            self.export_recording(kind, path)

    def export_recording(self, kind: str, path: str | Path) -> bool:
        """Write the shown recording (or the last one recorded here) as ``perfetto`` or
        ``csv``; a message says why when there is none or the file cannot be written."""
        from gpuwatch.core.files.export_csv import write_csv
        from gpuwatch.core.files.export_perfetto import write_perfetto

        try:
            if self.replay is not None:
                recording = self.replay.recording
            elif self.last_recording is not None:
                recording = open_recording(self.last_recording)
            else:
                self._show_error(
                    "Nothing to export",
                    "Exports are made from a recording: "
                    "record the run (File → Record) or open a recording first.",
                )
                return False
            (write_perfetto if kind == "perfetto" else write_csv)(recording, Path(path))
        except RecordingError as exc:
            self._show_error("Cannot export", str(exc))
            return False
        except OSError as exc:
            self._show_error("Cannot export", f"cannot write {path}: {exc.strerror or exc}")
            return False
        self.statusBar().showMessage(f"saved {path}", 15_000)
        return True

    def _ask_export_png(self) -> None:
        path, _ = QFileDialog.getSaveFileName(
            self,
            "Export PNG of the window",
            str(recordings_dir() / "gpuwatch.png"),
            "PNG images (*.png)",
        )
        if path:
            self.export_png(path)

    def export_png(self, path: str | Path) -> bool:
        error = save_screenshot(self, Path(path))
        if error:
            self._show_error("Cannot export", error)
            return False
        self.statusBar().showMessage(f"saved {path}", 15_000)
        return True

    def _show_error(self, title: str, text: str) -> None:
        """A message box that does not block (the run and the redraw go on)."""
        self.statusBar().showMessage(text, 30_000)
        self.error_box = QMessageBox(
            QMessageBox.Icon.Warning, title, text, QMessageBox.StandardButton.Ok, self
        )
        self.error_box.open()


def device_entries() -> list[tuple[str, str]]:
    """Device choices: auto, cpu, and one per GPU NVML lists (none without NVML)."""
    entries = [("auto", "auto"), ("cpu", "cpu")]
    with contextlib.suppress(Exception):  # no NVML, no driver, or an older core module
        from gpuwatch.core.run import nvml

        for dev in nvml.list_devices():
            # NVML numbers GPUs by PCI bus; the runner must use the same order for cuda:N.
            label = f"cuda:{dev.index}" + (f" — {dev.name}" if dev.name else "")
            entries.append((label, f"cuda:{dev.index}"))
    return entries
