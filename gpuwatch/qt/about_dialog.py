"""About gpuwatch: the versions a bug report needs, and a button that copies them.

The runner's torch/CUDA come from the current session's ``hello`` (the training interpreter
may be another Python than the GUI's), so they read "no run yet" until a run has started.
"""

from __future__ import annotations

import html
import platform
import sys

import pyqtgraph
import PySide6
from PySide6.QtCore import Qt, qVersion
from PySide6.QtWidgets import (
    QApplication,
    QDialog,
    QDialogButtonBox,
    QLabel,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from gpuwatch import __version__
from gpuwatch.core.model.messages import Hello
from gpuwatch.core.run.app_log import active_log_file, log_dir

NO_RUN = "no run yet"


def nvml_driver() -> str:
    """The NVIDIA driver version NVML reports, or "n/a — <reason>"."""
    try:
        from gpuwatch.core.run import nvml

        version = nvml.driver_version()
        if version is not nvml.NA and version:
            return str(version)
        reason = nvml.unavailable_reason()
    except Exception as exc:  # NVML is optional: any failure is a reason, never a crash
        reason = f"{type(exc).__name__}: {exc}"
    return f"n/a — {reason}" if reason else "n/a"


def version_rows(hello: Hello | None) -> list[tuple[str, str]]:
    """(name, version) rows: this GUI process, then the runner of the current session."""
    rows = [
        ("gpuwatch", __version__),
        ("Python", f"{platform.python_version()} ({sys.executable})"),
        ("Qt", qVersion()),
        ("PySide6", PySide6.__version__),
        ("pyqtgraph", pyqtgraph.__version__),
        ("OS", platform.platform()),
        ("NVML driver", nvml_driver()),
    ]
    if not hello:
        rows += [("runner torch", NO_RUN), ("runner CUDA", NO_RUN)]
    else:
        versions, device = hello.versions, hello.device
        rows += [
            ("runner Python", str(versions.get("python") or "unknown")),
            ("runner torch", str(versions.get("torch") or "unknown")),
            ("runner CUDA", str(versions.get("cuda") or "none (CPU build)")),
            ("runner device", device.name or device.kind or "unknown"),
        ]
    log = active_log_file()
    rows.append(("log", str(log) if log else f"{log_dir()} (not written yet)"))
    return rows


def diagnostics_text(hello: Hello | None) -> str:
    """Plain text for a bug report: one ``name: version`` line per row."""
    rows = version_rows(hello)
    width = max(len(name) for name, _ in rows)
    return (
        "gpuwatch diagnostics\n"
        + "\n".join(f"{name:<{width}}  {value}" for name, value in rows)
        + "\n"
    )


def copy_diagnostics(hello: Hello | None) -> str:
    """Put the diagnostics on the clipboard; returns the text."""
    text = diagnostics_text(hello)
    QApplication.clipboard().setText(text)
    return text


class AboutDialog(QDialog):
    """Versions in a table-like label, "Copy diagnostics" and Close."""

    def __init__(self, hello: Hello | None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("About gpuwatch")
        self.hello = hello
        layout = QVBoxLayout(self)
        title = QLabel(
            f"<h2>gpuwatch {__version__}</h2>"
            "<p>See why a PyTorch training loop is slow while it runs.</p>"
        )
        layout.addWidget(title)
        self.versions = QLabel(_rows_html(version_rows(hello)))
        self.versions.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.versions)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        self.copy_button = QPushButton("Copy diagnostics")
        self.copy_button.setToolTip("Copy these versions as plain text, for a bug report")
        buttons.addButton(self.copy_button, QDialogButtonBox.ButtonRole.ActionRole)
        self.copy_button.clicked.connect(self._copy)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)
        self.status = QLabel()
        layout.addWidget(self.status)

    def _copy(self) -> None:
        copy_diagnostics(self.hello)
        self.status.setText("Copied to the clipboard.")


def _rows_html(rows: list[tuple[str, str]]) -> str:
    cells = "".join(
        f"<tr><td><b>{html.escape(n)}</b>&nbsp;&nbsp;</td><td>{html.escape(v)}</td></tr>"
        for n, v in rows
    )
    return f"<table>{cells}</table>"
