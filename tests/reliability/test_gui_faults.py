"""GUI faults: the window is closed, or the GUI process is killed, while a run with
DataLoader workers is being recorded: the runner and its workers exit within seconds and the
recording is readable."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from faults import alive, assert_all_gone, kill_all, recorded_pids, write_fault_script
from temp_dirs import sweep_after_kill
from waiting import wait_until

from gpuwatch.core.files.recording_reader import open_recording
from gpuwatch.core.run.session import Session, SessionState

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

ROOT = Path(__file__).resolve().parents[2]
#: The runner notices the closed link at once; its watchdog ends it 3 s later at the latest.
RUNNER_GONE_S = 15

GUI = textwrap.dedent("""
    import sys, time
    from gpuwatch.core.files.recording import Recorder
    from gpuwatch.core.run.session import LaunchSpec, Session
    script, out, record = sys.argv[1:4]
    s = Session()
    recorder = Recorder(record, s, flush_s=0.1)
    recorder.start()
    s.start(LaunchSpec(script=script, script_args=(out, "none"), device="cpu"))
    while recorder.steps_written < 10:
        time.sleep(0.05)
    print("recording", flush=True)
    time.sleep(600)
""")


def test_gui_process_killed_ends_runner_and_workers_and_the_recording_is_readable(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    record = tmp_path / "killed gui.gpuwatch"
    gui_py = tmp_path / "gui.py"
    gui_py.write_text(GUI)
    gui = subprocess.Popen(
        [sys.executable, str(gui_py), str(write_fault_script(tmp_path)), str(out), str(record)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert gui.stdout is not None and gui.stdout.readline().strip() == "recording"
        pids = recorded_pids(out)
        assert pids.get("main") and len(pids.get("worker", [])) == 2
        gui.send_signal(signal.SIGKILL)
        gui.wait(10)
        runner_tree = pids["main"] + pids["worker"] + pids["helper"]
        wait_until(
            lambda: not alive(runner_tree),
            RUNNER_GONE_S,
            f"the runner and its workers to exit (left: {alive(runner_tree)})",
        )
        recording = open_recording(record)
        assert len(recording.steps) >= 10
        assert recording.hello is not None
    finally:
        if gui.poll() is None:
            gui.kill()
        kill_all(out)
        gui.wait(10)
    sweep_after_kill(gui.pid)


def test_closing_the_window_ends_the_whole_tree_and_keeps_the_recording(
    qtbot, tmp_path: Path, monkeypatch
) -> None:
    from gpuwatch.qt import file_dialogs, record_control
    from gpuwatch.qt.main_window import MainWindow
    from gpuwatch.qt.window_options import WindowOptions

    monkeypatch.setattr(file_dialogs, "recordings_dir", lambda: tmp_path / "recordings")
    monkeypatch.setattr(record_control, "recordings_dir", lambda: tmp_path / "recordings")
    out = tmp_path / "out"
    out.mkdir()
    session = Session(sample_coarse=False)
    window = MainWindow(
        session,
        WindowOptions(
            workload="vision",
            device="cpu",
            python=None,
            script=str(write_fault_script(tmp_path)),
            script_args=(str(out), "none"),
            cwd=str(tmp_path),
            seconds=None,
        ),
    )
    qtbot.addWidget(window)
    window.show()
    try:
        window.start_run()
        qtbot.waitUntil(lambda: session.steps.count >= 5, timeout=120_000)
        window.record_action.setChecked(True)
        assert window.recording.recorder is not None, "recording started"
        qtbot.waitUntil(lambda: window.recording.recorder.steps_written >= 5, timeout=10_000)
        path = window.recording.recorder.path
        window.close()
        assert session.state is SessionState.FINISHED, session.error
        assert_all_gone(out, 5)
        recording = open_recording(path)
        assert len(recording.steps) >= 5
        assert recording.bye is not None and recording.bye["reason"] == "stopped"
    finally:
        window.close()
        kill_all(out)
