"""The banner that says, at the top of the window, why the NVIDIA GPU here is not used.

A first torch often cannot use the GPU (a CPU-only build, a CUDA newer than the driver, no
kernels for the GPU's architecture) and the run then quietly trains on the CPU. The check
(``core.run.gpu_mismatch.check_python``: NVML first, then one survey of the training Python)
runs in a daemon thread, so the window's start does not wait for it; its verdict arrives as a
queued signal. The banner stays until dismissed: one sentence, the fix command with Copy, and
"Choose Python…", which triggers the window's own Run → Choose Python… action.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QAction, QGuiApplication
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from gpuwatch.core.run import gpu_mismatch
from gpuwatch.core.run.gpu_mismatch import GpuMismatch
from gpuwatch.qt.palette import set_style
from gpuwatch.qt.theme_tokens import Role

#: The run banner's warning look (``palette.BANNER_STYLES``), for a frame holding controls.
STYLE = (
    f"QFrame#gpu_banner {{ background: ${Role.BANNER_WARNING_BG.value}; border-radius: 3px; }} "
    f"QFrame#gpu_banner QLabel {{ color: ${Role.BANNER_TEXT.value}; font-weight: bold; "
    "background: transparent; }"
)

Check = Callable[[str | None], GpuMismatch | None]


class GpuBanner(QFrame):
    """Hidden until a check finds a mismatch; hidden again when dismissed or when a later
    check (another Python chosen) finds none."""

    #: A finished check: ``(check number, GpuMismatch | None)``, from the worker thread.
    sig_checked = Signal(object)

    def __init__(
        self,
        choose_python: QAction,
        check: Check | None = None,
        parent: QWidget | None = None,
    ) -> None:
        """``choose_python``: the window's Run → Choose Python… action; ``check``: what a
        check runs (default ``gpu_mismatch.check_python``)."""
        super().__init__(parent)
        self.setObjectName("gpu_banner")
        set_style(self, STYLE)
        self._check = check or gpu_mismatch.check_python
        self._checks = 0
        #: How many checks have reported (the newest one's verdict is shown).
        self.reported = 0
        self._dismissed: GpuMismatch | None = None
        self.mismatch: GpuMismatch | None = None
        self.sentence = QLabel()
        self.sentence.setTextFormat(Qt.TextFormat.PlainText)
        self.sentence.setWordWrap(True)
        self.sentence.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.command = QLineEdit()
        self.command.setReadOnly(True)
        self.copy_button = QPushButton("Copy")
        self.copy_button.setToolTip("Copy the command, to paste it into a terminal")
        self.choose_button = QPushButton("Choose Python…")
        self.choose_button.setToolTip(choose_python.toolTip())
        self.dismiss_button = QToolButton()
        self.dismiss_button.setText("✕")
        self.dismiss_button.setToolTip("Dismiss")
        self.copy_button.clicked.connect(self.copy_command)
        self.choose_button.clicked.connect(choose_python.trigger)
        self.dismiss_button.clicked.connect(self.dismiss)
        top = QHBoxLayout()
        top.addWidget(self.sentence, 1)
        top.addWidget(self.dismiss_button, 0, Qt.AlignmentFlag.AlignTop)
        fix = QHBoxLayout()
        fix.addWidget(self.command, 1)
        fix.addWidget(self.copy_button)
        fix.addWidget(self.choose_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(10, 6, 10, 6)
        layout.addLayout(top)
        layout.addLayout(fix)
        self.sig_checked.connect(self._on_checked)
        self.hide()

    # ---- The check, off the GUI thread -------------------------------------------------

    def check(self, python: str | None) -> None:
        """Check ``python`` (None: the one a run would use) in a daemon thread; only the
        newest check's verdict is shown."""
        self._checks += 1
        number = self._checks
        threading.Thread(
            target=self._run, args=(number, python), name="gpuwatch-gpu-check", daemon=True
        ).start()

    def _run(self, number: int, python: str | None) -> None:
        try:
            found = self._check(python)
        except Exception:  # the banner only advises: a failed check shows nothing
            found = None
        # RuntimeError: the window (and this banner) closed while the check ran.
        with contextlib.suppress(RuntimeError):
            self.sig_checked.emit((number, found))

    def _on_checked(self, result: tuple[int, GpuMismatch | None]) -> None:
        number, found = result
        self.reported += 1
        if number == self._checks:
            self.show_mismatch(found)

    # ---- What it shows -------------------------------------------------------------------

    def show_mismatch(self, found: GpuMismatch | None) -> None:
        """Show ``found`` (unless this very verdict was dismissed), or hide for None."""
        self.mismatch = found
        if found is None or found == self._dismissed:
            self.hide()
            return
        self.sentence.setText(found.sentence)
        self.command.setText(found.fix_command or "")
        self.command.setCursorPosition(0)
        self.command.setVisible(found.fix_command is not None)
        self.copy_button.setVisible(found.fix_command is not None)
        self.show()

    def copy_command(self) -> None:
        if self.mismatch is not None and self.mismatch.fix_command:
            QGuiApplication.clipboard().setText(self.mismatch.fix_command)

    def dismiss(self) -> None:
        """Hidden for this verdict; a different one (another Python) shows again."""
        self._dismissed = self.mismatch
        self.hide()
