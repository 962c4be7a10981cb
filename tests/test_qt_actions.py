"""The action table: the window's menus, keys and callbacks all come from it (no runner);
each ruled action is enabled only when it can run, else disabled with the reason."""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path

import pytest
from fake_knob_session import FakeSession
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QMenu
from test_advisor import row as advisor_row
from test_qt_replay import feed, make_recording

from gpuwatch.core.files.recording_reader import open_recording
from gpuwatch.core.files.replay import READ_ONLY, ReplaySession
from gpuwatch.core.run.session import LaunchSpec, Session, SessionState
from gpuwatch.qt import file_dialogs, record_control
from gpuwatch.qt.actions import MENUS, WINDOW_ACTIONS, Action, Slot
from gpuwatch.qt.advisor_view import NOT_RUNNING, AdvisorView
from gpuwatch.qt.file_dialogs import NOTHING_TO_EXPORT
from gpuwatch.qt.main_window import MainWindow
from gpuwatch.qt.shortcuts import SHORTCUTS
from gpuwatch.qt.window_options import WindowOptions
from gpuwatch.qt.window_shell import WindowShell

#: The menu bar as the window had it before the table (a separator is "-").
EXPECTED_MENUS = {
    "&File": [
        "Open recording…",
        "Watch a training script…",
        "Compare with…",
        "-",
        "Record",
        "Export",
        "-",
        "Quit",
    ],
    "&View": ["Present", "Panels", "Theme", "Pause view", "Zoom in (time)", "Zoom out (time)"],
    "&Run": [
        "Workload",
        "Device",
        "-",
        "Start",
        "Restart",
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


@pytest.fixture
def no_documents(tmp_path, monkeypatch) -> Path:
    """Record and the file dialogs use a temporary folder, never the user's documents."""
    folder = tmp_path / "documents" / "gpuwatch"
    monkeypatch.setattr(file_dialogs, "recordings_dir", lambda: folder)
    monkeypatch.setattr(record_control, "recordings_dir", lambda: folder)
    return folder


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


# ---- Never offer what will be refused -----------------------------------------------------

RULED = ("watch_script", "compare", "record", "export_perfetto", "export_csv", "restart")


def entry(window: MainWindow, ident: str):
    """The QAction of a row, whether the table or a part of the window made it."""
    actions = {
        **window.qactions,
        "watch_script": window.script_watch.action,
        "restart": window.script_watch.restart_action,
    }
    return actions[ident]


def says(window: MainWindow, ident: str, reason: str | None) -> bool:
    """Enabled with no reason, or disabled with ``reason`` as tooltip and status tip."""
    action = entry(window, ident)
    if reason is None:
        return action.isEnabled() and window.enablement.reason(ident) is None
    return (
        not action.isEnabled()
        and reason in action.toolTip()
        and reason in action.statusTip()
        and window.enablement.reason(ident) is not None
    )


def test_every_refusable_action_has_a_rule():
    ruled = {row.id for row in WINDOW_ACTIONS if row.why_not is not None}
    assert set(RULED) | {"apply_knobs"} <= ruled


def test_a_new_window_offers_only_what_it_can_do(window, no_documents):
    assert says(window, "watch_script", None)
    assert says(window, "record", None)
    assert says(window, "export_perfetto", NOTHING_TO_EXPORT)
    assert says(window, "export_csv", NOTHING_TO_EXPORT)
    assert says(window, "compare", "open a recording first")
    assert says(window, "restart", "Nothing was started in this window yet")
    assert says(window, "apply_knobs", "Start a run first")
    # Disabled in the menu too: the menus show the tooltip of a disabled entry.
    assert all(m.toolTipsVisible() for m in menus_of(window).values())


def test_a_live_run_is_exported_as_record_would_write_it(window, no_documents, tmp_path):
    """Export in a live window writes what it holds: no "record first"."""
    feed(window.session, 30)
    window._sync_state()
    assert says(window, "export_csv", None) and says(window, "export_perfetto", None)
    out = tmp_path / "live.csv"
    assert window.files.export_recording("csv", out)
    assert len(out.read_text().splitlines()) == 1 + 30 * 5  # header + the fed steps
    assert window.recording.recorder is None  # nothing left recording


def test_restart_is_offered_once_something_ran(window, no_documents):
    window.session.spec = LaunchSpec(workload="mlp", device="cpu")
    window.session._state = SessionState.FINISHED
    window._sync_state()
    assert says(window, "restart", None)
    window.session._state = SessionState.STOPPING
    window._sync_state()
    assert says(window, "restart", "Stopping the run")
    window.session._state = SessionState.FINISHED
    window._sync_state()
    assert says(window, "restart", None)


def test_remembered_knobs_are_offered_only_to_a_run_that_has_them(window, no_documents):
    feed(window.session, 5)
    window.session._state = SessionState.RUNNING
    window._sync_state()
    assert says(window, "apply_knobs", "No knobs remembered")
    window.settings.knobs = {"no_such_knob": 3}
    window._sync_state()
    assert says(window, "apply_knobs", "none of the remembered knobs")
    name = window.session.knobs[0]["name"]
    window.settings.knobs = {name: window.session.knobs[0]["default"]}
    window._sync_state()
    assert says(window, "apply_knobs", None)
    window.session._state = SessionState.FINISHED
    window._sync_state()
    assert says(window, "apply_knobs", "Start a run first")


def test_a_replay_window_offers_compare_and_export_not_record(show_window, tmp_path):
    replay = ReplaySession(open_recording(make_recording(tmp_path / "a.gpuwatch", 10)))
    win = show_window(replay)
    assert says(win, "compare", None)
    assert says(win, "export_perfetto", None) and says(win, "export_csv", None)
    assert says(win, "record", "it is saved already")
    assert says(win, "watch_script", "shows a recording")
    assert says(win, "restart", "A recording starts nothing")
    assert says(win, "apply_knobs", READ_ONLY)


def test_an_enabled_action_gets_its_own_tooltip_back(window, no_documents):
    export = window.qactions["export_csv"]
    assert not export.isEnabled()
    feed(window.session, 3)
    window._sync_state()
    assert export.isEnabled() and NOTHING_TO_EXPORT not in export.toolTip()


def test_advisor_apply_is_off_with_the_reason_once_the_run_stopped(qtbot):
    session = FakeSession()
    view = AdvisorView(session)
    qtbot.addWidget(view)
    rows = [dataclasses.replace(advisor_row(0, data=62, kernel=38), label="baseline")]
    view.refresh(rows)
    button = view.cards[0].apply_button
    assert button.isEnabled() and not button.statusTip()
    session.state = SessionState.FINISHED
    view.refresh(rows)
    assert not button.isEnabled()
    assert button.toolTip() == NOT_RUNNING and button.statusTip() == NOT_RUNNING
