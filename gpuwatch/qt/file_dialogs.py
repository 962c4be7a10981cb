"""File → Open recording, Compare with, Export: the dialogs and what each choice does.

Every failure is a message (a bad file, a folder that cannot be written) and the window stays
as it was. Export writes the window's recording, or in a live window what the window holds
(as Record would write it), so it never asks to record first; ``nothing_to_export`` says why
Export is disabled when the window holds nothing. Recordings open in windows of their own,
kept here so they live as long as the window they were opened from; a comparison is shown in
this window (``compare_mode``), one at a time, until it is closed.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import platformdirs
from PySide6.QtWidgets import QFileDialog, QPushButton, QStatusBar, QWidget

from gpuwatch.core.files.recording import SUFFIX, RecordingError
from gpuwatch.core.files.recording_reader import open_recording
from gpuwatch.core.files.replay import ReplaySession
from gpuwatch.qt.screenshot import save_screenshot


class ShownComparison(Protocol):
    """A comparison shown in the window (``compare_mode.CompareMode``)."""

    close_button: QPushButton

    def close(self) -> None: ...


#: Shows the window's recording and another one side by side in the window.
CompareFn = Callable[[ReplaySession], ShownComparison]


class LiveRun(Protocol):
    """What a live window holds, written as a recording (``record_control.RecordControl``)."""

    def holds_run(self) -> bool: ...

    def snapshot(self, path: Path) -> Path: ...


NOTHING_TO_EXPORT = (
    "Nothing to export yet: start a run or open a recording (there is no need to record the "
    "run first: Export writes what the window holds)"
)

RECORDING_FILTER = f"gpuwatch recordings (*{SUFFIX});;All files (*)"
#: Shows a non-blocking message: (title, text).
ErrorFn = Callable[[str, str], None]


def recordings_dir() -> Path:
    """Where Record saves by default (tests point it at a temporary folder)."""
    return Path(platformdirs.user_documents_dir()) / "gpuwatch"


class FileDialogs:
    """Open, compare and export for one window (``parent``)."""

    def __init__(
        self,
        parent: QWidget,
        replay: ReplaySession | None,
        *,
        last_recording: Callable[[], Path | None],
        open_window: Callable[[ReplaySession], QWidget],
        status: QStatusBar,
        show_error: ErrorFn,
        compare_in_window: CompareFn | None = None,
        live: LiveRun | None = None,
    ) -> None:
        """``replay`` is the window's recording (None: a live window, whose exports come
        from what ``live`` holds, else from ``last_recording()``); ``open_window`` makes a
        window for a recording; ``compare_in_window`` shows ``replay`` and another recording
        in the window."""
        self.parent = parent
        self._live = live
        self._compare_in_window = compare_in_window
        #: The comparison shown in this window, if any.
        self.comparison: ShownComparison | None = None
        self.replay = replay
        self._last_recording = last_recording
        self._open_window = open_window
        self.status = status
        self._show_error = show_error
        #: Replay windows opened from here.
        self.windows: list[QWidget] = []

    # ---- Open and compare ------------------------------------------------------------

    def ask_open(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self.parent, "Open recording", str(recordings_dir()), RECORDING_FILTER
        )
        if path:
            self.open_recording_file(path)

    def open_recording_file(self, path: str | Path) -> QWidget | None:
        """Show a recording in a new window; a bad file gets a message, this window stays."""
        try:
            replay = ReplaySession(open_recording(path))
        except RecordingError as exc:
            self._show_error("Cannot open the recording", str(exc))
            return None
        window = self._open_window(replay)
        window.resize(self.parent.size())
        window.show()
        self.windows.append(window)
        return window

    def ask_compare(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self.parent, "Compare with recording", str(recordings_dir()), RECORDING_FILTER
        )
        if path:
            self.compare_with(path)

    def compare_with(self, path: str | Path) -> ShownComparison | None:
        """This recording and ``path`` side by side (in a live window: ask for both files)."""
        try:
            other = ReplaySession(open_recording(path))
        except RecordingError as exc:
            self._show_error("Cannot open the recording", str(exc))
            return None
        if self.replay is None:
            self._show_error(
                "Nothing to compare with yet",
                "Open a recording first (File → Open recording…), then compare it with another.",
            )
            return None
        return self.show_compare(other)

    def show_compare(self, other: ReplaySession) -> ShownComparison:
        """This window's recording (A) and ``other`` (B) side by side in this window,
        instead of a comparison shown before."""
        assert self.replay is not None, "compare needs a recording in this window"
        assert self._compare_in_window is not None, "this window cannot show a comparison"
        self.close_compare()
        self.comparison = self._compare_in_window(other)
        self.comparison.close_button.clicked.connect(self.close_compare)
        return self.comparison

    def close_compare(self) -> None:
        """Back to the plain replay (nothing happens if no comparison is shown)."""
        if self.comparison is not None:
            self.comparison.close()
            self.comparison = None

    # ---- Export -----------------------------------------------------------------------

    def nothing_to_export(self) -> str | None:
        """Why Export cannot write anything now (None: it can)."""
        if self.replay is not None or self._last_recording() is not None:
            return None
        if self._live is not None and self._live.holds_run():
            return None
        return NOTHING_TO_EXPORT

    def ask_export(self, kind: str) -> None:
        """Ask where to write the recording as ``perfetto`` or ``csv``, then write it."""
        suffix, title = (".json", "Perfetto JSON") if kind == "perfetto" else (".csv", "CSV")
        source = self.replay.recording.path if self.replay is not None else self._last_recording()
        default = recordings_dir() / f"{source.stem if source else 'gpuwatch'}{suffix}"
        path, _ = QFileDialog.getSaveFileName(
            self.parent, f"Export {title}", str(default), f"{title} (*{suffix})"
        )
        if path:
            self.export_recording(kind, path)

    def export_recording(self, kind: str, path: str | Path) -> bool:
        """Write the shown recording, or in a live window what it holds (else the last
        recording made here), as ``perfetto`` or ``csv``; a message says why when there is
        nothing or the file cannot be written."""
        from gpuwatch.core.files.export_csv import write_csv
        from gpuwatch.core.files.export_perfetto import write_perfetto

        last = self._last_recording()
        try:
            if self.replay is not None:
                recording = self.replay.recording
            elif self._live is not None and self._live.holds_run():
                with tempfile.TemporaryDirectory(prefix="gpuwatch-export-") as folder:
                    recording = open_recording(self._live.snapshot(Path(folder) / f"x{SUFFIX}"))
            elif last is not None:
                recording = open_recording(last)
            else:
                self._show_error("Nothing to export", NOTHING_TO_EXPORT)
                return False
            (write_perfetto if kind == "perfetto" else write_csv)(recording, Path(path))
        except RecordingError as exc:
            self._show_error("Cannot export", str(exc))
            return False
        except OSError as exc:
            self._show_error("Cannot export", f"cannot write {path}: {exc.strerror or exc}")
            return False
        self.status.showMessage(f"saved {path}", 15_000)
        return True

    def ask_export_png(self) -> None:
        path, _ = QFileDialog.getSaveFileName(
            self.parent,
            "Export PNG of the window",
            str(recordings_dir() / "gpuwatch.png"),
            "PNG images (*.png)",
        )
        if path:
            self.export_png(path)

    def export_png(self, path: str | Path) -> bool:
        """The window as a PNG; a message if it cannot be saved."""
        error = save_screenshot(self.parent, Path(path))
        if error:
            self._show_error("Cannot export", error)
            return False
        self.status.showMessage(f"saved {path}", 15_000)
        return True
