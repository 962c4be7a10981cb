"""Two recordings side by side: their scoreboards, and where each segment's step time goes
(the bottom dock of a window in compare mode, ``compare_mode``).

The breakdown is the mean host time per phase over a segment's steady steps (the same steps
the scoreboard measures), so a row's phases add up to its mean step time: "input wait fell
from 30 to 2 ms" reads straight off the table. Mean, not median, because medians do not add.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QLabel,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from gpuwatch.core.figures.analysis import phase_durations
from gpuwatch.core.files.replay import ReplaySession
from gpuwatch.protocol import ALL_PHASES
from gpuwatch.qt.compare_summary import describe, shared_baseline
from gpuwatch.qt.scoreboard_view import ScoreboardView


@dataclass(frozen=True)
class SegmentBreakdown:
    """Mean milliseconds per steady step in each phase of ``ALL_PHASES``."""

    config_id: int
    label: str
    steady_steps: int
    phase_ms: tuple[float, ...]

    @property
    def step_ms(self) -> float:
        return float(sum(self.phase_ms))


def breakdown(session: ReplaySession) -> list[SegmentBreakdown]:
    """One row per configuration that has steady steps (transition steps left out)."""
    view = session.steps.snapshot()
    rows = []
    for change in session.config_changes():
        mask = (view.config == change.id) & (view.step >= change.first_step + change.warmup_steps)
        # Per segment, like the scoreboard: `other` of a segment's last step is not booked.
        sub = view.rows(mask)
        n = len(sub)
        if n == 0:
            continue
        mean_ms = phase_durations(sub).mean(axis=0) / 1e6
        rows.append(SegmentBreakdown(change.id, change.label, n, tuple(float(x) for x in mean_ms)))
    return rows


class CompareView(QWidget):
    """Scoreboards of two whole recordings (A, B), each titled by ``describe``, beside their
    per-phase breakdown."""

    def __init__(self, left: ReplaySession, right: ReplaySession) -> None:
        """``left`` and ``right`` are shown as recorded to the end (their play positions are
        not followed: the comparison is of the two runs, not of two moments)."""
        super().__init__()
        self.sessions = (left, right)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 2, 4, 2)
        boards = QHBoxLayout()
        boards.setContentsMargins(0, 0, 0, 0)
        self.scoreboards: list[ScoreboardView] = []
        self.titles: list[QLabel] = []
        shared = shared_baseline(left.scoreboard())  # B's speedups against A, not 1.00×
        for letter, session in zip("AB", self.sessions, strict=True):
            column = QVBoxLayout()
            title = QLabel(f"<b>{letter}</b> · {describe(session)}")
            title.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            column.addWidget(title)
            self.titles.append(title)
            board = ScoreboardView(session)
            board.show_rows(session.scoreboard())
            if shared is not None:
                board.compare_with(*shared)
            # Two boards and the breakdown share the window's width: the hint wraps, and a
            # recording's baseline is pinned in its own replay window, not here.
            board.hint.setWordWrap(True)
            board.pin_button.hide()
            column.addWidget(board, 1)
            self.scoreboards.append(board)
            boards.addLayout(column, 1)
        boards_box = QWidget()
        boards_box.setLayout(boards)
        caption = QLabel("<b>Step time per phase</b> (ms per steady step, share)")
        caption.setToolTip(
            "Mean ms per steady step of each segment (transition steps excluded); the phases "
            "add up to the step time, the share of it in brackets"
        )
        self.table = QTableWidget()
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().hide()
        self.table.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 6)
        breakdown_box = QWidget()
        breakdown_layout = QVBoxLayout(breakdown_box)
        breakdown_layout.setContentsMargins(0, 0, 0, 0)
        breakdown_layout.addWidget(caption)
        breakdown_layout.addWidget(self.table, 1)
        splitter = QSplitter(Qt.Orientation.Horizontal)
        splitter.addWidget(boards_box)
        splitter.addWidget(breakdown_box)
        splitter.setStretchFactor(0, 2)
        splitter.setStretchFactor(1, 1)
        layout.addWidget(splitter, 1)
        self._fill_table()

    def _fill_table(self) -> None:
        headers = ["run", "segment", "steady steps", *ALL_PHASES, "step (mean)"]
        rows = [
            (letter, b) for letter, s in zip("AB", self.sessions, strict=True) for b in breakdown(s)
        ]
        self.table.setColumnCount(len(headers))
        self.table.setHorizontalHeaderLabels(headers)
        self.table.setRowCount(len(rows))
        for r, (name, row) in enumerate(rows):
            cells = [name, row.label, str(row.steady_steps)]
            total = row.step_ms
            for ms in row.phase_ms:
                share = ms / total if total > 0 else 0.0
                cells.append(f"{ms:.1f} ({share:.0%})")
            cells.append(f"{total:.1f} ms")
            for c, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if c >= 2:
                    item.setTextAlignment(
                        Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
                    )
                self.table.setItem(r, c, item)
        self.table.resizeColumnsToContents()
