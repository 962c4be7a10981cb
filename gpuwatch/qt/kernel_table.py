"""The ops of a captured kernel window as a sortable table: calls, total, self and mean time.

The columns are those ``torch.profiler``'s ``key_averages().table()`` prints (name, calls,
total, self, average), so a profiler user reads it at a glance; a header click sorts by that
column (numbers sort as numbers). It shows one window: the latest one, or the one clicked in
the kernel lane. What it computes is ``KernelWindow.op_table``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QPersistentModelIndex, Qt
from PySide6.QtWidgets import QHeaderView, QLabel, QTableView, QVBoxLayout, QWidget

from gpuwatch.core.figures.kernel_window import KernelWindow, OpRow

Index = QModelIndex | QPersistentModelIndex


def _ms(ns: float) -> str:
    return f"{ns / 1e6:,.3f}"


def _us(ns: float) -> str:
    return f"{ns / 1e3:,.1f}"


#: (header, tooltip, sort key, text) per column.
COLUMNS: tuple[tuple[str, str, Callable[[OpRow], Any], Callable[[OpRow], str]], ...] = (
    ("Name", "The op (CPU) or kernel/copy (GPU) name", lambda r: r.name.lower(), lambda r: r.name),
    ("Kind", "kernel, memcpy, memset or cpu_op", lambda r: r.kind, lambda r: r.kind),
    ("Calls", "How many times it ran in the window", lambda r: r.calls, lambda r: f"{r.calls:,}"),
    (
        "Total ms",
        "Summed duration of its calls (nested events included)",
        lambda r: r.total_ns,
        lambda r: _ms(r.total_ns),
    ),
    (
        "Self ms",
        "Total minus the events nested directly inside its calls on the same stream/thread",
        lambda r: r.self_ns,
        lambda r: _ms(r.self_ns),
    ),
    ("Mean µs", "Total ÷ calls", lambda r: r.mean_ns, lambda r: _us(r.mean_ns)),
)
NUMERIC_FROM = 2  # columns from here on are numbers: right-aligned


class OpTableModel(QAbstractTableModel):
    """``OpRow``s as table rows; ``sort`` orders by the column's value, not its text."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[OpRow] = []
        self._sorted: tuple[int, Qt.SortOrder] = (3, Qt.SortOrder.DescendingOrder)

    def set_rows(self, rows: list[OpRow]) -> None:
        self.beginResetModel()
        self.rows = list(rows)
        self._order()
        self.endResetModel()

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008 - Qt's signature
        return 0 if parent.isValid() else len(self.rows)

    def columnCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008 - Qt's signature
        return 0 if parent.isValid() else len(COLUMNS)

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        row, column = self.rows[index.row()], index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            return COLUMNS[column][3](row)
        if role == Qt.ItemDataRole.ToolTipRole and column == 0:
            return row.name
        if role == Qt.ItemDataRole.TextAlignmentRole and column >= NUMERIC_FROM:
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        return None

    def headerData(
        self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole
    ) -> Any:
        if orientation != Qt.Orientation.Horizontal:
            return None
        if role == Qt.ItemDataRole.DisplayRole:
            return COLUMNS[section][0]
        if role == Qt.ItemDataRole.ToolTipRole:
            return COLUMNS[section][1]
        return None

    def sort(self, column: int, order: Qt.SortOrder = Qt.SortOrder.AscendingOrder) -> None:
        self.layoutAboutToBeChanged.emit()
        self._sorted = (column, order)
        self._order()
        self.layoutChanged.emit()

    def _order(self) -> None:
        column, order = self._sorted
        key = COLUMNS[column][2]
        self.rows.sort(key=key, reverse=order == Qt.SortOrder.DescendingOrder)


class KernelTable(QWidget):
    """A caption naming the window shown, over the sortable table of its ops."""

    def __init__(self) -> None:
        super().__init__()
        self.caption = QLabel("No kernel window yet: Capture kernels profiles a few steps.")
        self.caption.setWordWrap(True)
        self.model = OpTableModel()
        self.view = QTableView()
        self.view.setModel(self.model)
        self.view.setSortingEnabled(True)
        self.view.sortByColumn(3, Qt.SortOrder.DescendingOrder)
        self.view.verticalHeader().hide()
        self.view.setSelectionBehavior(QTableView.SelectionBehavior.SelectRows)
        self.view.setAlternatingRowColors(True)
        header = self.view.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for column in range(1, len(COLUMNS)):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addWidget(self.caption)
        layout.addWidget(self.view, 1)
        #: The window whose ops are shown.
        self.kernel_window: KernelWindow | None = None

    def show_window(self, window: KernelWindow | None) -> None:
        """Show ``window``'s ops (None: empty again)."""
        self.kernel_window = window
        if window is None:
            self.model.set_rows([])
            self.caption.setText("No kernel window yet: Capture kernels profiles a few steps.")
            return
        rows = window.op_table()
        self.model.set_rows(rows)
        steps = f"steps {window.steps[0]}–{window.steps[-1]}" if window.steps else "no steps"
        what = "GPU kernels and copies" if window.device == "cuda" else "outermost CPU ops"
        own = sum(r.self_ns for r in rows)
        self.caption.setText(
            f"Kernel window over {steps}: {len(rows)} {what} by name, "
            f"{own / 1e6:,.2f} ms of self time (profiled steps)"
        )
