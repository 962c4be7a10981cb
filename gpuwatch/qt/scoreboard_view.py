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
    QSize,
    Qt,
    Signal,
)
from PySide6.QtGui import QAction, QFont
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QMenu,
    QPushButton,
    QSizePolicy,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from gpuwatch.core.figures.segments import SegmentStats
from gpuwatch.core.figures.step_breakdown import idle_summary, summary
from gpuwatch.core.model.messages import Hello, describe_change
from gpuwatch.core.run.runs import (
    RECORDING,
    SCRIPT,
    WORKLOAD,
    RowRef,
    Run,
    RunGroup,
    RunInfo,
    Runs,
    ScoredRow,
    SpeedChange,
    noise_text,
    speedup_text,
)
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


def _ranks_rate(row: SegmentStats) -> str:
    if row.ranks_samples_per_s is None:
        return "—"
    return f"{row.ranks_samples_per_s:,.0f} ({row.ranks_counted} ranks)"


#: Columns only a run of many ranks fills: hidden otherwise.
RANK_COLUMNS = ("all ranks samples/s", "rank step p50 ms")


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
        "all ranks samples/s",
        "A run of many ranks: samples/s summed over the ranks whose steady steps in this "
        "configuration are measured (and how many they are)",
        _ranks_rate,
    ),
    Column(
        "step p50 ms",
        "Median step time (start to next start)",
        lambda r: _fmt("{:.1f}")(r.step_ms_p50),
    ),
    Column(
        "rank step p50 ms",
        "A run of many ranks: the fastest and slowest rank's median step time (in lockstep "
        "they are close: the straggler shows in the Ranks tab, as the others' wait)",
        lambda r: "—" if r.rank_step_ms is None else "{:.1f}–{:.1f}".format(*r.rank_step_ms),
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
SPEEDUP = next(i for i, c in enumerate(COLUMNS) if c.title == "speedup")
_STEP_P95 = next(i for i, c in enumerate(COLUMNS) if c.title == "step p95 ms")
_RANK_COLUMN_INDEXES = tuple(i for i, c in enumerate(COLUMNS) if c.title in RANK_COLUMNS)


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


#: The speedup cell of a run of another program than the baseline's (no ratio means anything).
OTHER_PROGRAM = "other program"


def speedup_cell(scored: ScoredRow) -> str:
    """``1.81× ±5%``; a speedup within its noise band is marked ``≈`` (no change beyond
    noise); the baseline row reads ``1.00×``."""
    speedup = scored.row.speedup
    if not scored.comparable:
        return OTHER_PROGRAM
    if speedup is None or scored.is_baseline or scored.noise is None:
        return cell_text(scored.row, COLUMNS[SPEEDUP])
    mark = "≈" if scored.within_noise else ""
    return f"{mark}{speedup_text(speedup)} {noise_text(scored.noise)}"


def group_heading(run: Run) -> str:
    """A run's separator line: ``run 2 · train.py · cpu · 06:41``."""
    if run.renamed or run.kind == RECORDING:
        return f"{run.label} — {run.describe()}"
    when = run.describe().rsplit(" · ", 1)[-1]
    return " · ".join(part for part in (run.label, run.device, when) if part)


#: A line of the table: a run's heading (its separator), or one of its rows.
Line = Run | ScoredRow


def _line_key(line: Line) -> tuple[int, int | None]:
    return (line.run_id, None) if isinstance(line, Run) else (line.run_id, line.row.config_id)


class ScoreboardModel(QAbstractTableModel):
    """The runs' rows, each run under its heading when there are several; the baseline row is
    bold, the live one italic."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[Line] = []
        self.baseline: RowRef | None = None
        #: The view's font: bold/italic rows derive from it, so they grow with it
        #: (presentation mode) instead of staying at the application's default size.
        self.base_font = QFont()
        #: "cuda" or "cpu": the breakdown says "kernel" on a GPU, "compute" on a CPU.
        self.device_kind: str | None = None

    @property
    def rows(self) -> list[SegmentStats]:
        """Every shown row's figures, speedups against the baseline, in table order."""
        return [line.row for line in self.lines if isinstance(line, ScoredRow)]

    @property
    def baseline_id(self) -> int | None:
        """The baseline row's configuration id (None before any row)."""
        return self.baseline.config_id if self.baseline is not None else None

    def set_groups(self, groups: Sequence[RunGroup], baseline: RowRef | None) -> bool:
        """Show ``groups``; a run gets a heading line when there is more than one. Returns
        True when the lines changed (the view then re-lays its headings)."""
        headed = len(groups) > 1
        lines: list[Line] = []
        for group in groups:
            if headed:
                lines.append(group.run)
            lines.extend(group.rows)
        if [_line_key(x) for x in lines] != [_line_key(x) for x in self.lines]:
            self.beginResetModel()
            self.lines, self.baseline = lines, baseline
            self.endResetModel()
            return True
        if lines != self.lines or baseline != self.baseline:
            self.lines, self.baseline = lines, baseline
            self.dataChanged.emit(self.index(0, 0), self.index(len(lines) - 1, len(COLUMNS) - 1))
        return False

    def ref_at(self, row: int) -> RowRef | None:
        line = self.lines[row] if 0 <= row < len(self.lines) else None
        return line.ref if isinstance(line, ScoredRow) else None

    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = _ROOT) -> int:
        return 0 if parent.isValid() else len(self.lines)

    def columnCount(self, parent: QModelIndex | QPersistentModelIndex = _ROOT) -> int:
        return 0 if parent.isValid() else len(COLUMNS)

    def data(
        self, index: QModelIndex | QPersistentModelIndex, role: int = Qt.ItemDataRole.DisplayRole
    ) -> Any:
        if not index.isValid() or index.row() >= len(self.lines):
            return None
        line, column = self.lines[index.row()], COLUMNS[index.column()]
        if isinstance(line, Run):
            return self._heading_data(line, index.column(), role)
        row = line.row
        if role == Qt.ItemDataRole.DisplayRole:
            return speedup_cell(line) if column is COLUMNS[SPEEDUP] else cell_text(row, column)
        if role == Qt.ItemDataRole.TextAlignmentRole:
            horizontal = (
                Qt.AlignmentFlag.AlignRight if column.numeric else Qt.AlignmentFlag.AlignLeft
            )
            return int(horizontal | Qt.AlignmentFlag.AlignVCenter)
        if role == Qt.ItemDataRole.FontRole:
            font = QFont(self.base_font)
            font.setItalic(row.live)
            font.setBold(line.is_baseline)
            return font
        if role == Qt.ItemDataRole.ToolTipRole:
            return self._tooltip(line, column)
        return None

    def _heading_data(self, run: Run, column: int, role: int) -> Any:
        if role == Qt.ItemDataRole.DisplayRole:
            return group_heading(run) if column == 0 else ""
        if role == Qt.ItemDataRole.FontRole:
            font = QFont(self.base_font)
            font.setBold(True)
            return font
        if role == Qt.ItemDataRole.ToolTipRole:
            return f"{run.label}: {run.describe()} (rename it in the Runs panel)"
        if role == Qt.ItemDataRole.SizeHintRole:  # it spans the row: never widen a column
            return QSize(1, 1)
        return None

    def _tooltip(self, line: ScoredRow, column: Column) -> str:
        row = line.row
        lines = [column.tip]
        if line.is_baseline:
            lines.append("This row is the baseline of the speedups.")
        if column is COLUMNS[SPEEDUP] and not line.comparable:
            lines.append(
                "This run is another program than the baseline's: its samples/s are not "
                "compared with them. Pin one of its rows as baseline to compare within it."
            )
        if column is COLUMNS[SPEEDUP] and line.noise is not None and row.speedup is not None:
            verdict = (
                "within noise: no change beyond it"
                if line.within_noise
                else "beyond noise: a real change"
            )
            lines.append(
                f"noise band {noise_text(line.noise)} (twice the combined uncertainty of the "
                f"two medians, 5-10 %): {verdict}"
            )
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


