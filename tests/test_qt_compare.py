"""Compare mode: ``replay A --compare B`` and File → Compare with… show B beside A in the
main window (the sentence B vs A, B's timeline with linked x, both scoreboards), it closes
back to the plain replay, and a bad B changes nothing. Recordings are made with the real
Recorder from a fed session (``test_qt_replay``, whose CLI test pictures
``replay A --compare B --screenshot`` at the window's size)."""

from __future__ import annotations

import re
import struct
from pathlib import Path

import pytest
from PySide6.QtWidgets import QDockWidget
from test_qt_replay import make_recording, no_documents  # noqa: F401 - no_documents: a fixture
from test_replay import S, SteppedClock, script

from gpuwatch.core.files.recording import Recorder
from gpuwatch.core.files.recording_reader import open_recording
from gpuwatch.core.files.replay import ReplaySession
from gpuwatch.core.run import session as session_module
from gpuwatch.core.run.session import Session, SessionState
from gpuwatch.qt.compare_mode import CompareMode
from gpuwatch.qt.compare_summary import compare_rows, reference_row
from gpuwatch.qt.screenshot import save_screenshot
from gpuwatch.qt.timeline_view import MERGED_LANES, PHASE_LANES

#: The file dialogs' folder is a temporary one, never the user's documents.
pytestmark = pytest.mark.usefixtures("no_documents")

#: B's batches: 48 samples where A's have 32, at the same step times (1.5× A's samples/s).
B_SAMPLES = 48


def make_faster_recording(path: Path) -> Path:
    """B: the script of A (``make_recording``) on another workload, 48 samples a step."""
    live = Session(sample_coarse=False)
    recorder = Recorder(path, live, flush_s=0.01)
    recorder.start()
    live._state = SessionState.RUNNING
    with pytest.MonkeyPatch.context() as patch:
        clock = SteppedClock(live.t0_ns)
        patch.setattr(session_module.time, "perf_counter_ns", clock)
        for t_ns, original in script(live.t0_ns + S, 24):
            message = original
            if original["kind"] == "hello":
                message = {**original, "workload": "mlp"}
            elif original["kind"] == "steps":
                message = {**original, "samples": [B_SAMPLES] * len(original["step"])}
            clock.now_ns = t_ns
            live._dispatch(message)
    live._state = SessionState.FINISHED
    recorder.close()
    assert recorder.error is None
    return path


@pytest.fixture
def pair(tmp_path) -> tuple[Path, Path]:
    return (
        make_recording(tmp_path / "before.gpuwatch"),
        make_faster_recording(tmp_path / "after.gpuwatch"),
    )


def compare_in_window(show_window, qtbot, pair) -> tuple[object, CompareMode]:
    win = show_window(ReplaySession(open_recording(pair[0])))
    qtbot.waitUntil(lambda: win.scoreboard.model.rowCount() == 2, timeout=5000)
    mode = win.files.compare_with(pair[1])
    assert isinstance(mode, CompareMode)
    return win, mode


def test_the_comparison_is_in_the_main_window_with_names_and_b_relative_to_a(
    show_window, qtbot, pair
):
    win, mode = compare_in_window(show_window, qtbot, pair)
    a_rows = ReplaySession(open_recording(pair[0])).scoreboard()
    b_rows = ReplaySession(open_recording(pair[1])).scoreboard()
    a_ref, b_ref = reference_row(a_rows), reference_row(b_rows)
    assert a_ref is not None and b_ref is not None
    assert a_ref.config_id == b_ref.config_id == 1  # the last configuration of each
    expected = b_ref.samples_per_s / a_ref.samples_per_s
    assert expected == pytest.approx(B_SAMPLES / 32)
    assert mode.comparison is not None
    assert mode.comparison.speed_ratio == pytest.approx(expected)
    assert compare_rows(a_rows, b_rows) == mode.comparison
    statement = mode.statement_label.text()
    assert f"B: {expected:.2f}× A's samples/s" in statement
    assert "input wait" in statement and "last configuration" in statement
    a_name = "A · before.gpuwatch · vision · fake CPU · "
    b_name = "B · after.gpuwatch · mlp · fake CPU · "
    assert a_name in win.timeline.getPlotItem().titleLabel.text
    assert b_name in mode.timeline.getPlotItem().titleLabel.text
    for name, title in zip((a_name, b_name), mode.view.titles, strict=True):
        plain = title.text().replace("<b>", "").replace("</b>", "")
        assert re.fullmatch(re.escape(name) + r"\d{4}-\d\d-\d\d \d\d:\d\d", plain)
    assert mode.header.isVisible() and mode.header.window() is win
    assert "before.gpuwatch vs after.gpuwatch" in win.windowTitle()
    dock = win.findChild(QDockWidget, "compare")
    assert dock is not None and dock.isVisible() and not dock.visibleRegion().isEmpty()
    assert [b.model.rowCount() for b in mode.view.scoreboards] == [2, 2]
    # B's lanes sit in the window, drawn, under A's plots.
    assert mode.timeline.window() is win and mode.timeline.isVisible()
    assert mode.timeline.frames_drawn >= 1
    # Both timelines' lanes grouped (4 lanes each), equally tall whatever the layout did.
    assert win.timeline.host_lanes is mode.timeline.host_lanes is MERGED_LANES
    boxes = [plot.getPlotItem().getViewBox() for plot in (win.timeline, mode.timeline)]
    qtbot.waitUntil(lambda: abs(boxes[0].height() - boxes[1].height()) <= 2, timeout=5000)
    assert win.timeline.height() >= win.timeline.minimumSizeHint().height() + 10
    assert sum(bars.count() for bars in mode.timeline.phase_bars.values()) > 0
    assert sorted(mode.timeline.markers.lines) == [0, 1]  # B's baseline and its change


