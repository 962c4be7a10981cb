"""Unexpected exceptions in the window: log the traceback, tell the user, keep running.

PySide6 hands an exception raised in a slot or an overridden Qt method to ``sys.excepthook``
and carries on; Python's default hook prints to a terminal a desktop user does not have.
This hook writes the traceback to the app log and shows ONE non-modal dialog with the message
and where the log is. A bug in the 30 fps redraw would raise 30 times a second, so further
exceptions update that dialog (with a count) instead of stacking up windows. Exceptions in
Python threads (``threading.excepthook``) reach the dialog through a queued signal.
"""

from __future__ import annotations

import logging
import sys
import threading
import traceback
from types import TracebackType
from typing import Any

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import QMessageBox, QWidget

from gpuwatch.core.run.app_log import active_log_file, log_dir

log = logging.getLogger("gpuwatch.errors")


class ErrorReporter(QObject):
    """Installs the hooks (``install``) and restores the previous ones (``uninstall``)."""

    #: (summary line, traceback text) from any thread; shown on the GUI thread.
    sig_error = Signal(str, str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._parent = parent
        self.dialog: QMessageBox | None = None
        self.count = 0
        self._previous_sys: Any = None
        self._previous_threading: Any = None
        self.sig_error.connect(self._show, Qt.ConnectionType.QueuedConnection)

    def install(self) -> None:
        self._previous_sys = sys.excepthook
        self._previous_threading = threading.excepthook
        sys.excepthook = self.excepthook
        threading.excepthook = self.thread_excepthook

    def uninstall(self) -> None:
        if sys.excepthook == self.excepthook:
            sys.excepthook = self._previous_sys or sys.__excepthook__
        if threading.excepthook == self.thread_excepthook:
            threading.excepthook = self._previous_threading or threading.__excepthook__

    # ---- Hooks --------------------------------------------------------------------------

    def excepthook(
        self, exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None
    ) -> None:
        if issubclass(exc_type, KeyboardInterrupt):  # Ctrl+C keeps its usual meaning
            (self._previous_sys or sys.__excepthook__)(exc_type, exc, tb)
            return
        self._report(exc_type, exc, tb, where="the window")

    def thread_excepthook(self, args: threading.ExceptHookArgs) -> None:
        if args.exc_type is SystemExit or args.exc_value is None:
            return
        name = args.thread.name if args.thread is not None else "a thread"
        self._report(args.exc_type, args.exc_value, args.exc_traceback, where=name)

    def _report(
        self,
        exc_type: type[BaseException],
        exc: BaseException,
        tb: TracebackType | None,
        where: str,
    ) -> None:
        text = "".join(traceback.format_exception(exc_type, exc, tb))
        log.error("unexpected exception in %s:\n%s", where, text.rstrip())
        summary = f"{exc_type.__name__}: {exc}" if str(exc) else exc_type.__name__
        # Emitting is thread-safe; the queued connection runs _show on the GUI thread.
        self.sig_error.emit(summary, text)

    # ---- Dialog -------------------------------------------------------------------------

    def _show(self, summary: str, details: str) -> None:
        self.count += 1
        where = active_log_file() or log_dir()
        text = (
            f"gpuwatch hit an unexpected error and carried on:\n\n{summary}\n\n"
            f"The full traceback is in the log:\n{where}\n\n"
            "(Help → Open log folder; please attach it to a bug report.)"
        )
        if self.count > 1:
            text += f"\n\n{self.count} errors so far; this shows the latest."
        if self.dialog is None:
            self.dialog = QMessageBox(
                QMessageBox.Icon.Critical,
                "Unexpected error",
                text,
                QMessageBox.StandardButton.Ok,
                self._parent,
            )
            self.dialog.setWindowModality(Qt.WindowModality.NonModal)
            self.dialog.finished.connect(self._forget_dialog)
        else:
            self.dialog.setText(text)
        self.dialog.setDetailedText(details)
        self.dialog.show()

    def _forget_dialog(self) -> None:
        self.dialog = None
        self.count = 0
