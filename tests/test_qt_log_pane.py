"""The log pane wraps long lines at its width: no horizontal scroll bar, nothing cut."""

from __future__ import annotations

import pytest
from PySide6.QtWidgets import QPlainTextEdit

from gpuwatch.core.run.session import LogLine
from gpuwatch.qt.log_pane import LogPane

LONG = 2000


def _pane(qtbot) -> LogPane:
    pane = LogPane()
    qtbot.addWidget(pane)
    pane.resize(400, 300)
    pane.show()
    qtbot.waitExposed(pane)
    return pane


@pytest.mark.parametrize(
    "text",
    [
        " ".join(f"word{i:04d}" for i in range(LONG // 9)),  # ~2,000 characters with spaces
        "x" * LONG,  # no space at all: wrapped anywhere
    ],
    ids=["words", "one-token"],
)
def test_a_2000_character_line_wraps_without_a_horizontal_scroll_bar(qtbot, text, light):
    pane = _pane(qtbot)
    assert len(text) >= LONG - 10
    pane.append_lines([LogLine(1_500_000_000, "info", "runner", text)], t0_ns=0)
    pane.append_lines([LogLine(2_000_000_000, "error", "gpuwatch", text)], t0_ns=0)
    assert pane.document().blockCount() == 2

    bar = pane.horizontalScrollBar()
    assert not bar.isVisible()
    assert bar.maximum() == 0  # nothing to the right of the viewport
    viewport = pane.viewport().width()
    for n in range(2):
        block = pane.document().findBlockByNumber(n)
        assert text in block.text()  # the whole line is kept, nothing elided
        lines = block.layout().lineCount()
        assert lines >= pane.fontMetrics().horizontalAdvance(text) // viewport  # any font
        assert lines > 1
        assert pane.blockBoundingRect(block).width() <= viewport
    # The columns' padding survives: time and source still line up.
    assert pane.document().findBlockByNumber(0).text().startswith("    1.500 s  runner    ")


def test_wrapping_is_the_panes_mode(qtbot):
    pane = _pane(qtbot)
    assert pane.lineWrapMode() == QPlainTextEdit.LineWrapMode.WidgetWidth
