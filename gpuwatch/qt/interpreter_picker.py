"""Run → Choose Python…: which interpreter trains, with a green/amber/red verdict for each.

The installed (frozen) app has no torch, so it must be told, or find, a Python that has:
the dialog lists what ``gpuwatch.core.run.interpreters`` discovers, surveys them in the
background (a first ``import torch`` takes seconds) and shows each verdict with the exact
command that fixes it; "Browse…" adds any file. The choice is remembered in the settings.
``InterpreterChoice`` is the window's side: the menu entry, and at a frozen app's first
Start the automatic pick, or a banner that says how to get torch when there is none.
"""

from __future__ import annotations

import contextlib
import html
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QAction, QColor, QIcon, QPainter, QPixmap
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QHeaderView,
    QLabel,
    QPushButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from gpuwatch.core.run import interpreters, launcher
from gpuwatch.core.run.interpreters import BAD, OK, WARN, Candidate, Surveyed
from gpuwatch.qt import palette
from gpuwatch.qt.theme_tokens import LIGHT, Role

if TYPE_CHECKING:
    from gpuwatch.qt.window_shell import WindowShell

CHECKING = "checking"
BADGE_COLORS = {
    OK: LIGHT[Role.BADGE_OK],
    WARN: LIGHT[Role.BADGE_WARN],
    BAD: LIGHT[Role.BADGE_BAD],
    CHECKING: LIGHT[Role.BADGE_CHECKING],
}
BADGE_WORDS = {OK: "ready", WARN: "usable", BAD: "cannot train", CHECKING: "checking…"}
PATH_ROLE = Qt.ItemDataRole.UserRole
LEVEL_ROLE = Qt.ItemDataRole.UserRole + 1


def badge(level: str) -> QIcon:
    """A filled circle in the verdict's colour."""
    pixmap = QPixmap(14, 14)
    pixmap.fill(Qt.GlobalColor.transparent)
    painter = QPainter(pixmap)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.setBrush(QColor(BADGE_COLORS[level]))
    painter.setPen(Qt.PenStyle.NoPen)
    painter.drawEllipse(1, 1, 12, 12)
    painter.end()
    return QIcon(pixmap)


class SurveyQueue(QObject):
    """Surveys run in worker threads; each result arrives as ``sig_surveyed`` in this object's
    (the GUI's) thread: Qt queues a signal emitted from another thread, so data crosses
    threads, never widgets, and nothing polls."""

    #: One candidate checked: a ``gpuwatch.core.run.interpreters.Surveyed``.
    sig_surveyed = Signal(object)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="gpuwatch-survey")
        self._gpus: list[tuple[int, int]] | None = None

    def submit(self, candidate: Candidate) -> None:
        future: Future = self._pool.submit(self._check, candidate)
        future.add_done_callback(self._deliver)

    def _deliver(self, future: Future) -> None:
        if future.cancelled():
            return
        # RuntimeError: the queue was deleted (its dialog closed) while this survey ran.
        with contextlib.suppress(RuntimeError):
            self.sig_surveyed.emit(future.result())

    def _check(self, candidate: Candidate) -> Surveyed:
        try:
            if self._gpus is None:
                self._gpus = interpreters.gpu_capabilities()
            return interpreters.check(candidate, self._gpus)
        except Exception as exc:  # a row must never stay "checking…" forever
            report = {"error": f"checking {candidate.path} failed: {exc}"}
            return Surveyed(candidate, report, interpreters.judge(report, candidate.path))

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


