"""Between the strides of a followed view (``plots_redraw.FOLLOW_STRIDES``) the plots stand
still, and a frame repaints only what its new data changed: the newest steps at the right
end, not every pixel. What is on screen is still what a full repaint shows.

The run here is SIMULATED (a CUDA-like fake on the test's own clock), drawn frame by frame.
"""

from __future__ import annotations

import numpy as np
import pytest
from backing_store import PaintedRects, on_screen, repainted_whole, view_box_rect
from PySide6.QtCore import QRect
from PySide6.QtWidgets import QApplication

from gpuwatch.core.model.messages import DeviceInfo, Hello
from gpuwatch.core.model.metrics import PROC_CPU
from gpuwatch.core.model.store import MetricStatus
from gpuwatch.core.run.session import Session, SessionState
from gpuwatch.protocol import N_MARKS
from gpuwatch.qt.lane_spans import _changed_x

S = 1_000_000_000
MS = 1_000_000
STEP_NS = 100 * MS


class FakeRun:
    """A CUDA-like run at 10 steps/s on a clock of the test's own: each step's device marks
    arrive with the next step, every tenth step is followed by a pause (an idle gap), and a
    runner CPU sample comes every second."""

    def __init__(self, session: Session, now_ns: int) -> None:
        self.session = session
        self.now_ns = now_ns
        self.rng = np.random.default_rng(7)
        self.step = 0
        self.pending: tuple[int, np.ndarray] | None = None
        self.next_sample_ns = session.t0_ns

    def _marks(self, start_ns: int) -> np.ndarray:
        lengths = (STEP_NS / N_MARKS * self.rng.uniform(0.5, 1.5, N_MARKS - 1)).astype(np.int64)
        return start_ns + np.concatenate(([0], np.cumsum(lengths)))

    def advance(self, ns: int) -> None:
        """Time passes: the steps and samples that ended meanwhile arrive."""
        self.now_ns += ns
        session = self.session
        while True:
            last = session.steps.snapshot(last=1)
            start = int(last.host[-1, -1]) if len(last) else session.t0_ns
            if self.step % 10 == 9:
                start += 3 * STEP_NS // 2  # a pause: the device lane idles
            marks = self._marks(start)
            if marks[-1] > self.now_ns:
                break
            session.steps.append([self.step], [0], [32], [marks.tolist()])
            if self.pending is not None:
                step, host = self.pending
                session.steps.set_device_marks([step], [(host + 2 * MS).tolist()])
            self.pending = (self.step, marks)
            self.step += 1
        while self.next_sample_ns + S <= self.now_ns:
            value = float(self.rng.uniform(30, 90))
            session.coarse.append(PROC_CPU, self.next_sample_ns, self.next_sample_ns + S, value)
            self.next_sample_ns += S


@pytest.fixture
def followed(show_window):
    """A window following a live fake run, its timer stopped: the test draws each frame."""
    session = Session(sample_coarse=False)
    now = 1_000 * S
    session.t0_ns = now - 40 * S
    session._state = SessionState.RUNNING  # as if launched: the window follows "now"
    session.hello = Hello(workload="mlp", device=DeviceInfo(kind="cuda", name="test GPU"))
    session.steps.set_device_is_host(False)
    session.coarse.set_status(
        MetricStatus(PROC_CPU, "runner CPU", "%", True, period_s=1.0, source="test")
    )
    run = FakeRun(session, session.t0_ns)
    run.advance(now - session.t0_ns)
    window = show_window(session)
    window.timer.stop()
    frame = window.frame
    frame.now_ns = lambda live: run.now_ns
    frame.clock_ns = lambda: run.now_ns + S  # every step's hold is over
    yield window, run
    session._state = SessionState.FINISHED  # nothing was launched: nothing to stop


def _draw_frame(window) -> bool:
    """A redraw tick now, and its paint; whether it drew (nothing new, nothing drawn)."""
    frame = window.frame
    drawn = frame.frames_drawn
    frame.drawn_at = -1e9  # the pacing between frames is not what this tests
    window._redraw()
    QApplication.sendPostedEvents()  # the paint the frame asked for, now
    QApplication.processEvents()
    return frame.frames_drawn > drawn


def _painted_area(paints: PaintedRects, box: QRect) -> int:
    """Pixels of ``box`` the paints recorded since ``paints.rects`` was cleared covered."""
    return sum(r.intersected(box).width() * r.intersected(box).height() for r in paints.rects)


def test_a_still_followed_timeline_repaints_only_the_newest_steps(followed, qtbot) -> None:
    window, run = followed
    timeline = window.timeline
    paints = PaintedRects(timeline.viewport())
    assert _draw_frame(window)
    assert not timeline.dense
    view = timeline.getPlotItem().getViewBox()
    ranges_set = []
    set_x_range = view.setXRange
    view.setXRange = lambda *a, **k: (ranges_set.append(a), set_x_range(*a, **k))[-1]
    strips = stills = 0
    for i in range(40):
        # Steps arrive (their device marks a step later, idle gaps between some), or time
        # passes with nothing new; every ten frames or so the view moves on a stride.
        lo_before = timeline.getPlotItem().getViewBox().viewRange()[0][0]
        run.advance(STEP_NS if i % 5 else 37 * MS)
        paints.rects.clear()
        ranges_set.clear()
        box = view_box_rect(timeline)
        if not _draw_frame(window):
            assert not paints.rects, f"frame {i}: nothing new, yet painted"
            continue
        still = timeline.getPlotItem().getViewBox().viewRange()[0][0] == lo_before
        stills += still
        assert bool(ranges_set) != still, f"frame {i}: the range is set only to move the view"
        area = _painted_area(paints, box)
        strips += still and 0 < area < box.width() * box.height() / 10
        shown = on_screen(timeline.viewport())
        np.testing.assert_array_equal(shown, repainted_whole(qtbot, paints), f"frame {i}")
    assert stills >= 25
    assert strips >= stills - 2  # a still frame repaints a strip, not the plot


def test_the_changed_part_of_a_layer() -> None:
    def rects(xs):
        return np.array([[x, 0.0, 0.5, 1.0] for x in xs]).reshape(-1, 4)

    old = rects([1.0, 2.0, 3.0])
    assert _changed_x(old, old.copy()) is None
    assert _changed_x(old, rects([1.0, 2.0, 3.0, 4.0])) == (4.0, 4.5)  # one came
    assert _changed_x(old, rects([1.0, 2.0, 3.2, 4.0])) == (3.0, 4.5)  # one changed
    assert _changed_x(old, rects([1.0, 2.0])) == (3.0, 3.5)  # one went
    assert _changed_x(old, rects([2.0, 3.0])) == (1.0, 3.5)  # one left the view
    assert _changed_x(rects([]), rects([])) is None
