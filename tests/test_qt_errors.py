"""An unexpected exception: logged with its traceback, one non-modal dialog naming the log,
and the window goes on (redraw timer running, actions still work)."""

from __future__ import annotations

import logging
import sys
import threading

import pytest
from PySide6.QtCore import QTimer

from gpuwatch.core.run.app_log import active_log_file, log_dir, setup_logging
from gpuwatch.core.run.session import Session
from gpuwatch.qt.error_dialog import ErrorReporter


@pytest.fixture
def reporter(show_window, qtbot):
    path = setup_logging()
    window = show_window(Session(sample_coarse=False))
    reporter = ErrorReporter(window)
    reporter.install()
    yield window, reporter, path
    reporter.uninstall()
    if reporter.dialog is not None:
        reporter.dialog.close()
    logger = logging.getLogger("gpuwatch")
    for handler in list(logger.handlers):  # the next test's log folder is another tmp dir
        if getattr(handler, "baseFilename", None) == str(path.resolve()):
            logger.removeHandler(handler)
            handler.close()


def _raise_inside() -> None:
    raise ValueError("a bug in a slot")


def test_injected_exception_is_logged_shown_and_the_window_goes_on(reporter, qtbot):
    window, errors, path = reporter
    assert path.parent == log_dir() and active_log_file() == path.resolve()
    try:
        _raise_inside()
    except ValueError:
        sys.excepthook(*sys.exc_info())
    qtbot.waitUntil(lambda: errors.dialog is not None and errors.dialog.isVisible())
    assert "ValueError: a bug in a slot" in errors.dialog.text()
    assert str(path.resolve()) in errors.dialog.text()
    assert not errors.dialog.isModal()
    logged = path.read_text(encoding="utf-8")
    assert "Traceback" in logged and "_raise_inside" in logged and "a bug in a slot" in logged
    # The window is still alive: its redraw timer ticks and an action still works.
    assert window.timer.isActive()
    ticks = window._ticks
    qtbot.waitUntil(lambda: window._ticks > ticks + 2)
    window.pause_view_action.trigger()
    assert window.view_paused
    window.follow_action.trigger()
    assert window.follow and not window.view_paused


def test_repeated_errors_update_one_dialog(reporter, qtbot):
    _, errors, _ = reporter
    for n in range(5):
        try:
            raise RuntimeError(f"tick {n}")
        except RuntimeError:
            sys.excepthook(*sys.exc_info())
    qtbot.waitUntil(lambda: errors.count == 5)
    assert "tick 4" in errors.dialog.text() and "5 errors so far" in errors.dialog.text()


@pytest.mark.qt_no_exception_capture
def test_a_raising_slot_reaches_the_dialog(reporter, qtbot):
    _, errors, path = reporter
    QTimer.singleShot(0, _raise_inside)
    qtbot.waitUntil(lambda: errors.dialog is not None and errors.dialog.isVisible())
    assert "a bug in a slot" in path.read_text(encoding="utf-8")


def test_a_thread_exception_reaches_the_dialog_on_the_gui_thread(reporter, qtbot):
    _, errors, path = reporter

    def work() -> None:
        raise OSError("disk gone")

    thread = threading.Thread(target=work, name="worker-x")
    thread.start()
    thread.join()
    qtbot.waitUntil(lambda: errors.dialog is not None and errors.dialog.isVisible())
    assert "OSError: disk gone" in errors.dialog.text()
    assert "worker-x" in path.read_text(encoding="utf-8")


def test_uninstall_restores_the_previous_hooks(qtbot):
    before_sys, before_thread = sys.excepthook, threading.excepthook
    errors = ErrorReporter()
    errors.install()
    assert sys.excepthook == errors.excepthook
    errors.uninstall()
    assert sys.excepthook is before_sys and threading.excepthook is before_thread
