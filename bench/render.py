"""How smoothly the window draws a fast run (``python bench/render.py``).

The real ``Session`` stores and the real ``MainWindow`` (offscreen Qt) are fed SIMULATED
telemetry: a generator process (standing in for the runner) sends ``steps`` batches every
50 ms at 1,000 and 10,000 steps/s and ``device_marks`` one batch later (CUDA events are
harvested late) over a pipe; a thread here receives, decodes and dispatches them as the
session's link reader does, and another writes NVML-like samples every 1/6 s as the NVML
sampler does. The window follows "now" with its default 30 s visible; the generator starts
30 s in the past so the view is full from the first measured frame.

A frame is one tick of the window's redraw timer plus the paint it causes (posted paint
events are flushed right after the tick, so the paint is timed inside the frame). Reported:
frame time p50/p95/max, frames dropped (periods of the nominal 33 ms clock without a frame),
and this process's CPU % (all its threads: window, link reading, samples); then the headline
figures at the end, from the frame presenter's function the window and headless read.
Nothing here runs a GPU: the device marks and utilization are made up.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import machine
import numpy as np
import psutil
from PySide6.QtCore import QCoreApplication, QTimer

from gpuwatch.core.figures.frame import HeadlineFigures, RunData, headline_figures
from gpuwatch.core.model.messages import DeviceInfo, Hello
from gpuwatch.core.model.metrics import NVML_GPU_UTIL, PROC_CPU
from gpuwatch.core.model.store import MetricStatus
from gpuwatch.core.run.session import Session, SessionState
from gpuwatch.protocol import N_MARKS, RUNNER_KINDS, decode, encode
from gpuwatch.qt.app import create_app
from gpuwatch.qt.main_window import REDRAW_MS, MainWindow
from gpuwatch.qt.window_options import WindowOptions

S = 1_000_000_000
BATCH_S = 0.05
NVML_PERIOD_NS = S // 6
#: Share of a step per phase (data, h2d, forward, backward, optimizer, sync) and the loop's
#: own time until the next step ("other"): an input-heavy step.
PHASE_SHARES = np.array([0.30, 0.05, 0.20, 0.30, 0.10, 0.04, 0.01])
DEVICE_LAG_NS = 200_000


def synthetic_marks(
    start_ns: int, n: int, step_ns: float, rng: np.random.Generator
) -> tuple[np.ndarray, int]:
    """Host marks ``(n, N_MARKS)`` of ``n`` steps from ``start_ns`` (±30 % jitter per phase),
    and where the next step starts."""
    phases = step_ns * PHASE_SHARES[None, :] * rng.uniform(0.7, 1.3, (n, len(PHASE_SHARES)))
    lengths = np.maximum(phases.astype(np.int64), 1)
    ends = start_ns + np.cumsum(lengths.sum(axis=1))
    starts = np.concatenate(([start_ns], ends[:-1]))
    marks = np.empty((n, N_MARKS), np.int64)
    marks[:, 0] = starts
    marks[:, 1:] = starts[:, None] + np.cumsum(lengths[:, :-1], axis=1)
    return marks, int(ends[-1])


class SyntheticRunner:
    """The runner's side, in its own process: steps batches every 50 ms (device marks one
    batch later), encoded and sent over a pipe, from ``start_ns`` on, until told to stop."""

    def __init__(self, rate: float, start_ns: int, seed: int = 0) -> None:
        self.rate, self.start_ns, self.seed = rate, start_ns, seed

    def __call__(self, conn: Connection, stop: Any) -> None:
        rng = np.random.default_rng(self.seed)
        step_ns = S / self.rate
        batch_ns = int(BATCH_S * S)
        n = max(1, round(batch_ns / step_ns))
        next_ns, next_step = self.start_ns, 0
        pending: tuple[list[int], list[list[int]]] | None = None
        while not stop.is_set():
            while next_ns + batch_ns > time.perf_counter_ns():
                if stop.wait(0.005):
                    return
            marks, next_ns = synthetic_marks(next_ns, n, step_ns, rng)
            ids = list(range(next_step, next_step + n))
            next_step += n
            conn.send_bytes(
                encode("steps", step=ids, config=[0] * n, samples=[32] * n, host=marks.tolist())
            )
            if pending is not None:
                conn.send_bytes(encode("device_marks", step=pending[0], device=pending[1]))
            pending = (ids, (marks + DEVICE_LAG_NS).tolist())


class SyntheticRun:
    """A simulated CUDA run written into ``session`` through the GUI's real link reading:
    a generator process (the runner) and a reader thread here that receives, decodes and
    dispatches each message like ``Session._read_link``; NVML-like samples are written
    here, like the NVML sampler thread does."""

    def __init__(self, session: Session, rate: float, start_ns: int) -> None:
        self.session = session
        self.rate = rate
        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe(duplex=False)
        self._stop = ctx.Event()
        self._proc = ctx.Process(
            target=SyntheticRunner(rate, start_ns), args=(child, self._stop), daemon=True
        )
        self._threads: list[threading.Thread] = []
        self._done = threading.Event()
        self._next_sample_ns = start_ns
        self.rng = np.random.default_rng(1)
        self.messages = 0

    def announce(self) -> None:
        """The hello's effect: a CUDA device with NVML readable at 1/6 s periods."""
        session = self.session
        session.hello = Hello(
            workload="synthetic", device=DeviceInfo(kind="cuda", name="SIMULATED GPU")
        )
        session.steps.set_device_is_host(False)
        session.coarse.set_status(
            MetricStatus(
                NVML_GPU_UTIL, "NVML GPU utilization", "%", True, period_s=1 / 6, source="simulated"
            )
        )
        session.coarse.set_status(
            MetricStatus(PROC_CPU, "runner CPU", "%", True, period_s=1.0, source="simulated")
        )

    def start(self) -> None:
        self._proc.start()
        for name, target in (("synthetic-link", self._read), ("synthetic-nvml", self._nvml)):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def caught_up(self) -> bool:
        """The history is in: the last stored step ended less than a batch ago."""
        last = self.session.steps.snapshot(last=1)
        return bool(len(last)) and (
            time.perf_counter_ns() - int(last.host[-1, -1]) < 2 * BATCH_S * S
        )

    def _read(self) -> None:
        while True:
            try:
                data = self._conn.recv_bytes()
            except (EOFError, OSError):
                return
            self.session._dispatch(decode(data, allowed=RUNNER_KINDS))
            self.messages += 1

    def _nvml(self) -> None:
        while True:
            now = time.perf_counter_ns()
            t0s, t1s, values = [], [], []
            while self._next_sample_ns + NVML_PERIOD_NS <= now:
                t0s.append(self._next_sample_ns)
                t1s.append(self._next_sample_ns + NVML_PERIOD_NS)
                values.append(float(self.rng.uniform(40, 90)))
                self._next_sample_ns += NVML_PERIOD_NS
            self.session.coarse.append_many(NVML_GPU_UTIL, t0s, t1s, values)
            if self._done.wait(NVML_PERIOD_NS / S):
                return

    def stop(self) -> None:
        self._stop.set()
        self._done.set()
        self._proc.join(10)
        self._conn.close()
        for thread in self._threads:
            thread.join(5)


