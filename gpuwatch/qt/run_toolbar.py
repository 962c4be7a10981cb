"""The run toolbar: what to run (a workload, or the script of ``gpuwatch run``) and where.

The Run menu mirrors the two combo boxes (``combo_menu``), so a first-time user who looks in
the menus finds them too.
"""

from __future__ import annotations

import contextlib
import html
import shlex
from collections.abc import Callable

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QComboBox, QLabel, QMainWindow, QMenu, QToolBar, QWidget

from gpuwatch.core.run.session import LaunchSpec
from gpuwatch.protocol import WORKLOADS

WORKLOAD_TIP = (
    "The built-in training workload to run: vision (JPEG decode + augmentation into a "
    "small ResNet; input-bound when naive), mlp (small feed-forward net on 28×28 "
    "digits; launch- and sync-bound on a GPU), gpt (small decoder-only transformer on "
    "random tokens). Applies at the next Start."
)
DEVICE_TIP = "Where the runner trains: auto picks CUDA when torch sees a GPU, else the CPU."


def device_entries() -> list[tuple[str, str]]:
    """Device choices: auto, cpu, and one per GPU NVML lists (none without NVML)."""
    entries = [("auto", "auto"), ("cpu", "cpu")]
    with contextlib.suppress(Exception):  # no NVML, no driver, or an older core module
        from gpuwatch.core.run import nvml

        for dev in nvml.list_devices():
            # NVML numbers GPUs by PCI bus; the runner must use the same order for cuda:N.
            label = f"cuda:{dev.index}" + (f" — {dev.name}" if dev.name else "")
            entries.append((label, f"cuda:{dev.index}"))
    return entries


class RunToolbar(QToolBar):
    """Workload (or script) and device; the window adds its run actions after them."""

    #: The user picked a workload (in the combo box or the Run menu), even the current one:
    #: a window watching a script goes back to the built-in workload.
    workload_picked = Signal(str)

    def __init__(
        self, window: QMainWindow, workload: str, device: str, script: LaunchSpec | None
    ) -> None:
        super().__init__("Run")
        self.setObjectName("run")
        self.setMovable(False)
        self.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        window.addToolBar(self)
        self.workload_combo = QComboBox()
        self.workload_combo.addItems(WORKLOADS)
        if workload in WORKLOADS:
            self.workload_combo.setCurrentText(workload)
        self.workload_combo.setToolTip(WORKLOAD_TIP)
        self.workload_combo.activated.connect(
            lambda i: self.workload_picked.emit(self.workload_combo.itemText(i))
        )
        #: Script mode: the script takes the workload's place (the combo stays unshown).
        self.script_label: QLabel | None = None
        self._script_name = QLabel()
        self._script_widgets = (
            self.addWidget(QLabel(" Script ")),
            self.addWidget(self._script_name),
        )
        self._workload_widgets = (
            self.addWidget(QLabel(" Workload ")),
            self.addWidget(self.workload_combo),
        )
        self.show_script(script)
        self.addWidget(QLabel("  Device "))
        self.device_combo = QComboBox()
        for label, value in device_entries():
            self.device_combo.addItem(label, value)
        index = self.device_combo.findData(device)
        if index < 0:
            self.device_combo.addItem(device, device)
            index = self.device_combo.count() - 1
        self.device_combo.setCurrentIndex(index)
        self.device_combo.setToolTip(DEVICE_TIP)
        self.addWidget(self.device_combo)
        self.addSeparator()

    def show_script(self, script: LaunchSpec | None) -> None:
        """Name ``script`` where the workload was (None: the workload combo again)."""
        label = self._script_name
        if script is not None:
            label.setText(f"<b>{html.escape(script.name)}</b>")
            args = shlex.join(script.script_args)
            what = f"-m {script.module}" if script.module else script.script
            label.setToolTip(
                f"{what} {args}".rstrip() + f"\nrun from {script.cwd}" * bool(script.cwd)
            )
        self.script_label = label if script is not None else None
        for action in self._script_widgets:
            action.setVisible(script is not None)
        for action in self._workload_widgets:
            action.setVisible(script is None)

    def combo_menus(self, parent: QWidget) -> dict[str, QMenu]:
        """The Run menu's Workload (not in script mode) and Device submenus."""
        menus = {"device": combo_menu("Device", self.device_combo, parent)}
        if self.script_label is None:
            menus["workload"] = combo_menu(
                "Workload",
                self.workload_combo,
                parent,
                lambda i: self.workload_picked.emit(self.workload_combo.itemText(i)),
            )
        return menus


def combo_menu(
    title: str,
    combo: QComboBox,
    parent: QWidget,
    picked: Callable[[int], None] | None = None,
) -> QMenu:
    """A submenu mirroring a toolbar combo box (its choices, the current one checked, enabled
    as the combo is), refreshed each time it opens; ``picked(i)`` after a choice."""
    menu = QMenu(title, parent)
    menu.setToolTipsVisible(True)

    def fill() -> None:
        menu.clear()
        for i in range(combo.count()):
            action = menu.addAction(combo.itemText(i))
            action.setCheckable(True)
            action.setChecked(i == combo.currentIndex())
            action.setEnabled(combo.isEnabled())
            action.setToolTip(combo.toolTip())
            action.triggered.connect(lambda _=False, i=i: pick(i))

    def pick(i: int) -> None:
        combo.setCurrentIndex(i)
        if picked is not None:
            picked(i)

    menu.aboutToShow.connect(fill)
    fill()
    return menu
