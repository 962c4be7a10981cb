"""The Ranks dock: one row per rank, the straggler's in bold with the reason above the table;
the scoreboard's rank columns, shown only for a run of many ranks."""

from __future__ import annotations

import dataclasses

import numpy as np
import pyqtgraph as pg
import pytest
from PySide6.QtCore import QEvent, QPoint, QPointF, Qt, QTimer
from PySide6.QtGui import QContextMenuEvent, QMouseEvent
from PySide6.QtWidgets import QApplication, QMenu, QSplitter
from test_ranks import EVEN, _ranks, _row, _view

from gpuwatch.core.figures.rank_figures import GpuSeries, RankFigures, RankSteps
from gpuwatch.core.model.messages import RankInfo
from gpuwatch.core.model.store import SeriesView, StepsView
from gpuwatch.core.run.runs import ScoredRow
from gpuwatch.core.run.session import Session
from gpuwatch.protocol import PHASES
from gpuwatch.qt.rank_gpu_curves import RankGpuCurves
from gpuwatch.qt.rank_lane_rows import merge_steps
from gpuwatch.qt.rank_lanes import (
    MAX_HEIGHT,
    MIN_HEIGHT,
    ROW_PX,
    ROWS_FIT,
    RankLanes,
    RankLanesControls,
)
from gpuwatch.qt.ranks_view import COLUMNS as RANK_TABLE
from gpuwatch.qt.ranks_view import HINT_NO_RANKS, NO_STRAGGLER, RanksView
from gpuwatch.qt.scoreboard_view import COLUMNS, RANK_COLUMNS, ScoreboardView
from gpuwatch.qt.utilization_view import UtilizationView


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
    wait = RANK_TABLE.index("Input wait")
    assert [table.item(r, wait).text() for r in range(3)] == ["3 %", "3 %", "86 %"]
    assert [table.item(r, 0).font().bold() for r in range(3)] == [False, False, True]
    assert view.verdict.text().startswith("Straggler: rank 2 holds the others back")
    assert "input wait is 86 %" in table.item(2, wait).toolTip()

    session.figures = _ranks(EVEN, EVEN)  # the ranks even out: no row stays bold
    view.refresh()
    assert table.rowCount() == 2
    columns = range(len(RANK_TABLE))
    assert not any(table.item(r, c).font().bold() for r in range(2) for c in columns)
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
    controls, splitter = _lanes_under_a_timeline(qtbot)
    timeline = splitter.widget(0)
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


def test_every_node_is_drawn_and_ranks_not_placed_yet_are_counted(qtbot) -> None:
    """The session hands ranks already on rank 0's clock (another machine's moved by its
    offset): two nodes share the rows; a rank of the job not placed yet is counted."""
    controls, _ = _lanes_under_a_timeline(qtbot)
    lanes = controls.lanes
    info = [
        RankInfo(0, 0, 4, 0, "here"),
        RankInfo(1, 1, 4, 0, "here"),
        RankInfo(2, 0, 4, 1, "there"),
    ]
    controls.sync(_RankSteps([RankSteps(i, _view(EVEN, n=5)) for i in info]), presenting=False)
    assert lanes.ranks == (0, 1, 2)
    assert lanes.labels == ("rank 0 ▸", "rank 1 ▸", "rank 2 ▸", "+1 more (Ranks tab)")


def _lanes_under_a_timeline(qtbot) -> tuple[RankLanesControls, QSplitter]:
    """The lanes under a timeline in a splitter (which the test keeps: it owns them)."""
    timeline = pg.PlotWidget()
    splitter = QSplitter(Qt.Orientation.Vertical)
    splitter.addWidget(timeline)
    qtbot.addWidget(splitter)
    splitter.resize(800, 600)
    splitter.show()
    timeline.setXRange(0.0, 1.0, padding=0)
    return RankLanesControls(splitter, timeline, index=1), splitter


def _click(qtbot, lanes: RankLanes, label: str, on_the_label: bool) -> None:
    """Click row ``label``: on its label (the left axis) or in the plot beside it."""
    view_box = lanes.getViewBox()
    row = lanes.labels.index(label)
    y = len(lanes.rows) - 1 - row + 0.5
    scene = view_box.mapViewToScene(QPointF(0.5, y))
    if on_the_label:
        scene.setX(lanes.getPlotItem().getAxis("left").sceneBoundingRect().center().x())
    point = lanes.mapFromScene(scene)
    qtbot.mouseClick(lanes.viewport(), Qt.MouseButton.LeftButton, pos=point)


