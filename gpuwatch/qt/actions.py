"""The window's actions as data: id, title, menu, keys, callback (napari declares its
``app_model`` actions the same way: https://napari.org/stable/developers/architecture/app_model.html).

One table says what each menu entry and key does; ``build_actions`` makes the ``QAction``s and
the menu bar from it, and the help's key list (``gpuwatch.qt.shortcuts.SHORTCUTS``) is read
from the same rows, so a key, its menu entry and its description cannot drift apart.
Entries whose ``QAction`` a part of the window owns (presentation mode's F11, the tour, kernel
capture, the interpreter choice) are ``Slot`` rows: the table places them, the part makes them.

A row may carry a rule (``why_not``): a small function of the window that returns None when
the action can run now, or the sentence saying why not. ``ActionEnablement`` disables such an
action with that sentence as its tooltip and status tip, so nothing is offered that would
then be refused; the window re-evaluates the rules when its state changes, never per frame.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from PySide6.QtCore import QObject, QUrl
from PySide6.QtGui import QAction, QDesktopServices, QKeySequence
from PySide6.QtWidgets import QApplication, QMenu, QMenuBar

from gpuwatch.core.files.replay import READ_ONLY, ReplaySession
from gpuwatch.core.run.app_log import log_dir
from gpuwatch.core.run.session import SessionState
from gpuwatch.qt.about_dialog import copy_diagnostics
from gpuwatch.qt.settings import apply_last_knobs
from gpuwatch.qt.view_control import set_view_paused, zoom
from gpuwatch.qt.window_shell import WindowShell

#: The menu bar, left to right (``&`` marks the mnemonic).
MENUS = ("&File", "&View", "&Run", "&Settings", "&Help")

#: Why an action cannot run in this window now (one sentence), or None when it can.
Rule = Callable[[WindowShell], str | None]


@dataclass(frozen=True)
class Action:
    """A window action: ``window.<id>_action`` is its ``QAction``.

    ``menu`` is a path (``"&File/Export"``; empty: keys only); rows of one menu keep the
    table's order and a new ``group`` starts after a separator. A ``checkable`` action calls
    ``toggled(window, checked)`` whenever its state changes (also when code sets it), any
    other calls ``callback(window)`` when triggered.
    """

    id: str
    title: str
    menu: str
    callback: Callable[[WindowShell], None] | None = None
    toggled: Callable[[WindowShell, bool], None] | None = None
    shortcut: tuple[str, ...] = ()
    #: The help's sentence for the keys (required when there are keys).
    what: str = ""
    tip: str = ""
    checked: bool = False
    group: int = 0
    why_not: Rule | None = None

    @property
    def checkable(self) -> bool:
        return self.toggled is not None

    @property
    def attribute(self) -> str:
        """Where the window keeps the ``QAction``."""
        return f"{self.id}_action"


@dataclass(frozen=True)
class Slot:
    """A menu entry (or keys) whose ``QAction`` or submenu a part of the window makes.

    ``attribute`` is its path on the window (``presentation.action``) when it has keys.
    """

    id: str
    menu: str
    shortcut: tuple[str, ...] = ()
    what: str = ""
    attribute: str = ""
    group: int = 0
    why_not: Rule | None = None


Row = Action | Slot


# ---- Rules: None when the action can run now, else why not ---------------------------------


def _is_replay(window: WindowShell) -> bool:
    return isinstance(window.session, ReplaySession)


def _compare_why_not(window: WindowShell) -> str | None:
    if _is_replay(window):
        return None
    return (
        "Compare works in a recording's window: open a recording first "
        "(File → Open recording…), then compare it with another"
    )


def _record_why_not(window: WindowShell) -> str | None:
    return "This window shows a recording: it is saved already" if _is_replay(window) else None


def _export_why_not(window: WindowShell) -> str | None:
    return window.files.nothing_to_export()


def _watch_script_why_not(window: WindowShell) -> str | None:
    if _is_replay(window):
        return "This window shows a recording: watch a script from a live window"
    return None


def _restart_why_not(window: WindowShell) -> str | None:
    session = window.session
    if isinstance(session, ReplaySession):
        return "A recording starts nothing"
    if session.state is SessionState.STOPPING:
        return "Stopping the run: restart once it has ended"
    if session.spec is None:
        return "Nothing was started in this window yet: press Start"
    return None


def _apply_knobs_why_not(window: WindowShell) -> str | None:
    session = window.session
    if isinstance(session, ReplaySession):
        return READ_ONLY
    if window.tour.active:
        return "The tour is driving the knobs: stop it first"
    if session.state is not SessionState.RUNNING:
        return "Start a run first: knobs apply to a running run"
    remembered = window.settings.knobs
    if not remembered:
        return "No knobs remembered from a last session"
    if not {k.get("name") for k in session.knobs} & set(remembered):
        return "This run has none of the remembered knobs"
    return None


def _open_log_folder(window: WindowShell) -> None:
    folder = log_dir()
    folder.mkdir(parents=True, exist_ok=True)
    if not QDesktopServices.openUrl(QUrl.fromLocalFile(str(folder))):
        window.statusBar().showMessage(f"the log folder is {folder}", 30_000)


def _copy_diagnostics(window: WindowShell) -> None:
    copy_diagnostics(window.session.hello)
    window.statusBar().showMessage("diagnostics copied to the clipboard", 10_000)


def _reset_settings(window: WindowShell) -> None:
    window.settings.reset()
    window.statusBar().showMessage("settings reset: the next start uses the defaults", 15_000)


def _zoom_in(window: WindowShell) -> None:
    zoom(window, -1)


def _zoom_out(window: WindowShell) -> None:
    zoom(window, +1)


def _apply_last_knobs(window: WindowShell) -> None:
    apply_last_knobs(window, window.settings)


def _follow(window: WindowShell, on: bool) -> None:
    """Following again redraws at once and ends a paused view."""
    if on:
        window.redraw_now()
        if window.pause_view_action.isChecked():
            window.pause_view_action.setChecked(False)


WINDOW_ACTIONS: tuple[Row, ...] = (
    # ---- File
    Action(
        "open",
        "Open recording…",
        "&File",
        lambda w: w.files.ask_open(),
        shortcut=("Ctrl+O",),
        what="Open a recording",
    ),
    Slot("watch_script", "&File", why_not=_watch_script_why_not),
    Action(
        "compare",
        "Compare with…",
        "&File",
        lambda w: w.files.ask_compare(),
        tip="Show this recording and another side by side",
        why_not=_compare_why_not,
    ),
    Action(
        "record",
        "Record",
        "&File",
        toggled=lambda w, on: w.recording.set_recording(on),
        shortcut=("Ctrl+S",),
        what="Save a recording: first press starts recording (what is on screen included), "
        "second press finishes the file",
        group=1,
        why_not=_record_why_not,
    ),
    Action(
        "export_perfetto",
        "Perfetto JSON…",
        "&File/Export",
        lambda w: w.files.ask_export("perfetto"),
        shortcut=("Ctrl+E",),
        what="Export the recording as Perfetto JSON (ui.perfetto.dev)",
        group=1,
        why_not=_export_why_not,
    ),
    Action(
        "export_csv",
        "CSV…",
        "&File/Export",
        lambda w: w.files.ask_export("csv"),
        group=1,
        why_not=_export_why_not,
    ),
    Action(
        "export_png",
        "PNG of the window…",
        "&File/Export",
        lambda w: w.files.ask_export_png(),
        group=1,
    ),
    Action(
        "quit",
        "Quit",
        "&File",
        lambda w: QApplication.closeAllWindows(),
        shortcut=("Ctrl+Q",),
        what="Quit (stops the run)",
        group=2,
    ),
    # ---- View
    Slot(
        "present",
        "&View",
        shortcut=("F11",),
        what="Presentation mode on / off (full screen; off returns to the window as it was)",
        attribute="presentation.action",
    ),
    Slot(
        "leave_presentation", "", ("Esc",), "Leave presentation mode", "presentation.leave_action"
    ),
    Slot("panels", "&View"),
    Slot("theme", "&View"),
    Action(
        "pause_view",
        "Pause view",
        "&View",
        toggled=set_view_paused,
        shortcut=("Space",),
        what="Pause / resume the view: the plots and figures freeze, the run goes on",
        tip="Freeze the plots and headline figures; the run goes on (Space)",
    ),
    Action(
        "zoom_in",
        "Zoom in (time)",
        "&View",
        _zoom_in,
        shortcut=("Ctrl+=", "Ctrl++"),
        what="Zoom the time axis in (shorter visible window, down to 5 s)",
    ),
    Action(
        "zoom_out",
        "Zoom out (time)",
        "&View",
        _zoom_out,
        shortcut=("Ctrl+-",),
        what="Zoom the time axis out (longer visible window, up to 10 min)",
    ),
    # ---- Run: the run toolbar in a menu too, where a first-time user looks for it
    Slot("workload", "&Run"),
    Slot("device", "&Run"),
    Action("start", "Start", "&Run", lambda w: w.start_or_stop(), group=1),
    Slot("restart", "&Run", group=1, why_not=_restart_why_not),
    Action(
        "follow",
        "Follow",
        "&Run",
        toggled=_follow,
        tip="Keep the last 30 s in view (panning or zooming the plots turns this off).",
        checked=True,
        group=1,
    ),
    Slot("tour", "&Run", group=1),
    Slot("capture_kernels", "&Run", group=1),
    Slot("choose_python", "&Run", group=2),
    # ---- Settings
    Action(
        "apply_knobs",
        "Apply last session's knobs",
        "&Settings",
        _apply_last_knobs,
        tip="The knob values the last window closed with, sent "
        "to the running workload (never applied silently)",
        why_not=_apply_knobs_why_not,
    ),
    Action("reset_settings", "Reset settings", "&Settings", _reset_settings, group=1),
    # ---- Help
    Action(
        "help",
        "Guide: how to read the views",
        "&Help",
        lambda w: w.show_guide(None),
        shortcut=("F1",),
        what="Help: how to read the views",
    ),
    Action("keys", "Keyboard shortcuts", "&Help", lambda w: w.show_guide("keys")),
    Action("about", "About gpuwatch", "&Help", lambda w: w.show_about(), group=1),
    Action("open_logs", "Open log folder", "&Help", _open_log_folder, tip=str(log_dir()), group=1),
    Action("copy_diagnostics", "Copy diagnostics", "&Help", _copy_diagnostics, group=1),
    Slot("nsight", "&Help", group=1),
)


def make_action(row: Action, window: WindowShell, parent: QObject) -> QAction:
    """The ``QAction`` of one row, connected to ``window`` and with its keys."""
    action = QAction(row.title, parent)
    if row.tip:
        action.setToolTip(row.tip)
    if row.shortcut:
        action.setShortcuts([QKeySequence(k) for k in row.shortcut])
    toggled, callback = row.toggled, row.callback
    if toggled is not None:
        action.setCheckable(True)
        action.setChecked(row.checked)
        action.toggled.connect(lambda on: toggled(window, on))
    elif callback is not None:
        action.triggered.connect(lambda _=False: callback(window))
    return action


def build_actions(
    window: WindowShell, parent: QObject, rows: tuple[Row, ...] = WINDOW_ACTIONS
) -> dict[str, QAction]:
    """Every ``Action`` row's ``QAction``, by id."""
    return {row.id: make_action(row, window, parent) for row in rows if isinstance(row, Action)}


