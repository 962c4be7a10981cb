"""The window's GPU banner: one sentence, the fix command with Copy, "Choose Python…", and it
stays until dismissed. Checks are injected (no GPU here); the window's own check runs off
the GUI thread and shows nothing on a machine without an NVIDIA GPU."""

from __future__ import annotations

import threading

from PySide6.QtGui import QAction
from PySide6.QtWidgets import QApplication

from gpuwatch.core.run import gpu_mismatch
from gpuwatch.core.run.gpu_mismatch import GpuMismatch, GpuView
from gpuwatch.core.run.session import Session
from gpuwatch.qt.gpu_banner import GpuBanner
from gpuwatch.qt.interpreter_picker import InterpreterChoice

CPU_BUILD = GpuMismatch(
    "The training Python's torch 2.14.1+cpu is a CPU-only build: the NVIDIA GPU (sm_86) is "
    "not used and training runs on the CPU; install its cu128 build.",
    r"C:\venv\Scripts\python.exe -m pip install --force-reinstall torch torchvision "
    "--index-url https://download.pytorch.org/whl/cu128",
)
NO_KERNELS = GpuMismatch("The training Python's torch has no kernels for sm_35.", None)


def make_banner(qtbot, check=None) -> tuple[GpuBanner, list[bool]]:
    action = QAction("Choose Python…")
    triggered: list[bool] = []
    action.triggered.connect(lambda *_: triggered.append(True))
    banner = GpuBanner(action, check=check)
    banner.action = action  # kept alive with the banner
    qtbot.addWidget(banner)
    return banner, triggered


def test_banner_shows_the_sentence_copies_the_command_and_opens_the_picker(qtbot):
    banner, triggered = make_banner(qtbot)
    assert banner.isHidden()
    banner.show_mismatch(CPU_BUILD)
    assert not banner.isHidden()
    assert banner.sentence.text() == CPU_BUILD.sentence
    assert banner.command.text() == CPU_BUILD.fix_command and banner.command.isReadOnly()
    QApplication.clipboard().clear()
    banner.copy_button.click()
    assert QApplication.clipboard().text() == CPU_BUILD.fix_command
    banner.choose_button.click()
    assert triggered == [True]


def test_banner_stays_until_dismissed_and_a_new_verdict_shows_again(qtbot):
    banner, _ = make_banner(qtbot)
    banner.show_mismatch(CPU_BUILD)
    banner.dismiss_button.click()
    assert banner.isHidden()
    banner.show_mismatch(CPU_BUILD)  # the same verdict again (a re-check): stays dismissed
    assert banner.isHidden()
    banner.show_mismatch(NO_KERNELS)  # another Python, another problem
    assert not banner.isHidden() and banner.sentence.text() == NO_KERNELS.sentence
    assert banner.command.isHidden() and banner.copy_button.isHidden()  # nothing to copy
    banner.show_mismatch(None)  # a Python that can use the GPU
    assert banner.isHidden()


def test_the_check_runs_off_the_gui_thread_and_only_the_newest_counts(qtbot):
    release = threading.Event()
    threads: list[str] = []

    def check(python):
        threads.append(threading.current_thread().name)
        if python == "/slow/python":
            release.wait(10.0)
            return NO_KERNELS
        return CPU_BUILD

    banner, _ = make_banner(qtbot, check)
    banner.check("/slow/python")
    banner.check("/v/bin/python")
    qtbot.waitUntil(lambda: not banner.isHidden(), timeout=10_000)
    assert banner.sentence.text() == CPU_BUILD.sentence
    release.set()  # the older check finishes last: its verdict is not shown
    qtbot.waitUntil(lambda: banner.reported == 2, timeout=10_000)
    assert banner.sentence.text() == CPU_BUILD.sentence
    assert threading.main_thread().name not in threads


def test_the_window_shows_the_banner_and_its_button_opens_the_picker(
    show_window, qtbot, monkeypatch
):
    opened: list[bool] = []
    checked: list[str | None] = []

    def check(python):
        checked.append(python)
        return CPU_BUILD if python != "/good/python" else None

    monkeypatch.setattr(InterpreterChoice, "open_picker", lambda self: opened.append(True))
    monkeypatch.setattr(gpu_mismatch, "check_python", check)
    win = show_window(Session(sample_coarse=False))
    qtbot.waitUntil(win.gpu_banner.isVisible, timeout=10_000)
    assert win.gpu_banner.sentence.text() == CPU_BUILD.sentence
    assert checked == [None]  # the Python a Start would use
    win.gpu_banner.choose_button.click()
    assert opened == [True]
    win.interpreter.choose("/good/python")  # another Python is checked again
    qtbot.waitUntil(lambda: win.gpu_banner.reported == 2, timeout=10_000)
    assert checked == [None, "/good/python"] and win.gpu_banner.isHidden()


def test_no_nvidia_gpu_no_banner_and_no_survey(show_window, qtbot, monkeypatch):
    checked = threading.Event()

    def survey(python, timeout):
        raise AssertionError("surveyed without a GPU")

    def check(python):
        try:
            return gpu_mismatch.check_python(python, gpus=GpuView(), survey=survey)
        finally:
            checked.set()

    monkeypatch.setattr(gpu_mismatch, "check_python", check)
    win = show_window(Session(sample_coarse=False))
    qtbot.waitUntil(lambda: win.gpu_banner.reported == 1, timeout=10_000)
    assert checked.is_set() and win.gpu_banner.isHidden()
