"""Each key of the shortcut table triggers its action on a shown window (no runner)."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QKeySequence
from PySide6.QtTest import QTest
from test_qt_replay import feed

from gpuwatch.core.run.session import Session
from gpuwatch.qt import file_dialogs, record_control
from gpuwatch.qt.help_view import shortcuts_html
from gpuwatch.qt.shortcuts import SHORTCUTS, apply_shortcuts
from gpuwatch.qt.view_control import ZOOM_LEVELS_S

CTRL = Qt.KeyboardModifier.ControlModifier
#: Built by part A's presentation mode; the table lists it either way.
OPTIONAL_ACTIONS = {"presentation.action", "presentation.leave_action"}


@pytest.fixture
def window(show_window, qtbot):
    win = show_window(Session(sample_coarse=False))
    win.activateWindow()
    qtbot.waitUntil(win.isActiveWindow)
    return win


def _action(window, path):
    target = window
    for name in path.split("."):
        target = getattr(target, name)
    return target


def test_every_listed_key_is_installed_on_its_action(window):
    assert set(apply_shortcuts(window)) <= OPTIONAL_ACTIONS
    for shortcut in SHORTCUTS:
        if shortcut.action in OPTIONAL_ACTIONS and not hasattr(window, "presentation"):
            continue
        keys = {k.toString() for k in _action(window, shortcut.action).shortcuts()}
        assert {QKeySequence(k).toString() for k in shortcut.keys} <= keys, shortcut
    assert "Ctrl+S" in shortcuts_html() and "Space" in shortcuts_html()


def test_space_pauses_and_resumes_the_view_not_the_run(window, qtbot):
    assert window.follow and not window.view_paused
    QTest.keyClick(window, Qt.Key.Key_Space)
    assert window.pause_view_action.isChecked()
    assert window.view_paused and not window.follow
    assert window.timer.isActive()  # the window keeps polling: only the view is frozen
    QTest.keyClick(window, Qt.Key.Key_Space)
    assert not window.view_paused and window.follow


def test_ctrl_equal_and_minus_zoom_the_time_axis(window, qtbot):
    assert window.window_s == 30.0
    QTest.keyClick(window, Qt.Key.Key_Equal, CTRL)
    assert window.window_s == 15.0
    QTest.keyClick(window, Qt.Key.Key_Minus, CTRL)
    QTest.keyClick(window, Qt.Key.Key_Minus, CTRL)
    assert window.window_s == 60.0
    vb = window.timeline.getPlotItem().getViewBox()
    qtbot.waitUntil(lambda: abs(vb.viewRange()[0][1] - vb.viewRange()[0][0] - 60.0) < 0.5)
    for _ in range(len(ZOOM_LEVELS_S) + 1):
        QTest.keyClick(window, Qt.Key.Key_Minus, CTRL)
    assert window.window_s == ZOOM_LEVELS_S[-1]  # stops at 10 min
    for _ in range(len(ZOOM_LEVELS_S) + 1):
        QTest.keyClick(window, Qt.Key.Key_Equal, CTRL)
    assert window.window_s == ZOOM_LEVELS_S[0]


def test_ctrl_s_starts_then_finishes_a_recording(window, qtbot, tmp_path, monkeypatch):
    monkeypatch.setattr(file_dialogs, "recordings_dir", lambda: tmp_path)
    monkeypatch.setattr(record_control, "recordings_dir", lambda: tmp_path)
    QTest.keyClick(window, Qt.Key.Key_S, CTRL)
    assert window.record_action.isChecked() and window.recording.recorder is not None
    QTest.keyClick(window, Qt.Key.Key_S, CTRL)
    assert not window.record_action.isChecked()
    assert (
        window.recording.last_recording is not None
        and window.recording.last_recording.parent == tmp_path
    )
    assert window.recording.last_recording.exists()


def test_ctrl_e_asks_where_to_export_perfetto(window, qtbot, monkeypatch):
    """With a run in the window (Export writes what it holds); an empty window's Export is
    disabled with the reason, which ``test_qt_actions`` checks."""
    feed(window.session, 12)
    qtbot.waitUntil(window.qactions["export_perfetto"].isEnabled, timeout=5000)
    window.activateWindow()  # offscreen, the window can lose activation as the state changes
    qtbot.waitUntil(window.isActiveWindow)
    asked = []
    monkeypatch.setattr(
        file_dialogs.QFileDialog,
        "getSaveFileName",
        lambda *args, **kw: (asked.append(args[1]), ("", ""))[1],
    )
    QTest.keyClick(window, Qt.Key.Key_E, CTRL)
    assert asked == ["Export Perfetto JSON"]


def test_f1_opens_the_guide(window, qtbot):
    QTest.keyClick(window, Qt.Key.Key_F1)
    qtbot.waitUntil(
        lambda: getattr(window, "help_dialog", None) is not None and window.help_dialog.isVisible()
    )
    window.help_dialog.close()


def test_ctrl_q_quits(window, qtbot):
    QTest.keyClick(window, Qt.Key.Key_Q, CTRL)
    qtbot.waitUntil(lambda: not window.isVisible())
    assert window.session.state.name == "IDLE"


def _menu_actions(menu) -> list:
    """Every visible action of a menu and its submenus."""
    found = []
    for action in menu.actions():
        if action.isVisible() and not action.isSeparator():
            found.append(action)
            if action.menu() is not None:
                found += _menu_actions(action.menu())
    return found


def test_every_toolbar_action_can_be_found_in_a_menu(window):
    in_menus = [a for top in window.menuBar().actions() for a in _menu_actions(top.menu())]
    on_toolbar = [a for a in window.run_bar.actions() if a.text() and not a.isSeparator()]
    assert {a.text() for a in on_toolbar} >= {"Start", "Follow", "Tour", "Present"}
    for action in on_toolbar:
        assert action in in_menus, action.text()
    panels = [a.text() for a in in_menus if a.text() in ("Log", "Scoreboard", "Knobs")]
    assert panels and "Stage headline" not in {a.text() for a in in_menus}


def test_workload_and_device_can_be_chosen_from_the_run_menu(window):
    run = next(a.menu() for a in window.menuBar().actions() if a.text() == "&Run")
    workload = next(a.menu() for a in run.actions() if a.text() == "Workload")
    workload.aboutToShow.emit()
    choices = {a.text(): a for a in workload.actions()}
    assert set(choices) == {"vision", "mlp", "gpt"} and choices["vision"].isChecked()
    choices["mlp"].trigger()
    assert window.workload_combo.currentText() == "mlp"
    device = next(a.menu() for a in run.actions() if a.text() == "Device")
    device.aboutToShow.emit()
    assert [a.text() for a in device.actions()][:2] == ["auto", "cpu"]
    assert next(a for a in device.actions() if a.text() == "cpu").isChecked()
