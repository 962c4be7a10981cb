"""The action table: the window's menus, keys and callbacks all come from it (no runner)."""

from __future__ import annotations

import inspect

import pytest
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QMenu

from gpuwatch.core.run.session import Session
from gpuwatch.qt.actions import MENUS, WINDOW_ACTIONS, Action, Slot
from gpuwatch.qt.main_window import MainWindow
from gpuwatch.qt.shortcuts import SHORTCUTS
from gpuwatch.qt.window_options import WindowOptions
from gpuwatch.qt.window_shell import WindowShell

#: The menu bar as the window had it before the table (a separator is "-").
EXPECTED_MENUS = {
    "&File": ["Open recording…", "Compare with…", "-", "Record", "Export", "-", "Quit"],
    "&View": ["Present", "Panels", "Theme", "Pause view", "Zoom in (time)", "Zoom out (time)"],
    "&Run": [
        "Workload",
        "Device",
        "-",
        "Start",
        "Follow",
        "Tour",
        "Capture kernels",
        "-",
        "Choose Python…",
    ],
    "&Settings": ["Apply last session's knobs", "-", "Reset settings"],
    "&Help": [
        "Guide: how to read the views",
        "Keyboard shortcuts",
        "-",
        "About gpuwatch",
        "Open log folder",
        "Copy diagnostics",
        "Copy Nsight Systems command",
    ],
}


def menu_texts(menu: QMenu) -> list[str]:
    return ["-" if a.isSeparator() else a.text() for a in menu.actions()]


def menus_of(window: MainWindow) -> dict[str, QMenu]:
    return {a.text(): a.menu() for a in window.menuBar().actions()}


@pytest.fixture
def window(show_window):
    return show_window(Session(sample_coarse=False))


def test_the_table_is_consistent():
    ids = [row.id for row in WINDOW_ACTIONS]
    assert len(ids) == len(set(ids)), "ids are unique"
    for row in WINDOW_ACTIONS:
        assert not row.menu or row.menu.split("/")[0] in MENUS, row
        assert bool(row.shortcut) <= bool(row.what), f"{row.id}: keys need a help sentence"
        if isinstance(row, Action):
            assert (row.callback is None) != (row.toggled is None), f"{row.id}: one handler"
        else:
            assert isinstance(row, Slot) and bool(row.shortcut) <= bool(row.attribute)
    assert {s.action for s in SHORTCUTS} >= {"record_action", "presentation.action"}


def test_the_menu_bar_is_built_from_the_table(window):
    menus = menus_of(window)
    assert list(menus) == list(MENUS)
    for title, expected in EXPECTED_MENUS.items():
        assert menu_texts(menus[title]) == expected, title
    export = next(a.menu() for a in menus["&File"].actions() if a.text() == "Export")
    assert menu_texts(export) == ["Perfetto JSON…", "CSV…", "PNG of the window…"]
    assert window.qactions["record"] is window.record_action
    assert window.record_action.isCheckable() and window.follow_action.isChecked()


def test_a_script_window_has_no_workload_entry(qtbot, tmp_path):
    script = tmp_path / "train.py"
    script.write_text("pass\n")
    win = MainWindow(Session(sample_coarse=False), WindowOptions(script=str(script)))
    qtbot.addWidget(win)
    try:
        run = menus_of(win)["&Run"]
        assert menu_texts(run)[:3] == ["Device", "-", "Start"]
    finally:
        win.close()


def test_triggering_an_entry_calls_its_callback_on_the_window(window, qtbot):
    assert window.window_s == 30.0
    window.zoom_in_action.trigger()
    assert window.window_s == 15.0
    window.keys_action.trigger()
    qtbot.waitUntil(lambda: window.help_dialog is not None and window.help_dialog.isVisible())
    window.help_dialog.close()
    window.reset_settings_action.trigger()
    assert window.settings.was_reset
    assert "settings reset" in window.statusBar().currentMessage()


def test_a_checkable_entry_follows_its_state_when_code_sets_it(window):
    window.pause_view_action.setChecked(True)
    assert window.view_paused and not window.follow
    window.follow_action.setChecked(True)  # following again ends the pause
    assert not window.pause_view_action.isChecked() and not window.view_paused


def test_the_window_is_what_its_parts_expect(window):
    """Every attribute and method of ``WindowShell`` exists on a built window."""
    members = set(inspect.get_annotations(WindowShell))
    members |= {
        name
        for name, value in vars(WindowShell).items()
        if not name.startswith("_") and (callable(value) or isinstance(value, property))
    }
    assert {"session", "files", "recording", "show_guide", "follow"} <= members
    missing = {name for name in members if not hasattr(window, name)}
    assert not missing


def test_parts_keep_no_timer_of_their_own(window):
    """The redraw timer drives the tour and kernel capture; nothing else polls the session."""
    for part in (window.tour, window.kernel_capture, window.interpreter):
        assert not part.findChildren(QTimer), part
