"""The guide opens on F1 / Help and from a headline figure, at the figure's section."""

from __future__ import annotations

from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtTest import QTest

from gpuwatch.core.figures.frame import HeadlineFigures
from gpuwatch.core.run.session import Session
from gpuwatch.qt.help_view import SECTIONS, TOOLTIP_HINT, guide_html
from gpuwatch.qt.scoreboard_view import COLUMNS
from gpuwatch.qt.shortcuts import SHORTCUTS


def test_guide_covers_every_section_and_key():
    text = guide_html()
    for anchor, title in SECTIONS:
        assert f'name="{anchor}"' in text and title.split(":")[0] in text
    for words in (
        "upper bound",
        "exact idle",
        "1/6 s to 1 s",
        "whole device",
        "runner CPU",
        "transition",
        "n/a",
    ):
        assert words in text, words
    for column in COLUMNS:
        assert column.title in text
    for shortcut in SHORTCUTS:
        assert shortcut.what in text
    assert "<i>input</i> = data, h2d" in text  # presentation's merged lanes


def test_help_menu_guide_and_keyboard_entries(show_window, qtbot):
    window = show_window(Session(sample_coarse=False))
    window.keys_action.trigger()
    dialog = window.help_dialog
    qtbot.waitUntil(dialog.isVisible)
    assert "Keyboard shortcuts" in dialog.browser.toPlainText()
    assert dialog.browser.verticalScrollBar().value() > 0  # scrolled to the keys section
    dialog.close()
    window.help_action.trigger()
    qtbot.waitUntil(dialog.isVisible)


def test_every_headline_figure_links_to_its_section(show_window, qtbot):
    window = show_window(Session(sample_coarse=False))
    bar = window.headline
    figures = {
        bar.samples: "step",
        bar.step: "step",
        bar.busy: "busy",
        bar.coarse: "nvml",
        bar.difference: "differ",
        bar.phases: "step",
    }
    for figure, section in figures.items():
        assert figure.toolTip().endswith(TOOLTIP_HINT)
        with qtbot.waitSignal(bar.sig_help_requested) as blocker:
            QTest.mouseClick(figure, Qt.MouseButton.LeftButton, pos=QPoint(3, 3))
        assert blocker.args == [section]
    qtbot.waitUntil(
        lambda: getattr(window, "help_dialog", None) is not None and window.help_dialog.isVisible()
    )


def _top_heading(dialog) -> str:
    """The text of the block at the top of the guide's viewport (where scrolling put it)."""
    browser = dialog.browser
    return browser.cursorForPosition(QPoint(4, 4)).block().text()


def test_each_figures_question_mark_opens_the_guide_at_its_section(show_window, qtbot):
    window = show_window(Session(sample_coarse=False))
    bar = window.headline
    titles = dict(SECTIONS)
    for figure, section in (
        (bar.busy, "busy"),
        (bar.coarse, "nvml"),
        (bar.difference, "differ"),
        (bar.samples, "step"),
    ):
        assert figure.help_button.isVisible() and figure.help_button.text() == "?"
        QTest.mouseClick(figure.help_button, Qt.MouseButton.LeftButton)
        dialog = window.help_dialog
        qtbot.waitUntil(dialog.isVisible)
        qtbot.waitUntil(lambda d=dialog, s=section: _top_heading(d) == titles[s])


def test_f1_on_a_focused_question_mark_opens_its_section(show_window, qtbot):
    window = show_window(Session(sample_coarse=False))
    window.activateWindow()
    button = window.headline.coarse.help_button
    button.setFocus(Qt.FocusReason.TabFocusReason)
    qtbot.waitUntil(button.hasFocus)
    QTest.mouseMove(window.timeline)  # the mouse is over no figure: the focus decides
    window.help_action.trigger()  # what F1 triggers (the key itself: test_qt_shortcuts)
    qtbot.waitUntil(
        lambda: (
            getattr(window, "help_dialog", None) is not None
            and _top_heading(window.help_dialog) == dict(SECTIONS)["nvml"]
        )
    )


def test_a_click_on_a_figures_number_opens_its_section_and_copy_quotes_it(show_window, qtbot):
    """The number is the figure's largest part: a click on it asks for the guide as a click
    beside it does, and its context menu's Copy puts "caption: value" on the clipboard."""
    window = show_window(Session(sample_coarse=False))
    bar = window.headline
    bar.show_figures(HeadlineFigures(window_s=5.0, step_ms_p50=10.25, step_ms_p95=11.0))
    value = bar.step.value
    with qtbot.waitSignal(bar.sig_help_requested) as blocker:
        QTest.mouseClick(value, Qt.MouseButton.LeftButton, pos=value.rect().center())
    assert blocker.args == ["step"]
    assert bar.step.contextMenuPolicy() == Qt.ContextMenuPolicy.ActionsContextMenu
    assert bar.step.copy_action in bar.step.actions()
    QGuiApplication.clipboard().clear()
    bar.step.copy_action.trigger()
    assert QGuiApplication.clipboard().text() == "step time p50 (p95): 10.2 ms (11.0)"
