"""Read-only, bounded log of the session: runner output and gpuwatch's own messages.

Bounded (``setMaximumBlockCount``) because a chatty training script can print forever;
a burst larger than one screenful per redraw is summarised rather than laid out line by line.
Long lines (a traceback's, a config dump) wrap at the pane's width, anywhere if they have no
space, and never scroll sideways: a cut line hides what it says.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from PySide6.QtCore import Qt
from PySide6.QtGui import QFont, QFontDatabase, QTextOption
from PySide6.QtWidgets import QPlainTextEdit

from gpuwatch.core.run.session import LogLine
from gpuwatch.qt import palette

MAX_LINES = 5000
#: Lines laid out per redraw at most; the rest of a burst is counted, not shown.
MAX_LINES_PER_DRAIN = 400

_COLORS = {"error": palette.ERROR_TEXT, "warning": palette.WARNING_TEXT}


class LogPane(QPlainTextEdit):
    """Appends ``LogLine``s with time since the session origin; errors in red."""

    def __init__(self) -> None:
        super().__init__()
        self.setReadOnly(True)
        self.setMaximumBlockCount(MAX_LINES)
        self.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
        self.setWordWrapMode(QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        font = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        font.setStyleHint(QFont.StyleHint.Monospace)
        self.setFont(font)

    def append_lines(self, lines: Sequence[LogLine], t0_ns: int) -> None:
        skipped = len(lines) - MAX_LINES_PER_DRAIN
        if skipped > 0:
            self._append("warning", f"… {skipped} log lines skipped (burst too large to show)")
            lines = lines[-MAX_LINES_PER_DRAIN:]
        for line in lines:
            t = (line.t_ns - t0_ns) / 1e9
            self._append(line.level, f"{t:9.3f} s  {line.source:<8}  {line.text}")

    def _append(self, level: str, text: str) -> None:
        # Ordinary lines carry no colour of their own, so they follow the theme (dark/light).
        color = _COLORS.get(level)
        # pre-wrap: the columns' padding is kept, and long lines still wrap.
        style = f"white-space: pre-wrap; color: {color}" if color else "white-space: pre-wrap"
        self.appendHtml(f'<span style="{style}">{html.escape(text)}</span>')
