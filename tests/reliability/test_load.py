"""Load: 10,000 steps/s from a (fake, torch-free) runner over the real link into the
Session and the window: the window keeps painting frames and stays responsive, and memory stays
bounded because every buffer is a ring. Figures over long runs: ``bench/soak.py``."""

from __future__ import annotations

import itertools
import sys
import time

import psutil
import pytest
from PySide6.QtCore import QEvent, QObject, QTimer

from gpuwatch.core.run.session import LaunchSpec, Session, SessionState

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="the fake runner is POSIX")

RATE = 10_000
CAPACITY = 4096
SECONDS = 4.0


class _PaintCounter(QObject):
    def __init__(self) -> None:
        super().__init__()
        self.times: list[float] = []

    def eventFilter(self, obj, event) -> bool:
        if event.type() == QEvent.Type.Paint:
            self.times.append(time.monotonic())
        return False


def test_ten_thousand_steps_per_second_keep_the_window_drawing_in_bounded_memory(
    qtbot, fake_python: str
) -> None:
    from gpuwatch.qt.main_window import MainWindow
    from gpuwatch.qt.window_options import WindowOptions

    session = Session(step_capacity=CAPACITY, sample_coarse=False)
    window = MainWindow(session, WindowOptions(workload="vision", device="cpu"))
    qtbot.addWidget(window)
    window.resize(1280, 800)
    window.show()
    qtbot.waitExposed(window)
    painted = _PaintCounter()
    window.timeline.viewport().installEventFilter(painted)
    ticks: list[float] = []
    probe = QTimer()
    probe.timeout.connect(lambda: ticks.append(time.monotonic()))
    probe.start(20)
    me = psutil.Process()
    try:
        session.start(LaunchSpec(workload=f"rate:{RATE}", device="cpu", python=fake_python))
        qtbot.waitUntil(lambda: session.steps.count >= CAPACITY, timeout=30_000)
        started = time.monotonic()
        rss_start = me.memory_info().rss
        count_start = session.steps.count
        qtbot.wait(int(SECONDS * 1000))  # the load runs for this long; we measure it
        elapsed = time.monotonic() - started
        rss_end = me.memory_info().rss
        rate = (session.steps.count - count_start) / elapsed
        during = [t for t in painted.times if t >= started]
        gaps = [b - a for a, b in itertools.pairwise(ticks) if a >= started]
        grew_mb = (rss_end - rss_start) / 2**20
        print(
            f"{rate:,.0f} steps/s, {len(during)} frames in {elapsed:.1f} s, longest event-loop "
            f"gap {max(gaps) * 1e3:.0f} ms, RSS {rss_end / 2**20:.0f} MiB ({grew_mb:+.1f})"
        )
        assert session.state is SessionState.RUNNING, session.error
        assert rate >= 0.5 * RATE, f"only {rate:,.0f} steps/s arrived"
        assert len(session.steps.snapshot()) == CAPACITY, "the ring keeps the newest steps only"
        assert len(during) >= 2 * SECONDS, f"only {len(during)} frames in {SECONDS:g} s"
        seconds = {int(t - started) for t in during}
        assert seconds >= set(range(int(SECONDS) - 1)), "frames in every second of the load"
        assert max(gaps) < 1.0, f"the event loop stalled for {max(gaps):.2f} s"
        assert grew_mb < 40, f"memory grew {grew_mb:.0f} MiB in {SECONDS:g} s at full ring"
    finally:
        probe.stop()
        window.close()
