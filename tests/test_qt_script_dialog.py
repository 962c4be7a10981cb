"""File → "Watch a training script…": the dialog's fields and messages, recent scripts, a
``.py`` dropped on the window, and end to end: the window runs the script as
``gpuwatch run SCRIPT ARGS`` does (argv, folder, environment), and Run → Restart runs it
again with the same settings; the installed app finds its Python first; picking a workload
leaves the script."""

from __future__ import annotations

import dataclasses
import json
import textwrap
from pathlib import Path

import pytest
from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QApplication

from gpuwatch.core.run import launcher
from gpuwatch.core.run.session import Session, SessionState
from gpuwatch.qt.script_dialog import InputError, ScriptDialog, parse_args, parse_env
from gpuwatch.qt.settings import RECENT_SCRIPTS, RecentScript, Settings
from gpuwatch.qt.window_options import WindowOptions

#: Appends what it was started with to seen.jsonl in its folder, then trains until stopped.
ENDLESS_TRAINING = """
import json, os, sys
import torch

if __name__ == "__main__":
    with open("seen.jsonl", "a") as f:
        seen = {"argv": sys.argv, "cwd": os.getcwd(), "env": os.environ.get("GW_DIALOG")}
        f.write(json.dumps(seen) + "\\n")
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    while True:
        loss = model(torch.randn(16, 8)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
"""


def write_script(folder: Path, name: str = "train.py", text: str = "pass\n") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


@pytest.fixture
def window(show_window):
    return show_window(Session(sample_coarse=False))


def test_arguments_and_environment_are_parsed_as_typed():
    assert parse_args("--lr 0.1 'two words' \"x y\"") == ("--lr", "0.1", "two words", "x y")
    assert parse_env("A=1\n\n# note\n B_2 = x=y \n") == (("A", "1"), ("B_2", " x=y"))
    with pytest.raises(InputError, match="arguments: No closing quotation"):
        parse_args("'open")
    for bad in ("JUST_TEXT", "=1", "2X=1", "A-B=1"):
        with pytest.raises(InputError, match="environment line 1: expected KEY=VALUE"):
            parse_env(bad)


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("missing", "no such script: "),
        ("not_py", "notes.txt is not a Python script (.py)"),
        ("folder", "the working folder "),
        ("env", "environment line 2: expected KEY=VALUE, not 'oops'"),
        ("args", "arguments: No closing quotation"),
        ("empty", "choose the training script to watch"),
    ],
)
def test_a_bad_field_is_one_message_and_nothing_starts(window, tmp_path, case, message):
    script = write_script(tmp_path / "proj")
    dialog = window.script_watch.open_dialog(str(script))
    if case == "missing":
        dialog.set_script(str(tmp_path / "proj" / "nope.py"))
    elif case == "not_py":
        dialog.set_script(str(write_script(tmp_path / "proj", "notes.txt")))
    elif case == "folder":
        dialog.cwd.setText(str(tmp_path / "no" / "such" / "folder"))
    elif case == "env":
        dialog.env.setPlainText("GOOD=1\noops")
    elif case == "args":
        dialog.args.setText("--name 'unfinished")
    elif case == "empty":
        dialog.set_script("")
    dialog.watch_button.click()
    assert dialog.isVisible() and dialog.error.isVisible()
    assert dialog.error.text().startswith(message)
    assert "\n" not in dialog.error.text()
    assert dialog.spec is None
    assert window.session.state is SessionState.IDLE and window.session.spec is None
    assert window.script_spec is None and window.settings.recent_scripts == []


def test_recent_scripts_newest_first_at_most_eight_missing_ones_dropped(qtbot, tmp_path):
    settings = Settings()
    scripts = [write_script(tmp_path, f"s{i}.py") for i in range(RECENT_SCRIPTS + 2)]
    for i, script in enumerate(scripts):
        settings.remember_script(RecentScript(str(script), (f"--run={i}",), str(tmp_path)))
    settings.remember_script(RecentScript(str(scripts[-1]), ("--again",), str(tmp_path)))
    recent = settings.recent_scripts
    assert len(recent) == RECENT_SCRIPTS
    assert [Path(e.script).name for e in recent[:3]] == ["s9.py", "s8.py", "s7.py"]
    assert recent[0].args == ("--again",)  # the same script once, with its newest settings
    scripts[8].unlink()
    dialog = ScriptDialog(settings, lambda: None)
    qtbot.addWidget(dialog)
    assert dialog.recent_note.isVisibleTo(dialog) and "s8.py" in dialog.recent_note.text()
    assert dialog.recent.count() == 1 + RECENT_SCRIPTS - 1
    assert [Path(e.script).name for e in settings.recent_scripts][:2] == ["s9.py", "s7.py"]
    assert dialog.script.text() == str(scripts[9]) and dialog.args.text() == "--again"
    dialog.recent.activated.emit(2)  # what picking the second entry emits
    assert dialog.script.text() == str(scripts[7]) and dialog.args.text() == "--run=7"
    again = ScriptDialog(settings, lambda: None)  # reported once, then gone from the list
    qtbot.addWidget(again)
    assert not again.recent_note.isVisibleTo(again)


