"""The window repaints only what changed, and not faster than it can be read.

A window following a steady 10 steps/s run must not cost the run's machine more than a few
percent of a core, so its widgets are counted, not timed: paint events per widget and per
second of data, over a few seconds of a live-looking run fed from a thread as the session's
link reader feeds it. Text (the headline, status bar, docks, tables) may repaint a few times a
second; the plots no more often than the frame pacing allows; the window never repaints
whole, and lays itself out again (repainting its dock separators) hardly ever. Bounds are per
second of *data*, so a loaded machine that runs the window late can only lower the counts.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pytest
from PySide6.QtCore import QEvent, QObject
from PySide6.QtGui import QPaintEvent
from PySide6.QtWidgets import QApplication, QWidget

from gpuwatch.core.figures.frame import NEW_STEPS_FRAME_S
from gpuwatch.core.model.messages import DeviceInfo, Hello
from gpuwatch.core.model.metrics import PROC_CPU
from gpuwatch.core.model.store import MetricStatus
from gpuwatch.core.run.session import Session, SessionState
from gpuwatch.protocol import N_MARKS

S = 1_000_000_000
RATE = 10.0
#: Seconds of data counted (after a warm-up of the same run).
COUNTED_S = 4.0
#: Text widgets: readable figures change a few times a second at most.
TEXT_PAINTS_PER_S = 4.0
#: The plots: at most one frame per new-steps interval (scrolling alone is paced slower).
PLOT_PAINTS_PER_S = 1.0 / NEW_STEPS_FRAME_S + 1.0
#: The window lays itself out again (repainting its dock separators, maybe moving the plots)
#: only when something really changes size, not for new numbers.
WINDOW_LAYOUTS_PER_S = 1.0
WAIT_MS = 120_000


class SteadyRun:
    """A CPU-device run at ``RATE`` steps/s written into ``session`` from a thread, each step
    ending "now", plus a runner-CPU sample every second (what the link reader and samplers
    write while a real runner trains)."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.steps = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._feed, name="steady-run", daemon=True)
        session.hello = Hello(workload="mlp", device=DeviceInfo(kind="cpu", name="test CPU"))
        session.steps.set_device_is_host(True)
        session.coarse.set_status(MetricStatus(PROC_CPU, "runner CPU", "%", True, period_s=1.0))

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _feed(self) -> None:
        start = time.perf_counter_ns()
        sample_t0 = start
        while not self._stop.wait(1.0 / RATE):
            now = time.perf_counter_ns()
            # The step spans from the previous one's end to now, even when this thread ran
            # late: the data always covers the wall time.
            marks = np.linspace(start, now, N_MARKS).astype(np.int64)
            self.session.steps.append([self.steps], [0], [32], [marks.tolist()])
            self.steps += 1
            start = now
            if now - sample_t0 >= S:
                self.session.coarse.append_many(PROC_CPU, [sample_t0], [now], [50.0])
                sample_t0 = now


@dataclass
class PaintCounter(QObject):
    """While ``on``: per widget, the paint events that repaint a quarter of it or more (a
    window painting the background under one small label is not a window repaint), every
    paint event (``all_counts``: a plot's frame may repaint only the strip its new data
    changed), and the layout requests each widget receives."""

    counts: Counter[int] = field(default_factory=Counter)
    all_counts: Counter[int] = field(default_factory=Counter)
    layouts: Counter[int] = field(default_factory=Counter)
    widgets: dict[int, QWidget] = field(default_factory=dict)
    on: bool = False

    def __post_init__(self) -> None:
        QObject.__init__(self)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if not self.on or not isinstance(watched, QWidget):
            return False
        kind = event.type()
        if kind == QEvent.Type.LayoutRequest:
            self.layouts[id(watched)] += 1
            self.widgets[id(watched)] = watched
        elif kind == QEvent.Type.Paint:
            assert isinstance(event, QPaintEvent)
            painted = sum(r.width() * r.height() for r in event.region())
            self.all_counts[id(watched)] += 1
            self.widgets[id(watched)] = watched
            if 4 * painted >= watched.width() * watched.height():
                self.counts[id(watched)] += 1
                self.widgets[id(watched)] = watched
        return False


def describe(widget: QWidget) -> str:
    """``Class(objectName) < parent class < ...``: which widget a count belongs to."""
    names = []
    w: QWidget | None = widget
    while w is not None and len(names) < 5:
        names.append(type(w).__name__ + (f"({w.objectName()})" if w.objectName() else ""))
        w = w.parentWidget()
    return " < ".join(names)


