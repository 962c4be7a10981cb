"""The "Tour" toolbar action: walk the running workload through the well-known fixes.

Plans the stages with ``gpuwatch.core.run.tour.plan_tour`` and drives a ``Conductor`` from the
window's redraw tick (``on_frame``): the conductor is a non-blocking state machine meant to be
ticked every 100–250 ms, so it is ticked at most every ``TICK_MS``, and the redraw period
(33 ms, stretched to at most 250 ms under load) keeps it within that range. The stage caption
is shown large above the plots, because the audience of a talk reads it from afar: with it the
verdict on the stage before ("AMP: 0.28× the best so far — reverted"), and at the end the
tour's story in one sentence and what was skipped. Stopping the tour leaves the run going in its
current configuration.

The speaker drives: next, back and hold, on the keys a presentation clicker sends (Page Down,
Page Up, and B or "." for its blank-screen button; the arrows too, unless a view that uses them
has the focus), a bar under the caption shows how far the stage is, and while a stage applies,
compiles or warms up ``phase_changed`` says so with its elapsed time for the headline.
"""

from __future__ import annotations

import html
import time
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QEvent, QObject, Qt, Signal
from PySide6.QtGui import QAction, QKeyEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QAbstractSlider,
    QAbstractSpinBox,
    QApplication,
    QComboBox,
    QGraphicsView,
    QLabel,
    QLineEdit,
    QProgressBar,
    QTextEdit,
    QWidget,
)

from gpuwatch.core.run.runs import Runs
from gpuwatch.core.run.session import SessionState
from gpuwatch.core.run.tour import Conductor, Skipped, TourProgress, plan_tour
from gpuwatch.qt import palette
from gpuwatch.qt.run_session import RunSession

#: Steady seconds each stage is held for at least (docs/knobs.md §4).
TOUR_STEADY_S = 10.0
TICK_MS = 200
#: How often the closing caption re-reads its figures from the scoreboard after the tour (as
#: often as the window redraws the scoreboard).
CLOSING_REFRESH_S = 0.5

LogFn = Callable[[str, str], None]  # (level, text)
#: Widgets whose arrow keys are their own (the timeline, tables, editors): with one of them
#: focused, Left and Right go to it, not to the tour.
ARROW_USERS = (
    QGraphicsView,
    QAbstractItemView,
    QAbstractSpinBox,
    QAbstractSlider,
    QComboBox,
    QLineEdit,
    QTextEdit,
)


def _escape(text: str) -> str:
    return html.escape(text, quote=False)


