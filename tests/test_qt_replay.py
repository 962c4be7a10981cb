"""The window on a recording: replay mode, File menu (open, compare, record, export PNG) and
``gpuwatch replay``; recordings are made with the real Recorder from a fed session."""

from __future__ import annotations

import io
import json
import struct
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from PySide6.QtCore import QPoint
from PySide6.QtWidgets import QApplication, QDockWidget
from test_replay import S, SteppedClock, script

from gpuwatch.core.files.recording import Recorder
from gpuwatch.core.files.recording_reader import open_recording
from gpuwatch.core.files.replay import READ_ONLY, ReplaySession
from gpuwatch.core.run import session as session_module
from gpuwatch.core.run.session import Session, SessionState
from gpuwatch.qt import file_dialogs, record_control
from gpuwatch.qt.app import DEFAULT_SIZE
from gpuwatch.qt.compare_view import CompareView, breakdown
from gpuwatch.qt.main_window import MainWindow
from gpuwatch.qt.window_options import WindowOptions

ROOT = Path(__file__).resolve().parents[1]


def feed(session: Session, n_batches: int) -> None:
    """Play the runner: a CPU run with a knob change, as if launched, each message arriving
    at its scripted time (the clock the session and the recorder's listener read)."""
    session._state = SessionState.RUNNING
    with pytest.MonkeyPatch.context() as patch:
        clock = SteppedClock(session.t0_ns)
        patch.setattr(session_module.time, "perf_counter_ns", clock)
        for t_ns, message in script(session.t0_ns + S, n_batches):
            clock.now_ns = t_ns
            session._dispatch(message)
    session._state = SessionState.FINISHED


def make_recording(path: Path, n_batches: int = 40) -> Path:
    live = Session(sample_coarse=False)
    recorder = Recorder(path, live, flush_s=0.01)
    recorder.start()
    feed(live, n_batches)
    recorder.close()
    assert recorder.error is None
    return path


@pytest.fixture
def recording(tmp_path) -> Path:
    return make_recording(tmp_path / "first.gpuwatch")


@pytest.fixture
def no_documents(tmp_path, monkeypatch) -> Path:
    """Record and the file dialogs use a temporary folder, never the user's documents."""
    folder = tmp_path / "documents" / "gpuwatch"
    monkeypatch.setattr(file_dialogs, "recordings_dir", lambda: folder)
    monkeypatch.setattr(record_control, "recordings_dir", lambda: folder)
    return folder


def test_replay_window_shows_the_run_with_a_moving_bar_and_read_only_knobs(
    show_window, qtbot, recording, no_documents
):
    now = [0.0]
    replay = ReplaySession(open_recording(recording), clock=lambda: now[0])
    win = show_window(replay)
    assert win.replay_bar is not None and "first.gpuwatch" in win.windowTitle()
    qtbot.waitUntil(lambda: win.scoreboard.model.rowCount() == 2, timeout=5000)
    assert win.timeline.getPlotItem().listDataItems()
    assert not win.start_action.isEnabled() and not win.record_action.isEnabled()
    assert not win.knob_panel.isEnabled() and win.knob_panel.rows
    assert READ_ONLY in win.findChild(QDockWidget, "knobs").windowTitle()
    bar = win.replay_bar
    assert bar.slider.value() == bar.slider.maximum()  # opened at the end: the whole run
    bar.seek(0.0)
    assert bar.slider.value() == 0 and replay.steps.count == 0
    bar.toggle()  # play
    assert replay.playing and bar.play_button.text() == "Pause"
    bar.speed_combo.setCurrentText("2×")
    now[0] += 1.0
    qtbot.waitUntil(lambda: bar.slider.value() == 2000, timeout=5000)
    assert bar.position_label.text() == "2.0 s"
    assert 0 < replay.steps.count < len(replay.recording.steps)
    qtbot.waitUntil(lambda: win.scoreboard.model.rowCount() == 1, timeout=5000)  # baseline
    now[0] += 100.0
    qtbot.waitUntil(lambda: not replay.playing, timeout=5000)
    assert bar.slider.value() == bar.slider.maximum() and bar.play_button.text() == "Play"


