"""The scoreboard: one row per segment (docs/knobs.md §3), speedup against a pinned baseline.

Refreshed a couple of times a second from ``session.scoreboard()``, not at the redraw rate:
figures that change every frame cannot be read. A figure that could not be measured reads
"n/a", never 0; a row waiting for its steady steps says "measuring (2 of 3 steady steps)".

Every figure is over *this configuration's steady steps* (warm-up and profiled steps left
out), which the busy column's label says, as the headline's busy is over its last seconds.
The coarse column keeps the unit of its source, in its header: NVML's % of the GPU's time,
or the runner's CPU as a % of *all* its cores (the headline's runner CPU is % of one core,
as ``top`` shows it). All cores, because that column is read across rows and machines next
to busy %, both 0–100 %, and feeds the bench JSON's ``coarse_util`` (a 0–1 fraction).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from PySide6.QtCore import (
    QAbstractTableModel,
    QEvent,
    QModelIndex,
    QPersistentModelIndex,
    QPoint,
    Qt,
)
from PySide6.QtGui import QAction, QFont
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QMenu,
    QPushButton,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from gpuwatch.core.figures.segments import SegmentStats
from gpuwatch.core.figures.step_breakdown import idle_summary, summary
from gpuwatch.core.model.messages import Hello, describe_change
from gpuwatch.qt import palette

NA = "n/a"
LIVE_MARK = "▶ "
HINT_NO_RUN = "Start a run to see its segments: one row per knob configuration."

_ROOT = QModelIndex()
_COARSE_SOURCES = {
    "nvml.gpu_util": "NVML GPU utilization (% of the GPU's time)",
    "proc.cpu": "runner CPU, % of all its cores",
}
STEADY_WINDOW = "this configuration, steady steps"


def _pct(value: float | None) -> str:
    return NA if value is None else f"{100 * value:.0f}%"


def _fmt(fmt: str) -> Callable[[float | None], str]:
    return lambda value: NA if value is None else fmt.format(value)


@dataclass(frozen=True)
class Column:
    """One scoreboard column: title, header tooltip, a row's cell text, and whether it is a figure
    (right-aligned, n/a until steady)."""

    title: str
    tip: str
    text: Callable[[SegmentStats], str]
    numeric: bool = True
    #: None until the row has its steady steps: the cell says it is measuring.
    steady_gated: bool = True
    #: The header's text on a device ("cuda", "cpu" or None), when it names a unit.
    header: Callable[[str | None], str] | None = None


def _coarse_header(device_kind: str | None) -> str:
    if device_kind == "cuda":
        return "GPU util % (NVML)"
    if device_kind == "cpu":
        return "CPU % of all cores"
    return "coarse %"


def _stage(row: SegmentStats) -> str:
    return (LIVE_MARK if row.live else "") + (row.label or f"config {row.config_id}")


COLUMNS: tuple[Column, ...] = (
    Column("stage", "The segment's name (▶ = still running)", _stage, numeric=False),
    Column(
        "samples/s",
        "Median of the 1 s window rates over the steady steps (steps of 1 s or "
        "longer: median of their own rates, samples over each step's time)",
        lambda r: _fmt("{:,.0f}")(r.samples_per_s),
    ),
    Column(
        "speedup",
        "samples/s divided by the baseline row's samples/s",
        lambda r: _fmt("{:.2f}×")(r.speedup),
    ),
    Column(
        "step p50 ms",
        "Median step time (start to next start)",
        lambda r: _fmt("{:.1f}")(r.step_ms_p50),
    ),
    Column("step p95 ms", "95th percentile step time", lambda r: _fmt("{:.1f}")(r.step_ms_p95)),
    Column(
        "busy %",
        f"Busy over {STEADY_WINDOW} (warm-up and profiled steps left out): the CUDA "
        "stream-active share (an upper bound) or, on a CPU, the compute share",
        lambda r: _pct(r.busy_share),
    ),
    Column(
        "input wait %",
        "Share of step time spent waiting for the next batch",
        lambda r: _pct(r.input_wait_share),
    ),
    Column(
        "coarse %",
        "Over the steady steps: NVML GPU utilization (% of the GPU's time a kernel ran), "
        "or on a CPU the runner's CPU as a % of all its cores (100 % = every core busy; "
        "the headline's runner CPU is % of one core)",
        lambda r: _pct(r.coarse_util),
        header=_coarse_header,
    ),
    Column(
        "energy J/step",
        "NVML energy per steady step (n/a without a power reading)",
        lambda r: _fmt("{:.2f}")(r.energy_j_per_step),
        steady_gated=False,
    ),
    Column(
        "transition s",
        "From the change to the end of its transition steps (rebuild, "
        "compile, warm-up): left out of every figure",
        lambda r: _fmt("{:.1f}")(r.transition_s),
        steady_gated=False,
    ),
    Column(
        "changed",
        "The knobs this configuration changed",
        lambda r: describe_change(r.changed) if r.changed else "—",
        numeric=False,
    ),
)


FIRST_FIGURE = next(i for i, c in enumerate(COLUMNS) if c.numeric)


def cell_text(row: SegmentStats, column: Column) -> str:
    """The cell: its figure, or while the row waits for steady steps what it is waiting for
    (in full in the first figure column, "measuring" in the others)."""
    text = column.text(row)
    wait = row.waiting
    if wait is None or text != NA or not column.steady_gated:
        return text
    if column is COLUMNS[FIRST_FIGURE]:
        return wait.text()
    return "measuring" if wait.live else NA


class ScoreboardModel(QAbstractTableModel):
    """Rows of ``SegmentStats``; the baseline row is bold, the live one italic."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[SegmentStats] = []
        self.baseline_id: int | None = None
        #: The view's font: bold/italic rows derive from it, so they grow with it
        #: (presentation mode) instead of staying at the application's default size.
        self.base_font = QFont()
        #: "cuda" or "cpu": the breakdown says "kernel" on a GPU, "compute" on a CPU.
        self.device_kind: str | None = None

    def set_rows(self, rows: Sequence[SegmentStats], baseline_id: int | None) -> None:
        rows = list(rows)
        if baseline_id is None and rows:
            baseline_id = rows[0].config_id
        if [r.config_id for r in rows] != [r.config_id for r in self.rows]:
            self.beginResetModel()
            self.rows, self.baseline_id = rows, baseline_id
            self.endResetModel()
        elif rows != self.rows or baseline_id != self.baseline_id:
            self.rows, self.baseline_id = rows, baseline_id
            self.dataChanged.emit(self.index(0, 0), self.index(len(rows) - 1, len(COLUMNS) - 1))

    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = _ROOT) -> int:
        return 0 if parent.isValid() else len(self.rows)

    def columnCount(self, parent: QModelIndex | QPersistentModelIndex = _ROOT) -> int:
        return 0 if parent.isValid() else len(COLUMNS)

    def data(
        self, index: QModelIndex | QPersistentModelIndex, role: int = Qt.ItemDataRole.DisplayRole
    ) -> Any:
        if not index.isValid() or index.row() >= len(self.rows):
            return None
        row, column = self.rows[index.row()], COLUMNS[index.column()]
        if role == Qt.ItemDataRole.DisplayRole:
            return cell_text(row, column)
        if role == Qt.ItemDataRole.TextAlignmentRole:
            horizontal = (
                Qt.AlignmentFlag.AlignRight if column.numeric else Qt.AlignmentFlag.AlignLeft
            )
            return int(horizontal | Qt.AlignmentFlag.AlignVCenter)
        if role == Qt.ItemDataRole.FontRole:
            font = QFont(self.base_font)
            font.setItalic(row.live)
            font.setBold(row.config_id == self.baseline_id)
            return font
        if role == Qt.ItemDataRole.ToolTipRole:
            return self._tooltip(row, column)
        return None

    def _tooltip(self, row: SegmentStats, column: Column) -> str:
        lines = [column.tip]
        if row.config_id == self.baseline_id:
            lines.append("This row is the baseline of the speedups.")
        wait = row.waiting
        if wait is not None and column.numeric:
            lines.append(
                f"{wait.text()}: figures need {wait.needed} steady steps "
                "(transition steps are left out)"
            )
        if column.title == "samples/s" and row.steady and row.rate_basis == "step":
            lines.append("steps of 1 s or longer: the median of per-step rates")
        if column.title == "coarse %" and row.coarse_source:
            lines.append(f"source: {_COARSE_SOURCES.get(row.coarse_source, row.coarse_source)}")
        if column.title == "changed" and row.changed:
            lines.append(describe_change(row.changed))  # in full, as the cell may be elided
        if column.title == "stage":
            lines.append(f"config {row.config_id}: {row.steps} steps, {row.steady_steps} steady")
        if (
            column.title in ("stage", "busy %", "input wait %")
            and row.breakdown
            and row.idle_causes
        ):  # where the step time goes, and why the device idles
            lines += [summary(row.breakdown, self.device_kind), idle_summary(row.idle_causes)]
        return "\n".join(lines)

    def headerData(
        self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole
    ) -> Any:
        if orientation != Qt.Orientation.Horizontal or not 0 <= section < len(COLUMNS):
            return None
        column = COLUMNS[section]
        if role == Qt.ItemDataRole.DisplayRole:
            return column.header(self.device_kind) if column.header else column.title
        if role == Qt.ItemDataRole.ToolTipRole:
            return COLUMNS[section].tip
        return None