class TourController(QObject):
    """Owns the Tour action, the caption label and, while touring, one ``Conductor``."""

    #: True while a tour drives the knobs (the knob panel stops sending meanwhile).
    active_changed = Signal(bool)
    #: ``compiling… 12 s`` while a stage applies, compiles or warms up; None otherwise.
    phase_changed = Signal(object)

    def __init__(
        self,
        session: RunSession,
        parent: QWidget,
        log: LogFn,
        *,
        plan: Callable[..., Any] = plan_tour,
        conductor: Callable[..., Any] = Conductor,
        min_steady_s: float = TOUR_STEADY_S,
        tick_ms: int = TICK_MS,
    ) -> None:
        super().__init__(parent)
        self.session = session
        self._log = log
        self._plan = plan
        self._make_conductor = conductor
        self._min_steady_s = min_steady_s
        self.conductor: Any = None
        self._hello: Any = None
        self._stage_index: int | None = None
        self._skipped: list[Skipped] = []
        #: The finished tour whose closing sentence the caption shows (kept up to date).
        self._closing: Any = None
        self._closing_due = 0.0
        self.action = QAction("Tour", parent)
        self.action.setToolTip(
            f"Walk the run through the well-known fixes one by one (workers, pinned memory, "
            f"batched logging, AMP, channels_last, compile), holding each stage until it has "
            f"{self._min_steady_s:g} s of steady rates; a stage that made the run slower is "
            "reverted, and the scoreboard shows what each bought. While it runs, Page Down and "
            "Page Up move between stages and B holds one (a presentation clicker's keys)."
        )
        self.action.triggered.connect(self.toggle)
        self.caption = QLabel()
        self.caption.setTextFormat(Qt.TextFormat.RichText)
        palette.set_style(self.caption, palette.TOUR_STYLE)
        self.caption.setWordWrap(True)
        self.caption.hide()
        #: How far the stage is towards its steady time (shown under the caption).
        self.progress_bar = QProgressBar()
        self.progress_bar.setRange(0, 100)
        self.progress_bar.setTextVisible(False)
        self.progress_bar.setFixedHeight(6)
        self.progress_bar.setToolTip("The stage's steady time so far, out of what it is held for")
        self.progress_bar.hide()
        self._make_drive_actions(parent)
        #: The window's runs: a tour is a run of its own there (None: not kept).
        self.runs: Runs | None = None
        self._tour_run: int | None = None
        self._phase: str | None = None
        #: Presentation mode: the stage's sentence only; the progress line is desk detail.
        self.compact = False
        self._tick_s = tick_ms / 1000
        self._tick_due = 0.0
        self.sync()

    def _make_drive_actions(self, parent: QWidget) -> None:
        """Next, back and hold (their keys come from ``shortcuts.SHORTCUTS``), and the arrow
        twins of next and back, which leave the arrows to a focused view that uses them."""
        self.next_action = QAction("Next tour stage", parent)
        self.next_action.triggered.connect(self.next_stage)
        self.back_action = QAction("Previous tour stage", parent)
        self.back_action.triggered.connect(self.previous_stage)
        self.next_arrow_action = QAction("Next tour stage (arrow)", parent)
        self.next_arrow_action.triggered.connect(
            lambda: self._arrow(self.next_arrow_action, Qt.Key.Key_Right, self.next_stage)
        )
        self.back_arrow_action = QAction("Previous tour stage (arrow)", parent)
        self.back_arrow_action.triggered.connect(
            lambda: self._arrow(self.back_arrow_action, Qt.Key.Key_Left, self.previous_stage)
        )
        self.hold_action = QAction("Hold tour stage", parent)
        self.hold_action.setCheckable(True)
        self.hold_action.setToolTip(
            "Hold the stage: it goes on being measured, the tour waits for Next (B or .)"
        )
        self.hold_action.toggled.connect(self._on_hold)

    @property
    def drive_actions(self) -> tuple[QAction, ...]:
        return (
            self.next_action,
            self.back_action,
            self.next_arrow_action,
            self.back_arrow_action,
            self.hold_action,
        )

    def next_stage(self) -> None:
        """Move on now (the clicker's forward key)."""
        if self.conductor is not None and self.conductor.next():
            self._log("info", "tour: next stage (asked for)")
            self.tick()

    def previous_stage(self) -> None:
        """Back to the stage before (the clicker's back key)."""
        if self.conductor is not None and self.conductor.back():
            self._log("info", "tour: back to the stage before (asked for)")
            self.tick()

    def _arrow(self, action: QAction, key: Qt.Key, move: Callable[[], None]) -> None:
        """An arrow key: the focused view's if it uses arrows (handed on to it, with the
        shortcut off meanwhile so it does not catch the key again), else the tour's."""
        focus = QApplication.focusWidget()
        if isinstance(focus, ARROW_USERS) or (
            focus is not None and isinstance(focus.parentWidget(), QGraphicsView)
        ):
            action.setEnabled(False)
            try:
                for kind in (QEvent.Type.KeyPress, QEvent.Type.KeyRelease):
                    event = QKeyEvent(kind, key, Qt.KeyboardModifier.NoModifier)
                    QApplication.sendEvent(focus, event)
            finally:
                action.setEnabled(self.active)
            return
        move()

    def _on_hold(self, on: bool) -> None:
        if self.conductor is None:
            if on:
                self.hold_action.setChecked(False)
            return
        if on != self.conductor.holding:
            self.conductor.hold(on)
            self._log("info", "tour: stage held" if on else "tour: moves on by itself again")
            self.tick()

    @property
    def active(self) -> bool:
        return self.conductor is not None

    def toggle(self) -> None:
        if self.active:
            self.stop()
        else:
            self.start()

    def start(self) -> None:
        """Plan the tour for the running workload and begin its first stage."""
        session = self.session
        hello = session.hello
        running = session.state is SessionState.RUNNING and bool(session.knobs)
        if self.active or not running or hello is None:
            self._log("warning", "tour: start a run first; the tour changes a running run's knobs")
            return
        stages, skipped = self._plan(session.knobs, hello.workload, hello.device.cores)
        for skip in skipped:
            self._log("info", f"tour: skipping “{skip.label}”: {skip.reason}")
        try:
            self.conductor = self._make_conductor(
                session, stages, min_steady_s=self._min_steady_s, revert_slower=True
            )
        except ValueError as exc:
            self._log("error", f"tour: cannot start: {exc}")
            return
        self._hello = hello
        self._stage_index = None
        self._skipped = list(skipped)
        self._closing = None
        self._tour_run = self.runs.begin_tour() if self.runs is not None else None
        self._tick_due = time.monotonic() + self._tick_s
        self._log(
            "info", f"tour: {len(stages)} stage(s): " + ", ".join(stage.label for stage in stages)
        )
        self.active_changed.emit(True)
        self.sync()
        self.tick()

    def stop(self) -> None:
        """End the tour where it is; the run keeps its current configuration."""
        if self.conductor is None:
            return
        self.conductor.stop()
        self._end(
            "tour stopped; the run goes on with its current knobs",
            "info",
            "Tour stopped — the run goes on with its current knobs.",
        )

    def on_frame(self) -> None:
        """Called by the window's redraw tick: tick the conductor when its period is up."""
        now = time.monotonic()
        if self.conductor is not None and now >= self._tick_due:
            self._tick_due = now + self._tick_s
            self.tick()

    def tick(self) -> None:
        """One step of the tour: log a new stage, show its progress, or end it."""
        conductor = self.conductor
        if conductor is None:
            return
        progress: TourProgress = conductor.tick()
        self._claim_configs(conductor)
        self._show_phase(progress.phase or None)
        stage = progress.stage
        if progress.index != self._stage_index and stage is not None:
            self._stage_index = progress.index
            if progress.note:
                self._log("info", f"tour: {progress.note}")
            self._log(
                "info",
                f"tour: stage {progress.index + 1}/{progress.n_stages} "
                f"“{stage.label}”: {stage.caption}",
            )
        if conductor.failed:
            self._end(
                f"tour failed: {conductor.failed}", "error", f"Tour failed: {conductor.failed}"
            )
            return
        if conductor.done:
            summary = conductor.summary
            if progress.note:
                self._log("info", f"tour: {progress.note}")
            if summary:
                self._end(f"tour done: {summary}", "info", self._closing_text(summary), rich=True)
                self._closing = conductor
                return
            self._end(
                f"tour done: {progress.n_stages} stage(s) measured",
                "info",
                f"Tour done: {progress.n_stages} stage(s) measured — see the "
                "scoreboard for what each one bought.",
            )
            return
        self._show_progress(progress)

    def _claim_configs(self, conductor: Any) -> None:
        """Tell the runs which configuration the tour's first stage runs as (once)."""
        if self.runs is None or self._tour_run is None:
            return
        configs = conductor.stage_configs() if hasattr(conductor, "stage_configs") else []
        if configs:
            self.runs.tour_config(self._tour_run, configs[0][1])
            self._tour_run = None

    def _show_phase(self, phase: str | None) -> None:
        if phase != self._phase:
            self._phase = phase
            self.phase_changed.emit(phase)

    def sync(self) -> None:
        """Follow the session (call a few times a second): action state, stale caption, and
        the closing sentence's speedup kept equal to the scoreboard's final row."""
        running = self.session.state is SessionState.RUNNING and bool(self.session.knobs)
        self.action.setText("Stop tour" if self.active else "Tour")
        self.action.setEnabled(self.active or running)
        for action in self.drive_actions:
            action.setEnabled(self.active)
        if not self.active and self.caption.isVisible() and self.session.hello is not self._hello:
            self.caption.hide()  # a new run: the last tour's closing words are stale
            self._closing = None
        now = time.monotonic()
        if self._closing is not None and self.caption.isVisible() and now >= self._closing_due:
            self._closing_due = now + CLOSING_REFRESH_S
            summary = self._closing.summary
            text = self._closing_text(summary) if summary else self.caption.text()
            if text != self.caption.text():
                self.caption.setText(text)

    def _closing_text(self, summary: str) -> str:
        """The closing caption: the tour's story, then (at the desk) what it skipped."""
        text = f"<b>Tour done</b> — {_escape(summary)}."
        if self._skipped and not self.compact:
            skipped = "; ".join(f"{s.label}: {s.reason}" for s in self._skipped)
            text += f"<br><small>skipped: {_escape(skipped)}</small>"
        return text

    def _show_progress(self, progress: TourProgress) -> None:
        stage = progress.stage
        title = f"Tour {progress.index + 1}/{progress.n_stages}"
        if stage is not None:
            title += f" · {_escape(stage.label)}"
            text = f"<b>{title}</b> — {_escape(stage.caption)}"
        else:
            text = f"<b>{title}</b>"
        if progress.note:  # the verdict on the stage before: part of the story, always shown
            text += f"<br>{_escape(progress.note)}"
        if progress.held:
            text += " <b>· held</b>"
        if not self.compact:  # <small> is relative to the caption's font
            text += f"<br><small>{_escape(progress.message)}</small>"
        if self.caption.text() != text:
            self.caption.setText(text)
        self.caption.show()
        percent = round(100 * progress.fraction)
        if self.progress_bar.value() != percent:
            self.progress_bar.setValue(percent)
        self.progress_bar.show()

    def _end(self, log_text: str, level: str, caption: str, *, rich: bool = False) -> None:
        self.conductor = None
        self._tour_run = None
        self._show_phase(None)
        self.progress_bar.hide()
        if self.hold_action.isChecked():
            self.hold_action.setChecked(False)
        self._log(level, log_text)
        self.caption.setText(caption if rich else _escape(caption))
        self.caption.show()
        self.active_changed.emit(False)
        self.sync()
