"""What a frame would cost without pyqtgraph (``python bench/renderer_floor.py``).

The window's plots are pyqtgraph items, and a frame pays for their per-frame machinery (every
visible span handed to ~14 bar items, linked view ranges, the scene's traversal, the axis).
This bench prices the other way: the same ``FramePresenter`` frames, from the same SIMULATED
telemetry as ``bench/render.py`` (its generator process and link reader), painted by ONE plain
``QWidget`` straight from the frame's arrays — lanes as ``drawRects`` (sparse) or one image
(dense, rendered whole each frame, as ``dense_lanes.render`` does), the two utilization step
series as ``drawLines``, a tick and label per second — offscreen, 1600x900, 30 s visible, a
frame at most every 60 ms when new steps arrived (the window's pacing).

It is a floor, not a product: no legend, tint, markers, interaction or themes. Printed per
rate: frames/s, CPU per frame (p50, the GUI thread), its parts (the presenter's frame data,
the dense image, the paint), and this process's CPU in % of one core. Nothing here runs a GPU.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass, field

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import machine
import numpy as np
import psutil
from pyqtgraph.Qt.internals import PrimitiveArray
from PySide6.QtCore import QCoreApplication, QLineF, QPointF, QRectF, Qt, QTimer
from PySide6.QtGui import QColor, QImage, QPainter, QPaintEvent, QPen
from PySide6.QtWidgets import QWidget
from render import S, SyntheticRun, spin

from gpuwatch.core.figures.frame import FramePresenter, PlotFrame, RunData
from gpuwatch.core.run.session import Session, SessionState
from gpuwatch.protocol import ALL_PHASES
from gpuwatch.qt import palette
from gpuwatch.qt.app import create_app
from gpuwatch.qt.dense_lanes import Lane, render, rgba

LEFT_PX = 150  # the lanes' labels, as the window's left axis
LANE_PX = 40
BAR = 0.72
PLOT_TOP_PX = 800.0  # the utilization's 0 %
PCT_PX = 2.5


#: A frame with new steps at most this often (seconds): the window's pacing.
FRAME_S = 0.06


@dataclass
class Pacing:
    """When the last frame was drawn (``time.monotonic``), the step count it drew, and
    whether frames are being recorded."""

    drawn_at: float = -1.0
    count: int = -1
    recording: bool = False


@dataclass
class Parts:
    """CPU seconds of the GUI thread per part of the frames drawn while recording."""

    frames: list[float] = field(default_factory=list)
    presenter: float = 0.0
    dense: float = 0.0
    paint: float = 0.0


class OneWidgetPlots(QWidget):
    """The timeline's lanes over the utilization's two step series, painted in one go."""

    def __init__(self, session: Session, parts: Parts) -> None:
        super().__init__()
        self.session = session
        self.parts = parts
        self.presenter = FramePresenter()
        self.shown: tuple[PlotFrame, int, int, float] | None = None
        self.rects = {name: PrimitiveArray(QRectF, 4) for name in (*ALL_PHASES, "active")}
        self.lines = {name: PrimitiveArray(QLineF, 4) for name in ("coarse", "busy")}
        self.colors = {name: QColor(palette.PHASE_COLORS[name]) for name in ALL_PHASES}
        self.colors["active"] = QColor(palette.DEVICE_ACTIVE)
        self.image: np.ndarray | None = None

    def new_frame(self, lo_ns: int, hi_ns: int) -> bool:
        width = float(self.width() - LEFT_PX)
        started = time.thread_time()
        frame = self.presenter.plots(RunData.of(self.session), lo_ns, hi_ns, width)
        self.parts.presenter += time.thread_time() - started
        if frame is None:
            return False
        self.shown = (frame, lo_ns, hi_ns, width)
        px_ns = (hi_ns - lo_ns) / width
        timeline = frame.timeline
        if timeline.sparse is not None:
            self.image = None
            rows = [*timeline.sparse.phases.values(), timeline.sparse.active]
            for row, (name, (s, e)) in enumerate(zip(self.rects, rows, strict=True)):
                self._spans(name, s, e, lo_ns=lo_ns, px_ns=px_ns, top=10 + row * LANE_PX)
        elif timeline.dense is not None:
            started = time.thread_time()
            cols = timeline.dense.columns
            lanes = [Lane([cols[name]], [rgba(self.colors[name])]) for name in self.rects]
            self.image = render(lanes, len(cols.c0), LANE_PX, BAR)
            self.parts.dense += time.thread_time() - started
        util = frame.utilization
        x0 = LEFT_PX + (util.coarse.t0 - lo_ns) / px_ns
        x1 = LEFT_PX + (util.coarse.t1 - lo_ns) / px_ns
        for name, values in (("coarse", util.coarse.value), ("busy", util.busy)):
            y = PLOT_TOP_PX - np.asarray(values, np.float64) * PCT_PX
            known = np.isfinite(y)
            lines = self.lines[name]
            lines.resize(int(known.sum()))
            out = lines.ndarray()
            out[:, 0], out[:, 1], out[:, 2], out[:, 3] = x0[known], y[known], x1[known], y[known]
        self.update()
        return True

    def _spans(
        self, name: str, s: np.ndarray, e: np.ndarray, *, lo_ns: int, px_ns: float, top: float
    ) -> None:
        rects = self.rects[name]
        rects.resize(len(s))
        if len(s):
            out = rects.ndarray()
            out[:, 0] = LEFT_PX + (s - lo_ns) / px_ns
            out[:, 1] = top
            out[:, 2] = np.maximum((e - s) / px_ns, 1.0)
            out[:, 3] = LANE_PX * BAR

    def paintEvent(self, event: QPaintEvent) -> None:
        started = time.thread_time()
        painter = QPainter(self)
        try:
            self._paint(painter)
        finally:
            painter.end()
        self.parts.paint += time.thread_time() - started

    def _paint(self, p: QPainter) -> None:
        p.fillRect(self.rect(), QColor(palette.BACKGROUND))
        if self.shown is None:
            return
        _, lo_ns, hi_ns, width = self.shown
        p.setPen(Qt.PenStyle.NoPen)
        if self.image is None:
            for name, rects in self.rects.items():
                p.setBrush(self.colors[name])
                p.drawRects(*rects.drawargs())
        else:
            image = self.image
            rows, cols = image.shape
            qimage = QImage(image.data, cols, rows, cols * 4, QImage.Format.Format_RGBA8888)
            p.drawImage(QPointF(LEFT_PX, 10), qimage)
        for name, color in (("coarse", palette.COARSE), ("busy", palette.DEVICE_ACTIVE)):
            p.setPen(QPen(QColor(color), 2))
            p.drawLines(*self.lines[name].drawargs())
        p.setPen(QColor(palette.FOREGROUND))
        t0 = self.session.t0_ns
        lo_s, hi_s = (lo_ns - t0) / S, (hi_ns - t0) / S
        for second in range(int(np.ceil(lo_s)), int(hi_s) + 1):
            x = LEFT_PX + (second - lo_s) / (hi_s - lo_s) * width
            p.drawLine(QPointF(x, 850), QPointF(x, 855))
            if second % 5 == 0:
                p.drawText(QPointF(x - 8, 870), str(second))


def measure(rate: float, seconds: float) -> str:
    """One simulated run at ``rate`` steps/s: its figures as one line."""
    session = Session(sample_coarse=False)
    now = time.perf_counter_ns()
    session.t0_ns = now - 31 * S
    session._state = SessionState.RUNNING  # as if launched
    run = SyntheticRun(session, rate, start_ns=now - 30 * S)  # 30 s of history first
    run.announce()
    parts = Parts()
    widget = OneWidgetPlots(session, parts)
    widget.resize(1600, 900)
    widget.show()
    run.start()
    deadline = time.monotonic() + 60
    while not run.caught_up() and time.monotonic() < deadline:
        spin(0.02)
    pacing = Pacing()

    def tick() -> None:
        started, now_s = time.thread_time(), time.monotonic()
        count = session.steps.count
        if count == pacing.count or now_s - pacing.drawn_at < FRAME_S:
            return
        hi = time.perf_counter_ns()
        if widget.new_frame(hi - 30 * S, hi):
            QCoreApplication.sendPostedEvents()  # its paint, timed inside the frame
            pacing.drawn_at, pacing.count = now_s, count
            if pacing.recording:
                parts.frames.append(time.thread_time() - started)

    timer = QTimer()
    timer.timeout.connect(tick)
    timer.start(33)
    spin(2.0)  # warm up
    parts.presenter = parts.dense = parts.paint = 0.0
    pacing.recording = True
    proc = psutil.Process()
    cpu0, wall0 = proc.cpu_times(), time.perf_counter()
    spin(seconds)
    cpu1, wall = proc.cpu_times(), time.perf_counter() - wall0
    pacing.recording = False
    timer.stop()
    run.stop()
    widget.close()
    n = max(len(parts.frames), 1)
    gui = 100 * ((cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)) / wall
    return (
        f"{rate:>8g} steps/s  {len(parts.frames) / seconds:5.1f} frames/s  "
        f"CPU/frame p50 {1e3 * float(np.median(parts.frames or [0.0])):5.1f} ms "
        f"(presenter {1e3 * parts.presenter / n:.1f}, dense image {1e3 * parts.dense / n:.1f}, "
        f"paint {1e3 * parts.paint / n:.1f})  process CPU {gui:5.1f} %"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=15.0, help="measured seconds per rate")
    parser.add_argument("--rates", default="10,100,1000,10000", help="steps/s, comma-separated")
    args = parser.parse_args(argv)
    create_app()
    print(machine.header("gpuwatch renderer floor (bench/renderer_floor.py)"))
    print("# SIMULATED telemetry; ONE QWidget paints the presenter's frames (not the window)")
    for rate in args.rates.split(","):
        print(measure(float(rate), args.seconds), flush=True)
    print(f"# load average at the end: {machine.load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