def test_a_rank_expands_into_a_row_per_phase_and_stays_so_as_new_steps_arrive(qtbot) -> None:
    controls, _splitter = _lanes_under_a_timeline(qtbot)
    lanes = controls.lanes
    phases = [2.0, 1.0, 3.0, 20.0, 1.0, 1.0]
    info = [RankInfo(i, i, 3, 0, "node") for i in range(3)]
    session = _RankSteps([RankSteps(i, _view(phases, n=10)) for i in info])
    controls.sync(session, presenting=False)
    assert lanes.labels == ("rank 0 ▸", "rank 1 ▸", "rank 2 ▸")
    assert lanes.layers["data"].count() == 30
    assert lanes.maximumHeight() == max(MIN_HEIGHT, ROW_PX * 3 + 12)

    _click(qtbot, lanes, "rank 1 ▸", on_the_label=True)
    expanded = ("rank 0 ▸", "rank 1 ▾", *PHASES, "rank 2 ▸")
    assert lanes.labels == expanded and lanes.ranks == (0, 1, 2)
    data = lanes.layers["data"]
    assert data.count() == 40  # each rank's row, and rank 1's data row
    n = len(expanded)
    in_data_row = np.isclose(data.rects[:, 1], n - 1 - 2 + (1 - 0.7) / 2)
    assert in_data_row.sum() == 10
    assert np.allclose(data.rects[in_data_row, 2], 2e-3)  # each step's 2 ms of input
    for phase in PHASES:  # every phase has a row of its own in rank 1's group
        assert lanes.layers[phase].count() == 40
    assert lanes.maximumHeight() == ROW_PX * n + 12

    session.ranks = [RankSteps(i, _view(phases, n=12)) for i in info]  # more steps: a redraw
    controls.sync(session, presenting=False)
    assert lanes.labels == expanded
    assert lanes.layers["data"].count() == 48

    _click(qtbot, lanes, "rank 1 ▾", on_the_label=False)  # its row collapses it again
    assert lanes.labels == ("rank 0 ▸", "rank 1 ▸", "rank 2 ▸")
    assert lanes.layers["data"].count() == 36
    _click(qtbot, lanes, "rank 2 ▸", on_the_label=False)
    assert lanes.labels == ("rank 0 ▸", "rank 1 ▸", "rank 2 ▾", *PHASES)


def test_expand_all_scrolls_the_rows_that_do_not_fit_and_collapse_all_folds_them(qtbot) -> None:
    controls, _splitter = _lanes_under_a_timeline(qtbot)
    lanes = controls.lanes
    info = [RankInfo(i, i, 4, 0, "node") for i in range(4)]
    session = _RankSteps([RankSteps(i, _view(EVEN, n=5)) for i in info])
    controls.sync(session, presenting=False)
    assert not lanes.scrollbar.isVisible()

    def choose_expand_all() -> None:  # runs inside the menu's own event loop
        menu = QApplication.activePopupWidget()
        assert isinstance(menu, QMenu)
        next(a for a in menu.actions() if a.text() == "Expand all").trigger()
        menu.close()

    QTimer.singleShot(0, choose_expand_all)
    at = QPoint(400, 10)  # a right-click: the context menu, until the timer chooses
    menu_event = QContextMenuEvent(
        QContextMenuEvent.Reason.Mouse, at, lanes.viewport().mapToGlobal(at)
    )
    QApplication.sendEvent(lanes.viewport(), menu_event)
    assert lanes.labels == tuple(
        label for r in range(4) for label in (f"rank {r} ▾", *PHASES)
    )  # 28 rows: more than fit in the lanes' height
    assert lanes.maximumHeight() == MAX_HEIGHT
    assert lanes.scrollbar.isVisible() and lanes.scrollbar.maximum() == 28 - ROWS_FIT
    low, high = lanes.getViewBox().viewRange()[1]
    assert (low, high) == (28 - ROWS_FIT, 28)  # the top rows are in view
    lanes.scrollbar.setValue(lanes.scrollbar.maximum())
    assert tuple(lanes.getViewBox().viewRange()[1]) == (0, ROWS_FIT)  # the bottom ones
    controls.sync(session, presenting=False)  # a redraw keeps the place
    assert tuple(lanes.getViewBox().viewRange()[1]) == (0, ROWS_FIT)

    lanes.collapse_all.trigger()
    assert lanes.labels == tuple(f"rank {r} ▸" for r in range(4))
    assert not lanes.scrollbar.isVisible()
    assert tuple(lanes.getViewBox().viewRange()[1]) == (0, 4)


