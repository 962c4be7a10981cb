"""Open the window: QApplication, Session, MainWindow; optional timed screenshot and exit.

``--demo-seconds N --screenshot PNG`` runs the window for N seconds, saves a picture and
exits, so talks, docs and CI get real screenshots without a display
(``QT_QPA_PLATFORM=offscreen``).
"""

from __future__ import annotations

import contextlib
import signal
import sys
from pathlib import Path
from typing import Any

from PySide6.QtCore import (
    QMessageLogContext,
    QTimer,
    QtMsgType,
    qFormatLogMessage,
    qInstallMessageHandler,
)
from PySide6.QtWidgets import QApplication

from gpuwatch.core.files.replay import ReplaySession
from gpuwatch.core.run.app_log import setup_logging
from gpuwatch.core.run.session import Session, SessionState
from gpuwatch.qt.app_icon import app_icon
from gpuwatch.qt.error_dialog import ErrorReporter
from gpuwatch.qt.main_window import MainWindow
from gpuwatch.qt.screenshot import save_screenshot
from gpuwatch.qt.settings import Settings
from gpuwatch.qt.theme import theme_manager

DEFAULT_SIZE = (1280, 800)
#: Presentation screenshots are taken at a projector's size, so slides and docs match a hall.
PRESENTATION_SIZE = (1280, 720)


def create_app() -> QApplication:
    """The process's QApplication (reused if one exists, e.g. under pytest-qt)."""
    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("gpuwatch")
    app.setStyle("Fusion")
    app.setWindowIcon(app_icon())
    return app  # type: ignore[return-value]


#: Harmless Qt warnings of the offscreen platform (no window manager to pass hints to);
#: dropped so a headless ``--demo-seconds`` run prints nothing.
_OFFSCREEN_NOISE = ("This plugin does not support propagateSizeHints()",)


def _install_quiet_handler() -> object:
    """Drop known offscreen noise; every other Qt message still reaches stderr."""
    previous = None

    def handler(mode: QtMsgType, context: QMessageLogContext, message: str) -> None:
        if message in _OFFSCREEN_NOISE:
            return
        if previous is not None:
            previous(mode, context, message)
        else:
            sys.stderr.write(qFormatLogMessage(mode, context, message) + "\n")

    previous = qInstallMessageHandler(handler)
    return previous


def _start_recording(options: Any, session: Session, window: MainWindow) -> Any:
    """``--record FILE``: a Recorder on the session before the run starts; None if not asked,
    False (after one line on stderr) if the file cannot be created."""
    path = getattr(options, "record", None)
    if not path:
        return None
    from gpuwatch.core.files.recording import Recorder, RecordingError

    spec = window.script_spec
    recorder = Recorder(
        path,
        session,
        spec={
            "script": spec.script if spec else None,
            "args": list(spec.script_args) if spec else [],
            "cwd": spec.cwd if spec else None,
            "workload": None if spec else window.workload_combo.currentText(),
            "device": window.device_combo.currentData() or "auto",
            "python": getattr(options, "python", None),
        },
    )
    try:
        recorder.start()
    except RecordingError as exc:
        print(f"gpuwatch: {exc}", file=sys.stderr)  # noqa: T201 - one line, then exit 1
        return False
    window.statusBar().showMessage(f"recording to {recorder.path}", 15_000)
    return recorder


def _remember_interpreter(options: Any, settings: Settings) -> None:
    """``--python`` is remembered; a frozen app (no Python of its own) uses the remembered
    one when none is given. From a source install, no ``--python`` means this
    interpreter, as the command line says."""
    chosen = getattr(options, "python", None)
    if chosen:
        settings.python = str(chosen)
    elif getattr(sys, "frozen", False) and settings.python and options is not None:
        options.python = settings.python


def apply_look(window: MainWindow, options: Any) -> None:
    """``--theme`` (else the remembered theme) and ``--presentation`` on a shown window.

    With ``--window-size`` or ``--screenshot``, presentation mode keeps a window of that size
    (else 1280×720) instead of going full screen, so the picture is the same on every machine.
    """
    theme_manager().set_mode(getattr(options, "theme", None) or Settings().theme)
    if getattr(options, "presentation", False):
        size = getattr(options, "window_size", None)
        fixed = size is not None or getattr(options, "screenshot", None) is not None
        if fixed:
            window.resize(*(size or PRESENTATION_SIZE))
        window.presentation.set_active(True, fullscreen=not fixed)


def run_window(options: Any) -> int:
    """Run the window until it closes; 0, or 1 if the run FAILED or the PNG was not saved.

    ``options`` has ``workload``, ``device``, ``python``, ``autostart``, ``demo_seconds``
    and ``screenshot`` (the CLI's parsed arguments); ``gpuwatch run`` adds ``script``,
    ``script_args``, ``cwd``, ``seconds`` and ``record`` (a file the run is recorded to from
    its start); ``gpuwatch replay`` gives ``recording`` (shown instead of a live run) and
    ``compare`` (a second one, side by side), both already opened.
    """
    app = create_app()
    previous_handler = _install_quiet_handler()
    setup_logging()
    _remember_interpreter(options, Settings())
    recording = getattr(options, "recording", None)  # gpuwatch replay: an opened Recording
    session = Session() if recording is None else ReplaySession(recording)
    window = MainWindow(session, options)
    if getattr(options, "window_size", None):
        window.resize(*options.window_size)
    elif getattr(options, "screenshot", None) or not window.settings.has_window():
        window.resize(*DEFAULT_SIZE)  # screenshots are reproducible, not the user's layout
    window.show()
    apply_look(window, options)
    reporter = ErrorReporter(window)
    reporter.install()
    if getattr(options, "compare", None) is not None:
        window.show_compare(ReplaySession(options.compare))
    problems: list[str] = []
    recorder = _start_recording(options, session, window)
    if recorder is False:
        window.close()
        return 1

    demo_seconds = getattr(options, "demo_seconds", None)
    if demo_seconds:

        def finish_demo() -> None:
            shot = getattr(options, "screenshot", None)
            if shot is not None:
                error = save_screenshot(window, Path(shot))
                if error:
                    problems.append(error)
            app.closeAllWindows()  # with any compare or replay window opened from this one

        QTimer.singleShot(int(demo_seconds * 1000), finish_demo)

    # Ctrl+C in the terminal closes the window (and so stops the run) instead of being
    # swallowed by the Qt event loop; the redraw timer lets Python run the handler.
    previous = signal.signal(signal.SIGINT, lambda *_: window.close())
    try:
        if getattr(options, "autostart", True):
            window.start_run()
        app.exec()
    finally:
        window.close()  # idempotent: the session is closed exactly once
        if recorder is not None:
            recorder.close()
        with contextlib.suppress(ValueError, TypeError):
            signal.signal(signal.SIGINT, previous)
        qInstallMessageHandler(previous_handler)
        reporter.uninstall()
    if session.state is SessionState.FAILED and recording is None:
        problems.insert(0, f"the run failed: {session.error or 'no reason given'}")
    if problems:
        print(f"gpuwatch: {problems[0]}", file=sys.stderr)  # noqa: T201 - one line, then exit 1
        return 1
    return 0
