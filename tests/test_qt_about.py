"""About lists the versions; "Copy diagnostics" puts the same plain text on the clipboard."""

from __future__ import annotations

import platform

import pyqtgraph
import PySide6
from PySide6.QtCore import qVersion
from PySide6.QtWidgets import QApplication

from gpuwatch import __version__
from gpuwatch.core.model.messages import Hello
from gpuwatch.core.run.session import Session
from gpuwatch.qt.about_dialog import NO_RUN, AboutDialog, diagnostics_text, nvml_driver

HELLO = Hello.from_message(
    {
        "versions": {"python": "3.12.1", "torch": "2.14.0", "cuda": "12.8"},
        "device": {"kind": "cuda", "name": "Test GPU"},
    }
)


def test_versions_are_listed_and_copied(qtbot):
    dialog = AboutDialog(HELLO)
    qtbot.addWidget(dialog)
    dialog.show()
    shown = dialog.versions.text()
    for expected in (
        __version__,
        platform.python_version(),
        qVersion(),
        PySide6.__version__,
        pyqtgraph.__version__,
        "2.14.0",
        "12.8",
        "Test GPU",
        "NVML driver",
    ):
        assert expected in shown, expected
    QApplication.clipboard().clear()
    dialog.copy_button.click()
    copied = QApplication.clipboard().text()
    assert copied == diagnostics_text(HELLO)
    assert "runner torch" in copied and "2.14.0" in copied and "<" not in copied
    assert dialog.status.text() == "Copied to the clipboard."


def test_before_a_run_the_runner_reads_no_run_yet():
    text = diagnostics_text(None)
    lines = {line.split("  ")[0]: line.rstrip() for line in text.splitlines()}
    assert lines["runner torch"].endswith(NO_RUN) and lines["runner CUDA"].endswith(NO_RUN)
    assert text.count(NO_RUN) == 2


def test_nvml_driver_is_a_version_or_na_with_a_reason():
    text = nvml_driver()
    assert text and (text[0].isdigit() or text.startswith("n/a"))


def test_help_menu_about_and_copy_diagnostics(show_window, qtbot):
    window = show_window(Session(sample_coarse=False))
    window.about_action.trigger()
    qtbot.waitUntil(window.about_dialog.isVisible)
    assert NO_RUN in window.about_dialog.versions.text()
    window.about_dialog.close()
    QApplication.clipboard().clear()
    window.copy_diagnostics_action.trigger()
    assert QApplication.clipboard().text().startswith("gpuwatch diagnostics")
