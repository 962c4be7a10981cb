"""The Runs panel: every run the window watched (each start, restart or tour), newest last.

Each run has a label the user can edit (double-click: the scoreboard's group headings and a
recording's default file name follow it), what it ran, where and when, its configurations and
its best samples/s; "Use as baseline" measures every speedup against the selected run's first
row. It reads ``core.run.runs.Runs`` and refreshes only when that changed (its ``revision``)
and no label is being edited.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDockWidget,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QMainWindow,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from gpuwatch.core.run.runs import RowRef, Run, Runs, rate_text
from gpuwatch.qt.docks import dock
from gpuwatch.qt.scoreboard_view import ScoreboardView

HEADERS = ("run", "what", "device", "started", "configurations", "best samples/s")
HINT = "Every start, restart and tour is kept here; double-click a label to rename it."

PinFn = Callable[[RowRef | None], None]


def best_rate(run: Run) -> str:
    """The run's fastest steady row, or "n/a" before any has figures."""
    rates = [row.samples_per_s for row in run.rows if row.samples_per_s is not None]
    return rate_text(max(rates)) if rates else "n/a"


class RunsView(QWidget):
    """The table of runs with an editable label column and "Use as baseline"."""

    def __init__(self, runs: Runs, pin: PinFn) -> None:
        super().__init__()
        self.runs = runs
        self._pin = pin
        self._shown_revision = -1
        self._filling = False
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 2, 4, 2)
        layout.setSpacing(2)
        top = QHBoxLayout()
        self.hint = QLabel(HINT)
        self.hint.setWordWrap(True)
        top.addWidget(self.hint, 1)
        self.baseline_button = QPushButton("Use as baseline")
        self.baseline_button.setToolTip(
            "Measure every speedup in the scoreboard against the selected run's first row"
        )
        self.baseline_button.clicked.connect(self.use_selected_as_baseline)
        top.addWidget(self.baseline_button)
        layout.addLayout(top)
        self.table = QTableWidget(0, len(HEADERS))
        self.table.setHorizontalHeaderLabels(list(HEADERS))
        self.table.verticalHeader().hide()
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(
            QAbstractItemView.EditTrigger.DoubleClicked
            | QAbstractItemView.EditTrigger.EditKeyPressed
        )
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        self.table.itemChanged.connect(self._on_item_changed)
        self.table.itemSelectionChanged.connect(self._sync_button)
        layout.addWidget(self.table, 1)
        self.refresh()

    def refresh(self) -> None:
        """Show the runs if they changed since the last look (call at the scoreboard's rate);
        never while a label is being edited."""
        if self.runs.revision == self._shown_revision:
            return
        if self.table.state() == QAbstractItemView.State.EditingState:
            return
        self._shown_revision = self.runs.revision
        selected = self.selected_run_id()
        runs = self.runs.runs
        self._filling = True
        try:
            self.table.setRowCount(len(runs))
            for i, run in enumerate(runs):
                started = time.strftime("%H:%M:%S", time.localtime(run.started_at))
                cells = (
                    run.label,
                    run.what,
                    run.device or "—",
                    started,
                    str(len(run.rows)),
                    best_rate(run),
                )
                for c, text in enumerate(cells):
                    item = self.table.item(i, c)
                    if item is None:
                        item = QTableWidgetItem()
                        self.table.setItem(i, c, item)
                    if item.text() != text:
                        item.setText(text)
                    flags = Qt.ItemFlag.ItemIsSelectable | Qt.ItemFlag.ItemIsEnabled
                    if c == 0:
                        flags |= Qt.ItemFlag.ItemIsEditable
                        item.setData(Qt.ItemDataRole.UserRole, run.run_id)
                        item.setToolTip(f"{run.describe()}{' (running)' if run.live else ''}")
                    item.setFlags(flags)
                    if c >= 4:
                        item.setTextAlignment(
                            Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
                        )
        finally:
            self._filling = False
        if selected is not None:
            self.select_run(selected)
        self._sync_button()

    def selected_run_id(self) -> int | None:
        rows = self.table.selectionModel().selectedRows()
        if not rows:
            return None
        item = self.table.item(rows[0].row(), 0)
        value = item.data(Qt.ItemDataRole.UserRole) if item is not None else None
        return value if isinstance(value, int) else None

    def select_run(self, run_id: int) -> None:
        for i in range(self.table.rowCount()):
            item = self.table.item(i, 0)
            if item is not None and item.data(Qt.ItemDataRole.UserRole) == run_id:
                self.table.selectRow(i)
                return

    def use_selected_as_baseline(self) -> None:
        """The selected run's first row becomes the baseline of every speedup."""
        run = self.runs.run(self.selected_run_id() or 0)
        if run is not None and run.rows:
            self._pin(RowRef(run.run_id, run.rows[0].config_id))

    def _sync_button(self) -> None:
        run = self.runs.run(self.selected_run_id() or 0)
        self.baseline_button.setEnabled(run is not None and bool(run.rows))

    def _on_item_changed(self, item: QTableWidgetItem) -> None:
        if self._filling or item.column() != 0:
            return
        run_id = item.data(Qt.ItemDataRole.UserRole)
        if isinstance(run_id, int):
            self.runs.rename(run_id, item.text())
            self.refresh()


def add_runs_dock(window: QMainWindow, scoreboard: ScoreboardView) -> RunsView:
    """The Runs panel over the scoreboard's runs, as a tab beside the log (the layout the
    window fits 1280×720 with stays as it is); "Use as baseline" pins in the scoreboard."""
    view = RunsView(scoreboard.runs, scoreboard.pin)
    made = dock(window, "Runs", "runs", view)
    window.addDockWidget(Qt.DockWidgetArea.BottomDockWidgetArea, made)
    log = window.findChild(QDockWidget, "log")
    if log is not None:
        window.tabifyDockWidget(log, made)
        log.raise_()
    return view
