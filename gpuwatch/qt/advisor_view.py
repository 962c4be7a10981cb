"""The Advisor dock: why the device waits, what to flip, and what the flip measurably did.

Refreshed with the scoreboard (~2 Hz) from its rows: the newest steady segment's step-time
breakdown and idle causes on top, then the ranked findings of ``gpuwatch.core.figures.advisor``,
each with its evidence and an Apply button that sends the suggestion through
``Session.set_knobs``. An applied finding is remembered with the configuration it created,
so once that segment is steady the advisor reports the change in the quantity it was about.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any, Protocol

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QFrame,
    QLabel,
    QPushButton,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from gpuwatch.core.figures.advisor import AdvisedRun, Finding, advise, context_of
from gpuwatch.core.figures.segments import SegmentStats
from gpuwatch.core.figures.step_breakdown import idle_summary, summary
from gpuwatch.core.model.messages import ACTIVE_STATES, ConfigChange, Refusal, SessionState
from gpuwatch.core.run.session import SessionError
from gpuwatch.qt import palette

HINT_NO_RUN = (
    "Start a run: the advisor reads each configuration's steady steps and says why "
    "the device waits and which knob to try."
)
#: Why Apply is off when the run is not running (a stopped run would refuse the change).
NOT_RUNNING = "The run is not running: Apply sends the change to a running run"
_SMALL = "font-size: 11px;"


def _esc(text: str) -> str:
    return html.escape(text, quote=False)


_KIND_MARK = {"fix": "▶", "worse": "⚠", "outcome": "✔", "ok": "✔"}


def sent_text(finding: Finding) -> str:
    """What a card says between Apply and the runner's answer (the runner starts new workers
    while training goes on: under a second where they fork from a warm server, seconds where
    each is spawned, docs/knobs.md §2)."""
    workers = finding.suggestion.get("num_workers")
    how = (
        "the new workers start while training goes on, then"
        if isinstance(workers, int) and workers > 0
        else "the runner applies it, then"
    )
    return f"Sent {finding.apply_text}: {how} the advisor measures what it changed…"


class FindingCard(QFrame):
    """One finding: the sentence, its evidence, an Apply button and what became of it."""

    def __init__(self, view: AdvisorView) -> None:
        super().__init__()
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.finding: Finding | None = None
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 4, 6, 4)
        layout.setSpacing(2)
        self.title = QLabel()
        self.title.setWordWrap(True)
        self.title.setTextFormat(Qt.TextFormat.PlainText)
        # Why the knob addresses what was measured (the rule's reason), for a new user.
        self.why = QLabel()
        self.why.setWordWrap(True)
        self.why.setTextFormat(Qt.TextFormat.PlainText)
        self.why.setStyleSheet(_SMALL)
        self.evidence = QLabel()
        self.evidence.setWordWrap(True)
        self.evidence.setTextFormat(Qt.TextFormat.PlainText)
        palette.set_style(self.evidence, f"color: $note_text; {_SMALL}")
        self.apply_button = QPushButton()
        self.apply_button.clicked.connect(lambda: view.apply(self.finding))
        self.status = QLabel()
        self.status.setWordWrap(True)
        self.status.setTextFormat(Qt.TextFormat.PlainText)
        self.status.setStyleSheet(_SMALL)
        for widget in (self.title, self.why, self.evidence, self.apply_button, self.status):
            layout.addWidget(widget)

    def show_finding(self, finding: Finding, status: str, locked: str | None) -> None:
        self.finding = finding
        text = f"{_KIND_MARK.get(finding.kind, '')} {finding.title}".strip()
        if self.title.text() != text:
            self.title.setText(text)
        bold = "font-weight: bold;" if finding.kind in ("fix", "worse") else ""
        if self.title.styleSheet() != bold:
            self.title.setStyleSheet(bold)
        why = f"Why: {finding.why}." if finding.why and finding.kind != "outcome" else ""
        self.why.setVisible(bool(why))
        if self.why.text() != why:
            self.why.setText(why)
        evidence = f"evidence: {finding.evidence} · rule {finding.rule}"
        if self.evidence.text() != evidence:
            self.evidence.setText(evidence)
        self.apply_button.setVisible(bool(finding.suggestion))
        verb = "Revert" if finding.kind == "worse" else "Apply"
        self.apply_button.setText(f"{verb}: {finding.apply_text}")
        self.apply_button.setEnabled(bool(finding.suggestion) and locked is None and not status)
        self.apply_button.setToolTip(
            locked
            or f"send {finding.apply_text} to the run; the advisor then reports what it changed"
        )
        self.apply_button.setStatusTip(locked or "")
        self.status.setVisible(bool(status))
        if self.status.text() != status:
            self.status.setText(status)


class AdvisorSession(AdvisedRun, Protocol):
    """What the dock reads and sends: the advisor's figures, Apply's ``set`` and its answer
    (a Session, a replay, or a test's stand-in)."""

    @property
    def state(self) -> SessionState: ...

    def set_knobs(self, values: dict[str, Any]) -> int | None: ...

    def answer(self, request: int) -> ConfigChange | Refusal | None: ...


class AdvisorView(QWidget):
    """The advisor's findings for ``session``."""

    #: A sentence for the status bar (a refused or failed Apply).
    status_message = Signal(str)

    def __init__(self, session: AdvisorSession) -> None:
        super().__init__()
        self.session = session
        self.findings: list[Finding] = []
        self.cards: list[FindingCard] = []
        #: config id → quantity of the finding whose Apply created it (for its outcome)
        self.applied: dict[int, str] = {}
        self._pending: dict[int, Finding] = {}  # request id → finding
        self._status: dict[tuple[str, str], str] = {}  # (rule, apply text) → what happened
        self._locked: str | None = None
        self._run: tuple[object, object] = (None, None)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        # Everything scrolls, so the dock can be narrow (presentation doubles the fonts on a
        # 1280 px projector) without the window growing.
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        holder = QWidget()
        self._list = QVBoxLayout(holder)
        self._list.setContentsMargins(4, 2, 4, 2)
        self._list.setSpacing(4)
        self.summary = QLabel(HINT_NO_RUN)
        self.summary.setWordWrap(True)
        self.summary.setTextFormat(Qt.TextFormat.RichText)
        self._list.addWidget(self.summary)
        self._list.addStretch(1)
        scroll.setWidget(holder)
        outer.addWidget(scroll, 1)

    def set_locked(self, reason: str | None) -> None:
        """No Apply while the tour drives the knobs, or in a replay (``reason`` says why)."""
        self._locked = reason
        self._show()

    def refresh(self, rows: Sequence[SegmentStats]) -> None:
        """New scoreboard rows (call at the scoreboard's ~2 Hz)."""
        session = self.session
        changes = session.config_changes()
        run = (session.hello.pid if session.hello else None, changes[0].t_ns if changes else None)
        if run != self._run:  # a new run (not a grown schema): forget the last one's requests
            self._run = run
            self.applied.clear()
            self._pending.clear()
            self._status.clear()
        self._collect_answers()
        self.findings = advise(rows, context_of(session), self.applied) if session.hello else []
        self._show_summary(rows)
        self._show()

    def apply(self, finding: Finding | None) -> None:
        """Send a finding's suggestion to the run, as the knob panel would."""
        if finding is None or not finding.suggestion or self._locked:
            return
        key = (finding.rule, finding.apply_text)
        try:
            request = self.session.set_knobs(dict(finding.suggestion))
        except SessionError as exc:
            self._status[key] = f"Not applied: {exc}"
            self.status_message.emit(f"Advisor: {exc}")
        else:
            if request is None:
                self._status[key] = "Already set: nothing to send."
            else:
                self._pending[request] = finding
                self._status[key] = sent_text(finding)
        self._show()

    def _collect_answers(self) -> None:
        for request, finding in list(self._pending.items()):
            answer = self.session.answer(request)
            if answer is None:
                if self.session.state not in ACTIVE_STATES:
                    del self._pending[request]
                    self._status[(finding.rule, finding.apply_text)] = (
                        "No answer: the run has ended."
                    )
                continue
            del self._pending[request]
            key = (finding.rule, finding.apply_text)
            if isinstance(answer, Refusal):
                self._status[key] = f"Refused: {answer.message}"
                self.status_message.emit(f"Advisor change refused: {answer.message}")
            elif isinstance(answer, ConfigChange):
                self.applied[answer.id] = finding.quantity
                self._status.pop(key, None)

    def _show_summary(self, rows: Sequence[SegmentStats]) -> None:
        session = self.session
        if not session.hello:
            text = _esc(HINT_NO_RUN)
        elif not rows:
            text = "Waiting for the first steps…"
        else:
            latest = rows[-1]
            kind = session.hello.device.kind
            if latest.breakdown is None or latest.idle_causes is None or not latest.steady:
                text = (
                    f"Measuring <b>{_esc(latest.label)}</b>: findings once its "
                    f"steady steps are in (transition steps are left out)."
                )
                waiting = [self._status[k] for k in self._status]
                if self.applied.get(latest.config_id) is not None or waiting:
                    text += "<br>" + _esc(
                        waiting[-1] if waiting else "Applied: measuring what it changed…"
                    )
            else:
                text = (
                    f"<b>{_esc(latest.label)}</b>: "
                    f"{_esc(summary(latest.breakdown, kind))}<br>"
                    f"{_esc(idle_summary(latest.idle_causes))}"
                )
        if self.summary.text() != text:
            self.summary.setText(text)

    def _show(self) -> None:
        while len(self.cards) < len(self.findings):
            card = FindingCard(self)
            self._list.insertWidget(len(self.cards) + 1, card)  # after the summary
            self.cards.append(card)
        # Apply is offered to a running run only (any other would refuse it), saying why.
        running = self.session.state is SessionState.RUNNING
        locked = self._locked or (None if running else NOT_RUNNING)
        for card, finding in zip(self.cards, self.findings, strict=False):
            status = self._status.get((finding.rule, finding.apply_text), "")
            card.show_finding(finding, status, locked)
            card.show()
        for card in self.cards[len(self.findings) :]:
            card.hide()
