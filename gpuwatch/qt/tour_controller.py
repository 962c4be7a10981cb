"""The "Tour" toolbar action: walk the running workload through the well-known fixes.

Plans the stages with ``gpuwatch.core.run.tour.plan_tour`` and drives a ``Conductor`` from the
window's redraw tick (``on_frame``): the conductor is a non-blocking state machine meant to be
ticked every 100–250 ms, so it is ticked at most every ``TICK_MS``, and the redraw period
(33 ms, stretched to at most 250 ms under load) keeps it within that range. The stage caption
is shown large above the plots, because the audience of a talk reads it from afar: with it the
verdict on the stage before ("AMP: 0.28× the best so far — reverted"), and at the end the
tour's story in one sentence and what was skipped. Stopping the tour leaves the run going in its
current configuration.
"""

from __future__ import annotations

import html
import time
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QLabel, QWidget

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


def _escape(text: str) -> str:
    return html.escape(text, quote=False)


class TourController(QObject):
    """Owns the Tour action, the caption label and, while touring, one ``Conductor``."""

    #: True while a tour drives the knobs (the knob panel stops sending meanwhile).
    active_changed = Signal(bool)

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
            "reverted, and the scoreboard shows what each bought."
        )
        self.action.triggered.connect(self.toggle)
        self.caption = QLabel()
        self.caption.setTextFormat(Qt.TextFormat.RichText)
        palette.set_style(self.caption, palette.TOUR_STYLE)
        self.caption.setWordWrap(True)
        self.caption.hide()
        #: Presentation mode: the stage's sentence only; the progress line is desk detail.
        self.compact = False
        self._tick_s = tick_ms / 1000
        self._tick_due = 0.0
        self.sync()

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

    def sync(self) -> None:
        """Follow the session (call a few times a second): action state, stale caption, and
        the closing sentence's speedup kept equal to the scoreboard's final row."""
        running = self.session.state is SessionState.RUNNING and bool(self.session.knobs)
        self.action.setText("Stop tour" if self.active else "Tour")
        self.action.setEnabled(self.active or running)
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
        if not self.compact:  # <small> is relative to the caption's font
            text += f"<br><small>{_escape(progress.message)}</small>"
        if self.caption.text() != text:
            self.caption.setText(text)
        self.caption.show()

    def _end(self, log_text: str, level: str, caption: str, *, rich: bool = False) -> None:
        self.conductor = None
        self._log(level, log_text)
        self.caption.setText(caption if rich else _escape(caption))
        self.caption.show()
        self.active_changed.emit(False)
        self.sync()