class FrameClock:
    """Times each redraw tick of ``window`` together with the paint it posts."""

    def __init__(self, window: MainWindow) -> None:
        self.window = window
        self.frames_ms: list[float] = []
        #: CPU time of the GUI thread per frame: the work itself, without the waits for a CPU
        #: that a loaded machine adds to the wall-clock figure.
        self.cpu_ms: list[float] = []
        self.recording = False
        original = window._tick

        def timed_tick() -> None:
            started, cpu = time.perf_counter(), time.thread_time()
            original()
            QCoreApplication.sendPostedEvents()  # the paint this tick asked for, now
            if self.recording:
                self.frames_ms.append((time.perf_counter() - started) * 1e3)
                self.cpu_ms.append((time.thread_time() - cpu) * 1e3)

        window.timer.timeout.disconnect()
        window.timer.timeout.connect(timed_tick)

    def dropped(self, duration_s: float) -> int:
        """Nominal frames (one per ``REDRAW_MS``) that got none: stretched or late ticks."""
        return max(0, round(duration_s * 1e3 / REDRAW_MS) - len(self.frames_ms))


def window_bins(window: MainWindow) -> Any:
    """The timeline bins the window draws from: its frame presenter's, held by the part that
    redraws its plots (``window.frame``) or by the window itself."""
    owner = getattr(window, "frame", window)
    presenter = getattr(owner, "presenter", None)
    return (presenter if presenter is not None else owner).bins


def filled_share(window: MainWindow) -> float:
    """Share of the visible window's pixel columns that show steps (the step ring holds 13 s
    at 10,000 steps/s; the timeline's bins keep what it dropped)."""
    lo_s, hi_s = window.timeline.getPlotItem().getViewBox().viewRange()[0]
    t0 = window.session.t0_ns
    cols = window_bins(window).columns(t0 + int(lo_s * S), t0 + int(hi_s * S), 300)
    return float(np.mean(cols["steps"] > 0))


def headline_now(session: Session) -> tuple[HeadlineFigures, float]:
    """The window's headline figures from the frame presenter's function, now, and what one
    computation costs (ms, the median of 5: the window refreshes them ~4 times a second)."""
    costs = []
    for _ in range(5):
        started = time.perf_counter()
        figures = headline_figures(RunData.of(session), time.perf_counter_ns())
        costs.append((time.perf_counter() - started) * 1e3)
    return figures, machine.percentile(costs, 50)


