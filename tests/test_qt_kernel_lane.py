"""The kernel lane and the "Capture kernels" action, fed like the link thread feeds a Session.

The CUDA window below is SIMULATED (hand-written kernels, streams and geometry; no GPU here).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QDockWidget

from gpuwatch import protocol
from gpuwatch.commands.nsight_command import gpuwatch_argv, nsight_command
from gpuwatch.core.model.messages import DeviceInfo, Hello
from gpuwatch.core.run.session import LaunchSpec, Session, SessionState

K, CPY, OP = (protocol.KERNEL_KINDS.index(k) for k in ("kernel", "memcpy", "cpu_op"))
MS = 1_000_000


class FakeLink:
    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def send(self, kind: str, **fields: Any) -> bool:
        self.sent.append((kind, fields))
        return True


def kernels_message(t0: int, device: str = "cuda") -> dict[str, Any]:
    """SIMULATED window of 3 steps from ``t0``: two kernels (one under-filled) and a copy."""
    kind = [K, K, CPY] if device == "cuda" else [OP, OP, OP]
    return {
        "kind": "kernels",
        "status": "ok",
        "device": device,
        "steps": [11, 12, 13],
        "perturbed": [10, 11, 12, 13],
        "t0_ns": t0,
        "t1_ns": t0 + 30 * MS,
        "names": ["gemm", "relu", "Memcpy HtoD"],
        "type": kind,
        "name": [0, 1, 2],
        "stream": [7, 7, 7],
        "start": [t0 + 1 * MS, t0 + 5 * MS, t0 + 10 * MS],
        "end": [t0 + 4 * MS, t0 + 6 * MS, t0 + 12 * MS],
        "launch": [t0, t0, t0],
        "blocks_per_sm": [4.0, 0.5, None],
        "grid": [None] * 3,
        "block": [None] * 3,
        "dropped": 0,
    }


@pytest.fixture
def window(show_window):
    return show_window(Session(sample_coarse=False))


def running(session: Session) -> FakeLink:
    link = FakeLink()
    session.hello = Hello(workload="mlp", device=DeviceInfo(kind="cuda", name="simulated GPU"))
    session._link = link  # type: ignore[assignment]
    session._state = SessionState.RUNNING
    return link


def test_lane_is_hidden_until_a_capture_and_action_needs_a_run(window, qtbot) -> None:
    controls = window.kernel_capture
    assert not controls.lane.isVisible()
    assert not controls.action.isEnabled()  # nothing is running
    assert not controls.capture()
    assert "no training run" in window.statusBar().currentMessage()


def test_capture_asks_the_runner_and_the_window_shows_in_the_lane(window, qtbot) -> None:
    session: Session = window.session
    link = running(session)
    controls = window.kernel_capture
    qtbot.waitUntil(controls.action.isEnabled, timeout=5000)
    controls.step_actions[5].trigger()
    controls.action.trigger()
    assert link.sent == [("capture", {"steps": 5})]
    qtbot.waitUntil(lambda: controls.action.text() == "Capturing…", timeout=5000)
    assert not controls.action.isEnabled() and controls.lane.isVisible()

    session._dispatch_kind(kernels_message(session.t0_ns + 2_000 * MS))  # SIMULATED CUDA
    qtbot.waitUntil(lambda: controls.lane.summary != "", timeout=5000)
    lane = controls.lane
    assert lane.event_bars["kernel"].count() == 2 and lane.event_bars["memcpy"].count() == 1
    assert lane.window_bars.count() == 1
    assert [t.toPlainText() for t in lane.labels] == [
        "profiled: busy 20%, 2 kernels, 1 under-filled"
    ]
    assert "left out of the scoreboard" in lane.toolTip()
    assert "1 under-filled (<1 block/SM" in lane.summary
    qtbot.waitUntil(controls.action.isEnabled, timeout=5000)
    assert session.kernel_windows()[0].perturbed == (10, 11, 12, 13)


def test_cpu_window_is_labelled_cpu_ops(window, qtbot) -> None:
    session: Session = window.session
    session._dispatch_kind(kernels_message(session.t0_ns, device="cpu"))
    lane = window.kernel_capture.lane
    qtbot.waitUntil(lane.isVisible, timeout=5000)
    assert lane.event_bars["cpu_op"].count() == 3
    ticks = lane.getPlotItem().getAxis("left")._tickLevels[0]
    assert ticks[0][1] == "CPU ops\n(profiled)"
    assert "CPU ops" in lane.labels[0].toPlainText()


def test_a_failed_capture_is_shown_in_the_status_bar(window, qtbot) -> None:
    session: Session = window.session
    running(session)
    window.kernel_capture.capture(3)
    session._dispatch_kind(
        {
            "kind": "kernels",
            "status": "failed",
            "device": "cuda",
            "error": "the profiler could not start (RuntimeError: CUPTI)",
            "steps": [],
            "perturbed": [],
            "names": [],
            "type": [],
            "name": [],
            "stream": [],
            "start": [],
            "end": [],
        }
    )
    qtbot.waitUntil(lambda: "could not start" in window.statusBar().currentMessage(), timeout=5000)
    assert window.kernel_capture.action.isEnabled()


def test_copy_nsight_command_puts_the_command_on_the_clipboard(window) -> None:
    command = window.kernel_capture.copy_nsight_command()
    spec = LaunchSpec(
        workload=window.workload_combo.currentText(), device=str(window.device_combo.currentData())
    )
    assert command == nsight_command(spec, gpuwatch_argv())
    assert QGuiApplication.clipboard().text() == command
    help_menu = next(a.menu() for a in window.menuBar().actions() if "Help" in a.text())
    assert window.kernel_capture.nsight_action in help_menu.actions()


def test_replay_shows_recorded_windows_and_cannot_capture(show_window, tmp_path, qtbot) -> None:
    from waiting import wait_until

    from gpuwatch.core.files.recording import Recorder
    from gpuwatch.core.files.recording_reader import open_recording
    from gpuwatch.core.files.replay import ReplaySession

    live = Session(sample_coarse=False)
    recorder = Recorder(tmp_path / "k.gpuwatch", live, flush_s=0.05)
    recorder.start()
    live._dispatch(
        {
            "kind": "hello",
            "protocol": 1,
            "pid": 1,
            "workload": "mlp",
            "device": {"kind": "cuda", "name": "simulated GPU"},
            "versions": {},
            "knobs": [],
            "config": {"values": {}, "warmup_steps": 0},
        }
    )
    t0 = live.t0_ns
    live._dispatch(
        {
            "kind": "steps",
            "step": list(range(20)),
            "config": [0] * 20,
            "samples": [4] * 20,
            "host": [[t0 + i * 10 * MS + k * MS for k in range(7)] for i in range(20)],
        }
    )
    live._dispatch(kernels_message(t0 + 100 * MS))  # SIMULATED CUDA window
    wait_until(lambda: recorder.steps_written == 20, 10, "the steps written")
    recorder.close()

    window = show_window(ReplaySession(open_recording(tmp_path / "k.gpuwatch")))
    controls = window.kernel_capture
    qtbot.waitUntil(controls.lane.isVisible, timeout=5000)
    assert controls.lane.event_bars["kernel"].count() == 2
    assert not controls.action.isEnabled()


def test_the_ops_table_lists_calls_total_and_self_time_and_sorts_by_value(window, qtbot) -> None:
    from PySide6.QtCore import Qt

    session: Session = window.session
    running(session)
    window.kernel_capture.capture(3)
    message = kernels_message(session.t0_ns + 2_000 * MS)  # SIMULATED CUDA
    # a third kernel named like the first: gemm runs twice (3 ms + 1 ms)
    for column, value in (("type", K), ("name", 0), ("stream", 7), ("launch", 0)):
        message[column].append(value)
    message["start"].append(session.t0_ns + 20 * MS + 2_000 * MS)
    message["end"].append(session.t0_ns + 21 * MS + 2_000 * MS)
    for column in ("blocks_per_sm", "grid", "block"):
        message[column].append(None)
    session._dispatch_kind(message)
    dock = window.findChild(QDockWidget, "kernel_ops")
    qtbot.waitUntil(
        lambda: dock.isVisible() and bool(window.kernel_capture.table.model.rows), timeout=5000
    )
    table = window.kernel_capture.table
    model = table.model

    def column(name: str) -> list[str]:
        index = [model.headerData(c, Qt.Orientation.Horizontal) for c in range(6)].index(name)
        return [model.data(model.index(r, index)) for r in range(model.rowCount())]

    assert column("Name") == ["gemm", "Memcpy HtoD", "relu"]  # most total time first
    assert column("Calls") == ["2", "1", "1"]
    assert column("Total ms") == ["4.000", "2.000", "1.000"]
    assert column("Self ms") == column("Total ms")  # one stream: nothing nests
    assert column("Mean µs") == ["2,000.0", "2,000.0", "1,000.0"]
    assert "steps 11–13" in table.caption.text()
    table.view.sortByColumn(2, Qt.SortOrder.AscendingOrder)  # a header click: by calls
    assert column("Calls") == ["1", "1", "2"]
    table.view.sortByColumn(0, Qt.SortOrder.AscendingOrder)
    assert column("Name") == ["gemm", "Memcpy HtoD", "relu"]  # names sort case-blind


def test_the_lane_shows_only_while_a_window_is_in_view(window, qtbot) -> None:
    session: Session = window.session
    session._dispatch_kind(kernels_message(session.t0_ns + 2_000 * MS, device="cpu"))
    lane = window.kernel_capture.lane
    view_box = window.timeline.getPlotItem().getViewBox()
    window.follow_action.setChecked(False)
    view_box.setXRange(1.0, 3.0, padding=0)
    qtbot.waitUntil(lane.isVisible, timeout=5000)
    lane_box = lane.getPlotItem().getViewBox()
    np.testing.assert_allclose(lane_box.viewRange()[0], (1.0, 3.0))  # on the timeline's range
    view_box.setXRange(10.0, 40.0, padding=0)  # the window scrolled out of view
    qtbot.waitUntil(lambda: not lane.isVisible(), timeout=5000)
    # hidden, it no longer follows the timeline (a linked view follows every frame)
    assert lane_box.linkedView(0) is None
    view_box.setXRange(0.0, 30.0, padding=0)
    qtbot.waitUntil(lane.isVisible, timeout=5000)
    np.testing.assert_allclose(lane_box.viewRange()[0], (0.0, 30.0))
    view_box.setXRange(0.5, 20.0, padding=0)
    np.testing.assert_allclose(lane_box.viewRange()[0], (0.5, 20.0))
