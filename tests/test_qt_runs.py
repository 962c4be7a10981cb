"""Every run kept in the window: the scoreboard's groups and baseline, and the Runs panel."""

from __future__ import annotations

import pytest
from fake_knob_session import FakeSession, row
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDockWidget

from gpuwatch.core.run.runs import RowRef
from gpuwatch.core.run.session import Session
from gpuwatch.qt.compare_summary import shared_baseline
from gpuwatch.qt.runs_dock import RunsView
from gpuwatch.qt.scoreboard_view import COLUMNS, LIVE_MARK, ScoreboardView

QUIET = (100.0, 100.5, 99.5)


def rated(config_id: int, label: str, rate: float, **kw):
    rates = tuple(rate * r / 100 for r in QUIET)
    return row(config_id, label, samples_per_s=rate, window_rates=rates, **kw)


@pytest.fixture
def board(qtbot):
    view = ScoreboardView(FakeSession())
    qtbot.addWidget(view)
    view.resize(1000, 260)
    view.show()
    return view


def cell(view: ScoreboardView, r: int, title: str, role=Qt.ItemDataRole.DisplayRole):
    column = [c.title for c in COLUMNS].index(title)
    return view.model.data(view.model.index(r, column), role)


def stages(view: ScoreboardView) -> list[str]:
    return [cell(view, r, "stage") for r in range(view.model.rowCount())]


def restart(view: ScoreboardView, final_rows: list) -> None:
    """What Start does after a run ended with ``final_rows``: the old run keeps them, and the
    new run says hello."""
    view.session.rows = final_rows
    view.keep_run()
    view.session.new_run(view.session.knobs)


def test_a_restart_keeps_the_first_runs_row_and_the_ratio_to_it(board):
    board.show_rows([rated(0, "baseline", 78.0, live=True)])
    assert stages(board) == [LIVE_MARK + "baseline"]  # one run: no heading
    restart(board, [rated(0, "baseline", 78.0)])
    board.show_rows([])
    board.show_rows([rated(0, "baseline", 138.0, live=True)])
    shown = stages(board)
    assert shown[0].startswith("run 1 · vision · fake CPU · ")  # the run's separator line
    assert shown[1] == "baseline"
    assert shown[2].startswith("run 2 · vision · fake CPU · ")
    assert shown[3] == LIVE_MARK + "baseline"
    assert board.table.columnSpan(0, 0) == len(COLUMNS) and board.table.columnSpan(1, 0) == 1
    assert cell(board, 1, "samples/s") == "78"  # the first run's row did not vanish
    assert cell(board, 1, "speedup") == "1.00×"
    assert cell(board, 1, "stage", Qt.ItemDataRole.FontRole).bold()
    assert cell(board, 3, "speedup") == "1.77× ±5%"  # against the first run, not 1.00×
    assert "“run 1 · vision · baseline”" in board.hint.text()
    assert [r.samples_per_s for r in board.model.rows] == [78.0, 138.0]


def test_choosing_another_baseline_changes_the_ratios_and_says_so(board, qtbot):
    board.show_rows([rated(0, "baseline", 78.0)])
    restart(board, [rated(0, "baseline", 78.0)])
    board.show_rows([rated(0, "baseline", 138.0, live=True)])
    board.table.selectRow(3)
    assert board.pin_button.isEnabled()
    with qtbot.waitSignal(board.baseline_changed) as said:
        qtbot.mouseClick(board.pin_button, Qt.MouseButton.LeftButton)
    assert said.args == ["Baseline: every speedup is now against “run 2 · vision · baseline”"]
    assert cell(board, 1, "speedup") == "0.57× ±5%"
    assert cell(board, 3, "speedup") == "1.00×"
    assert cell(board, 3, "stage", Qt.ItemDataRole.FontRole).bold()
    assert not cell(board, 1, "stage", Qt.ItemDataRole.FontRole).bold()
    assert "“run 2 · vision · baseline” (pinned)" in board.hint.text()
    assert board.session.baseline_id == 0  # the live run's own figures follow
    board.show_rows([rated(0, "baseline", 140.0, live=True)])  # a refresh keeps the choice
    assert board.runs.baseline() == RowRef(2, 0) and cell(board, 1, "speedup") == "0.56× ±5%"
    board.pin(RowRef(1, 0))
    assert cell(board, 3, "speedup") == "1.79× ±5%"
    assert board.session.baseline_id is None  # a finished run's row: not the session's


