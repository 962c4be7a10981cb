"""The main window: toolbar, headline figures, timeline over utilization, knob panel,
scoreboard and log docks.

Data flow: the Session's threads fill ring buffers; this window polls them on ONE timer
(~30 Hz while a run is live or the view moves, 4 Hz at rest, and no tick before a frame can be
due) and redraws from snapshots only what changed, at most ~15 frames a second. There are no
data signals and no per-message redraws, so a runner sending 10,000 steps/s costs the GUI about
the same as one sending 10. The rare changes (a configuration applied, a refusal, a kernel
window, the run's state) arrive as ``SessionSignals``. The window composes its parts: actions
and menus from one table (``actions``), the run toolbar, recording and file dialogs, replay
mode, and the plots.
"""

from __future__ import annotations

import dataclasses
import math
import time

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QAction, QCloseEvent, QShowEvent
from PySide6.QtWidgets import (
    QMainWindow,
    QMenu,
    QMessageBox,
    QStyle,
    QVBoxLayout,
    QWidget,
)

from gpuwatch.core.figures.frame import hold_for_tick_s
from gpuwatch.core.files.replay import ReplaySession
from gpuwatch.core.run.session import ACTIVE_STATES, LaunchSpec, LogLine, SessionState
from gpuwatch.qt import palette
from gpuwatch.qt.about_dialog import AboutDialog
from gpuwatch.qt.actions import ActionEnablement, build_actions, build_menus
from gpuwatch.qt.compare_mode import CompareMode
from gpuwatch.qt.docks import PlotsFloor, WindowDocks
from gpuwatch.qt.file_dialogs import FileDialogs
from gpuwatch.qt.gpu_banner import GpuBanner
from gpuwatch.qt.headline_bar import HeadlineBar
from gpuwatch.qt.help_view import HelpDialog, open_help, section_under_cursor
from gpuwatch.qt.interpreter_picker import InterpreterChoice, needs_choice
from gpuwatch.qt.kernel_lane import KernelCaptureControls
from gpuwatch.qt.plots_redraw import PlotsRedraw, SteadyHeight
from gpuwatch.qt.presentation import PresentationMode
from gpuwatch.qt.rank_gpu_curves import RankGpuCurves
from gpuwatch.qt.rank_lanes import RankLanesControls
from gpuwatch.qt.record_control import RecordControl
from gpuwatch.qt.replay_mode import ReplayMode
from gpuwatch.qt.run_banner import RunBanner
from gpuwatch.qt.run_session import RunSession
from gpuwatch.qt.run_toolbar import RunToolbar
from gpuwatch.qt.runs_dock import add_runs_dock
from gpuwatch.qt.script_dialog import ScriptWatch
from gpuwatch.qt.session_signals import SessionSignals
from gpuwatch.qt.settings import Settings, save_on_close
from gpuwatch.qt.shortcuts import apply_shortcuts
from gpuwatch.qt.status_line import StatusLine
from gpuwatch.qt.step_inspector import StepInspector
from gpuwatch.qt.theme import theme_manager
from gpuwatch.qt.tour_controller import TourController
from gpuwatch.qt.view_menus import ThemeMenu, panels_menu
from gpuwatch.qt.window_options import WindowOptions

#: Redraw tick while a run is live or the view moved lately: a tick draws only what changed,
#: and only when a frame is due (``frame.frame_due``: ~15 frames a second at most).
REDRAW_MS = 33
#: If a frame costs more than half the tick, the tick stretches (up to this): on a CPU
#: device the GUI competes with the very run it measures, and input must stay responsive.
MAX_REDRAW_MS = 250
#: Tick at rest (no live run, nothing drawn for ``AWAKE_S`` seconds): an open window costs
#: ~nothing; a pan, a resize, the run's state or the replay bar wakes it at once.
IDLE_REDRAW_MS = 250
AWAKE_S = 1.0
#: Width of the visible window while following "now".
WINDOW_S = 30.0
#: The toolbar, banner and status fields follow the run this often (seconds); a change of
#: the run's state also arrives as a signal and is shown at once.
STATE_PERIOD_S = 0.25
#: The headline figures are refreshed this often at most (seconds), and only after a frame
#: was drawn: readable, not flickering, and no new text while nothing changes.
HEADLINE_PERIOD_S = 0.5
#: The knob panel and kernel capture follow answers and values this often (seconds; a
#: refused change snaps back within it)...
KNOBS_PERIOD_S = 0.25
#: ...and the scoreboard, the knobs' costs and the change markers this often: ~2 Hz, since
#: ``session.scoreboard()`` recomputes the live row and table figures must stay readable.
SCOREBOARD_PERIOD_S = 0.5


