"""A followed live run's plots move their pixels and repaint only what is new
(``qt/scroll_repaint.py``): what is on screen after each such frame is what a full repaint
draws, and a frame that moved repaints a strip, not the plot."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QEvent, QObject
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QApplication

from gpuwatch.core.model.messages import DeviceInfo, Hello
from gpuwatch.core.model.metrics import PROC_CPU
from gpuwatch.core.model.store import MetricStatus
from gpuwatch.core.run.session import Session, SessionState
from gpuwatch.protocol import N_MARKS
from gpuwatch.qt.scroll_repaint import first_change, first_point_change

S = 1_000_000_000
MS = 1_000_000
STEP_NS = 100 * MS  # 10 steps a second


class PaintedArea(QObject):
    """The pixels of a plot's view box its paint events covered since the last ``reset``."""

    def __init__(self, plot) -> None:
        super().__init__()
        self.plot = plot
        self.area = 0
        self.paints = 0

    @property
    def box(self):
        view_box = self.plot.getPlotItem().getViewBox()
        return self.plot.mapFromScene(view_box.sceneBoundingRect()).boundingRect()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.Paint:
            self.paints += 1
            self.area += sum(r.width() * r.height() for r in event.region().intersected(self.box))
        return False

    def reset(self) -> None:
        self.area = self.paints = 0


def _marks(start_ns: int, rng: np.random.Generator) -> np.ndarray:
    lengths = (STEP_NS / N_MARKS * rng.uniform(0.5, 1.5, N_MARKS - 1)).astype(np.int64)
    return start_ns + np.concatenate(([0], np.cumsum(lengths)))


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

    def advance(self, ns: int) -> None:
        """Time passes: the steps and samples that ended meanwhile arrive."""
        self.now_ns += ns
        session = self.session
        while True:
            last = session.steps.snapshot(last=1)
            start = int(last.host[-1, -1]) if len(last) else session.t0_ns
            if self.step % 10 == 9:
                start += 3 * STEP_NS // 2  # a pause: the device lane idles
            marks = _marks(start, self.rng)
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
def followed(show_window, qtbot):
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


def _draw_frame(window) -> None:
    frame = window.frame
    drawn = frame.frames_drawn
    frame.drawn_at = -1e9  # the pacing between frames is not what this tests
    window._redraw()
    assert frame.frames_drawn == drawn + 1
    QApplication.sendPostedEvents()  # the paint the frame asked for, now
    QApplication.processEvents()


def _on_screen(widget) -> QImage:
    """The widget's pixels as the window's backing store holds them (not a fresh render)."""
    viewport = widget.viewport()
    corner = viewport.mapTo(viewport.window(), viewport.rect().topLeft())
    screen = QApplication.primaryScreen()
    return (
        screen.grabWindow(
            viewport.window().winId(), corner.x(), corner.y(), viewport.width(), viewport.height()
        )
        .toImage()
        .convertToFormat(QImage.Format.Format_RGB32)
    )


def _repainted_whole(widget) -> QImage:
    widget.viewport().repaint()
    return _on_screen(widget)


def test_a_followed_frame_shows_what_a_full_repaint_shows_and_repaints_a_strip(followed) -> None:
    window, run = followed
    plots = (window.timeline, window.utilization.plot)
    counters = []
    for plot in plots:
        counter = PaintedArea(plot)
        plot.viewport().installEventFilter(counter)
        counters.append(counter)
    _draw_frame(window)
    assert not window.timeline.dense
    moved = [window.frame.timeline_repaint.moved, window.frame.utilization_repaint.moved]
    strips = 0
    for i in range(40):
        # Steps and samples arrive, or (every fifth frame) time passes with nothing new.
        run.advance(STEP_NS if i % 5 else 37 * MS)
        for counter in counters:
            counter.reset()
        _draw_frame(window)
        shown = [_on_screen(plot) for plot in plots]
        strips += all(c.paints and c.area < c.box.width() * c.box.height() / 4 for c in counters)
        for plot, image in zip(plots, shown, strict=True):
            assert image == _repainted_whole(plot), f"frame {i}: {type(plot).__name__}"
    assert window.frame.timeline_repaint.moved - moved[0] >= 35
    assert window.frame.utilization_repaint.moved - moved[1] >= 35
    assert strips >= 30  # most frames repaint a few columns of each plot


def test_a_frame_that_is_not_a_move_repaints_the_whole_plot(followed) -> None:
    window, run = followed
    _draw_frame(window)
    repainted = window.frame.timeline_repaint.repainted
    window.follow_action.setChecked(False)  # the user took the view: no longer followed
    run.advance(STEP_NS)
    _draw_frame(window)
    window.follow_action.setChecked(True)
    run.advance(STEP_NS)
    _draw_frame(window)
    assert window.frame.timeline_repaint.repainted >= repainted
    for plot in (window.timeline, window.utilization.plot):
        assert _on_screen(plot) == _repainted_whole(plot)


def test_the_first_change_of_spans_and_of_curve_points() -> None:
    def rects(xs):
        return np.array([[x, 0.0, 0.5, 1.0] for x in xs]).reshape(-1, 4)

    old = rects([1.0, 2.0, 3.0])
    assert first_change(old, rects([2.0, 3.0]), 1.6, 1e-9) is None  # one left the view
    assert first_change(old, rects([2.0, 3.0, 4.0]), 1.6, 1e-9) == 4.0  # one came
    assert first_change(old, rects([2.0, 3.2, 4.0]), 1.6, 1e-9) == 3.0  # one changed
    assert first_change(old, rects([2.0]), 1.6, 1e-9) == 3.0  # one went
    assert first_change(old, rects([1.0, 2.0, 3.0]), 0.0, 1e-9) is None
    x = np.array([0.0, 1.0, 2.0])
    y = np.array([1.0, np.nan, 3.0])
    assert first_point_change((x, y), (x, y.copy())) is None
    assert first_point_change((x, y), (x, np.array([1.0, np.nan, 4.0]))) == 2
    assert first_point_change((x, y), (np.append(x, 3.0), np.append(y, 1.0))) == 3
