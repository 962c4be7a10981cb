"""The banner above the plots: a failure, a notice while the run goes on (e.g. no step for
30 s), and in script mode how the script ended."""

from __future__ import annotations

from collections.abc import Mapping

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel

from gpuwatch.core.run.outcome import describe, facts_from
from gpuwatch.core.run.session import ACTIVE_STATES, SessionState
from gpuwatch.qt.palette import set_style
from gpuwatch.qt.run_session import RunSession


def banner_text(session: RunSession, script_mode: bool) -> tuple[str | None, str]:
    """What the banner says and its level (``error``, ``warning``, ``info``); None: hidden."""
    state = session.state
    notice = getattr(session, "notice", None)
    if not script_mode or getattr(session, "spec", None) is None:
        if state is SessionState.FAILED:
            return f"Run failed: {session.error or 'the runner ended with an error'}", "error"
        if state in ACTIVE_STATES and notice:  # e.g. no step for 30 s
            return notice, "warning"
        return None, "error"
    if state in ACTIVE_STATES and not notice:
        return None, "info"
    outcome = describe(facts_from(session))
    return outcome.sentence, outcome.level


class RunBanner(QLabel):
    """Plain text (exception texts may hold "<"), selectable, styled by its level."""

    def __init__(self, styles: Mapping[str, str]) -> None:
        """``styles``: a style-sheet template per level (``palette.BANNER_STYLES``)."""
        super().__init__()
        self.styles = styles
        set_style(self, styles["error"])
        self.setTextFormat(Qt.TextFormat.PlainText)
        self.setWordWrap(True)
        self.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.hide()

    def show_for(self, session: RunSession, script_mode: bool) -> bool:
        """Show what the run calls for, or hide; True if the text (and so the style) changed."""
        text, level = banner_text(session, script_mode)
        if not text:
            self.hide()
            return False
        changed = self.text() != text
        if changed:
            self.setText(text)
            set_style(self, self.styles[level])
        self.show()
        return changed
