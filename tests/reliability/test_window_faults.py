"""In the window: bad knob values are refused with a message while training
goes on; a runner killed from outside is shown (banner), its steps stay on screen, the window
stays responsive, and Start runs it again."""

from __future__ import annotations

import itertools
import signal
import sys
import time

import psutil
import pytest
from PySide6.QtCore import QTimer

from gpuwatch.core.model.messages import Refusal
from gpuwatch.core.run.session import Session, SessionState

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

BAD_KNOBS = [
    {"num_workers": -1},
    {"num_workers": "two"},
    {"amp": "fp64"},
    {"no_such_knob": 1},
    {"batch_size": 0},
    {"pin_memory": "yes"},
]


def test_bad_knobs_are_refused_a_killed_runner_is_shown_and_start_runs_again(qtbot) -> None:
    from gpuwatch.qt.main_window import MainWindow
    from gpuwatch.qt.window_options import WindowOptions

    session = Session(sample_coarse=False)
    window = MainWindow(session, WindowOptions(workload="mlp", device="cpu"))
    qtbot.addWidget(window)
    window.show()
    ticks: list[float] = []
    probe = QTimer()
    probe.timeout.connect(lambda: ticks.append(time.monotonic()))
    probe.start(20)
    try:
        window.workload_combo.setCurrentText("mlp")
        window.start_run()
        qtbot.waitUntil(
            lambda: session.steps.count >= 20 or session.state is SessionState.FAILED,
            timeout=120_000,
        )
        for values in BAD_KNOBS:
            request = session.set_knobs(values)
            qtbot.waitUntil(lambda r=request: session.answer(r) is not None, timeout=30_000)
            answer = session.answer(request)
            assert isinstance(answer, Refusal), f"{values} was applied"
            assert answer.message, f"{values} refused without a reason"
        count = session.steps.count
        qtbot.waitUntil(lambda: session.steps.count > count, timeout=30_000)  # goes on

        psutil.Process(session.pid).send_signal(signal.SIGKILL)
        qtbot.waitUntil(lambda: session.state is SessionState.FAILED, timeout=30_000)
        killed_at = time.monotonic()
        qtbot.waitUntil(window.banner.isVisible, timeout=5_000)
        assert "killed by SIGKILL" in window.banner.text()
        assert session.steps.count >= count, "the steps received so far stay"
        assert window.start_action.isEnabled() and window.start_action.text() == "Start"
        qtbot.wait(300)  # the window keeps ticking after the failure
        gaps = [b - a for a, b in itertools.pairwise(ticks) if a >= killed_at]
        assert gaps and max(gaps) < 1.0, "the window stays responsive"

        window.start_action.trigger()  # restart
        qtbot.waitUntil(
            lambda: session.state is SessionState.RUNNING and session.steps.count > 0,
            timeout=120_000,
        )
        assert not window.banner.isVisible()
    finally:
        probe.stop()
        window.close()
