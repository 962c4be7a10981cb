"""The Ranks dock: one row per rank, the straggler's in bold with the reason above the table;
the scoreboard's rank columns, shown only for a run of many ranks."""

from __future__ import annotations

import dataclasses

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QSplitter
from test_ranks import EVEN, _ranks, _row, _view

from gpuwatch.core.figures.rank_figures import RankFigures, RankSteps
from gpuwatch.core.model.messages import RankInfo
from gpuwatch.core.run.runs import ScoredRow
from gpuwatch.core.run.session import Session
from gpuwatch.qt.rank_lanes import RankLanesControls
from gpuwatch.qt.ranks_view import HINT_NO_RANKS, NO_STRAGGLER, RanksView
from gpuwatch.qt.scoreboard_view import COLUMNS, RANK_COLUMNS, ScoreboardView


class _Ranked:
    def __init__(self, figures: list[RankFigures]) -> None:
        self.figures = figures

    def rank_figures(self) -> list[RankFigures]:
        return self.figures


def test_the_straggler_row_is_bold_and_the_reason_is_above_the_table(qtbot) -> None:
    slow = [30.0, 0.0, 2.0, 2.0, 1.0, 0.0]
    waiting = [1.0, 0.0, 2.0, 31.0, 1.0, 0.0]
    session = _Ranked(_ranks(waiting, waiting, slow))
    view = RanksView(session)
    qtbot.addWidget(view)
    view.refresh()

    table = view.table
    assert table.rowCount() == 3
    assert [table.item(r, 0).text() for r in range(3)] == ["0", "1", "2"]
    assert [table.item(r, 6).text() for r in range(3)] == ["3 %", "3 %", "86 %"]
    assert [table.item(r, 0).font().bold() for r in range(3)] == [False, False, True]
    assert view.verdict.text().startswith("Straggler: rank 2 holds the others back")
    assert "input wait is 86 %" in table.item(2, 6).toolTip()

    session.figures = _ranks(EVEN, EVEN)  # the ranks even out: no row stays bold
    view.refresh()
    assert table.rowCount() == 2
    assert not any(table.item(r, c).font().bold() for r in range(2) for c in range(9))
    assert view.verdict.text() == NO_STRAGGLER


def test_a_run_of_one_process_says_how_to_start_ranks(qtbot) -> None:
    view = RanksView(object())
    qtbot.addWidget(view)
    view.refresh()
    assert view.table.rowCount() == 0
    assert view.verdict.text() == HINT_NO_RANKS


def test_the_scoreboard_shows_the_rank_columns_only_for_a_run_of_many_ranks(qtbot) -> None:
    view = ScoreboardView(Session())
    qtbot.addWidget(view)
    rank_columns = [i for i, c in enumerate(COLUMNS) if c.title in RANK_COLUMNS]
    one = _row(0, 100.0, 10.0)
    view.show_rows([one])
    assert all(view.table.isColumnHidden(i) for i in rank_columns)
    ranked = dataclasses.replace(
        one, ranks_samples_per_s=398.0, ranks_counted=4, rank_step_ms=(10.0, 10.6)
    )
    view.show_rows([ranked])
    assert not any(view.table.isColumnHidden(i) for i in rank_columns)
    row = next(i for i, line in enumerate(view.model.lines) if isinstance(line, ScoredRow))
    texts = [view.model.index(row, i).data() for i in rank_columns]
    assert texts == ["398 (4 ranks)", "10.0–10.6"]


class _RankSteps:
    """A session's origin and its ranks' steps, as the rank lanes read them."""

    t0_ns = 0

    def __init__(self, ranks: list[RankSteps]) -> None:
        self.ranks = ranks

    def rank_steps(self, since_ns: int) -> list[RankSteps]:
        return self.ranks


def test_the_rank_lanes_draw_a_row_per_rank_only_for_a_run_of_many_ranks(qtbot) -> None:
    timeline = pg.PlotWidget()
    splitter = QSplitter(Qt.Orientation.Vertical)
    splitter.addWidget(timeline)
    qtbot.addWidget(splitter)
    splitter.resize(800, 600)
    splitter.show()
    timeline.setXRange(0.0, 1.0, padding=0)
    controls = RankLanesControls(splitter, timeline, index=1)
    lanes = controls.lanes
    slow = [30.0, 0.0, 2.0, 2.0, 1.0, 0.0]
    waiting = [1.0, 0.0, 2.0, 31.0, 1.0, 0.0]
    info = [RankInfo(i, i, 3, 0, "node") for i in range(3)]
    views = [_view(p, n=10) for p in (waiting, slow, waiting)]
    session = _RankSteps([RankSteps(i, v) for i, v in zip(info, views, strict=True)])

    controls.sync(session, presenting=False)
    assert lanes.isVisible() and lanes.ranks == (0, 1, 2)
    data = lanes.layers["data"]
    assert data.count() == 30  # a data span per step of every rank
    widths = data.x1 - data.x0
    slow_rows = data.rects[:, 1] > 0.5 + 0.5  # rank 1 is the middle row (y 1..2)
    slow_rows &= data.rects[:, 1] < 2
    assert widths[slow_rows].min() > widths[~slow_rows].max() * 10  # its input wait shows
    assert lanes.getViewBox().linkedView(pg.ViewBox.XAxis) is timeline.getViewBox()

    timeline.setXRange(0.0, 100.0, padding=0)  # steps narrower than a few pixels each:
    controls.sync(session, presenting=False)  # each is one bar in its longest phase's colour
    assert lanes.layers["data"].count() == 10  # rank 1's steps: input-bound
    assert lanes.layers["backward"].count() == 20  # the others': waiting in the all-reduce
    assert lanes.layers["forward"].count() == 0

    controls.sync(session, presenting=True)  # on stage: the lanes make room
    assert not lanes.isVisible()
    controls.sync(_RankSteps(session.ranks[:1]), presenting=False)  # one rank: the timeline's
    assert not lanes.isVisible()
    controls.sync(object(), presenting=False)  # a session without ranks
    assert not lanes.isVisible()