class MainWindow(QMainWindow):
    """Watches one session (injected: tests feed its stores without starting it)."""

    def __init__(self, session: RunSession, options: WindowOptions | None = None) -> None:
        super().__init__()
        options = options or WindowOptions()
        self.session = session
        #: The training interpreter of the next Start (None: gpuwatch's own Python).
        self.python = options.python
        #: Script mode (``gpuwatch run SCRIPT``): Start runs this script instead of a workload.
        self.script_spec: LaunchSpec | None = options.script_spec()
        self.setWindowTitle(
            f"gpuwatch — {self.script_spec.name}" if self.script_spec else "gpuwatch"
        )
        self._ticks = 0
        self._tick_cost_ms = 0.0
        self._awake_until = 0.0
        self._state_due = 0.0
        self._headline_due = 0.0
        self._drawn_since_headline = True
        #: What the scoreboard was last computed from (None: recompute at the next refresh).
        self._panels_key: tuple[object, ...] | None = None
        self._closed = False
        self._live_shown: bool | None = None  # what the Start/Stop action shows
        #: Restart (or a newly chosen script): start again once the run in progress ended.
        self._start_when_ended = False
        #: Actions that cannot run now are disabled with the reason (``actions.why_not``).
        self.enablement: ActionEnablement | None = None
        self._knobs_due = 0.0
        self._scoreboard_due = 0.0
        #: Space: the plots and headline freeze while the run goes on.
        self.view_paused = False
        #: Visible window length while following; Ctrl+= / Ctrl+- step it.
        self.window_s = WINDOW_S
        self.help_dialog: HelpDialog | None = None
        self.about_dialog: AboutDialog | None = None
        self.error_box: QMessageBox | None = None
        #: ``gpuwatch --tour``: begin the tour as soon as a run is up (for talks and demos).
        self._tour_pending = options.tour
        #: A scripted ``--demo-seconds`` run: its window layout is not remembered.
        self.demo_run = bool(options.demo_seconds)
        self.settings = Settings()
        a = self.qactions = build_actions(self, self)
        self.start_action, self.follow_action = a["start"], a["follow"]
        self.record_action, self.open_action, self.quit_action = a["record"], a["open"], a["quit"]
        self.pause_view_action, self.export_perfetto_action = a["pause_view"], a["export_perfetto"]
        self.zoom_in_action, self.zoom_out_action = a["zoom_in"], a["zoom_out"]
        self.help_action, self.keys_action, self.about_action = a["help"], a["keys"], a["about"]
        self.copy_diagnostics_action = a["copy_diagnostics"]
        self.reset_settings_action = a["reset_settings"]
        # An explicit --workload/--device wins; otherwise what the user last chose.
        self.run_bar = RunToolbar(
            self,
            options.workload or self.settings.workload or "vision",
            options.device or self.settings.device or "auto",
            self.script_spec,
        )
        self.workload_combo = self.run_bar.workload_combo
        self.device_combo = self.run_bar.device_combo
        self.script_label = self.run_bar.script_label
        self.run_bar.addActions([self.start_action, self.follow_action])
        central = QWidget()
        layout = QVBoxLayout(central)
        layout.setContentsMargins(6, 4, 6, 2)
        layout.setSpacing(4)
        self.banner = RunBanner(palette.BANNER_STYLES)
        layout.addWidget(self.banner)
        #: Run → Choose Python…, and the frozen app's search for a Python with torch.
        self.interpreter = InterpreterChoice(self, self)
        layout.addWidget(self.interpreter.banner)
        #: Why the NVIDIA GPU here is not used (e.g. a CPU-only torch), checked off the GUI
        #: thread, and again whenever another Python is chosen; a replay trains nothing.
        self.gpu_banner = GpuBanner(self.interpreter.action)
        layout.addWidget(self.gpu_banner)
        self.interpreter.sig_chosen.connect(self.gpu_banner.check)
        if not isinstance(session, ReplaySession):
            self.gpu_banner.check(self.python)
        self.tour = TourController(session, self, self._log_gui)
        self.run_bar.addSeparator()
        self.run_bar.addAction(self.tour.action)
        layout.addWidget(self.tour.caption)
        layout.addWidget(self.tour.progress_bar)
        self.headline = HeadlineBar()
        self.presentation = PresentationMode(self, self.headline)  # its sentence: a top dock
        layout.addWidget(SteadyHeight(self.headline))  # new figures never re-lay-out the window
        frame = self.frame = PlotsRedraw(
            session, layout, self.headline, lambda: self.presentation.active
        )
        self.setCentralWidget(central)
        self.timeline, self.utilization = frame.timeline, frame.utilization
        self.timeline_caption = frame.timeline_caption
        self.timeline_markers = frame.timeline_markers
        self.utilization_markers = frame.utilization_markers
        docks = WindowDocks(self, session, self.tour)
        self.plots_floor = PlotsFloor(self.timeline, self.utilization.plot)
        self.log_pane, self.scoreboard = docks.log_pane, docks.scoreboard
        self.knob_panel, self.advisor = docks.knob_panel, docks.advisor
        self.ranks, self.ranks_dock = docks.ranks, docks.ranks_dock
        #: Every start, restart and tour, kept: the Runs panel, the scoreboard's groups.
        self.runs_view = add_runs_dock(self, self.scoreboard)
        self.tour.runs = self.scoreboard.runs
        self.tour.phase_changed.connect(self.headline.show_phase)
        self.scoreboard.live_change.connect(self.headline.show_change)
        self.scoreboard.baseline_changed.connect(lambda t: self.statusBar().showMessage(t, 15_000))
        self.status_line = StatusLine(self.statusBar())

        self.recording = RecordControl(
            session,
            self.record_action,
            self.statusBar(),
            run_bar=self.run_bar,
            script=self.script_spec,
            python=lambda: self.python,
            show_error=self.show_error,
        )
        self.recording.run_label = self.scoreboard.runs.recording_name  # named as the run is
        self.replay = session if isinstance(session, ReplaySession) else None
        self.files = FileDialogs(
            self,
            self.replay,
            last_recording=lambda: self.recording.last_recording,
            open_window=MainWindow,
            status=self.statusBar(),
            show_error=self.show_error,
            compare_in_window=self._compare_in_window,
            live=self.recording,
        )
        self.run_bar.addAction(self.record_action)
        self.run_bar.addSeparator()
        self.run_bar.addAction(self.presentation.action)
        self.theme_menu = ThemeMenu(self, self.settings)
        self.theme_actions = self.theme_menu.mode_actions
        menus: dict[str, QAction | QMenu] = {"panels": panels_menu(self), "theme": self.theme_menu}
        #: Replay mode: the session is a recording; the replay bar moves its play position.
        self.replay_mode = (
            ReplayMode(self, self.replay, docks.knob_dock) if self.replay is not None else None
        )
        self.replay_bar = self.replay_mode.bar if self.replay_mode is not None else None
        for plot in (self.timeline, self.utilization.plot):
            view_box = plot.getPlotItem().getViewBox()
            view_box.sigRangeChangedManually.connect(self._on_manual_pan)
            view_box.sigResized.connect(self.wake)
        if self.replay_bar is not None:
            self.replay_bar.position_changed.connect(self.wake)
        self.frame.caption(None, dense=False)
        self._sync_state()
        self.signals = SessionSignals(session.model, self)
        self.signals.sig_state_changed.connect(lambda *_: self._sync_state())
        self.signals.sig_state_changed.connect(self.wake)
        for signal in (self.signals.sig_config_applied, self.signals.sig_refusal):
            signal.connect(self._refresh_panels_soon)
        #: Toolbar "Capture kernels", the kernel lane under the timeline, Help ▸ Nsight command.
        self.kernel_capture = KernelCaptureControls(
            self, frame.splitter, self.signals, docks.kernel_dock
        )
        #: A run of many ranks: one lane per rank under the timeline (above the kernel lane).
        self.rank_lanes = RankLanesControls(frame.splitter, self.timeline, index=1)
        self.rank_gpus = RankGpuCurves(self.utilization)
        #: Hover or click a step on the timeline: its number, duration and phase times.
        self.step_inspector = StepInspector(self.timeline, session)
        menus.update(self.run_bar.combo_menus(self), present=self.presentation.action)
        menus.update(tour=self.tour.action, capture_kernels=self.kernel_capture.action)
        menus.update(
            choose_python=self.interpreter.action, nsight=self.kernel_capture.nsight_action
        )
        #: File → Watch a training script…, a .py dropped on the window, Run → Restart.
        self.script_watch = ScriptWatch(
            self,
            self.settings,
            lambda: self.python,
            watch=self.watch_script,
            restart=self.restart_run,
            choose_python=self.interpreter.open_picker,
        )
        menus.update(
            watch_script=self.script_watch.action, restart=self.script_watch.restart_action
        )
        self.run_bar.workload_picked.connect(lambda _: self.watch_workload())
        build_menus(self.menuBar(), {**self.qactions, **menus})
        self.enablement = ActionEnablement(self, {**self.qactions, **menus})
        self.enablement.update()
        apply_shortcuts(self)
        self.headline.sig_help_requested.connect(self.show_guide)
        self.settings.restore_window(self)
        self.settings.show_docks_new_to_the_layout(self, ("advisor",))

        self.timer = QTimer(self)
        # Ticks come when a frame can be due (the pacing after a frame, the end of a hold):
        # a coarse timer fires up to 5 % early, and an early tick draws nothing and ticks again.
        self.timer.setTimerType(Qt.TimerType.PreciseTimer)
        self.timer.setInterval(REDRAW_MS)
        self.timer.timeout.connect(self._tick)
        self.timer.start()
        theme_manager().attach(self)

    # ---- Actions ----------------------------------------------------------------------

    @property
    def follow(self) -> bool:
        return self.follow_action.isChecked()

    def start_run(self) -> None:
        """Start the selected workload (no-op while a run is in progress)."""
        if self.session.state in ACTIVE_STATES:
            return
        if needs_choice(self.python):  # the installed app has no Python: find one, then start
            self.interpreter.find_then(self.start_run)
            return
        device = self.device_combo.currentData() or "auto"
        if self.script_spec is not None:
            spec = dataclasses.replace(self.script_spec, device=device, python=self.python)
        else:
            spec = LaunchSpec(
                workload=self.workload_combo.currentText(), device=device, python=self.python
            )
        self.scoreboard.keep_run()  # the run so far keeps its rows in the scoreboard
        self.session.start(spec)
        self.follow_action.setChecked(True)
        self._sync_state()

    def watch_script(self, spec: LaunchSpec) -> None:
        """Watch ``spec``'s script from now on (File → Watch a training script…): Start and
        Restart run it as ``gpuwatch run`` would; a run in progress is stopped first."""
        self.script_spec = self.recording.script = spec
        self.setWindowTitle(f"gpuwatch — {spec.name}")
        self.run_bar.show_script(spec)
        self.script_label = self.run_bar.script_label
        self.restart_run()

    def watch_workload(self) -> None:
        """A workload was picked (Run → Workload): Start runs it again, not the script
        watched from the window (the next Start; a run in progress goes on)."""
        if self.script_spec is None:
            return
        self.script_spec = self.recording.script = None
        self.setWindowTitle("gpuwatch")
        self.run_bar.show_script(None)
        self.script_label = None
        self._sync_state()

    def restart_run(self) -> None:
        """Run → Restart: the same script or workload again, with the same device and
        Python; a run in progress is stopped first and the new one starts once it ended."""
        if self.session.state in ACTIVE_STATES:
            self._start_when_ended = True
            self.session.stop()
            self._sync_state()
        else:
            self.start_run()

    def start_or_stop(self) -> None:
        """The Start/Stop action: start a run, or stop the one in progress."""
        if self.session.state in ACTIVE_STATES:
            self.session.stop()
            self._sync_state()
        else:
            self.start_run()

    def show_guide(self, section: str | None = None) -> None:
        """The guide at ``section``; None: at the figure under the mouse (F1), if any."""
        self.help_dialog = open_help(self, section or section_under_cursor())

    def show_about(self) -> None:
        self.about_dialog = AboutDialog(self.session.hello, self)
        self.about_dialog.show()

    def _compare_in_window(self, other: ReplaySession) -> CompareMode:
        """Replay mode only: this recording and ``other`` side by side in this window."""
        assert self.replay is not None
        return CompareMode(self, self.frame, self.replay, other)

    def show_error(self, title: str, text: str) -> None:
        """A message box that does not block (the run and the redraw go on)."""
        self.statusBar().showMessage(text, 30_000)
        self.error_box = QMessageBox(
            QMessageBox.Icon.Warning, title, text, QMessageBox.StandardButton.Ok, self
        )
        self.error_box.open()

    def _on_manual_pan(self, *_: object) -> None:
        self.follow_action.setChecked(False)
        self.wake()

    def wake(self, *_: object) -> None:
        """Something may need drawing soon (a pan, a resize, the run's state, the replay
        bar): tick at the full rate again for a while."""
        self._awake_until = time.monotonic() + AWAKE_S
        if self.timer.interval() > REDRAW_MS:
            self.timer.setInterval(REDRAW_MS)

    def remember_layout(self, settings: Settings) -> None:
        """The desk layout, workload, device and knobs for the next start; not a replay's or
        a scripted ``--demo-seconds`` run's (neither is the user's own), nor after a reset."""
        if settings.was_reset or self.replay is not None or self.demo_run:
            return
        if self.presentation.active:
            self.presentation.set_active(False)  # save the desk layout, not the stage one
        workload = None if self.script_spec else self.workload_combo.currentText()
        save_on_close(settings, self, self.session, workload, self.device_combo.currentData())

    def showEvent(self, event: QShowEvent) -> None:
        """A status message posted before the window was first shown (a replay folds its
        refusals while it is built) is posted again: Qt hides the status fields under a
        message only if they were visible when it came, so both would be drawn over each
        other."""
        super().showEvent(event)
        status = self.statusBar()
        message = status.currentMessage()
        if message:
            status.clearMessage()  # the same text again would change nothing
            status.showMessage(message, 15_000)

    def closeEvent(self, event: QCloseEvent) -> None:
        """Stop the run with the window: no runner outlives the GUI."""
        self.timer.stop()
        if not self._closed:
            self._closed = True
            self.remember_layout(self.settings)
            self.session.close()
            self.recording.stop()
        event.accept()

    # ---- Redraw -----------------------------------------------------------------------

    def redraw_now(self) -> None:
        """Redraw at once even if no data changed (presentation regrouped lanes and captions)."""
        self.frame.last_key = None
        self._tick()

    def _tick(self) -> None:
        started = time.perf_counter()
        drew = self._redraw()
        now = time.monotonic()
        if drew:  # the stretch follows what frames cost, not the cheap ticks between them
            cost_ms = (time.perf_counter() - started) * 1e3
            self._tick_cost_ms = 0.8 * self._tick_cost_ms + 0.2 * cost_ms
            self._awake_until = now + AWAKE_S
        awake = now < self._awake_until or self.session.state in ACTIVE_STATES
        base = REDRAW_MS if awake else IDLE_REDRAW_MS
        interval = int(min(max(base, 2 * self._tick_cost_ms), max(base, MAX_REDRAW_MS)))
        due = self.frame.due_in_s
        if drew:  # the next frame cannot come sooner than the pacing or the next hold allow
            due = max(interval / 1e3, self.frame.next_frame_in_s(now))
        if due is not None:
            # No frame can be drawn before then (new steps wait for more, or the last frame
            # was just drawn): tick then, and the next tick sets the regular interval again.
            # Ticks before it would draw nothing; steps that arrive meanwhile are drawn in
            # that frame, no later than their own wait.
            self.timer.start(max(1, math.ceil(due * 1e3)))
        elif abs(interval - self.timer.interval()) > 5:
            self.timer.setInterval(interval)

    def _redraw(self) -> bool:
        """One tick: the log, the run's state, then a frame if one is due; True if drawn."""
        self._ticks += 1
        if self.replay_mode is not None:
            self.replay_mode.before_frame()
        lines = self.session.drain_log()
        if lines:
            self.log_pane.append_lines(lines, self.session.t0_ns)
        self.recording.check()
        now = time.monotonic()
        if now >= self._state_due:  # state changes come as signals; notices are polled
            self._state_due = now + STATE_PERIOD_S
            self._sync_state()
        live = self.session.state in ACTIVE_STATES
        now_ns = self._now_ns(live)
        lo_s, hi_s = self.frame.visible_window(now_ns, self.follow, self.window_s)
        hold_s = hold_for_tick_s(self._tick_cost_ms)
        drew = self.frame.plots(live, lo_s, hi_s, follow=self.follow, hold_s=hold_s)
        if drew or not self.follow:
            self.status_line.show_window(lo_s, hi_s, following=self.follow)
        if drew:
            self._drawn_since_headline = True
        now = time.monotonic()
        if self._drawn_since_headline and now >= self._headline_due and not self.view_paused:
            self._headline_due = now + HEADLINE_PERIOD_S
            self._drawn_since_headline = False
            self.frame.headline(now_ns)
        self.status_line.show_cpu(now, self.session.instrumentation_share)
        self.tour.on_frame()
        self.presentation.on_frame()
        self._redraw_knobs_and_scoreboard(now_ns)
        return drew

    def _refresh_panels_soon(self, *_: object) -> None:
        """A configuration was applied or refused: the panels follow at the next frame."""
        self._scoreboard_due = 0.0
        self._panels_key = None
        self.wake()

    def _scoreboard_key(self) -> tuple[object, ...]:
        """What the scoreboard's rows are computed from: unchanged, they are not recomputed
        (a finished run or a replay at rest would price its whole history twice a second)."""
        session = self.session
        return (
            session.t0_ns,
            session.steps.count,
            len(session.config_changes()),
            session.state,
            session.baseline_id,
            self.frame.last_key,
        )

    def _redraw_knobs_and_scoreboard(self, now_ns: int) -> None:
        """Knob panel and kernel capture at ~4 Hz; scoreboard, costs and change markers at
        ~2 Hz (by time, as the redraw period stretches under load)."""
        now = time.monotonic()
        key = self._scoreboard_key() if now >= self._scoreboard_due else None
        if key is not None and key != self._panels_key:
            self._panels_key = key
            self._scoreboard_due = now + SCOREBOARD_PERIOD_S
            self._knobs_due = now + KNOBS_PERIOD_S
            session = self.session
            rows = session.scoreboard()
            self.scoreboard.show_rows(rows)
            self.runs_view.refresh()
            self.knob_panel.refresh(rows)
            self.advisor.refresh(rows)
            self._refresh_ranks()
            changes = session.config_changes()
            for markers in (self.timeline_markers, self.utilization_markers):
                markers.update(session.hello, changes, rows, session.t0_ns, now_ns)
            self._start_pending_tour()
            self.tour.sync()
            self.kernel_capture.sync()
        elif now >= self._knobs_due:
            self._knobs_due = now + KNOBS_PERIOD_S
            self.knob_panel.refresh()
            self.tour.sync()
            self.kernel_capture.sync()

    def _start_pending_tour(self) -> None:
        if self._tour_pending and self.session.state is SessionState.RUNNING and self.session.knobs:
            self._tour_pending = False
            self.tour.start()

    def _log_gui(self, level: str, text: str) -> None:
        """A line of the window's own (e.g. the tour's) in the log pane."""
        line = LogLine(time.perf_counter_ns(), level, "tour", text)
        self.log_pane.append_lines([line], self.session.t0_ns)

    def _now_ns(self, live: bool) -> int:
        """The right edge of "now": a replay's play position when nothing is live."""
        if self.replay_mode is not None and not live:
            return self.replay_mode.now_ns
        return self.frame.now_ns(live)

    # ---- State ------------------------------------------------------------------------

    def _refresh_ranks(self) -> None:
        """The Ranks tab; raised once, when the first ranks of a run appear."""
        ranks = self.ranks
        had = ranks.table.rowCount()
        ranks.refresh()
        self.rank_lanes.sync(self.session, self.presentation.active)
        self.rank_gpus.sync(self.session, self.presentation.active)
        if not had and ranks.table.rowCount():
            self.ranks_dock.raise_()

    def _sync_state(self) -> None:
        session = self.session
        state = session.state
        live = state in ACTIVE_STATES
        if self._live_shown is not live:
            self._live_shown = live
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
        replay = self.replay is not None  # a recording starts nothing
        self.start_action.setEnabled(state is not SessionState.STOPPING and not replay)
        self.workload_combo.setEnabled(not live and not replay)
        self.device_combo.setEnabled(not live and not replay)
        if self._start_when_ended and not live:
            self._start_when_ended = False
            self.start_run()  # syncs the state again
            return
        if self.enablement is not None:
            self.enablement.update()
        device_name = session.hello.device.name if session.hello is not None else None
        self.status_line.show_run(state, device_name, session.device_kind)
        restyled = self.banner.show_for(session, self.script_spec is not None)
        if restyled and self.presentation.active:  # a new style sheet has the desk's font size
            self.presentation.restyle()
