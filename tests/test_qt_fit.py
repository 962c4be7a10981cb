"""The window fits a 1280×720 projector and a 1920×1080 screen, at the desk and on stage.

Screenshot-style checks on the laid-out window (offscreen): every dock shown and the status
bar lie wholly inside the window, the plots' axis titles inside their plot, nothing is
squeezed below what it asks for; a widening scoreboard number leaves the timeline's edges
where they were; a window larger than the screen is brought inside its available geometry.
"""

from __future__ import annotations

import dataclasses

import pytest
from PySide6.QtCore import QPoint, QRect
from PySide6.QtWidgets import QApplication, QDockWidget, QMainWindow, QWidget
from test_qt_replay import feed

from gpuwatch.core.run.session import Session
from gpuwatch.qt.app import fit_to_screen

SIZES = [(1280, 720), (1920, 1080)]


def rect_in(widget: QWidget, window: QWidget) -> QRect:
    return QRect(widget.mapTo(window, QPoint(0, 0)), widget.size())


def settle(win: QMainWindow) -> None:
    win.redraw_now()
    QApplication.processEvents()


def shown_dock(win: QMainWindow, dock: QDockWidget) -> bool:
    """Shown in the window: visible, docked, and not a tab behind another (Qt keeps those
    "visible" but moves them out of the window)."""
    if not dock.isVisible() or dock.isFloating():
        return False
    return not (win.tabifiedDockWidgets(dock) and dock.visibleRegion().isEmpty())


def check_fits(win: QMainWindow, size: tuple[int, int]) -> None:
    assert (win.width(), win.height()) == size  # the window's minimum is not larger
    room = win.rect()
    shown = [d for d in win.findChildren(QDockWidget) if shown_dock(win, d)]
    assert shown
    for dock in shown:
        assert room.contains(rect_in(dock, win)), dock.objectName()
        assert dock.width() >= 100 and dock.height() >= 40, dock.objectName()
    status = win.statusBar()
    if status.isVisible():
        assert room.contains(rect_in(status, win))
    for plot in (win.timeline, win.utilization.plot):
        assert room.contains(rect_in(plot, win))
        assert plot.height() >= 80  # lanes and curves stay readable
        item = plot.getPlotItem()
        inside = plot.viewport().rect()
        for name in ("left", "bottom"):
            axis = item.getAxis(name)
            if not axis.isVisible() or not axis.label.isVisible():
                continue
            # The text without the document's margin (4 px of empty space on each side).
            margin = axis.label.document().documentMargin()
            text = axis.label.boundingRect().adjusted(margin, margin, -margin, -margin)
            title = plot.mapFromScene(axis.label.mapRectToScene(text)).boundingRect()
            assert inside.contains(title), f"{name} axis title cut: {title} not in {inside}"


@pytest.fixture
def fed_window(show_window):
    """A window over a finished CPU run with a knob change (two scoreboard rows)."""
    session = Session(sample_coarse=False)
    feed(session, 40)

    def show(size: tuple[int, int]) -> QMainWindow:
        win = show_window(session)
        win.resize(*size)
        settle(win)
        return win

    return show


@pytest.mark.parametrize("size", SIZES, ids=["1280x720", "1920x1080"])
def test_every_part_is_inside_the_window_at_the_desk(fed_window, size) -> None:
    win = fed_window(size)
    check_fits(win, size)


@pytest.mark.parametrize("size", SIZES, ids=["1280x720", "1920x1080"])
def test_every_part_is_inside_the_window_on_stage(fed_window, size) -> None:
    win = fed_window(size)
    win.presentation.set_active(True, fullscreen=False)
    settle(win)
    try:
        check_fits(win, size)
    finally:
        win.presentation.set_active(False)


def test_a_wider_scoreboard_number_does_not_move_the_timeline(fed_window, qtbot) -> None:
    win = fed_window((1280, 720))
    qtbot.waitUntil(lambda: win.scoreboard.model.rowCount() == 2, timeout=5000)
    settle(win)
    before = rect_in(win.timeline, win)
    rows = win.session.scoreboard()
    wide = [dataclasses.replace(r, samples_per_s=123_456_789_012.5) for r in rows]
    wide.append(dataclasses.replace(wide[-1], config_id=99, label="a much longer label " * 4))
    win.scoreboard.show_rows(wide)  # a new row: the columns fit their contents again
    win.scoreboard.hint.setText("a hint far longer than the dock is wide " * 6)
    settle(win)
    after = rect_in(win.timeline, win)
    assert (after.left(), after.right()) == (before.left(), before.right())


def test_a_window_larger_than_the_screen_is_brought_inside_it(qtbot) -> None:
    win = QMainWindow()
    qtbot.addWidget(win)
    win.resize(1280, 800)
    win.move(300, 200)
    room = QRect(0, 0, 1280, 720)
    fit_to_screen(win, room)
    assert room.contains(win.frameGeometry())
    win.resize(640, 480)
    win.move(100, 100)
    fit_to_screen(win, room)  # one that fits stays as and where it is
    assert (win.width(), win.height(), win.x(), win.y()) == (640, 480, 100, 100)