def _lockstep(phases_ms: list[list[float]], n: int, step_ms: float = 100.0) -> list[StepsView]:
    """One view per rank: ``n`` steps starting together every ``step_ms`` (numbered 0..n-1),
    rank ``k``'s phases taking ``phases_ms[k]``."""
    views = []
    for phases in phases_ms:
        marks = np.concatenate([[0.0], np.cumsum(phases)]) * 1e6
        host = (marks[None, :] + np.arange(n)[:, None] * step_ms * 1e6).astype(np.int64)
        empty = np.zeros_like(host)
        views.append(
            StepsView(
                np.arange(n), np.zeros(n, np.int64), np.full(n, 8), host, empty, np.zeros(n, bool)
            )
        )
    return views


def test_more_than_sixteen_ranks_share_one_row_per_phase_with_their_spread(qtbot) -> None:
    controls, _splitter = _lanes_under_a_timeline(qtbot)
    lanes = controls.lanes
    # rank k reads its batch in 1 + k ms (rank 19 the straggler), the rest is the same
    phases = [[1.0 + k, 0.5, 3.0, 10.0, 1.0, 0.5] for k in range(20)]
    views = _lockstep(phases, n=8)
    info = [RankInfo(k, k % 8, 20, 0, "node") for k in range(20)]
    session = _RankSteps([RankSteps(i, v) for i, v in zip(info, views, strict=True)])
    controls.sync(session, presenting=False)
    assert lanes.labels == ("all 20 ranks", *PHASES)
    assert lanes.ranks == tuple(range(20))
    assert not lanes.expand_all.isEnabled()

    spread, median = lanes.spread_layers["data"], lanes.layers["data"]
    assert spread.count() == median.count() == 8  # one per step number, not per rank
    starts = np.arange(8) * 0.1
    assert np.allclose(spread.x0, starts)  # every rank starts its input at the step's start
    assert np.allclose(spread.x1, starts + 20e-3)  # and rank 19 ends it last, 20 ms in
    assert np.allclose(median.x1 - median.x0, 10e-3)  # the lower median of 1..20 ms
    forward = lanes.spread_layers["forward"]  # forward starts after each rank's input
    assert np.allclose(forward.x0, starts + 1.5e-3) and np.allclose(forward.x1, starts + 23.5e-3)
    assert lanes.layers["forward"].count() == 8
    assert all(lanes.layers[p].count() == 8 for p in PHASES)
    row_y = {float(y) for y in spread.rects[:, 1]}
    assert row_y == {len(lanes.rows) - 2 + 0.15}  # the data row, under the header

    data_row = len(lanes.rows) - 2 + 0.5
    assert lanes.hover_text(0.305, data_row) == (
        "step 3, data: slowest rank 19 (20.0 ms; median 10.0 ms over 20 ranks)"
    )
    assert lanes.hover_text(0.350, data_row) is None  # between two steps' input
    assert lanes.hover_text(0.305, data_row + 1) is None  # the header
    at = QPointF(lanes.mapFromScene(lanes.getViewBox().mapViewToScene(QPointF(0.305, data_row))))
    move = QMouseEvent(
        QEvent.Type.MouseMove,
        at,
        QPointF(lanes.viewport().mapToGlobal(at.toPoint())),
        Qt.MouseButton.NoButton,
        Qt.MouseButton.NoButton,
        Qt.KeyboardModifier.NoModifier,
    )
    QApplication.sendEvent(lanes.viewport(), move)  # the hover names the slowest rank
    assert "slowest rank 19" in lanes.spans.toolTip()

    lanes.toggle(3)  # an expanded rank stays in the set, but merged rows have no groups
    assert lanes.labels == ("all 20 ranks", *PHASES)


