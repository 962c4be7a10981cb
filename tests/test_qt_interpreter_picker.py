"""Run → Choose Python…, and the installed app's search for a Python with torch.

Candidates are fake interpreters (shell scripts printing a survey report); discovery is
replaced so the machine's real Pythons do not take part. No GPU: NVML capabilities are [].
"""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pytest

from gpuwatch.core.run import interpreters
from gpuwatch.core.run.interpreters import BAD, OK, Candidate
from gpuwatch.qt.interpreter_picker import InterpreterPicker
from gpuwatch.qt.settings import Settings

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="fake interpreters are sh")

GOOD = {
    "python": "3.12.1",
    "torch": "2.14.1",
    "torchvision": "0.29.1",
    "cuda": None,
    "cuda_available": False,
    "arch_list": [],
    "capabilities": [],
}
NO_TORCH = {
    "python": "3.12.1",
    "torch": None,
    "torch_error": "ModuleNotFoundError: No module named 'torch'",
}


def fake_python(folder: Path, report: dict) -> str:
    folder.mkdir(parents=True)
    path = folder / "python"
    path.write_text(f"#!/bin/sh\ncat <<'EOF'\n{json.dumps(report)}\nEOF\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


@pytest.fixture
def fakes(tmp_path, monkeypatch):
    good = fake_python(tmp_path / "good", GOOD)
    bad = fake_python(tmp_path / "bad", NO_TORCH)
    found = [Candidate(good, "venv: good"), Candidate(bad, "on PATH")]
    monkeypatch.setattr(interpreters, "discover", lambda extra=(): [*extra, *found])
    monkeypatch.setattr(interpreters, "gpu_capabilities", lambda: [])
    return good, bad


def test_picker_shows_verdicts_and_only_a_usable_choice_is_accepted(qtbot, fakes):
    good, bad = fakes
    dialog = InterpreterPicker()
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitUntil(lambda: dialog.pending() == 0, timeout=20_000)
    assert dialog.level_of(good) == OK and dialog.level_of(bad) == BAD

    dialog.tree.setCurrentItem(dialog._item(bad))
    assert not dialog.use_button.isEnabled()
    assert "torch not installed" in dialog.details.text()
    assert f"{bad} -m pip install torch torchvision" in dialog.details.text()

    dialog.tree.setCurrentItem(dialog._item(good))
    assert dialog.use_button.isEnabled()
    dialog.use_button.click()
    assert dialog.chosen == good and dialog.result() == dialog.DialogCode.Accepted


def test_browse_adds_and_surveys_any_file(qtbot, fakes, tmp_path):
    # Written before the dialog surveys anything: a survey forked while this file is still
    # open for writing keeps the write descriptor in its child until exec, and running the file
    # then fails with "Text file busy" (ETXTBSY), a verdict of BAD for a good interpreter.
    other = fake_python(tmp_path / "browsed", GOOD)
    dialog = InterpreterPicker()
    qtbot.addWidget(dialog)
    dialog.add_path(other)
    assert dialog.selected_path() == other
    qtbot.waitUntil(lambda: dialog.level_of(other) == OK, timeout=20_000)
    not_python = tmp_path / "notes.txt"
    not_python.write_text("hello")
    dialog.add_path(str(not_python))
    qtbot.waitUntil(lambda: dialog.level_of(str(not_python)) == BAD, timeout=20_000)
    assert "is not a Python interpreter" in dialog.details.text()


def test_menu_choice_is_remembered_and_used_by_the_next_start(qtbot, fakes, show_window):
    from gpuwatch.core.run.session import Session

    good, _ = fakes
    session = Session()
    window = show_window(session)
    started = []
    session.start = started.append  # the spec the window would launch
    assert window.interpreter.action.text() == "Choose Python…"
    dialog = window.interpreter.open_picker()
    qtbot.waitUntil(lambda: dialog.pending() == 0, timeout=20_000)
    dialog.tree.setCurrentItem(dialog._item(good))
    dialog.use_button.click()
    assert window.python == good
    assert Settings().python == good
    window.start_run()
    assert started and started[0].python == good


def test_frozen_start_without_any_torch_python_shows_how_to_get_torch(
    qtbot, show_window, monkeypatch, tmp_path
):
    from gpuwatch.core.run.session import Session, SessionState

    monkeypatch.setattr(sys, "frozen", True, raising=False)
    bad = fake_python(tmp_path / "bad", NO_TORCH)
    monkeypatch.setattr(interpreters, "discover", lambda extra=(): [Candidate(bad, "PATH")])
    monkeypatch.setattr(interpreters, "gpu_capabilities", lambda: [])
    window = show_window(Session())
    window.start_run()
    qtbot.waitUntil(window.interpreter.banner.isVisible, timeout=20_000)
    assert "No Python with torch was found" in window.interpreter.banner.text()
    assert "Open recording" in window.interpreter.banner.text()
    assert window.session.state is SessionState.IDLE  # nothing launched, no crash
    assert window.statusBar().currentMessage() == "no Python with torch found"
    assert window.python is None


def test_frozen_start_picks_the_green_interpreter_and_starts(
    qtbot, show_window, monkeypatch, fakes
):
    from gpuwatch.core.run.session import Session

    good, _ = fakes
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    session = Session()
    window = show_window(session)
    started = []
    session.start = started.append
    window.start_run()
    qtbot.waitUntil(lambda: bool(started), timeout=20_000)
    assert started[0].python == good and Settings().python == good
    assert not window.interpreter.banner.isVisible()