def headline_text(f: HeadlineFigures, cost_ms: float) -> str:
    """One line of the headline figures, as the window's bar shows them."""

    def num(value: float | None, fmt: str) -> str:
        return "—" if value is None else fmt.format(value)

    return (
        f"headline over {f.window_s:g} s: {num(f.samples_per_s, '{:,.0f}')} samples/s, step "
        f"{num(f.step_ms_p50, '{:.2f}')} ms, busy {num(f.busy_pct, '{:.0f}%')}, "
        f"{f.coarse_short} {num(f.coarse_pct, '{:.0f}%')}; same periods: {f.coarse_short} "
        f"{num(f.coarse_same_pct, '{:.0f}%')} vs busy {num(f.busy_same_pct, '{:.0f}%')} "
        f"({cost_ms:.1f} ms to compute)"
    )


def run_rate(app: Any, rate: float, seconds: float, size: tuple[int, int]) -> dict[str, Any]:
    session = Session(sample_coarse=False)
    now = time.perf_counter_ns()
    session.t0_ns = now - 31 * S
    session._state = SessionState.RUNNING  # as if launched: the window follows "now"
    run = SyntheticRun(session, rate, start_ns=now - 30 * S)  # 30 s of history first
    run.announce()
    window = MainWindow(session, WindowOptions(workload="vision", device="cpu"))
    window.resize(*size)
    window.show()
    clock = FrameClock(window)
    run.start()
    deadline = time.monotonic() + 60
    while not run.caught_up() and time.monotonic() < deadline:
        app.processEvents()
        time.sleep(0.005)
    settle = time.monotonic() + 2.0  # then warm up: first layouts, caches
    while time.monotonic() < settle:
        app.processEvents()
        time.sleep(0.001)
    proc = psutil.Process()
    cpu0, wall0 = proc.cpu_times(), time.perf_counter()
    clock.recording = True
    done = threading.Event()
    QTimer.singleShot(int(seconds * 1e3), done.set)
    while not done.is_set():
        app.processEvents()
        time.sleep(0.001)
    clock.recording = False
    wall = time.perf_counter() - wall0
    cpu1 = proc.cpu_times()
    figures, headline_ms = headline_now(session)
    run.stop()
    cpu_s = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    frames = clock.frames_ms
    result = {
        "rate": rate,
        "seconds": wall,
        "frames": len(frames),
        "p50": machine.percentile(frames, 50),
        "p95": machine.percentile(frames, 95),
        "max": max(frames) if frames else float("nan"),
        "dropped": clock.dropped(wall),
        "cpu50": machine.percentile(clock.cpu_ms, 50),
        "cpu95": machine.percentile(clock.cpu_ms, 95),
        "cpu_pct": 100 * cpu_s / wall,
        "dense": window.timeline.dense,
        "stored": len(session.steps.snapshot()),
        "interval_ms": window.timer.interval(),
        "filled": filled_share(window),
        "headline": headline_text(figures, headline_ms),
    }
    window.session.close = lambda *a, **k: None  # type: ignore[method-assign]  # never started
    window.close()
    window.deleteLater()
    app.processEvents()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="measured seconds per rate")
    parser.add_argument("--rates", default="1000,10000", help="steps/s, comma-separated")
    parser.add_argument("--size", default="1600x900", help="window size WxH")
    args = parser.parse_args(argv)
    width, height = (int(v) for v in args.size.split("x"))
    machine.isolate_user_dirs()
    app = create_app()
    print(
        machine.header(
            "gpuwatch drawing cost (bench/render.py)",
            [
                f"SIMULATED telemetry into the real Session + MainWindow, offscreen, "
                f"{width}x{height}, 30 s visible, {args.seconds:g} s per rate"
            ],
        )
    )
    budgets = {1000.0: 33.0, 10000.0: 50.0}
    print(
        f"{'steps/s':>8} {'frames':>6} {'p50 ms':>7} {'p95 ms':>7} {'max ms':>7} "
        f"{'dropped':>7} {'GUI CPU %':>9} {'timer ms':>8} {'stored':>7} {'filled':>6} "
        f"{'cpu p50':>7} {'cpu p95':>7}  budget p95"
    )
    for rate in (float(r) for r in args.rates.split(",")):
        r = run_rate(app, rate, args.seconds, (width, height))
        budget = budgets.get(rate)
        verdict = (
            ""
            if budget is None
            else (f"<= {budget:g} ms: {'met' if r['p95'] <= budget else 'MISSED'}")
        )
        print(
            f"{rate:8.0f} {r['frames']:6d} {r['p50']:7.1f} {r['p95']:7.1f} {r['max']:7.1f} "
            f"{r['dropped']:7d} {r['cpu_pct']:9.1f} {r['interval_ms']:8d} {r['stored']:7d} "
            f"{r['filled']:6.0%} {r['cpu50']:7.1f} {r['cpu95']:7.1f}  {verdict}"
        )
        print(f"#   {r['headline']}")
        sys.stdout.flush()
    print(
        "# frame times are wall clock (tick + paint); cpu p50/p95: the GUI thread's CPU time "
        "per frame (without waiting for a CPU); stored: steps in the ring; filled: share of "
        "the 30 s view that shows steps"
    )
    print(
        f"# GUI CPU %: this process (window, link reading + decoding, NVML-like samples); "
        f"the simulated runner is another process.\n# load average at the end: "
        f"{machine.load_average()}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
