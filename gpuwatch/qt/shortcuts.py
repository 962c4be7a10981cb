"""The keyboard: one table of shortcuts that both installs them and lists them in Help,
plus the view actions only the keyboard (and the View menu) drive: pause the view, zoom
the time axis, quit; and the Run menu's copy of the run toolbar.

Ctrl+S is "save a recording": it toggles File → Record. The first press starts recording
(what the window already holds is written too), the second finishes the file and the status
bar names it. That is what Ctrl+S means in a live tool with no document open; a replay is
already a file, so there it does nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QApplication, QComboBox, QMainWindow, QMenu

#: Visible window lengths Ctrl+= / Ctrl+- step through (seconds).
ZOOM_LEVELS_S = (5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0)
PAUSED_HINT = "view paused (the run goes on): Space resumes"


@dataclass(frozen=True)
class Shortcut:
    """Keys (portable text), the window's QAction (an attribute path), what it does."""

    keys: tuple[str, ...]
    action: str
    what: str

    @property
    def label(self) -> str:
        """The keys as the platform writes them (e.g. ⌘S on macOS)."""
        return " / ".join(
            QKeySequence(k).toString(QKeySequence.SequenceFormat.NativeText) for k in self.keys
        )


SHORTCUTS: tuple[Shortcut, ...] = (
    Shortcut(
        ("Space",),
        "pause_view_action",
        "Pause / resume the view: the plots and figures freeze, the run goes on",
    ),
    Shortcut(
        ("F11",),
        "presentation.action",
        "Presentation mode on / off (full screen; off returns to the window as it was)",
    ),
    Shortcut(("Esc",), "presentation.leave_action", "Leave presentation mode"),
    Shortcut(
        ("Ctrl+S",),
        "record_action",
        "Save a recording: first press starts recording (what is on screen included), "
        "second press finishes the file",
    ),
    Shortcut(
        ("Ctrl+E",),
        "export_perfetto_action",
        "Export the recording as Perfetto JSON (ui.perfetto.dev)",
    ),
    Shortcut(
        ("Ctrl+=", "Ctrl++"),
        "zoom_in_action",
        "Zoom the time axis in (shorter visible window, down to 5 s)",
    ),
    Shortcut(
        ("Ctrl+-",),
        "zoom_out_action",
        "Zoom the time axis out (longer visible window, up to 10 min)",
    ),
    Shortcut(("Ctrl+O",), "open_action", "Open a recording"),
    Shortcut(("Ctrl+Q",), "quit_action", "Quit (stops the run)"),
    Shortcut(("F1",), "help_action", "Help: how to read the views"),
)


def apply_shortcuts(window: Any) -> list[str]:
    """Give each of the window's actions its keys; returns the table's actions it lacks
    (e.g. ``presentation.action`` in a window built without presentation mode)."""
    missing = []
    for shortcut in SHORTCUTS:
        action: Any = window
        for name in shortcut.action.split("."):
            action = getattr(action, name, None)
        if not isinstance(action, QAction):
            missing.append(shortcut.action)
            continue
        action.setShortcuts([QKeySequence(k) for k in shortcut.keys])
        if action not in window.actions():
            window.addAction(action)  # keys work even if the action is in no visible menu
    return missing


def find_menu(window: QMainWindow, title: str) -> QMenu:
    """The menu bar's menu named ``title`` (``&`` ignored), created if absent: two parts of
    the window may add to the same menu without knowing who built it first."""
    plain = title.replace("&", "")
    for action in window.menuBar().actions():
        menu = action.menu()
        if isinstance(menu, QMenu) and action.text().replace("&", "") == plain:
            return menu
    return window.menuBar().addMenu(title)


def build_view_actions(window: Any) -> None:
    """Pause view, zoom in/out (View menu) and Quit (File menu) on ``window``.

    The window needs ``follow_action``, ``view_paused`` and ``window_s`` (the length of the
    visible window while following) and a timeline plot.
    """
    pause = QAction("Pause view", window)
    pause.setCheckable(True)
    pause.setToolTip("Freeze the plots and headline figures; the run goes on (Space)")
    pause.toggled.connect(lambda on: set_view_paused(window, on))
    window.follow_action.toggled.connect(
        lambda on: on and pause.isChecked() and pause.setChecked(False)
    )
    window.pause_view_action = pause
    window.zoom_in_action = QAction("Zoom in (time)", window)
    window.zoom_in_action.triggered.connect(lambda: zoom(window, -1))
    window.zoom_out_action = QAction("Zoom out (time)", window)
    window.zoom_out_action.triggered.connect(lambda: zoom(window, +1))
    view = find_menu(window, "&View")
    view.addActions([pause, window.zoom_in_action, window.zoom_out_action])
    window.quit_action = QAction("Quit", window)
    window.quit_action.triggered.connect(QApplication.closeAllWindows)
    file_menu = find_menu(window, "&File")
    file_menu.addSeparator()
    file_menu.addAction(window.quit_action)


def build_run_menu(window: Any) -> None:
    """Run ▸ Workload, Device, Start/Stop, Follow, Tour, Capture kernels: the run toolbar in a
    menu too, where a first-time user looks for it (above what the menu already holds)."""
    menu = find_menu(window, "&Run")
    first = menu.actions()[0] if menu.actions() else None
    if getattr(window, "script_spec", None) is None:  # a script takes the workload's place
        menu.insertMenu(first, combo_menu("Workload", window.workload_combo, menu))
    menu.insertMenu(first, combo_menu("Device", window.device_combo, menu))
    actions = [window.start_action, window.follow_action, window.tour.action]
    capture = getattr(getattr(window, "kernel_capture", None), "action", None)
    if isinstance(capture, QAction):
        actions.append(capture)
    menu.insertActions(first, actions)  # type: ignore[arg-type]
    menu.insertSeparator(window.start_action)
    if first is not None:
        menu.insertSeparator(first)


def combo_menu(title: str, combo: QComboBox, parent: QMenu) -> QMenu:
    """A submenu mirroring a toolbar combo box (its choices, the current one checked, enabled
    as the combo is), refreshed each time it opens."""
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
            action.triggered.connect(lambda _=False, i=i: combo.setCurrentIndex(i))

    menu.aboutToShow.connect(fill)
    fill()
    return menu


def set_view_paused(window: Any, paused: bool) -> None:
    """Paused: stop following "now" and freeze the headline; resumed: follow again."""
    window.view_paused = paused
    if paused:
        window.follow_action.setChecked(False)
        window.statusBar().showMessage(PAUSED_HINT)
    else:
        window.statusBar().clearMessage()
        window.follow_action.setChecked(True)


def zoom(window: Any, direction: int) -> float:
    """Step the visible window length one level shorter (-1) or longer (+1); returns it.

    While following, the next redraw uses it; otherwise the view keeps its right edge.
    """
    current = window.window_s
    if direction < 0:
        shorter = [s for s in ZOOM_LEVELS_S if s < current - 1e-9]
        new = shorter[-1] if shorter else ZOOM_LEVELS_S[0]
    else:
        longer = [s for s in ZOOM_LEVELS_S if s > current + 1e-9]
        new = longer[0] if longer else ZOOM_LEVELS_S[-1]
    window.window_s = new
    if not window.follow:
        vb = window.timeline.getPlotItem().getViewBox()
        hi = vb.viewRange()[0][1]
        vb.setXRange(hi - new, hi, padding=0)
    window.statusBar().showMessage(f"time axis: {new:g} s visible", 5_000)
    return new