def test_merged_steps_align_by_step_number_when_some_ranks_are_behind() -> None:
    views = _lockstep([[1.0, 0.0, 2.0, 5.0, 1.0, 0.0], [3.0, 0.0, 2.0, 3.0, 1.0, 0.0]], n=6)
    views.append(_lockstep([[2.0, 0.0, 2.0, 4.0, 1.0, 0.0]], n=4)[0])  # two steps behind
    later = views[1]
    views[1] = StepsView(  # rank 1's view begins a step later (its first ended before it)
        later.step[1:],
        later.config[1:],
        later.samples[1:],
        later.host[1:],
        later.device[1:],
        later.has_device[1:],
    )
    merged = merge_steps(views, [0, 1, 2], t0_ns=0)
    assert list(merged.step) == [0, 1, 2, 3, 4, 5]
    assert list(merged.ranks) == [2, 3, 3, 3, 2, 2]
    data = PHASES.index("data")
    assert np.allclose(
        merged.hi[:, data] - merged.lo[:, data], [2e-3, 3e-3, 3e-3, 3e-3, 3e-3, 3e-3]
    )
    assert list(merged.slowest[:, data]) == [2, 1, 1, 1, 1, 1]
    assert np.allclose(merged.median_s[:, data], [1e-3, 2e-3, 2e-3, 2e-3, 1e-3, 1e-3])
    backward = PHASES.index("backward")
    assert list(merged.slowest[:, backward]) == [0] * 6


class _Gpus:
    def __init__(self, gpus: list[GpuSeries]) -> None:
        self.t0_ns = 0
        self.gpus = gpus

    def rank_gpu_series(self, since_ns: int) -> list[GpuSeries]:
        return self.gpus


def test_the_other_ranks_gpus_are_dashed_curves_named_under_the_plots_legend(qtbot) -> None:
    view = UtilizationView()
    qtbot.addWidget(view)
    view.show()
    curves = RankGpuCurves(view)
    t = np.arange(4, dtype=np.int64) * 500_000_000
    gpus = [
        GpuSeries(1, "cuda:1 of rank 1", SeriesView(t, t + 500_000_000, np.full(4, 80.0))),
        GpuSeries(2, "cuda:2 of rank 2", SeriesView(t, t + 500_000_000, np.full(4, 10.0))),
    ]
    curves.sync(_Gpus(gpus), presenting=False)
    assert curves.labels == ("cuda:1 of rank 1", "cuda:2 of rank 2")
    assert curves.legend.isVisible() and "cuda:2 of rank 2" in curves.legend.text()
    shown = [c for c in curves.curves if c.isVisible()]
    assert len(shown) == 2 and shown[0].opts["pen"].style() != shown[1].opts["pen"].style()
    x, y = shown[0].getData()
    assert x[0] == 0.0 and x[-1] == pytest.approx(2.0) and set(y) == {80.0}

    curves.sync(_Gpus(gpus[:1]), presenting=False)  # rank 2 gone: its curve is empty
    assert [c.isVisible() for c in curves.curves] == [True, False]
    curves.sync(_Gpus(gpus), presenting=True)  # on stage: the plot's own curves only
    assert not curves.legend.isVisible() and not any(c.isVisible() for c in curves.curves)
    curves.sync(object(), presenting=False)  # a session without ranks
    assert not curves.legend.isVisible()


def test_the_columns_fit_the_figures_once_every_rank_has_steps(qtbot) -> None:
    """The first refresh comes before any step ("—" everywhere); the widths follow the first
    real figures, or "97 %" would show as "9…"."""
    busy = [dataclasses.replace(f, busy=0.97, gpu_util=88.0) for f in _ranks(EVEN, EVEN)]
    session = _Ranked([dataclasses.replace(f, steps=0, busy=None) for f in busy])
    view = RanksView(session)
    qtbot.addWidget(view)
    view.refresh()
    session.figures = busy
    view.refresh()
    table = view.table
    for column in range(table.columnCount()):  # every cell as wide as its text needs
        assert table.columnWidth(column) >= table.sizeHintForColumn(column), column

    slow = [dataclasses.replace(f, busy=0.97) for f in _ranks(EVEN, [60.0, 0, 2, 2, 1, 0])]
    session.figures = slow  # a straggler: its row turns bold, which is wider
    view.refresh()
    assert table.item(1, 0).font().bold()
    for column in range(table.columnCount()):
        assert table.columnWidth(column) >= table.sizeHintForColumn(column), column
