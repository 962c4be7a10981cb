"""File → Record (Ctrl+S): a ``Recorder`` on the live session while the action is checked.

The first press starts recording (what the window already holds is written too), the second
finishes the file and the status bar names it. A recorder that fails meanwhile (a full disk)
is stopped at the next frame and says why. ``snapshot`` writes what the window holds the same
way, finished at once: Export in a live window writes from it, so it never asks the user to
record first.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from PySide6.QtGui import QAction
from PySide6.QtWidgets import QStatusBar

from gpuwatch.core.files.recording import SUFFIX, Recorder, RecordingError
from gpuwatch.core.run.session import LaunchSpec, Session
from gpuwatch.qt.file_dialogs import ErrorFn, recordings_dir
from gpuwatch.qt.run_session import RunSession
from gpuwatch.qt.run_toolbar import RunToolbar


class RecordControl:
    """Owns the window's ``Recorder`` and the last file it wrote (what Export writes from)."""

    def __init__(
        self,
        session: RunSession,
        action: QAction,
        status: QStatusBar,
        *,
        run_bar: RunToolbar,
        script: LaunchSpec | None,
        python: Callable[[], str | None],
        show_error: ErrorFn,
    ) -> None:
        """The file records how the run was started: ``script`` (None: the toolbar's
        workload), the toolbar's device and ``python()``, the interpreter chosen now."""
        self.session = session
        self.action = action
        self.status = status
        self.run_bar = run_bar
        self.script = script
        self._python = python
        self._show_error = show_error
        self.recorder: Recorder | None = None
        self.last_recording: Path | None = None
        #: The run's label as a file name (the window's ``Runs.recording_name``), if any.
        self.run_label: Callable[[], str | None] = lambda: None
        action.setToolTip(f"Record the run to a {SUFFIX} file in {recordings_dir()}")

    def set_recording(self, on: bool) -> None:
        """Start (``on``) or finish the recording; a file that cannot be made unchecks it."""
        if not on:
            self.stop()
            return
        if self.recorder is not None or not isinstance(self.session, Session):
            return  # recording already, or a replay (already a recording)
        stamp = datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
        script, workload = self.script, self.run_bar.workload_combo.currentText()
        name = self.run_label() or (script.name if script else workload)
        path = recordings_dir() / f"{Path(name).stem}-{stamp}{SUFFIX}"
        recorder = Recorder(path, self.session, spec=self._spec())
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            recorder.start()
        except (RecordingError, OSError) as exc:
            self.action.setChecked(False)
            self._show_error("Cannot record", str(exc))
            return
        self.recorder = recorder
        self.status.showMessage(f"recording to {path}")

    def _spec(self) -> dict[str, object]:
        """How the run was started, as the file keeps it."""
        script, workload = self.script, self.run_bar.workload_combo.currentText()
        return {
            "script": script.script if script else None,
            "module": script.module if script else None,
            "args": list(script.script_args) if script else [],
            "cwd": script.cwd if script else None,
            "workload": None if script else workload,
            "device": self.run_bar.device_combo.currentData() or "auto",
            "python": self._python(),
        }

    def holds_run(self) -> bool:
        """A live window that holds a run (its hello came): something a snapshot can write."""
        return isinstance(self.session, Session) and self.session.hello is not None

    def snapshot(self, path: Path) -> Path:
        """What the window holds, written to ``path`` as Record would start it and finished
        at once; ``RecordingError`` or ``OSError`` when it cannot be written."""
        if not isinstance(self.session, Session):
            raise RecordingError("a replay is already a recording")
        recorder = Recorder(path, self.session, spec=self._spec(), overwrite=True)
        recorder.start()
        recorder.close()
        if recorder.error:
            raise RecordingError(recorder.error)
        return path

    def stop(self) -> None:
        """Finish the file (if recording) and say where it is or why it failed."""
        recorder, self.recorder = self.recorder, None
        if recorder is None:
            return
        recorder.close()
        self.last_recording = recorder.path
        text = (
            f"recording stopped: {recorder.error}"
            if recorder.error
            else f"recorded {recorder.steps_written:,} steps to {recorder.path}"
        )
        self.status.showMessage(text, 30_000)
        if self.action.isChecked():
            self.action.setChecked(False)

    def check(self) -> None:
        """Once per frame: a recorder that failed (e.g. a full disk) stops and says so now."""
        recorder = self.recorder
        if recorder is not None and recorder.error:
            self.stop()
            self._show_error("Recording stopped", recorder.error)

    def disable(self, why: str) -> None:
        """A window that cannot record (a replay is already a recording)."""
        self.action.setEnabled(False)
        self.action.setToolTip(why)