@pytest.fixture
def steady_window(show_window, qtbot):
    session = Session(sample_coarse=False)
    now = time.perf_counter_ns()
    session.t0_ns = now - S
    session._state = SessionState.RUNNING  # as if launched: the window follows "now"
    run = SteadyRun(session)
    window = show_window(session)
    window.resize(1600, 900)
    run.start()
    yield window, run
    run.stop()
    session._state = SessionState.FINISHED  # nothing was launched: nothing to stop


def test_a_steady_slow_run_repaints_text_a_few_times_a_second_and_plots_per_frame(
    steady_window, qtbot
):
    window, run = steady_window
    counter = PaintCounter()
    QApplication.instance().installEventFilter(counter)
    try:
        # Warm up (first layouts, the view filling), then count over COUNTED_S of data.
        qtbot.waitUntil(lambda: run.steps >= 2 * RATE, timeout=WAIT_MS)
        first = run.steps
        first_ns = time.perf_counter_ns()
        counter.on = True
        qtbot.waitUntil(lambda: run.steps >= first + COUNTED_S * RATE, timeout=WAIT_MS)
        counter.on = False
        data_s = (time.perf_counter_ns() - first_ns) / S
    finally:
        QApplication.instance().removeEventFilter(counter)
    plots = {id(w) for w in (window.timeline.viewport(), window.utilization.plot.viewport())} | {
        id(window.timeline),
        id(window.utilization.plot),
    }
    per_s = {key: n / data_s for key, n in counter.counts.items()}
    plot_paints = {
        describe(counter.widgets[k]): n / data_s
        for k, n in counter.all_counts.items()
        if k in plots
    }
    assert plot_paints, "the plots never painted: nothing was drawn"
    too_often = {
        describe(counter.widgets[k]): round(r, 1)
        for k, r in per_s.items()
        if k not in plots and r > TEXT_PAINTS_PER_S
    }
    assert not too_often, f"repainted more than {TEXT_PAINTS_PER_S}/s: {too_often}"
    plots_too_often = {k: round(r, 1) for k, r in plot_paints.items() if r > PLOT_PAINTS_PER_S}
    assert not plots_too_often, f"plots above {PLOT_PAINTS_PER_S:.1f}/s: {plots_too_often}"
    relayouts = counter.layouts[id(window)] / data_s
    assert relayouts <= WINDOW_LAYOUTS_PER_S, f"the window laid itself out {relayouts:.1f}/s"
    assert window.frame.frames_drawn > 0


def test_new_legends_and_figures_repaint_their_text_but_never_lay_the_window_out(
    show_window, qtbot
):
    """Idle causes come and go in the timeline's legend as a run is followed (a few times a
    second) and the headline's numbers change width: neither lays the window out again
    (which re-lays every dock and moves the plots), once their boxes fit each text."""
    from gpuwatch.core.figures.frame import HeadlineFigures
    from gpuwatch.core.figures.gap_causes import CAUSES

    window = show_window(Session())
    window.resize(1600, 900)
    qtbot.waitUntil(lambda: window.width() == 1600)
    legends = [CAUSES[:2], CAUSES[:1], (CAUSES[2], CAUSES[0]), ()]
    figures = [
        HeadlineFigures(window_s=5.0, samples_per_s=v, step_ms_p50=v / 7, step_ms_p95=v / 5)
        for v in (123_456.0, 8.0, 1_234.5, 77.0)
    ]

    def show(i: int) -> None:
        window.timeline.causes_shown = legends[i % len(legends)]
        window.frame.caption("cuda", True)
        window.headline.show_figures(figures[i % len(figures)])
        for _ in range(4):  # the layout requests each change posts, and those they post
            QApplication.sendPostedEvents()

    for i in range(len(legends) * len(figures)):  # each text once: the boxes fit them all
        show(i)
    counter = PaintCounter()
    QApplication.instance().installEventFilter(counter)
    counter.on = True
    try:
        captions = []
        for i in range(2 * len(legends) * len(figures)):
            show(i)
            captions.append(window.timeline_caption.text())
    finally:
        counter.on = False
        QApplication.instance().removeEventFilter(counter)
    assert len(set(captions)) == len(legends), "the legend did change"
    assert counter.layouts, "the changes asked for layouts (of the boxes that hold them)"
    laid_out = {describe(counter.widgets[k]): n for k, n in counter.layouts.items()}
    assert counter.layouts[id(window)] == 0, f"the window was laid out again: {laid_out}"