class ActionEnablement:
    """Each ruled action enabled, or disabled with its rule's reason as tooltip and status
    tip. ``update`` evaluates the rules (a few attribute reads each) and touches only the
    actions whose answer changed; the window calls it when its state changes."""

    def __init__(
        self,
        window: WindowShell,
        entries: Mapping[str, QAction | QMenu],
        rows: tuple[Row, ...] = WINDOW_ACTIONS,
    ) -> None:
        self.window = window
        self._ruled: list[tuple[str, Rule, QAction]] = []
        for row in rows:
            entry = entries.get(row.id)
            if row.why_not is not None and isinstance(entry, QAction):
                self._ruled.append((row.id, row.why_not, entry))
        self._reasons: dict[str, str | None] = {}
        #: Tooltip and status tip of a disabled action, given back when it is enabled again.
        self._tips: dict[str, tuple[str, str]] = {}

    def update(self) -> None:
        for ident, rule, action in self._ruled:
            reason = rule(self.window)
            if ident in self._reasons and self._reasons[ident] == reason:
                continue
            self._reasons[ident] = reason
            if reason is None:
                tip, status = self._tips.pop(ident, (action.toolTip(), action.statusTip()))
                action.setEnabled(True)
                action.setToolTip(tip)
                action.setStatusTip(status)
            else:
                self._tips.setdefault(ident, (action.toolTip(), action.statusTip()))
                action.setEnabled(False)
                action.setToolTip(reason)
                action.setStatusTip(reason)

    def reason(self, ident: str) -> str | None:
        """Why the action ``ident`` is disabled (None: it is enabled, or has no rule)."""
        return self._reasons.get(ident)


def build_menus(
    bar: QMenuBar,
    entries: Mapping[str, QAction | QMenu],
    rows: tuple[Row, ...] = WINDOW_ACTIONS,
) -> dict[str, QMenu]:
    """The menu bar from the table; ``entries`` holds each row's action or submenu by id
    (a row without one, e.g. the workload in script mode, is left out). Returns the menus
    by path."""
    menus: dict[str, QMenu] = {title: bar.addMenu(title) for title in MENUS}
    for menu in menus.values():  # a disabled entry says why when hovered
        menu.setToolTipsVisible(True)
    groups: dict[str, int] = {}
    for row in rows:
        entry = entries.get(row.id)
        if not row.menu or entry is None:
            continue
        top, _, sub = row.menu.partition("/")
        menu = menus[top]
        if top in groups and groups[top] != row.group:
            menu.addSeparator()
        groups[top] = row.group
        if sub:
            if row.menu not in menus:
                menus[row.menu] = menu.addMenu(sub)
                menus[row.menu].setToolTipsVisible(True)
            menu = menus[row.menu]
        if isinstance(entry, QMenu):
            menu.addMenu(entry)
        else:
            menu.addAction(entry)
    return menus