def test_the_folder_follows_the_script_unless_typed(qtbot, tmp_path):
    dialog = ScriptDialog(Settings(), lambda: "/opt/python3")
    qtbot.addWidget(dialog)
    assert dialog.python.text() == "/opt/python3"
    dialog.set_script(str(tmp_path / "a" / "train.py"))
    assert dialog.cwd.text() == str(tmp_path / "a")
    dialog.set_script(str(tmp_path / "b" / "train.py"))
    assert dialog.cwd.text() == str(tmp_path / "b")
    dialog.cwd.setText(str(tmp_path / "mine"))
    dialog.set_script(str(tmp_path / "c" / "train.py"))
    assert dialog.cwd.text() == str(tmp_path / "mine")


def drag_events(path: Path) -> tuple[QDragEnterEvent, QDropEvent, QMimeData]:
    """A drag of ``path`` entering the window and its drop (and their data, kept alive)."""
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(path))])
    buttons, keys = Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier
    enter = QDragEnterEvent(QPoint(200, 200), Qt.DropAction.CopyAction, mime, buttons, keys)
    drop = QDropEvent(QPointF(200, 200), Qt.DropAction.CopyAction, mime, buttons, keys)
    return enter, drop, mime


def test_a_dropped_script_opens_the_dialog_with_it(window, tmp_path):
    script = write_script(tmp_path / "proj")
    enter, drop, _mime = drag_events(script)
    QApplication.sendEvent(window, enter)
    assert enter.isAccepted()
    QApplication.sendEvent(window, drop)
    dialog = window.script_watch.dialog
    assert dialog is not None and dialog.isVisible()
    assert dialog.script.text() == str(script) and dialog.cwd.text() == str(script.parent)
    assert window.session.state is SessionState.IDLE  # nothing starts before Watch
    dialog.reject()
    other, _, _other_mime = drag_events(write_script(tmp_path, "notes.txt"))
    other.setAccepted(False)
    QApplication.sendEvent(window, other)
    assert not other.isAccepted()


def read_seen(folder: Path) -> list[dict]:
    path = folder / "seen.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def test_the_window_watches_the_script_as_gpuwatch_run_does_and_restarts_it(
    window, qtbot, tmp_path
):
    """One dialog, two real runs: the script gets its arguments, folder and environment; the
    spec is the one ``gpuwatch run`` builds; Restart stops the run and starts the same again."""
    script = write_script(tmp_path / "proj", text=ENDLESS_TRAINING)
    work = tmp_path / "work"
    work.mkdir()
    dialog = window.script_watch.open_dialog()
    dialog.set_script(str(script))
    dialog.args.setText("--lr 0.1 'two words'")
    dialog.cwd.setText(str(work))
    dialog.env.setPlainText("GW_DIALOG=hello there")
    dialog.watch_button.click()
    assert not dialog.isVisible()
    args = ("--lr", "0.1", "two words")
    as_run = WindowOptions(script=str(script), script_args=args, cwd=str(work)).script_spec()
    assert as_run is not None
    expected = dataclasses.replace(
        as_run, device="cpu", python=None, env=(("GW_DIALOG", "hello there"),)
    )
    assert window.session.spec == expected
    assert window.windowTitle() == "gpuwatch — train.py"
    assert window.script_label is not None and "train.py" in window.script_label.text()
    assert window.settings.recent_scripts[0] == RecentScript(
        str(script), args, str(work), (("GW_DIALOG", "hello there"),)
    )
    session = window.session
    qtbot.waitUntil(lambda: session.steps.count > 0, timeout=120_000)
    first = {"argv": [str(script), *args], "cwd": str(work), "env": "hello there"}
    assert read_seen(work) == [first]
    assert window.script_watch.restart_action.isEnabled()

    window.script_watch.restart_action.trigger()  # stops this run, then starts it again
    qtbot.waitUntil(lambda: len(read_seen(work)) == 2, timeout=120_000)
    assert read_seen(work) == [first, first]
    assert session.spec == expected
    qtbot.waitUntil(lambda: session.steps.count > 0, timeout=60_000)
    assert session.state is SessionState.RUNNING