class ScoredRun(Protocol):
    """What the scoreboard reads of a run (a Session, a replay, or a test's stand-in), and
    the baseline it pins there."""

    baseline_id: int | None

    @property
    def hello(self) -> Hello | None: ...

    def scoreboard(self) -> Sequence[SegmentStats]: ...


class ScoreboardView(QWidget):
    """The table with a "Pin as baseline" button and context-menu entry."""

    def __init__(self, session: ScoredRun) -> None:
        super().__init__()
        self.session = session
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 2, 4, 2)
        layout.setSpacing(2)
        top = QHBoxLayout()
        self.hint = QLabel(HINT_NO_RUN)
        self.hint.setTextFormat(Qt.TextFormat.PlainText)
        palette.set_style(self.hint, "color: $note_text;")
        top.addWidget(self.hint, 1)
        self.pin_button = QPushButton("Pin as baseline")
        self.pin_button.setToolTip("Measure every speedup against the selected row")
        self.pin_button.clicked.connect(self.pin_selected)
        top.addWidget(self.pin_button)
        layout.addLayout(top)
        self.model = ScoreboardModel()
        self.table = QTableView()
        self.table.setModel(self.model)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().hide()
        # Compact rows: a whole tour (up to 7 segments) fits without scrolling.
        self.table.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 6)
        self.table.setAlternatingRowColors(True)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.table.customContextMenuRequested.connect(self._context_menu)
        self.table.selectionModel().selectionChanged.connect(lambda *_: self._sync_controls())
        layout.addWidget(self.table, 1)
        self._sync_controls()

    def changeEvent(self, event: QEvent) -> None:
        """Follow a new font (presentation mode): cell fonts and row height."""
        if event.type() == QEvent.Type.FontChange:
            self.model.base_font = QFont(self.table.font())
            self.table.verticalHeader().setDefaultSectionSize(self.table.fontMetrics().height() + 6)
            self.model.layoutChanged.emit()
        super().changeEvent(event)

    def show_rows(self, rows: Sequence[SegmentStats]) -> None:
        """New rows from ``session.scoreboard()`` (call at ~2 Hz)."""
        selected = self.selected_config_id()
        count_before = self.model.rowCount()
        hello = self.session.hello
        kind = hello.device.kind if hello else None
        if kind != self.model.device_kind:  # the coarse header names its device's unit
            self.model.device_kind = kind
            self.model.headerDataChanged.emit(Qt.Orientation.Horizontal, 0, len(COLUMNS) - 1)
        self.model.set_rows(rows, self.session.baseline_id)
        if self.model.rowCount() != count_before:
            self.table.resizeColumnsToContents()
            if selected is not None:
                self.select_config(selected)
            self.table.scrollToBottom()  # the live segment is the last row
        self._sync_controls()

    def _sync_hint(self) -> None:
        rows = self.model.rows
        base = next((r for r in rows if r.config_id == self.model.baseline_id), None)
        if not rows:
            hint = HINT_NO_RUN
        elif base is not None:
            hint = f"speedup vs “{base.label}”; transition steps excluded; n/a = not measured"
        else:
            hint = ""
        if self.hint.text() != hint:
            self.hint.setText(hint)

    def selected_config_id(self) -> int | None:
        rows = self.table.selectionModel().selectedRows()
        if not rows or rows[0].row() >= len(self.model.rows):
            return None
        return self.model.rows[rows[0].row()].config_id

    def select_config(self, config_id: int) -> None:
        for i, row in enumerate(self.model.rows):
            if row.config_id == config_id:
                self.table.selectRow(i)
                return

    def pin_baseline(self, config_id: int | None) -> None:
        """Make ``config_id`` the baseline of the speedups (None: back to the first row)."""
        self.session.baseline_id = config_id
        self.model.set_rows(self.session.scoreboard(), config_id)
        self._sync_controls()

    def pin_selected(self) -> None:
        config_id = self.selected_config_id()
        if config_id is not None:
            self.pin_baseline(config_id)

    def _sync_controls(self) -> None:
        self._sync_hint()
        selected = self.selected_config_id()
        self.pin_button.setEnabled(selected is not None and selected != self.model.baseline_id)

    def _context_menu(self, pos: QPoint) -> None:
        index = self.table.indexAt(pos)
        if not index.isValid():
            return
        self.table.selectRow(index.row())
        config_id = self.model.rows[index.row()].config_id
        menu = QMenu(self)
        pin = QAction("Pin as baseline", menu)
        pin.setEnabled(config_id != self.model.baseline_id)
        pin.triggered.connect(lambda: self.pin_baseline(config_id))
        menu.addAction(pin)
        first = self.model.rows[0].config_id if self.model.rows else None
        if self.session.baseline_id is not None and self.session.baseline_id != first:
            reset = QAction("Baseline: back to the first row", menu)
            reset.triggered.connect(lambda: self.pin_baseline(None))
            menu.addAction(reset)
        menu.exec(self.table.viewport().mapToGlobal(pos))
