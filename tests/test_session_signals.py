"""The Qt bridge: a run model's events arrive as signals on the GUI thread."""

from __future__ import annotations

import threading

from PySide6.QtCore import QObject, QThread

from gpuwatch.core.figures.kernel_window import KernelWindow
from gpuwatch.core.model.messages import (
    CaptureFailed,
    ChangeRefused,
    ConfigApplied,
    ConfigChange,
    KernelWindowReady,
    Refusal,
    SessionState,
    StateChanged,
)
from gpuwatch.core.run.run_model import RunModel
from gpuwatch.qt.session_signals import SessionSignals

CHANGE = ConfigChange(
    id=1, values={"num_workers": 2}, changed={"num_workers": 2}, t_ns=5, first_step=10,
    warmup_steps=6,
)  # fmt: skip
REFUSAL = Refusal(request=3, values={"num_workers": "two"}, message="not an integer", t_ns=7)
#: A capture window of two steps without events (the bridge passes it on untouched).
WINDOW = KernelWindow.from_message(
    {"status": "ok", "device": "cpu", "steps": [3, 4], "perturbed": [2, 3, 4],
     "t0_ns": 100, "t1_ns": 900, "names": [], "type": [], "name": [], "stream": [],
     "start": [], "end": []}
)  # fmt: skip


def _emit_from_a_plain_thread(model: RunModel, event: object) -> None:
    thread = threading.Thread(target=model.emit, args=(event,))
    thread.start()
    thread.join(10)


def test_each_event_kind_arrives_as_its_signal_on_the_gui_thread(qtbot) -> None:
    model = RunModel()
    signals = SessionSignals(model)
    gui = QThread.currentThread()
    ran_on: list[bool] = []
    signals.sig_state_changed.connect(lambda _: ran_on.append(QThread.currentThread() is gui))
    cases = [
        (signals.sig_config_applied, ConfigApplied(CHANGE), CHANGE),
        (signals.sig_refusal, ChangeRefused(REFUSAL), REFUSAL),
        (signals.sig_kernel_window, KernelWindowReady(WINDOW), WINDOW),
        (signals.sig_capture_failed, CaptureFailed("refused: busy"), "refused: busy"),
        (signals.sig_state_changed, StateChanged(SessionState.RUNNING), SessionState.RUNNING),
    ]
    for signal, event, payload in cases:
        with qtbot.waitSignal(signal, timeout=10_000) as blocker:
            _emit_from_a_plain_thread(model, event)
        assert blocker.args == [payload]
    assert ran_on == [True]


def test_a_plain_thread_emit_is_queued_until_the_gui_loop_runs(qtbot) -> None:
    model = RunModel()
    signals = SessionSignals(model)
    got: list[object] = []
    signals.sig_refusal.connect(got.append)
    _emit_from_a_plain_thread(model, ChangeRefused(REFUSAL))
    assert got == []  # not delivered on the emitting thread
    qtbot.waitUntil(lambda: got == [REFUSAL], timeout=10_000)


def test_detached_or_destroyed_bridges_stop_listening(qtbot) -> None:
    model = RunModel()
    parent = QObject()
    kept = SessionSignals(model, parent)
    got: list[object] = []
    kept.sig_state_changed.connect(got.append)
    kept.detach()
    model.emit(StateChanged(SessionState.FAILED))
    qtbot.wait(50)  # a queued delivery would land within the event loop's next turns
    assert got == []
    SessionSignals(model, parent)
    assert len(model._listeners) == 1
    parent.deleteLater()
    qtbot.waitUntil(lambda: not model._listeners, timeout=10_000)