def test_a_second_tour_is_a_separate_group(board):
    runs = board.runs
    board.show_rows([rated(0, "baseline", 360.0, live=True)])
    runs.tour_config(runs.begin_tour(), 0)  # the tour's first stage holds config 0
    rows = [rated(0, "baseline", 360.0), rated(1, "workers", 419.0)]
    board.show_rows(rows)
    assert stages(board) == ["baseline", "workers"]  # one run so far, which is the tour
    second = runs.begin_tour()
    rows = [*rows, rated(2, "baseline", 361.0), rated(3, "workers", 421.0, live=True)]
    board.show_rows(rows)
    runs.tour_config(second, 2)
    board.show_rows(rows)
    shown = stages(board)
    assert shown[0].startswith("tour 1 · vision") and shown[3].startswith("tour 2 · vision")
    assert shown[1:3] == ["baseline", "workers"] and shown[4:] == ["baseline", "▶ workers"]
    # The first tour's rows keep their ratio to its baseline: nothing re-based on tour 2's.
    assert cell(board, 2, "speedup") == "1.16× ±5%"
    assert cell(board, 4, "speedup") == "≈1.00× ±5%"  # within noise of the baseline
    assert cell(board, 5, "speedup") == "1.17× ±5%"
    assert "within noise" in cell(board, 4, "speedup", Qt.ItemDataRole.ToolTipRole)
    assert "beyond noise" in cell(board, 5, "speedup", Qt.ItemDataRole.ToolTipRole)


def test_compare_measures_b_against_a(board):
    """Compare: B's table shows its ratio to A's row, not its own 1.00×."""
    a_rows = [rated(0, "baseline", 50.0), rated(1, "workers", 100.0)]
    label, a_row = shared_baseline(a_rows)
    assert label == "A · workers" and a_row.config_id == 1
    board.show_rows([rated(0, "baseline", 181.0)])
    board.compare_with(label, a_row)
    assert cell(board, 0, "speedup") == "1.81× ±5%"
    assert "speedup vs “A · workers”" in board.hint.text()
    assert shared_baseline([row(0, "baseline", steady=False)]) is None


def test_runs_panel_renames_and_chooses_the_baseline(board, qtbot):
    pinned: list[RowRef | None] = []
    view = RunsView(board.runs, lambda ref: (pinned.append(ref), board.pin(ref)))
    qtbot.addWidget(view)
    view.show()
    board.show_rows([rated(0, "baseline", 78.0)])
    restart(board, [rated(0, "baseline", 78.0)])
    board.show_rows([rated(0, "baseline", 138.0, live=True)])
    view.refresh()
    assert view.table.rowCount() == 2
    assert [view.table.item(r, 0).text() for r in range(2)] == ["run 1 · vision", "run 2 · vision"]
    assert view.table.item(1, 5).text() == "138"
    view.table.item(0, 0).setText("before the fix")  # what an edit of the label does
    assert board.runs.run(1).label == "before the fix"
    board.show_rows([rated(0, "baseline", 138.0, live=True)])
    assert stages(board)[0].startswith("before the fix — vision · fake CPU · ")
    assert not view.baseline_button.isEnabled()  # nothing selected
    view.table.selectRow(1)
    qtbot.mouseClick(view.baseline_button, Qt.MouseButton.LeftButton)
    assert pinned == [RowRef(2, 0)]
    assert cell(board, 1, "speedup") == "0.57× ±5%"