def test_the_installed_app_finds_its_python_before_the_script_starts(window, tmp_path, monkeypatch):
    """Frozen, with no Python chosen: Watch goes through the window's Start, which first
    looks for a Python with torch (as for a workload), then starts the script in it."""
    monkeypatch.setattr(launcher, "is_frozen", lambda: True)
    searches = []
    monkeypatch.setattr(window.interpreter, "find_then", searches.append)
    window.python = None
    dialog = window.script_watch.open_dialog(str(write_script(tmp_path / "proj")))
    assert dialog.python.text().startswith("not chosen yet")
    dialog.watch_button.click()
    assert searches == [window.start_run]
    assert window.session.state is SessionState.IDLE and window.session.spec is None
    assert window.script_spec is not None and window.script_spec.name == "train.py"


def test_picking_a_workload_leaves_the_script(window, qtbot, tmp_path, monkeypatch):
    started = []
    monkeypatch.setattr(window.session, "start", started.append)
    script = write_script(tmp_path / "proj")
    dialog = window.script_watch.open_dialog(str(script))
    dialog.watch_button.click()
    assert [s.script for s in started] == [str(script)]
    qtbot.waitUntil(window.workload_combo.isHidden)  # the toolbar lays out
    run_menu = next(a.menu() for a in window.menuBar().actions() if a.text() == "&Run")
    workload_menu = next(a.menu() for a in run_menu.actions() if a.text() == "Workload")
    workload_menu.aboutToShow.emit()
    next(a for a in workload_menu.actions() if a.text() == "mlp").trigger()
    assert window.script_spec is None and window.windowTitle() == "gpuwatch"
    qtbot.waitUntil(lambda: not window.workload_combo.isHidden())
    window.start_run()
    assert started[-1].script is None and started[-1].workload == "mlp"


def test_a_module_is_watched_as_gpuwatch_run_m_runs_it(window, qtbot, tmp_path, monkeypatch):
    """``-m pkg.train`` in the Script field: the spec is the one ``gpuwatch run -m`` builds
    (the window runs it as ``tests/test_run_module.py`` checks), remembered as a module and
    offered again as one; a bad name is one message."""
    started = []
    monkeypatch.setattr(window.session, "start", started.append)
    work = tmp_path / "work"
    work.mkdir()
    dialog = window.script_watch.open_dialog()
    dialog.set_script("-m 2pkg.train")
    dialog.watch_button.click()
    assert dialog.error.text() == (
        "'2pkg.train' is not a module name (dotted Python names, as in -m pkg.train)"
    )
    assert started == [] and dialog.spec is None
    dialog.set_script("-m ")
    dialog.watch_button.click()
    assert dialog.error.text() == "-m needs a module name, as in -m pkg.train"
    dialog.set_script("-m pkg.train")
    dialog.args.setText("--lr 0.1")
    dialog.cwd.setText(str(work))
    dialog.watch_button.click()
    assert not dialog.isVisible()
    as_run = WindowOptions(module="pkg.train", script_args=("--lr", "0.1"), cwd=str(work))
    expected = as_run.script_spec()
    assert expected is not None and expected.module == "pkg.train" and expected.script is None
    assert started == [dataclasses.replace(expected, device="cpu", python=None)]
    assert window.windowTitle() == "gpuwatch — pkg.train"
    entry = window.settings.recent_scripts[0]
    assert entry == RecentScript("", ("--lr", "0.1"), str(work), (), "pkg.train")
    assert RecentScript.from_json(json.loads(json.dumps(entry.to_json()))) == entry
    again = window.script_watch.open_dialog()  # the newest entry fills the fields
    assert again.script.text() == "-m pkg.train" and again.cwd.text() == str(work)
    assert again.recent.itemText(1) == f"-m pkg.train --lr 0.1 — {work}"
    again.reject()


def test_a_module_entry_whose_folder_is_gone_is_dropped(qtbot, tmp_path):
    settings = Settings()
    here, gone = tmp_path / "here", tmp_path / "gone"
    here.mkdir()
    settings.remember_script(RecentScript("", (), str(gone), (), "pkg.old"))
    settings.remember_script(RecentScript("", (), str(here), (), "pkg.train"))
    dialog = ScriptDialog(settings, lambda: None)
    qtbot.addWidget(dialog)
    note = dialog.recent_note.text()
    assert note == f"No longer there, dropped from the list: -m pkg.old (in {gone})"
    assert [e.module for e in settings.recent_scripts] == ["pkg.train"]
    assert RecentScript.from_json({"script": "", "args": [], "env": []}) is None  # neither
