"""File → "Watch a training script…" (or a ``.py`` dropped on the window): the window runs
the user's own script, as ``gpuwatch run SCRIPT ARGS`` does.

The dialog asks for the script, its arguments, the folder it runs in (by default the script's
own), extra environment variables (``KEY=VALUE`` lines) and shows the training Python (Run →
Choose Python… picks it). It offers the recent scripts (``Settings.recent_scripts``, newest
first; one that no longer exists is dropped with a note). Its result is a ``LaunchSpec``, the
value ``gpuwatch run`` builds too (``WindowOptions.script_spec``): the window's Start fills in
the device and the Python and hands it to ``Session.start``, which starts the runner through
``core/run/launcher`` (in the installed app: the chosen external Python). A script that is
missing or not a ``.py`` file, a folder that does not exist or a malformed line is one message
in the dialog, and nothing starts.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QEvent, QObject, Qt, QUrl
from PySide6.QtGui import QAction, QDropEvent
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from gpuwatch.core.run import launcher
from gpuwatch.core.run.session import LaunchSpec, module_problem, script_problem
from gpuwatch.qt import palette
from gpuwatch.qt.settings import RecentScript, Settings
from gpuwatch.qt.theme_tokens import Role

SCRIPT_FILTER = "Python scripts (*.py);;All files (*)"
#: A script is what ``python SCRIPT`` runs; the dialog takes ``.py`` files (``gpuwatch run``
#: takes any file, as ``python`` does).
SUFFIXES = (".py",)


class InputError(ValueError):
    """A field the dialog cannot use: one sentence saying which and why."""


def parse_args(text: str) -> tuple[str, ...]:
    """The arguments as a shell would split them (quotes keep spaces)."""
    try:
        return tuple(shlex.split(text))
    except ValueError as exc:
        raise InputError(f"arguments: {exc}") from None


def parse_env(text: str) -> tuple[tuple[str, str], ...]:
    """``KEY=VALUE`` lines (blank lines and ``#`` comments skipped), in order."""
    pairs: list[tuple[str, str]] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, equals, value = line.partition("=")
        key = key.strip()
        if not equals or not key or not key.replace("_", "a").isalnum() or key[0].isdigit():
            raise InputError(f"environment line {number}: expected KEY=VALUE, not {line!r}")
        pairs.append((key, value))
    return tuple(pairs)


def format_env(pairs: tuple[tuple[str, str], ...]) -> str:
    """The environment field's text for ``pairs``."""
    return "\n".join(f"{key}={value}" for key, value in pairs)


def module_of(text: str) -> str | None:
    """The module of a Script field that reads ``-m NAME`` (as ``gpuwatch run -m`` and
    ``python -m`` take it), else None; "" when the name is missing."""
    text = text.strip()
    if text != "-m" and not text.startswith(("-m ", "-m\t")):
        return None
    return text[2:].strip()


def check_choice(script: str, cwd: str) -> str | None:
    """Why this script (or ``-m`` module) cannot be watched from this folder (one
    sentence), or None."""
    if not script.strip():
        return "choose the training script to watch"
    if cwd and not Path(cwd).expanduser().is_dir():
        return f"the working folder {cwd} does not exist"
    module = module_of(script)
    if module is not None:
        return module_problem(module)
    problem = script_problem(script)
    if problem is not None:
        return problem
    if Path(script).suffix.lower() not in SUFFIXES:
        return f"{Path(script).name} is not a Python script (.py)"
    return None


def python_text(python: str | None) -> str:
    """Which interpreter will train, in words."""
    if python:
        return python
    if launcher.is_frozen():
        return "not chosen yet: found at Start, or Run → Choose Python…"
    return f"gpuwatch's own ({launcher.default_python()})"


class ScriptDialog(QDialog):
    """The script, its arguments, folder and environment; ``spec`` once accepted."""

    def __init__(
        self,
        settings: Settings,
        python: Callable[[], str | None],
        parent: QWidget | None = None,
        *,
        script: str | None = None,
        choose_python: Callable[[], object] | None = None,
    ) -> None:
        """``python()`` is the window's training interpreter, read again whenever the dialog
        becomes active (Choose… opens the picker, whose choice the window keeps)."""
        super().__init__(parent)
        self.setWindowTitle("Watch a training script")
        self.settings = settings
        self._python = python
        #: What to run, once accepted.
        self.spec: LaunchSpec | None = None
        self._default_cwd = ""
        layout = QVBoxLayout(self)
        form = QFormLayout()
        layout.addLayout(form)

        self.recent = QComboBox()
        self.recent.setToolTip("Scripts watched from this window before, newest first")
        present, gone = settings.present_scripts()
        self.recent_entries = present
        self.recent.addItem("—" if present else "(none yet)")
        for entry in present:
            self.recent.addItem(_describe(entry))
        self.recent.setEnabled(bool(present))
        self.recent.activated.connect(self._use_recent_index)
        form.addRow("Recent scripts", self.recent)
        self.recent_note = QLabel()
        self.recent_note.setWordWrap(True)
        palette.set_style(self.recent_note, "color: $note_text;")
        gone_names = ", ".join(_gone_name(e) for e in gone)
        self.recent_note.setText(
            f"No longer there, dropped from the list: {gone_names}" if gone else ""
        )
        self.recent_note.setVisible(bool(gone))
        form.addRow("", self.recent_note)

        self.script = QLineEdit()
        self.script.setPlaceholderText("train.py, or -m package.train")
        self.script.setToolTip(
            "The script to run, or -m and a module to run as python -m runs it (from the "
            "working folder)"
        )
        self.script.textEdited.connect(self._script_edited)
        form.addRow("Script", _with_button(self.script, "Browse…", self._browse_script))
        self.args = QLineEdit()
        self.args.setPlaceholderText("--epochs 3 --batch-size 64")
        self.args.setToolTip("The script's arguments, split as a shell would (quotes keep spaces)")
        form.addRow("Arguments", self.args)
        self.cwd = QLineEdit()
        self.cwd.setToolTip(
            "The folder the script runs in (default: the script's folder; for -m, the folder "
            "gpuwatch was started in)"
        )
        form.addRow("Working folder", _with_button(self.cwd, "Browse…", self._browse_cwd))
        self.python = QLabel(python_text(python()))
        self.python.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.python.setWordWrap(True)
        python_row: QWidget = self.python
        if choose_python is not None:
            python_row = _with_button(self.python, "Choose…", choose_python)
        form.addRow("Python", python_row)
        self.env = QPlainTextEdit()
        self.env.setPlaceholderText("KEY=VALUE, one a line, e.g. OMP_NUM_THREADS=4")
        self.env.setToolTip("Added to your environment for this script only")
        self.env.setFixedHeight(72)
        form.addRow("Environment", self.env)

        self.error = QLabel()
        self.error.setWordWrap(True)
        self.error.setTextFormat(Qt.TextFormat.PlainText)
        palette.set_style(self.error, palette.text_style(Role.ERROR_TEXT, "font-weight: 600;"))
        self.error.hide()
        layout.addWidget(self.error)
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
        )
        self.watch_button = buttons.button(QDialogButtonBox.StandardButton.Ok)
        self.watch_button.setText("Watch")
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)
        self.resize(620, self.sizeHint().height())
        if script:
            self.set_script(script)
        elif present:
            self.use_recent(present[0])

    # ---- Fields ------------------------------------------------------------------------

    def event(self, event: QEvent) -> bool:
        if event.type() == QEvent.Type.WindowActivate:
            self.python.setText(python_text(self._python()))
        return super().event(event)

    def set_script(self, path: str) -> None:
        """Choose ``path``; the folder follows it unless the user typed one."""
        self.script.setText(path)
        self._script_edited(path)

    def _script_edited(self, text: str) -> None:
        if module_of(text) is not None:
            folder = os.getcwd()  # where python -m would run it from a terminal here
        else:
            folder = str(Path(text).expanduser().parent) if text.strip() else ""
        if self.cwd.text() in ("", self._default_cwd):
            self.cwd.setText(folder)
        self._default_cwd = folder

    def use_recent(self, entry: RecentScript) -> None:
        """Fill every field as ``entry`` ran."""
        self.script.setText(f"-m {entry.module}" if entry.module else entry.script)
        self.args.setText(shlex.join(entry.args))
        default = os.getcwd() if entry.module else str(Path(entry.script).parent)
        self.cwd.setText(entry.cwd or default)
        self._default_cwd = default
        self.env.setPlainText(format_env(entry.env))

    def _use_recent_index(self, index: int) -> None:
        if 1 <= index <= len(self.recent_entries):
            self.use_recent(self.recent_entries[index - 1])

    def _browse_script(self) -> None:
        start = self.script.text() or self.cwd.text() or os.getcwd()
        path, _ = QFileDialog.getOpenFileName(self, "Training script", start, SCRIPT_FILTER)
        if path:
            self.set_script(path)

    def _browse_cwd(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Working folder", self.cwd.text())
        if folder:
            self.cwd.setText(folder)

    # ---- Result ------------------------------------------------------------------------

    def choice(self) -> RecentScript:
        """The fields as one value; ``InputError`` names the first one that cannot be used."""
        script, cwd = self.script.text().strip(), self.cwd.text().strip()
        problem = check_choice(script, cwd)
        if problem is not None:
            raise InputError(problem)
        module = module_of(script)
        if module is not None:
            folder = str(Path(cwd).expanduser().resolve()) if cwd else os.getcwd()
            return RecentScript(
                "", parse_args(self.args.text()), folder, parse_env(self.env.toPlainText()), module
            )
        path = Path(script).expanduser().resolve()
        folder = str(Path(cwd).expanduser().resolve()) if cwd else str(path.parent)
        return RecentScript(
            str(path), parse_args(self.args.text()), folder, parse_env(self.env.toPlainText())
        )

    def accept(self) -> None:
        """Watch: the run's spec, or one message and nothing started."""
        try:
            chosen = self.choice()
        except InputError as exc:
            self.error.setText(str(exc))
            self.error.show()
            return
        self.error.hide()
        self.settings.remember_script(chosen)
        self.spec = spec_of(chosen)
        super().accept()


def spec_of(entry: RecentScript) -> LaunchSpec:
    """What Start runs for ``entry`` (the device and the Python are filled in at Start)."""
    return LaunchSpec(
        script=entry.script or None,
        module=entry.module,
        script_args=entry.args,
        cwd=entry.cwd,
        env=entry.env,
    )


def _describe(entry: RecentScript) -> str:
    args = f" {shlex.join(entry.args)}" if entry.args else ""
    if entry.module:
        return f"-m {entry.module}{args} — {entry.cwd or os.getcwd()}"
    return f"{Path(entry.script).name}{args} — {Path(entry.script).parent}"


def _gone_name(entry: RecentScript) -> str:
    return f"-m {entry.module} (in {entry.cwd})" if entry.module else entry.script


def _with_button(field: QWidget, text: str, clicked: Callable[[], object]) -> QWidget:
    row = QWidget()
    layout = QHBoxLayout(row)
    layout.setContentsMargins(0, 0, 0, 0)
    layout.addWidget(field, 1)
    button = QPushButton(text)
    button.clicked.connect(lambda _=False: clicked())
    layout.addWidget(button)
    return row


def dropped_script(urls: list[QUrl]) -> str | None:
    """The one local ``.py`` file among dropped ``urls``, if that is what they are."""
    if len(urls) != 1 or not urls[0].isLocalFile():
        return None
    path = urls[0].toLocalFile()
    return path if Path(path).suffix.lower() in SUFFIXES else None


class ScriptWatch(QObject):
    """The window's side: File → "Watch a training script…", a ``.py`` dropped on the
    window, and Run → Restart. ``watch(spec)`` makes the window run the script (stopping a
    run in progress first); ``restart()`` runs what ran last again."""

    def __init__(
        self,
        window: QWidget,
        settings: Settings,
        python: Callable[[], str | None],
        *,
        watch: Callable[[LaunchSpec], None],
        restart: Callable[[], None],
        choose_python: Callable[[], object] | None = None,
    ) -> None:
        super().__init__(window)
        self._window = window
        self._settings = settings
        self._python = python
        self._watch = watch
        self._choose_python = choose_python
        self.dialog: ScriptDialog | None = None
        #: File → Watch a training script…
        self.action = QAction("Watch a training script…", self)
        self.action.setToolTip("Run your own training script in this window")
        self.action.triggered.connect(lambda _=False: self.open_dialog())
        #: Run → Restart
        self.restart_action = QAction("Restart", self)
        self.restart_action.setToolTip(
            "Run the same script or workload again, with the same settings (a run in "
            "progress is stopped first)"
        )
        self.restart_action.triggered.connect(lambda _=False: restart())
        window.setAcceptDrops(True)
        window.installEventFilter(self)

    def open_dialog(self, script: str | None = None) -> ScriptDialog:
        """The dialog, non-blocking (the run and the redraw go on)."""
        dialog = self.dialog = ScriptDialog(
            self._settings,
            self._python,
            self._window,
            script=script,
            choose_python=self._choose_python,
        )
        dialog.accepted.connect(lambda: self._watch(dialog.spec) if dialog.spec else None)
        dialog.open()
        return dialog

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        """A ``.py`` file dragged over the window is accepted; dropped, it opens the dialog."""
        kind = event.type()
        dragged = (QEvent.Type.DragEnter, QEvent.Type.DragMove, QEvent.Type.Drop)
        if kind not in dragged or not isinstance(event, QDropEvent):  # drag events are drops
            return super().eventFilter(watched, event)
        script = dropped_script(event.mimeData().urls())
        if script is None or not self.action.isEnabled():
            return super().eventFilter(watched, event)
        event.acceptProposedAction()
        if kind == QEvent.Type.Drop:
            self.open_dialog(script)
        return True
