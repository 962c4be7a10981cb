"""The Ranks dock: every rank of a torchrun job side by side, and the one holding the rest back.

One row per rank (its node, local rank, steps, samples/s, step p50, input wait, forward and
backward p50 over its newest steps: ``Session.rank_figures``); the straggler's row is bold and
the line above the table says why (``rank_figures.find_straggler``, the advisor's rule). A run
of one process, or a replay, shows how to start one with ranks. Refreshed with the scoreboard;
a cell's text is set only when it changes.
"""

from __future__ import annotations

from PySide6.QtGui import QFont
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from gpuwatch.core.figures.advisor import RankedRun
from gpuwatch.core.figures.rank_figures import RankFigures, Straggler, find_straggler
from gpuwatch.core.run.session import RANK_FIGURES_STEPS

HINT_NO_RANKS = (
    "A run of many ranks shows each rank here: gpuwatch run --nproc-per-node N train.py, or "
    "gpuwatch run -m torch.distributed.run … train.py"
)
NO_STRAGGLER = "No straggler: no rank's input wait, forward or step time stands out."
BUSY_TIP = (
    f"Busy over each rank's newest {RANK_FIGURES_STEPS:,} steps: the share of their time its "
    "device worked (stream active on CUDA, the compute phases on a CPU), as the headline's"
)
ALLREDUCE_TIP = (
    "DDP's own timing of its gradient all-reduce (the backward's first bucket sent to the last "
    "one done, the wait for the other ranks included), sampled by DDP on its first 10 "
    "iterations and one in 100 after: the rank that arrives last has the shortest"
)
GPU_UTIL_TIP = (
    "NVML utilization of the rank's GPU over the same steps (one series per GPU, in the "
    "utilization plot too); — on a CPU or for a rank of another machine, whose GPU NVML "
    "cannot reach from here"
)
COLUMNS = (
    "Rank",
    "Node",
    "Local",
    "Steps",
    "Samples/s",
    "Step p50 ms",
    "Busy",
    "Input wait",
    "Forward p50 ms",
    "Backward p50 ms",
    "All-reduce p50 ms",
    "GPU util",
)


def row_cells(r: RankFigures) -> tuple[str, ...]:
    """One rank's cells, in ``COLUMNS`` order ("—" where it has no figure yet)."""

    def num(value: float | None, fmt: str) -> str:
        return "—" if value is None else format(value, fmt)

    return (
        str(r.rank),
        r.node or "—",
        str(r.local_rank),
        f"{r.steps:,}",
        num(r.samples_per_s, ",.1f"),
        num(r.step_ms_p50, ".1f"),
        "—" if r.busy is None else f"{r.busy * 100:.0f} %",
        "—" if r.input_wait is None else f"{r.input_wait * 100:.0f} %",
        num(r.forward_ms_p50, ".1f"),
        num(r.backward_ms_p50, ".1f"),
        num(r.allreduce_ms_p50, ".1f"),
        "—" if r.gpu_util is None else f"{r.gpu_util:.0f} %",
    )


class RanksView(QWidget):
    """See the module docstring."""

    def __init__(self, session: object) -> None:
        super().__init__()
        self.session = session
        self.verdict = QLabel(HINT_NO_RANKS)
        self.verdict.setWordWrap(True)
        #: What the widths were fitted to: every rank's figures (not only "—"), and the bold row.
        self._fitted: tuple[bool, int | None] = (False, None)
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        tips = (
            ("Busy", BUSY_TIP),
            ("All-reduce p50 ms", ALLREDUCE_TIP),
            ("GPU util", GPU_UTIL_TIP),
        )
        for column, tip in tips:
            header = self.table.horizontalHeaderItem(COLUMNS.index(column))
            if header is not None:
                header.setToolTip(tip)
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        # Compact rows: four ranks fit under the verdict at the scoreboard's usual height.
        rows = self.table.verticalHeader()
        rows.setSectionResizeMode(QHeaderView.ResizeMode.Fixed)
        rows.setDefaultSectionSize(self.table.fontMetrics().height() + 6)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.setSpacing(2)
        layout.addWidget(self.verdict)
        layout.addWidget(self.table)
        #: The straggler shown, if any (tests and the window read it).
        self.straggler: Straggler | None = None
        self._bold = QFont(self.table.font())
        self._bold.setBold(True)

    def refresh(self) -> None:
        """Read the ranks' figures and show them (nothing changes that did not)."""
        session = self.session
        figures = list(session.rank_figures()) if isinstance(session, RankedRun) else []
        self.straggler = find_straggler(figures)
        if not figures:
            text = HINT_NO_RANKS
        elif self.straggler is not None:
            text = f"Straggler: {self.straggler.sentence}."
        else:
            text = NO_STRAGGLER
        if self.verdict.text() != text:
            self.verdict.setText(text)
        self._show_rows(figures)

    def _show_rows(self, figures: list[RankFigures]) -> None:
        table = self.table
        resized = table.rowCount() != len(figures)
        if resized:
            table.setRowCount(len(figures))
        slow = self.straggler.rank if self.straggler is not None else None
        tip = self.straggler.sentence if self.straggler is not None else ""
        for row, figure in enumerate(figures):
            bold = figure.rank == slow
            for column, text in enumerate(row_cells(figure)):
                item = table.item(row, column)
                if item is None:
                    item = QTableWidgetItem()
                    table.setItem(row, column, item)
                if item.text() != text:
                    item.setText(text)
                if item.font().bold() != bold:
                    item.setFont(self._bold if bold else table.font())
                if item.toolTip() != (tip if bold else ""):
                    item.setToolTip(tip if bold else "")
        # headers and the first figures fit (again once every rank has steps, "—" being
        # narrow, and when another row turns bold); later figures keep the widths, so the
        # table does not jump twice a second
        measured = bool(figures) and all(f.steps for f in figures)
        fitted = (measured, slow)
        if (resized and figures) or (measured and fitted != self._fitted):
            table.resizeColumnsToContents()
            self._fitted = fitted