def test_file_open_on_a_bad_file_shows_the_error_and_keeps_the_window(
    show_window, qtbot, tmp_path, recording, no_documents
):
    win = show_window(Session(sample_coarse=False))
    bad = tmp_path / "notes.gpuwatch"
    bad.write_text("not a recording")
    assert win.files.open_recording_file(bad) is None
    assert win.error_box is not None and win.error_box.isVisible()
    assert "not a gpuwatch recording" in win.error_box.text()
    win.error_box.close()
    assert win.isVisible()
    opened = win.files.open_recording_file(recording)
    assert opened is not None and opened.replay is not None and opened.isVisible()
    qtbot.waitUntil(lambda: opened.scoreboard.model.rowCount() == 2, timeout=5000)
    opened.close()


def test_compare_shows_both_scoreboards_and_breakdowns_that_sum_to_the_step(
    show_window, qtbot, tmp_path, recording, no_documents
):
    other = make_recording(tmp_path / "second.gpuwatch", n_batches=12)
    win = show_window(ReplaySession(open_recording(recording)))
    mode = win.files.compare_with(other)
    assert mode is not None
    view = mode.view
    assert isinstance(view, CompareView) and view.window() is win  # in the window, not beside
    assert [b.model.rowCount() for b in view.scoreboards] == [2, 2]
    runs = [view.table.item(r, 0).text() for r in range(view.table.rowCount())]
    assert runs == ["A", "A", "B", "B"]
    assert [view.sessions[0].recording.path.name, view.sessions[1].recording.path.name] == [
        "first.gpuwatch",
        "second.gpuwatch",
    ]
    for session in view.sessions:
        rows = {r.config_id: r for r in session.scoreboard()}
        for part in breakdown(session):
            assert part.step_ms == pytest.approx(rows[part.config_id].step_ms_p50)
            assert part.phase_ms[0] == pytest.approx(8.0)  # the data phase of the script
    assert win.files.compare_with(tmp_path / "missing.gpuwatch") is None
    assert "no such file" in win.error_box.text()


def test_record_action_writes_a_file_that_open_recording_reads(show_window, qtbot, no_documents):
    session = Session(sample_coarse=False)
    win = show_window(session)
    win.record_action.setChecked(True)
    assert win.recording.recorder is not None
    path = win.recording.recorder.path
    assert path.parent == no_documents and path.suffix == ".gpuwatch"
    assert "recording to" in win.statusBar().currentMessage()
    feed(session, 8)
    win.record_action.setChecked(False)
    assert (
        win.recording.recorder is None and "recorded 40 steps" in win.statusBar().currentMessage()
    )
    recording = open_recording(path)
    assert len(recording.steps) == 40
    assert [c.id for c in recording.configs] == [0, 1]


def test_export_png_of_the_window(show_window, tmp_path, recording, no_documents):
    win = show_window(ReplaySession(open_recording(recording)))
    out = tmp_path / "shots" / "window.png"
    assert win.files.export_png(out)
    assert out.read_bytes()[:4] == b"\x89PNG"


def test_export_perfetto_and_csv_from_the_menu(show_window, tmp_path, recording, no_documents):
    live = show_window(Session(sample_coarse=False))
    assert not live.files.export_recording("csv", tmp_path / "none.csv")
    assert "record the run" in live.error_box.text()
    win = show_window(ReplaySession(open_recording(recording)))
    assert win.files.export_recording("perfetto", tmp_path / "trace.json")
    assert json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    assert win.files.export_recording("csv", tmp_path / "steps.csv")
    assert len((tmp_path / "steps.csv").read_text().splitlines()) == 1 + 200
    assert not win.files.export_recording("csv", tmp_path / "no" / "such" / "dir" / "steps.csv")
    assert "cannot write" in win.error_box.text()


def run_cli(*args: str) -> subprocess.CompletedProcess:
    code = (
        "import sys; from gpuwatch.cli import main; rc = main(sys.argv[1:]); "
        "print('torch imported' if 'torch' in sys.modules else 'no torch'); sys.exit(rc)"
    )
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={"QT_QPA_PLATFORM": "offscreen", "PATH": "/usr/bin:/bin"},
    )


