"""Data: a recording survives a kill of its writer at any moment, is never
overwritten without asking, and a full disk is reported (headless and in the window), with what
was committed before it still readable."""

from __future__ import annotations

import datetime as dt
import io
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from waiting import wait_until

from gpuwatch.commands.headless import HeadlessOptions, run_headless
from gpuwatch.core.files import recording as recording_module
from gpuwatch.core.files.recording_reader import open_recording
from gpuwatch.core.run.session import Session

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

ROOT = Path(__file__).resolve().parents[2]
FULL = "database or disk is full"

WRITER = textwrap.dedent("""
    import sys, time
    from gpuwatch.core.files.recording import Recorder
    from gpuwatch.core.run.session import LaunchSpec, Session
    python, record = sys.argv[1:3]
    s = Session(sample_coarse=False)
    Recorder(record, s, flush_s=0.05).start()
    s.start(LaunchSpec(workload="rate:5000", device="cpu", python=python))
    print("started", flush=True)
    time.sleep(600)
""")


@pytest.mark.parametrize("after_s", [0.0, 0.15, 0.4, 0.8, 1.3, 2.1])
def test_a_writer_killed_at_any_moment_leaves_a_readable_recording(
    tmp_path: Path, fake_python: str, after_s: float
) -> None:
    record = tmp_path / "run.gpuwatch"
    writer_py = tmp_path / "writer.py"
    writer_py.write_text(WRITER)
    writer = subprocess.Popen(
        [sys.executable, str(writer_py), fake_python, str(record)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "started"
        time.sleep(after_s)  # the moment of the kill is the parameter, not a wait for a result
        writer.send_signal(signal.SIGKILL)
        writer.wait(10)
    finally:
        if writer.poll() is None:
            writer.kill()
    recording = open_recording(record)  # raises RecordingError if the file were broken
    steps = recording.steps.step
    assert list(steps) == list(range(len(steps))), "a prefix of the run, without holes"
    if after_s >= 0.8:  # batches are committed every 50 ms: by now some must be in the file
        assert len(steps) > 0, "nothing was committed before the kill"


def _full_after_first_batch():
    """A Recorder._write that commits once, then fails as SQLite does on a full disk."""
    original = recording_module.Recorder._write
    calls = []

    def write(recorder, batch, *, final):
        calls.append(len(batch))
        if len(calls) > 1 and any(m["kind"] == "steps" for m, _ in batch):
            raise sqlite3.OperationalError(FULL)
        return original(recorder, batch, final=final)

    return write


def test_a_full_disk_is_reported_headless_and_the_run_goes_on(
    tmp_path: Path, fake_python: str, monkeypatch
) -> None:
    monkeypatch.setattr(recording_module.Recorder, "_write", _full_after_first_batch())
    monkeypatch.setenv("GPUWATCH_FAKE_MODE", "rate:500")
    script = tmp_path / "train.py"
    script.write_text("")
    out, err = io.StringIO(), io.StringIO()
    code = run_headless(
        HeadlessOptions(
            script=str(script),
            python=fake_python,
            seconds=1.5,
            record=str(tmp_path / "full.gpuwatch"),
            cwd=str(tmp_path),
        ),
        out=out,
        err=err,
    )
    assert code == 0, err.getvalue()
    assert (
        f"the recording stopped early: recording to {tmp_path / 'full.gpuwatch'} stopped "
        f"({FULL}); the run goes on" in err.getvalue()
    )
    assert "was stopped after 1.5 s" in out.getvalue(), "the run itself went on to its end"
    open_recording(tmp_path / "full.gpuwatch")  # what was committed stays readable


def test_an_unexpected_error_in_the_writer_stops_the_recording_with_a_message(
    tmp_path: Path, fake_python: str, monkeypatch
) -> None:
    """A bug (not a disk error) must not kill the writer thread silently while the queue
    fills and drops everything after it."""
    from gpuwatch.core.files.recording import Recorder

    def broken(recorder, batch, *, final):
        raise TypeError("a bug")

    monkeypatch.setattr(Recorder, "_write", broken)
    session = Session(sample_coarse=False)
    recorder = Recorder(tmp_path / "bug.gpuwatch", session, flush_s=0.05)
    recorder.start()
    try:
        session.start(_fake_spec(fake_python))
        wait_until(lambda: recorder.error is not None, 10, "the recorder to report the bug")
        assert "internal error: TypeError: a bug" in recorder.error
        assert "the run goes on" in recorder.error
    finally:
        recorder.close()
        session.close()


def _fake_spec(fake_python: str):
    from gpuwatch.core.run.session import LaunchSpec

    return LaunchSpec(workload="rate:500", device="cpu", python=fake_python)


def _window(qtbot, session: Session, fake_python: str):
    from gpuwatch.qt.main_window import MainWindow
    from gpuwatch.qt.window_options import WindowOptions

    window = MainWindow(
        session, WindowOptions(workload="rate:500", device="cpu", python=fake_python)
    )
    qtbot.addWidget(window)
    window.show()
    return window


def test_a_full_disk_is_reported_in_the_window_at_once(
    qtbot, tmp_path: Path, fake_python: str, monkeypatch
) -> None:
    from gpuwatch.qt import file_dialogs, main_window, record_control

    monkeypatch.setattr(file_dialogs, "recordings_dir", lambda: tmp_path)
    monkeypatch.setattr(record_control, "recordings_dir", lambda: tmp_path)
    monkeypatch.setattr(recording_module.Recorder, "_write", _full_after_first_batch())
    session = Session(sample_coarse=False)
    window = _window(qtbot, session, fake_python)
    try:
        window.session.start(
            main_window.LaunchSpec(workload="rate:500", device="cpu", python=fake_python)
        )
        qtbot.waitUntil(lambda: session.steps.count > 0, timeout=30_000)
        window.record_action.setChecked(True)
        qtbot.waitUntil(
            lambda: window.error_box is not None and window.error_box.isVisible(), timeout=10_000
        )
        assert window.error_box.windowTitle() == "Recording stopped"
        assert FULL in window.error_box.text()
        assert not window.record_action.isChecked()
        assert window.recording.recorder is None
        count = session.steps.count
        qtbot.waitUntil(lambda: session.steps.count > count, timeout=10_000)  # run goes on
    finally:
        window.close()


def test_the_window_never_overwrites_a_recording(
    qtbot, tmp_path: Path, fake_python: str, monkeypatch
) -> None:
    from gpuwatch.qt import file_dialogs, record_control

    class Frozen(dt.datetime):
        @classmethod
        def now(cls, tz=None):
            return cls(2026, 1, 2, 3, 4, 5)

    monkeypatch.setattr(file_dialogs, "recordings_dir", lambda: tmp_path)
    monkeypatch.setattr(record_control, "recordings_dir", lambda: tmp_path)
    monkeypatch.setattr(record_control, "datetime", Frozen)
    existing = tmp_path / "rate:500-2026-01-02_03-04-05.gpuwatch"
    existing.write_bytes(b"an earlier run")
    session = Session(sample_coarse=False)
    window = _window(qtbot, session, fake_python)
    try:
        window.workload_combo.addItem("rate:500")
        window.workload_combo.setCurrentText("rate:500")
        window.record_action.setChecked(True)
        qtbot.waitUntil(
            lambda: window.error_box is not None and window.error_box.isVisible(), timeout=5_000
        )
        assert "already exists" in window.error_box.text()
        assert existing.read_bytes() == b"an earlier run"
        assert not window.record_action.isChecked()
    finally:
        window.close()