class InterpreterPicker(QDialog):
    """The list of candidate interpreters, their verdicts, Browse… and "Use this Python"."""

    def __init__(self, current: str | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Choose the Python that runs training")
        self.resize(860, 420)
        self.current = current
        self.chosen: str | None = None
        self.results: dict[str, Surveyed] = {}
        layout = QVBoxLayout(self)
        intro = QLabel(
            "gpuwatch trains in a Python that has torch. Pick one with a green "
            "badge; the others say what they lack and how to fix it."
        )
        intro.setWordWrap(True)
        layout.addWidget(intro)
        self.tree = QTreeWidget()
        self.tree.setHeaderLabels(["Verdict", "Python", "Found as"])
        self.tree.setRootIsDecorated(False)
        self.tree.header().setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        self.tree.currentItemChanged.connect(lambda *_: self._show_details())
        self.tree.itemDoubleClicked.connect(lambda *_: self._accept_if_usable())
        layout.addWidget(self.tree, 1)
        self.details = QLabel()
        self.details.setWordWrap(True)
        self.details.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.details.setMinimumHeight(60)
        layout.addWidget(self.details)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.use_button = buttons.addButton(
            "Use this Python", QDialogButtonBox.ButtonRole.AcceptRole
        )
        self.browse_button = QPushButton("Browse…")
        self.refresh_button = QPushButton("Search again")
        buttons.addButton(self.browse_button, QDialogButtonBox.ButtonRole.ActionRole)
        buttons.addButton(self.refresh_button, QDialogButtonBox.ButtonRole.ActionRole)
        self.use_button.clicked.connect(self._accept_if_usable)
        buttons.rejected.connect(self.reject)
        self.browse_button.clicked.connect(self._browse)
        self.refresh_button.clicked.connect(self.search)
        layout.addWidget(buttons)
        self.surveys = SurveyQueue(self)
        self.surveys.sig_surveyed.connect(self._collect)
        self.finished.connect(lambda _: self.surveys.close())
        self.search()

    # ---- Rows -----------------------------------------------------------------------

    def search(self) -> None:
        """(Re)discover candidates and survey each; the current choice is listed first."""
        extra = [Candidate(self.current, "current choice")] if self.current else []
        for candidate in interpreters.discover(extra=extra):
            self.add_candidate(candidate)
        if self.tree.currentItem() is None and self.tree.topLevelItemCount():
            self.tree.setCurrentItem(self.tree.topLevelItem(0))

    def add_path(self, path: str) -> None:
        """A file the user picked: listed (first survey wins over a duplicate) and selected."""
        self.add_candidate(Candidate(path, "chosen with Browse…"))
        self.tree.setCurrentItem(self._item(path))

    def add_candidate(self, candidate: Candidate) -> None:
        if self._item(candidate.path) is not None:
            return
        item = QTreeWidgetItem(["", candidate.path, candidate.origin])
        item.setData(0, PATH_ROLE, candidate.path)
        self._set_level(item, CHECKING)
        self.tree.addTopLevelItem(item)
        self.surveys.submit(candidate)

    def _item(self, path: str) -> QTreeWidgetItem | None:
        for i in range(self.tree.topLevelItemCount()):
            item = self.tree.topLevelItem(i)
            if item.data(0, PATH_ROLE) == path:
                return item
        return None

    def _set_level(self, item: QTreeWidgetItem, level: str) -> None:
        item.setData(0, LEVEL_ROLE, level)
        item.setIcon(0, badge(level))
        item.setText(0, BADGE_WORDS[level])

    def level_of(self, path: str) -> str | None:
        item = self._item(path)
        return None if item is None else item.data(0, LEVEL_ROLE)

    def pending(self) -> int:
        return sum(
            self.tree.topLevelItem(i).data(0, LEVEL_ROLE) == CHECKING
            for i in range(self.tree.topLevelItemCount())
        )

    def _collect(self, surveyed: Surveyed) -> None:
        path = surveyed.candidate.path
        self.results[path] = surveyed
        item = self._item(path)
        if item is not None:
            self._set_level(item, surveyed.verdict.level)
            item.setToolTip(1, surveyed.verdict.summary)
        self._show_details()

    # ---- Selection ------------------------------------------------------------------

    def selected_path(self) -> str | None:
        item = self.tree.currentItem()
        return None if item is None else item.data(0, PATH_ROLE)

    def _show_details(self) -> None:
        path = self.selected_path()
        surveyed = self.results.get(path or "")
        if path is None:
            text = "No Python found yet: use Browse… to pick one."
        elif surveyed is None:
            text = f"Checking {html.escape(path)}… (importing torch can take a few seconds)"
        else:
            verdict = surveyed.verdict
            color = BADGE_COLORS[verdict.level]
            text = (
                f"<b style='color:{color}'>{html.escape(BADGE_WORDS[verdict.level])}</b>"
                f": {html.escape(verdict.summary)}"
            )
            if verdict.fix:
                text += f"<br><b>Fix:</b> {html.escape(verdict.fix)}"
        if self.details.text() != text:
            self.details.setText(text)
        usable = surveyed is not None and surveyed.verdict.usable
        self.use_button.setEnabled(usable)
        self.use_button.setToolTip(
            "" if usable else "Pick an interpreter whose check is green or amber"
        )

    def _accept_if_usable(self) -> None:
        path = self.selected_path()
        surveyed = self.results.get(path or "")
        if surveyed is not None and surveyed.verdict.usable:
            self.chosen = path
            self.accept()

    def _browse(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Choose a Python interpreter")
        if path:
            self.add_path(path)


class InterpreterChoice(QObject):
    """The window's training interpreter: Run → Choose Python…, and for the frozen app the
    automatic pick at the first Start (or a banner saying how to get torch)."""

    sig_chosen = Signal(str)

    def __init__(self, window: WindowShell, dialog_parent: QWidget) -> None:
        super().__init__(dialog_parent)
        self.window = window
        self._dialog_parent = dialog_parent
        self.dialog: InterpreterPicker | None = None
        self.banner = QLabel()
        palette.set_style(self.banner, palette.BANNER_STYLES["warning"])
        self.banner.setWordWrap(True)
        self.banner.setTextFormat(Qt.TextFormat.RichText)
        self.banner.linkActivated.connect(lambda _: self.open_picker())
        self.banner.hide()
        self._search: SurveyQueue | None = None
        self._waiting: set[str] = set()
        self._found: list[Surveyed] = []
        self._then: Callable[[], None] | None = None
        #: Run → Choose Python…
        self.action = QAction("Choose Python…", self)
        self.action.setToolTip("The interpreter (with torch) that runs the training")
        self.action.triggered.connect(self.open_picker)

    def open_picker(self) -> InterpreterPicker:
        """The dialog, non-blocking (the run and the redraw go on)."""
        self.dialog = InterpreterPicker(self.window.python, self._dialog_parent)
        self.dialog.accepted.connect(lambda: self.choose(self.dialog.chosen))
        self.dialog.open()
        return self.dialog

    def choose(self, path: str | None, how: str = "chosen") -> None:
        if not path:
            return
        self.window.python = path
        self.window.settings.python = path
        self.banner.hide()
        self.window.statusBar().showMessage(
            f"training Python ({how}): {path}; it applies at the next Start", 20_000
        )
        self.sig_chosen.emit(path)

    # ---- Frozen app, nothing chosen yet ----------------------------------------------

    def find_then(self, then: Callable[[], None]) -> None:
        """Look for a usable interpreter in the background; pick the best and call ``then``,
        or show the banner with how to get torch."""
        self._then = then
        if self._search is not None:
            return
        self._search = SurveyQueue(self)
        self._search.sig_surveyed.connect(self._collect)
        self._found = []
        candidates = interpreters.discover()
        self._waiting = {c.path for c in candidates}
        for candidate in candidates:
            self._search.submit(candidate)
        self.window.statusBar().showMessage(
            "looking for a Python with torch to run the training…", 30_000
        )
        if not self._waiting:
            self._finish()

    def searching(self) -> bool:
        return self._search is not None

    def _collect(self, surveyed: Surveyed) -> None:
        if self._search is None:
            return
        self._waiting.discard(surveyed.candidate.path)
        self._found.append(surveyed)
        if not self._waiting:
            self._finish()

    def _finish(self) -> None:
        """Every candidate checked: use the best, or say how to get torch."""
        if self._search is not None:
            self._search.close()
            self._search.deleteLater()
        self._search = None
        best = interpreters.best(self._found)
        if best is None:
            self.show_no_torch()
            return
        self.choose(best.candidate.path, how=f"found automatically, {best.candidate.origin}")
        then, self._then = self._then, None
        if then is not None:
            then()

    def show_no_torch(self) -> None:
        text = html.escape(interpreters.NO_TORCH_HELP).replace(
            "Run → Choose Python….",
            f"<a href='choose' style='color:{LIGHT[Role.BANNER_TEXT]}'>Run → Choose Python…</a>",
        )
        self.banner.setText(text)
        self.banner.show()
        self.window.statusBar().showMessage("no Python with torch found", 30_000)


def needs_choice(python: str | None) -> bool:
    """A frozen app without a chosen interpreter cannot start a run (it has no Python)."""
    return launcher.is_frozen() and not python