def run_key(session: ScoredRun) -> object:
    """What tells one run of a session from the next: its start time on the run clock (a
    test's stand-in without one: its hello)."""
    t0 = getattr(session, "t0_ns", None)
    return t0 if isinstance(t0, int) else id(session.hello)


def run_info(session: ScoredRun) -> RunInfo:
    """The kind, name and device of the session's current run."""
    hello = session.hello
    device = (hello.device.name or hello.device.kind) if hello is not None else ""
    recording = getattr(session, "recording", None)
    if recording is not None:
        return RunInfo(RECORDING, recording.path.name, device)
    spec = getattr(session, "spec", None)
    if spec is not None:
        return RunInfo(SCRIPT if spec.script or spec.module else WORKLOAD, spec.name, device)
    if hello is not None and hello.script and hello.script.get("path"):
        name = str(hello.script["path"]).replace("\\", "/").rsplit("/", 1)[-1]
        return RunInfo(SCRIPT, name, device)
    return RunInfo(WORKLOAD, hello.workload if hello is not None else "run", device)


class ScoreboardView(QWidget):
    """The table with a "Pin as baseline" button and context-menu entry. It keeps every run
    the window watched (``runs``): a restart adds a group instead of dropping the rows."""

    #: The baseline changed: one sentence saying against what every speedup now is.
    baseline_changed = Signal(str)
    #: The live row's samples/s against the baseline changed (a ``SpeedChange`` or None).
    live_change = Signal(object)

    def __init__(self, session: ScoredRun, runs: Runs | None = None) -> None:
        super().__init__()
        self.session = session
        self.runs = runs if runs is not None else Runs()
        self._change: SpeedChange | None = None
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 2, 4, 2)
        layout.setSpacing(2)
        top = QHBoxLayout()
        self.hint = QLabel(HINT_NO_RUN)
        self.hint.setTextFormat(Qt.TextFormat.PlainText)
        # A long baseline name is cut rather than widen the dock (and the window) with it.
        self.hint.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        palette.set_style(self.hint, "color: $note_text;")
        top.addWidget(self.hint, 1)
        self.pin_button = QPushButton("Pin as baseline")
        self.pin_button.setToolTip("Measure every speedup, in every run, against the selected row")
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
        self._show_rank_columns()  # hidden from the start: no run of many ranks yet
        self._sync_controls()

    def changeEvent(self, event: QEvent) -> None:
        """Follow a new font (presentation mode): cell fonts and row height."""
        if event.type() == QEvent.Type.FontChange:
            self.model.base_font = QFont(self.table.font())
            self.table.verticalHeader().setDefaultSectionSize(self.table.fontMetrics().height() + 6)
            self.model.layoutChanged.emit()
        super().changeEvent(event)

    def show_rows(self, rows: Sequence[SegmentStats]) -> None:
        """New rows from ``session.scoreboard()`` (call at ~2 Hz): the current run's, beside
        the runs before it."""
        hello = self.session.hello
        if hello is not None or rows:  # a run that never came up is not a run
            self.runs.follow(run_key(self.session), run_info(self.session), rows)
        kind = hello.device.kind if hello else None
        if kind != self.model.device_kind:  # the coarse header names its device's unit
            self.model.device_kind = kind
            self.model.headerDataChanged.emit(Qt.Orientation.Horizontal, 0, len(COLUMNS) - 1)
        self._render()

    def keep_run(self) -> None:
        """The session is about to start again: its run so far keeps its rows as they are
        now (call before ``Session.start``, which clears them)."""
        if self.session.hello is not None:
            self.runs.follow(
                run_key(self.session), run_info(self.session), self.session.scoreboard()
            )
        self.runs.finish()
        self._render()

    def compare_with(self, label: str, row: SegmentStats) -> None:
        """Measure this board's speedups against another run's row (Compare: B's table
        against A), named ``label`` in the hint."""
        self.runs.set_reference(label, row)
        self._render()

    def _render(self) -> None:
        runs = self.runs
        selected = self.selected_ref()
        count_before = self.model.rowCount()
        relaid = self.model.set_groups(runs.groups(), runs.baseline())
        if relaid:
            self._span_headings()
        if self.model.rowCount() != count_before:
            self.table.resizeColumnsToContents()
            if selected is not None:
                self.select_ref(selected)
            self.table.scrollToBottom()  # the live segment is the last row
        self._show_rank_columns()
        change = runs.live_change()
        if change != self._change:
            self._change = change
            self.live_change.emit(change)
        self._sync_controls()

    def _show_rank_columns(self) -> None:
        """The rank columns only for a run of many ranks, and never on stage (presentation
        mode hides the desk's columns, "step p95 ms" among them)."""
        ranked = any(r.ranks_counted or r.rank_step_ms for r in self.model.rows)
        on_stage = self.table.isColumnHidden(_STEP_P95)
        for i in _RANK_COLUMN_INDEXES:
            hidden = not ranked or on_stage
            if self.table.isColumnHidden(i) != hidden:
                self.table.setColumnHidden(i, hidden)

    def _span_headings(self) -> None:
        self.table.clearSpans()
        for i, line in enumerate(self.model.lines):
            if isinstance(line, Run):
                self.table.setSpan(i, 0, 1, len(COLUMNS))

    def _sync_hint(self) -> None:
        label = self.runs.baseline_label()
        if not self.model.lines:
            hint = HINT_NO_RUN
        elif label:
            chosen = " (pinned)" if self.runs.chosen_baseline is not None else ""
            hint = (
                f"speedup vs “{label}”{chosen} ± its noise band, ≈ = within noise; "
                "transition steps excluded; n/a = not measured"
            )
        else:
            hint = ""
        if self.hint.text() != hint:
            self.hint.setText(hint)
            self.hint.setToolTip(hint)

    def selected_ref(self) -> RowRef | None:
        rows = self.table.selectionModel().selectedRows()
        return self.model.ref_at(rows[0].row()) if rows else None

    def selected_config_id(self) -> int | None:
        ref = self.selected_ref()
        return ref.config_id if ref is not None else None

    def select_ref(self, ref: RowRef) -> None:
        for i in range(self.model.rowCount()):
            if self.model.ref_at(i) == ref:
                self.table.selectRow(i)
                return

    def pin(self, ref: RowRef | None) -> None:
        """Make ``ref`` the baseline of every speedup (None: back to the first row), and say
        so."""
        self.runs.choose_baseline(ref)
        run = self.runs.run(ref.run_id) if ref is not None else None
        # The session's own figures follow when the row is one of its live run's.
        self.session.baseline_id = ref.config_id if ref is not None and run and run.live else None
        self._render()
        self.baseline_changed.emit(
            f"Baseline: every speedup is now against “{self.runs.baseline_label()}”"
        )

    def pin_selected(self) -> None:
        ref = self.selected_ref()
        if ref is not None:
            self.pin(ref)

    def _sync_controls(self) -> None:
        self._sync_hint()
        selected = self.selected_ref()
        self.pin_button.setEnabled(selected is not None and selected != self.model.baseline)

    def _context_menu(self, pos: QPoint) -> None:
        index = self.table.indexAt(pos)
        ref = self.model.ref_at(index.row()) if index.isValid() else None
        if ref is None:
            return
        self.table.selectRow(index.row())
        menu = QMenu(self)
        pin = QAction("Pin as baseline", menu)
        pin.setEnabled(ref != self.model.baseline)
        pin.triggered.connect(lambda: self.pin(ref))
        menu.addAction(pin)
        if self.runs.chosen_baseline is not None:
            reset = QAction("Baseline: back to the first row", menu)
            reset.triggered.connect(lambda: self.pin(None))
            menu.addAction(reset)
        menu.exec(self.table.viewport().mapToGlobal(pos))
