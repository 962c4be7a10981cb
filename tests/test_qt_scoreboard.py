"""The scoreboard table, pinning a baseline, and the change markers on the time axis."""

from __future__ import annotations

import dataclasses

import pyqtgraph as pg
import pytest
from fake_knob_session import KNOBS, T0, FakeSession, row
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDockWidget

from gpuwatch.core.model.messages import ConfigChange
from gpuwatch.core.run.session import Session
from gpuwatch.qt.change_markers import ChangeMarkers
from gpuwatch.qt.scoreboard_view import COLUMNS, HINT_NO_RUN, LIVE_MARK, ScoreboardView
from gpuwatch.qt.timeline_view import TimelineView

S = 1_000_000_000
WAIT_MS = 5000


@pytest.fixture
def board(qtbot):
    session = FakeSession()
    view = ScoreboardView(session)
    qtbot.addWidget(view)
    view.resize(1000, 220)
    view.show()
    return view


def cell(view: ScoreboardView, r: int, title: str, role=Qt.ItemDataRole.DisplayRole):
    column = [c.title for c in COLUMNS].index(title)
    return view.model.data(view.model.index(r, column), role)


def three_rows() -> list:
    return [
        row(0, "baseline", samples_per_s=360.4, speedup=1.0),
        row(
            1,
            "workers",
            changed={"num_workers": 2, "persistent_workers": True},
            samples_per_s=701.0,
            speedup=1.945,
            input_wait_share=0.05,
            transition_s=2.13,
        ),
        row(
            2, "compile", changed={"compile": "default"}, live=True, steady=False, transition_s=None
        ),
    ]


def test_rows_with_figures_and_na(board):
    assert board.model.rowCount() == 0
    assert board.hint.text() == HINT_NO_RUN
    board.show_rows(three_rows())
    assert board.model.rowCount() == 3
    assert cell(board, 0, "stage") == "baseline"
    assert cell(board, 1, "changed") == "num_workers=2, persistent_workers=on"
    assert cell(board, 0, "changed") == "—"
    assert cell(board, 0, "samples/s") == "360"
    assert cell(board, 1, "speedup") == "1.95× ±5%"  # with its noise band
    assert cell(board, 1, "input wait %") == "5%"
    assert cell(board, 1, "busy %") == "43%"
    assert cell(board, 1, "transition s") == "2.1"
    assert cell(board, 0, "energy J/step") == "n/a"  # no power reading: n/a, never 0
    # The live segment, not steady yet: it says how far it is, marked and in italics.
    assert cell(board, 2, "stage") == LIVE_MARK + "compile"
    assert cell(board, 2, "samples/s") == "measuring (2 of 5 steady steps)"
    for title in ("step p50 ms", "busy %", "input wait %", "speedup"):
        assert cell(board, 2, title) == "measuring", title
    assert cell(board, 2, "transition s") == "n/a"  # still in its transition
    assert cell(board, 2, "stage", Qt.ItemDataRole.FontRole).italic()
    assert not cell(board, 1, "stage", Qt.ItemDataRole.FontRole).italic()
    tip = cell(board, 2, "samples/s", Qt.ItemDataRole.ToolTipRole)
    assert "figures need 5 steady steps" in tip
    # With no pinned baseline, the first row is the baseline (bold) and named in the hint.
    assert cell(board, 0, "stage", Qt.ItemDataRole.FontRole).bold()
    assert "baseline" in board.hint.text()


def test_long_steps_measure_to_three_and_a_short_finished_row_says_so(board):
    long_live = dataclasses.replace(
        row(0, "baseline", live=True, steady=False), steady_steps=2, steady_needed=3
    )
    board.show_rows([long_live])
    assert cell(board, 0, "samples/s") == "measuring (2 of 3 steady steps)"
    short = dataclasses.replace(long_live, live=False)
    board.show_rows([short])
    assert cell(board, 0, "samples/s") == "n/a (only 2 of 3 steady steps)"
    assert cell(board, 0, "busy %") == "n/a"
    rated = row(0, "baseline", rate_basis="step", steady_needed=3)
    board.show_rows([rated])
    assert "per-step rates" in cell(board, 0, "samples/s", Qt.ItemDataRole.ToolTipRole)


def header(view: ScoreboardView, title: str, role=Qt.ItemDataRole.DisplayRole):
    column = [c.title for c in COLUMNS].index(title)
    return view.model.headerData(column, Qt.Orientation.Horizontal, role)


@pytest.mark.parametrize(
    ("kind", "coarse"), [("cpu", "CPU % of all cores"), ("cuda", "GPU util % (NVML)")]
)
def test_busy_names_its_window_and_coarse_its_unit(board, kind, coarse):
    board.session.hello = dataclasses.replace(
        board.session.hello,
        device=dataclasses.replace(board.session.hello.device, kind=kind),
    )
    board.show_rows(three_rows())
    assert header(board, "coarse %") == coarse
    assert "this configuration, steady steps" in header(
        board, "busy %", Qt.ItemDataRole.ToolTipRole
    )
    assert "% of one core" in header(board, "coarse %", Qt.ItemDataRole.ToolTipRole)
    assert header(board, "busy %") == "busy %"