def test_the_window_has_a_runs_panel_beside_the_log(show_window):
    win = show_window(Session(sample_coarse=False))
    docks = {d.objectName(): d for d in win.findChildren(QDockWidget)}
    assert docks["runs"].widget() is win.runs_view
    assert win.runs_view.runs is win.scoreboard.runs is win.tour.runs
    assert docks["runs"] in win.tabifiedDockWidgets(docks["log"])


def test_start_again_in_the_window_keeps_the_first_runs_row(show_window, qtbot, monkeypatch):
    """The window's Start after a run ended: the scoreboard keeps the first run's row (78
    samples/s) and measures the new run against it, instead of "baseline 138, 1.00×"."""
    session = Session(sample_coarse=False)
    win = show_window(session)
    rows = [rated(0, "baseline", 78.0)]
    monkeypatch.setattr(session, "scoreboard", lambda: rows)
    hello = {"kind": "hello", "workload": "vision", "device": {"kind": "cpu", "name": "sim"}}
    session.model.fold(hello)  # the first run is up (its scoreboard: one row at 78/s)
    qtbot.waitUntil(lambda: win.scoreboard.model.rowCount() == 1, timeout=5000)

    def start_without_a_runner(spec) -> None:  # what Session.start does to what views read
        session.model.reset()
        rows[:] = []

    monkeypatch.setattr(session, "start", start_without_a_runner)
    win.start_run()
    rows[:] = [rated(0, "baseline", 138.0, live=True)]
    session.model.fold(hello)  # the second run says hello
    qtbot.waitUntil(lambda: win.scoreboard.model.rowCount() == 4, timeout=5000)
    board = win.scoreboard
    assert cell(board, 1, "samples/s") == "78" and cell(board, 1, "speedup") == "1.00×"
    assert cell(board, 3, "speedup") == "1.77× ±5%"
    qtbot.waitUntil(lambda: win.runs_view.table.rowCount() == 2, timeout=5000)
    assert win.headline.change is not None and win.headline.change.ratio == pytest.approx(138 / 78)


def test_a_recording_is_named_after_the_runs_label(show_window, qtbot, tmp_path, monkeypatch):
    from gpuwatch.qt import record_control

    monkeypatch.setattr(record_control, "recordings_dir", lambda: tmp_path)
    session = Session(sample_coarse=False)
    win = show_window(session)
    monkeypatch.setattr(session, "scoreboard", lambda: [rated(0, "baseline", 78.0)])
    session.model.fold({"kind": "hello", "workload": "vision", "device": {"kind": "cpu"}})
    qtbot.waitUntil(lambda: win.scoreboard.model.rowCount() == 1, timeout=5000)
    win.scoreboard.runs.rename(1, "before the fix")
    win.record_action.setChecked(True)
    win.record_action.setChecked(False)
    assert win.recording.last_recording.name.startswith("before-the-fix-")


def test_a_run_of_another_program_says_so_instead_of_a_ratio(board):
    board.show_rows([rated(0, "baseline", 11_000.0)])
    board.session.rows = [rated(0, "baseline", 11_000.0)]
    board.keep_run()
    board.session.new_run(board.session.knobs, workload="gpt")  # another program
    board.show_rows([rated(0, "baseline", 430.0, live=True)])
    assert stages(board)[2].startswith("run 2 · gpt · ")
    assert cell(board, 3, "speedup") == "other program"  # not "0.04×"
    tip = cell(board, 3, "speedup", Qt.ItemDataRole.ToolTipRole)
    assert "another program than the baseline's" in tip and "Pin one of its rows" in tip
    board.runs.choose_baseline(RowRef(2, 0))
    board.show_rows([rated(0, "baseline", 430.0, live=True)])
    assert cell(board, 3, "speedup") == "1.00×" and cell(board, 1, "speedup") == "other program"
