"""Open the window: QApplication, Session, MainWindow; optional timed screenshot and exit.

``--demo-seconds N --screenshot PNG`` runs the window for N seconds, saves a picture and
exits, so talks, docs and CI get real screenshots without a display
(``QT_QPA_PLATFORM=offscreen``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import sys

from PySide6.QtCore import (
    QMessageLogContext,
    QRect,
    QTimer,
    QtMsgType,
    qFormatLogMessage,
    qInstallMessageHandler,
)
from PySide6.QtWidgets import QApplication, QWidget

from gpuwatch.core.files.recording import Recorder, RecordingError
from gpuwatch.core.files.replay import ReplaySession
from gpuwatch.core.run.app_log import setup_logging
from gpuwatch.core.run.session import Session, SessionState
from gpuwatch.qt.app_icon import app_icon
from gpuwatch.qt.error_dialog import ErrorReporter
from gpuwatch.qt.main_window import MainWindow
from gpuwatch.qt.screenshot import save_screenshot
from gpuwatch.qt.settings import Settings
from gpuwatch.qt.theme import theme_manager
from gpuwatch.qt.window_options import WindowOptions

#: A first window's size (and a screenshot's); on a smaller screen ``fit_to_screen`` shrinks it.
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


def _start_recording(
    options: WindowOptions, session: Session, window: MainWindow
) -> Recorder | bool | None:
    """``--record FILE``: a Recorder on the session before the run starts; None if not asked,
    False (after one line on stderr) if the file cannot be created."""
    if not options.record:
        return None
    spec = window.script_spec
    recorder = Recorder(
        options.record,
        session,
        spec={
            "script": spec.script if spec else None,
            "module": spec.module if spec else None,
            "args": list(spec.script_args) if spec else [],
            "cwd": spec.cwd if spec else None,
            "workload": None if spec else window.workload_combo.currentText(),
            "device": window.device_combo.currentData() or "auto",
            "python": options.python,
        },
    )
    try:
        recorder.start()
    except RecordingError as exc:
        print(f"gpuwatch: {exc}", file=sys.stderr)  # noqa: T201 - one line, then exit 1
        return False
    window.statusBar().showMessage(f"recording to {recorder.path}", 15_000)
    return recorder


def _remember_interpreter(options: WindowOptions, settings: Settings) -> WindowOptions:
    """``--python`` is remembered; a frozen app (no Python of its own) uses the remembered
    one when none is given. From a source install, no ``--python`` means this
    interpreter, as the command line says. Returns the options the window opens with."""
    if options.python:
        settings.python = str(options.python)
    elif getattr(sys, "frozen", False) and settings.python:
        return dataclasses.replace(options, python=settings.python)
    return options


def fit_to_screen(window: QWidget, room: QRect | None = None) -> None:
    """Keep the window, its frame included, inside ``room`` (default: its screen's available
    geometry, the screen less task bars and docks): the default size or a layout remembered
    from a larger screen would leave the status bar and the bottom docks off a 1280×720
    projector."""
    if room is None:
        screen = window.screen()
        if screen is None:
            return
        room = screen.availableGeometry()
    frame = window.frameGeometry()
    extra_w = max(frame.width() - window.width(), 0)
    extra_h = max(frame.height() - window.height(), 0)
    width = min(window.width(), room.width() - extra_w)
    height = min(window.height(), room.height() - extra_h)
    if (width, height) != (window.width(), window.height()):
        window.resize(width, height)
    frame = window.frameGeometry()
    x = min(max(frame.x(), room.left()), room.right() + 1 - frame.width())
    y = min(max(frame.y(), room.top()), room.bottom() + 1 - frame.height())
    if (x, y) != (frame.x(), frame.y()):
        window.move(x, y)


def apply_look(window: MainWindow, options: WindowOptions) -> None:
    """``--theme`` (else the remembered theme) and ``--presentation`` on a shown window.

    With ``--window-size`` or ``--screenshot``, presentation mode keeps a window of that size
    (else 1280×720) instead of going full screen, so the picture is the same on every machine.
    """
    theme_manager().set_mode(options.theme or Settings().theme)
    if options.presentation:
        size = options.window_size
        fixed = size is not None or options.screenshot is not None
        if fixed:
            window.resize(*(size or PRESENTATION_SIZE))
        window.presentation.set_active(True, fullscreen=not fixed)


def run_window(options: WindowOptions) -> int:
    """Run the window until it closes; 0, or 1 if the run FAILED or the PNG was not saved.

    ``gpuwatch run`` gives a script and perhaps a file the run is recorded to from its
    start; ``gpuwatch replay`` gives ``recording`` (shown instead of a live run) and
    ``compare`` (a second one, shown beside it in this window: ``compare_mode``), both
    already opened.
    """
    app = create_app()
    previous_handler = _install_quiet_handler()
    setup_logging()
    options = _remember_interpreter(options, Settings())
    recording = options.recording
    session = Session() if recording is None else ReplaySession(recording)
    window = MainWindow(session, options)
    if options.window_size:
        window.resize(*options.window_size)
    elif options.screenshot or not window.settings.has_window():
        window.resize(*DEFAULT_SIZE)  # screenshots are reproducible, not the user's layout
    if not options.window_size and not options.screenshot:  # an asked-for size is kept
        fit_to_screen(window)
    window.show()
    apply_look(window, options)
    reporter = ErrorReporter(window)
    reporter.install()
    if options.compare is not None:
        window.files.show_compare(ReplaySession(options.compare))
    problems: list[str] = []
    recorder = _start_recording(options, session, window)
    if recorder is False:
        window.close()
        return 1

    demo_seconds = options.demo_seconds
    if demo_seconds:

        def finish_demo() -> None:
            shot = options.screenshot
            if shot is not None:
                error = save_screenshot(window, shot)
                if error:
                    problems.append(error)
            app.closeAllWindows()  # with any replay window opened from this one

        QTimer.singleShot(int(demo_seconds * 1000), finish_demo)

    # Ctrl+C in the terminal closes the window (and so stops the run) instead of being
    # swallowed by the Qt event loop; the redraw timer lets Python run the handler.
    previous = signal.signal(signal.SIGINT, lambda *_: window.close())
    try:
        if options.autostart:
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