def test_cli_replay_opens_compares_and_screenshots_without_torch(tmp_path, recording):
    other = make_recording(tmp_path / "second.gpuwatch", n_batches=12)
    shot = tmp_path / "replay.png"
    done = run_cli(
        "replay",
        str(recording),
        "--compare",
        str(other),
        "--demo-seconds",
        "1",
        "--screenshot",
        str(shot),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "no torch"
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    # The comparison is in the window and did not widen it: the picture is the window's size.
    assert struct.unpack(">II", data[16:24]) == DEFAULT_SIZE


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("missing.gpuwatch", None, "no such file"),
        ("text.gpuwatch", "hello", "not a gpuwatch recording"),
    ],
)
def test_cli_replay_of_a_bad_file_is_one_line_and_exit_1(tmp_path, name, content, message):
    path = tmp_path / name
    if content is not None:
        path.write_text(content)
    done = run_cli("replay", str(path))
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and lines[0].startswith("gpuwatch: ")


def test_window_options_are_ignored_in_replay(qtbot, recording):
    win = MainWindow(
        ReplaySession(open_recording(recording)),
        WindowOptions(workload="mlp", device="cpu"),
    )
    qtbot.addWidget(win)
    assert not win.workload_combo.isEnabled() and not win.device_combo.isEnabled()
    win.close()


def test_replay_fills_the_log_with_what_the_run_logged_and_printed(show_window, qtbot, tmp_path):
    live = Session(sample_coarse=False)
    recorder = Recorder(tmp_path / "printed.gpuwatch", live, flush_s=0.01)
    recorder.start()
    feed(live, 12)
    # What the script printed reaches the session through the runner's output pipe.
    live._proc = SimpleNamespace(stdout=io.BytesIO(b"loss 0.52\n\nepoch 1 done\n"))
    live._read_output()
    recorder.close()
    assert recorder.error is None
    win = show_window(ReplaySession(open_recording(tmp_path / "printed.gpuwatch")))
    text = win.log_pane.toPlainText
    qtbot.waitUntil(lambda: "epoch 1 done" in text(), timeout=5000)
    assert "runner    loss 0.52" in text()  # the output, as the live log showed it
    assert "epoch 3" in text()  # a runner log message
    assert "fp16 needs CUDA" in text()  # the refusal, logged by the fold as live
    win.replay_bar.seek(0.0)  # back to the start: the log starts over, then fills as it plays
    qtbot.waitUntil(lambda: "epoch 3" not in text(), timeout=5000)


def test_replay_keeps_the_live_layout(show_window, qtbot, recording, no_documents):
    live = Session(sample_coarse=False)
    feed(live, 40)
    shown = [show_window(live), show_window(ReplaySession(open_recording(recording)))]
    for win in shown:
        win.resize(1280, 720)
        qtbot.waitUntil(lambda w=win: w.scoreboard.model.rowCount() == 2, timeout=5000)
    QApplication.processEvents()
    replay_win = shown[1]
    # The same parts; the plots give up only the room the replay bar's toolbar takes.
    plots = [w.timeline.height() + w.utilization.plot.height() for w in shown]
    tops = [w.centralWidget().mapTo(w, QPoint(0, 0)).y() for w in shown]
    assert tops[1] - tops[0] >= replay_win.replay_bar.height()
    assert 0 <= plots[0] - plots[1] <= tops[1] - tops[0] + 2, (plots, tops)
    assert not replay_win.kernel_capture.lane.isVisible()  # nothing captured: no empty lane
    line = replay_win.timeline.fontMetrics().height()
    assert replay_win.timeline.height() >= 8 * line  # eight lanes, a text line each at least
    assert replay_win.utilization.plot.height() >= 5 * line


def test_a_message_posted_before_the_window_shows_is_not_drawn_over_the_status_fields(
    show_window, qtbot, recording
):
    """The replay folds its refusal while the window is built; once shown, the message
    stands alone where the run's state, device and timing fields are."""
    win = show_window(ReplaySession(open_recording(recording)))
    qtbot.waitUntil(lambda: "refused" in win.statusBar().currentMessage(), timeout=5000)
    assert not win.status_line.state_label.isVisible()
    assert not win.status_line.timing_label.isVisible()
