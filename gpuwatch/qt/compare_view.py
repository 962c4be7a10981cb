"""Two recordings side by side: their scoreboards, and where each segment's step time goes.

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
from gpuwatch.core.model.store import StepsView
from gpuwatch.protocol import ALL_PHASES
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
        sub = StepsView(
            view.step[mask],
            view.config[mask],
            view.samples[mask],
            view.host[mask],
            view.device[mask],
            view.has_device[mask],
        )
        n = len(sub)
        if n == 0:
            continue
        mean_ms = phase_durations(sub).mean(axis=0) / 1e6
        rows.append(SegmentBreakdown(change.id, change.label, n, tuple(float(x) for x in mean_ms)))
    return rows


class CompareView(QWidget):
    """Scoreboards of two recordings, labelled by file name, over their per-phase breakdown."""

    def __init__(self, left: ReplaySession, right: ReplaySession) -> None:
        super().__init__()
        self.sessions = (left, right)
        self.setWindowTitle(f"gpuwatch — compare {_name(left)} with {_name(right)}")
        layout = QVBoxLayout(self)
        boards = QHBoxLayout()
        self.scoreboards: list[ScoreboardView] = []
        for session in self.sessions:
            column = QVBoxLayout()
            title = QLabel(f"<b>{_name(session)}</b>")
            title.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            column.addWidget(title)
            board = ScoreboardView(session)
            board.show_rows(session.scoreboard())
            column.addWidget(board, 1)
            self.scoreboards.append(board)
            boards.addLayout(column, 1)
        top = QWidget()
        top.setLayout(boards)
        caption = QLabel(
            "<b>Step time per phase</b> — mean ms per steady step of each "
            "segment (transition steps excluded); the phases add up to the step "
            "time, the share of it in brackets"
        )
        caption.setWordWrap(True)
        self.table = QTableWidget()
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().hide()
        bottom = QWidget()
        bottom_layout = QVBoxLayout(bottom)
        bottom_layout.setContentsMargins(0, 0, 0, 0)
        bottom_layout.addWidget(caption)
        bottom_layout.addWidget(self.table, 1)
        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.addWidget(top)
        splitter.addWidget(bottom)
        layout.addWidget(splitter, 1)
        self._fill_table()

    def _fill_table(self) -> None:
        headers = ["recording", "segment", "steady steps", *ALL_PHASES, "step (mean)"]
        rows = [(_name(s), b) for s in self.sessions for b in breakdown(s)]
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


def _name(session: ReplaySession) -> str:
    return session.recording.path.name
