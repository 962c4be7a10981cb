"""The keyboard: the keys of the action table, installed on the window and listed in Help.

Ctrl+S is "save a recording": it toggles File → Record. The first press starts recording
(what the window already holds is written too), the second finishes the file and the status
bar names it. That is what Ctrl+S means in a live tool with no document open; a replay is
already a file, so there it does nothing.

The tour's keys are those a presentation clicker sends: Page Down and Page Up for its forward
and back buttons, B or "." for its blank-screen button (PowerPoint's keys: the clicker's vendors
map their buttons to them), here "hold the stage". The arrows move the tour too, unless a view
that uses them (the timeline, a table, an editor) has the focus.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QMainWindow

from gpuwatch.qt.actions import WINDOW_ACTIONS, Action, Row


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


def shortcuts_of(rows: tuple[Row, ...]) -> tuple[Shortcut, ...]:
    """The rows that have keys, in the table's order."""
    return tuple(
        Shortcut(row.shortcut, row.attribute, row.what)
        for row in rows
        if row.shortcut and (isinstance(row, Action) or row.attribute)
    )


#: The tour's keys (``TourController`` makes their actions; enabled only while it tours).
TOUR_SHORTCUTS: tuple[Shortcut, ...] = (
    Shortcut(
        ("PgDown",),
        "tour.next_action",
        "Tour: next stage (the forward button of a presentation clicker)",
    ),
    Shortcut(
        ("PgUp",),
        "tour.back_action",
        "Tour: previous stage (the back button of a presentation clicker)",
    ),
    Shortcut(
        ("B", "."),
        "tour.hold_action",
        "Tour: hold the stage / let it move on by itself (the blank-screen button of a clicker)",
    ),
    Shortcut(
        ("Right",),
        "tour.next_arrow_action",
        "Tour: next stage, unless the timeline, a table or an editor has the focus",
    ),
    Shortcut(
        ("Left",),
        "tour.back_arrow_action",
        "Tour: previous stage, unless the timeline, a table or an editor has the focus",
    ),
)

SHORTCUTS: tuple[Shortcut, ...] = shortcuts_of(WINDOW_ACTIONS) + TOUR_SHORTCUTS


def apply_shortcuts(window: QMainWindow) -> list[str]:
    """Give each of the window's actions its keys and add it to the window, so the keys work
    with the menu bar hidden (presentation mode); returns the table's actions it lacks (e.g.
    ``presentation.action`` in a window built without presentation mode)."""
    missing = []
    for shortcut in SHORTCUTS:
        action: object = window
        for name in shortcut.action.split("."):
            action = getattr(action, name, None)
        if not isinstance(action, QAction):
            missing.append(shortcut.action)
            continue
        action.setShortcuts([QKeySequence(k) for k in shortcut.keys])
        if action not in window.actions():
            window.addAction(action)  # keys work even if the action is in no visible menu
    return missing