def test_pin_a_baseline(board, qtbot):
    board.session.rows = three_rows()
    board.show_rows(three_rows())
    assert not board.pin_button.isEnabled()  # nothing selected
    board.table.selectRow(1)
    assert board.pin_button.isEnabled()
    qtbot.mouseClick(board.pin_button, Qt.MouseButton.LeftButton)
    assert board.session.baseline_id == 1
    assert cell(board, 1, "stage", Qt.ItemDataRole.FontRole).bold()
    assert not cell(board, 0, "stage", Qt.ItemDataRole.FontRole).bold()
    assert not board.pin_button.isEnabled()  # already the baseline
    assert "“workers”" in board.hint.text()
    board.show_rows(three_rows())  # the next refresh keeps the pin and the selection
    assert board.selected_config_id() == 1
    board.pin(None)
    assert board.session.baseline_id is None
    assert cell(board, 0, "stage", Qt.ItemDataRole.FontRole).bold()


def test_same_rows_update_in_place(board):
    board.show_rows(three_rows())
    board.table.selectRow(2)
    rows = three_rows()
    rows[2] = row(2, "compile", live=True, transition_s=40.5, samples_per_s=900.0)
    board.show_rows(rows)
    assert cell(board, 2, "samples/s") == "900"
    assert cell(board, 2, "transition s") == "40.5"
    assert board.selected_config_id() == 2


def changes() -> list[ConfigChange]:
    return [
        ConfigChange(0, {}, {}, T0, 0, 3, label="baseline"),
        ConfigChange(1, {}, {"num_workers": 2}, T0 + 20 * S, 100, 4, label="workers"),
        ConfigChange(
            2,
            {},
            {"compile": "default"},
            T0 + 40 * S,
            200,
            3,
            label="compile=default, a long label that gets cut",
        ),
    ]


def test_markers_at_each_change_with_transitions_shaded(qtbot):
    plot = TimelineView()
    qtbot.addWidget(plot)
    markers = ChangeMarkers(plot, labels=True)
    rows = [
        row(0, "baseline", transition_s=1.0),
        row(1, "workers", transition_s=2.5),
        row(2, "compile", live=True, steady=False, transition_s=None),
    ]
    run = object()
    markers.update(run, changes(), rows, T0 - 5 * S, now_ns=T0 + 50 * S)
    assert sorted(markers.lines) == [0, 1, 2]
    assert [markers.lines[i].value() for i in range(3)] == pytest.approx([5.0, 25.0, 45.0])
    texts = markers.marker_texts()
    assert texts[:2] == ["baseline", "workers"]
    assert texts[2].endswith("…") and len(texts[2]) <= 28
    assert markers.lines[1].label.format == "workers"
    # Each transition runs from the change to its first steady step; the live one to "now".
    assert markers.regions[1].getRegion() == pytest.approx((25.0, 27.5))
    assert markers.regions[2].getRegion() == pytest.approx((45.0, 55.0))
    items = plot.getPlotItem().items
    assert all(markers.lines[i] in items and markers.regions[i] in items for i in range(3))

    # The live transition grows with "now"; a new run clears the old markers.
    markers.update(run, changes(), rows, T0 - 5 * S, now_ns=T0 + 52 * S)
    assert markers.regions[2].getRegion() == pytest.approx((45.0, 57.0))
    old_line = markers.lines[1]
    markers.update(object(), changes()[:1], rows[:1], T0 - 5 * S, now_ns=T0)
    assert sorted(markers.lines) == [0]
    assert old_line not in plot.getPlotItem().items


def test_window_shows_scoreboard_markers_and_knobs(show_window, qtbot):
    """The window polls a session's scoreboard, changes and knobs on its own timer."""
    session = Session(sample_coarse=False)
    fake = FakeSession(KNOBS)
    rows = three_rows()
    # A real (unstarted) Session whose knob half answers like a running one.
    session.hello = fake.hello
    session.config_changes = changes
    session.scoreboard = lambda: rows
    session.config_values = fake.config_values
    win = show_window(session)
    qtbot.waitUntil(lambda: win.scoreboard.model.rowCount() == 3, timeout=WAIT_MS)
    qtbot.waitUntil(lambda: len(win.timeline_markers.lines) == 3, timeout=WAIT_MS)
    assert len(win.utilization_markers.lines) == 3
    assert win.timeline_markers.lines[1].label is not None
    assert getattr(win.utilization_markers.lines[1], "label", None) is None  # timeline only
    assert isinstance(win.utilization_markers.regions[1], pg.LinearRegionItem)
    qtbot.waitUntil(lambda: len(win.knob_panel.rows) == len(KNOBS), timeout=WAIT_MS)
    # The session is not running: the knobs are shown, disabled, with the reason.
    assert not win.knob_panel.rows["num_workers"].editor.isEnabled()
    assert win.knob_panel.hint.isVisible()
    docks = {d.windowTitle(): d.widget() for d in win.findChildren(QDockWidget)}
    assert docks["Knobs"] is win.knob_panel and docks["Scoreboard"] is win.scoreboard
    assert not win.tour.action.isEnabled()  # nothing running to tour