def test_the_x_axes_are_linked_and_b_is_redrawn_for_the_new_range(show_window, qtbot, pair):
    win, mode = compare_in_window(show_window, qtbot, pair)
    win.follow_action.setChecked(False)  # the window stops moving the view itself
    drawn = mode.timeline.frames_drawn
    win.timeline.getPlotItem().getViewBox().setXRange(1.0, 1.5, padding=0)
    lo, hi = mode.timeline.getPlotItem().getViewBox().viewRange()[0]
    assert (lo, hi) == pytest.approx((1.0, 1.5))
    qtbot.waitUntil(lambda: mode.timeline.frames_drawn > drawn, timeout=5000)
    starts = mode.timeline.phase_bars["data"].x0
    assert len(starts) and min(starts) >= 0.9 and max(starts) <= 1.5  # B's own seconds
    mode.timeline.getPlotItem().getViewBox().setXRange(2.0, 2.5, padding=0)
    assert win.timeline.getPlotItem().getViewBox().viewRange()[0] == pytest.approx([2.0, 2.5])


def test_closing_the_comparison_returns_to_the_plain_replay(show_window, qtbot, pair):
    win = show_window(ReplaySession(open_recording(pair[0])))
    title = win.windowTitle()
    splitter = win.frame.splitter
    plots_before = splitter.count()
    log = win.findChild(QDockWidget, "log")
    assert log.isVisible()
    tabs = win.tabifiedDockWidgets(log)
    assert {d.objectName() for d in tabs} >= {"kernel_ops", "runs"}
    mode = win.files.compare_with(pair[1])
    assert splitter.count() == plots_before + 1
    assert not log.isVisible()  # its width went to the comparison
    assert not any(d.isVisible() for d in tabs)  # no empty kernel table in the log's place
    again = win.files.compare_with(pair[1])  # a second comparison replaces the first
    assert again is not mode and splitter.count() == plots_before + 1
    qtbot.waitUntil(lambda: len(win.findChildren(QDockWidget, "compare")) == 1, timeout=5000)
    again.close_button.click()
    assert win.files.comparison is None
    assert splitter.count() == plots_before
    assert win.windowTitle() == title and log.isVisible()
    assert all(d.isVisible() for d in tabs)
    assert not log.visibleRegion().isEmpty()  # the log's tab in front again
    assert win.timeline.host_lanes is PHASE_LANES  # one lane per phase again, as at the desk
    assert not win.timeline.getPlotItem().titleLabel.isVisible()
    assert not again.header.isVisible()
    qtbot.waitUntil(lambda: win.findChild(QDockWidget, "compare") is None, timeout=5000)
    assert win.replay_bar is not None and win.replay.steps.count > 0
    qtbot.waitUntil(lambda: win.scoreboard.model.rowCount() == 2, timeout=5000)


def test_a_corrupt_b_gives_one_error_and_leaves_the_replay_as_it_was(
    show_window, qtbot, tmp_path, pair
):
    win, mode = compare_in_window(show_window, qtbot, pair)
    bad = tmp_path / "broken.gpuwatch"
    bad.write_bytes(b"SQLite format 3\x00" + b"\x00" * 200)
    assert win.files.compare_with(bad) is None
    assert win.error_box is not None and win.error_box.isVisible()
    assert "broken.gpuwatch" in win.error_box.text()
    assert win.files.comparison is mode and mode.header.isVisible()  # the shown one stays
    mode.close_button.click()
    assert win.files.compare_with(bad) is None
    assert win.files.comparison is None and win.findChild(QDockWidget, "compare") is None
    assert win.replay.recording.path == pair[0] and win.replay.steps.count > 0
    assert "(replay)" in win.windowTitle() and "vs" not in win.windowTitle()


def test_the_window_picture_holds_the_comparison_at_the_window_size(
    show_window, qtbot, tmp_path, pair
):
    win, mode = compare_in_window(show_window, qtbot, pair)
    assert (win.width(), win.height()) == (1280, 800)  # nothing in it widened the window
    shot = tmp_path / "compare.png"
    assert save_screenshot(win, shot) is None
    assert png_size(shot) == (win.width(), win.height())
    assert mode.dock.geometry().bottom() < win.height()  # the dock is part of the picture


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from the PNG's IHDR chunk."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_without_steady_figures_the_sentence_says_which_run_lacks_them(pair):
    rows = ReplaySession(open_recording(pair[1])).scoreboard()
    waiting = [r for r in rows if not r.steady]
    assert compare_rows(waiting, rows) == (
        "no comparison: A has no configuration with steady figures"
    )
    assert compare_rows([], []) == (
        "no comparison: A and B have no configuration with steady figures"
    )
    same = compare_rows(rows, rows)
    assert not isinstance(same, str) and same.speed_ratio == pytest.approx(1.0)
    assert same.sentence().startswith("B: 1.00× A's samples/s (2,400 → 2,400/s), input wait ")
