"""What the window costs while it draws (``python bench/render.py [--json]``).

Per step rate, the real ``Session`` stores and the real ``MainWindow`` (offscreen Qt) are fed
SIMULATED telemetry: a generator process (standing in for the runner) sends ``steps``
batches every 50 ms and ``device_marks`` one batch later (CUDA events are harvested late) over
a pipe; a thread here receives, decodes and dispatches them as the session's link reader does,
and another writes NVML-like samples every 1/6 s as the NVML sampler does. The window follows
"now" with its default 30 s visible; the generator starts 30 s in the past so the view is full
from the first measured frame. Other cases (``--cases``): the window open with no run
(``idle``), a replay of a 100,000-step recording at rest (``replay``), and a real runner
(``mlp`` on the CPU) through the real Session (``live``).

A frame is a redraw tick that drew, together with the paint it posts (flushed right after the
tick, so the paint is timed inside the frame); ticks with nothing due draw nothing. Reported
per case: frames and frames/s, frame time p50/p95 (wall) and the GUI thread's CPU per frame,
this process's CPU % of one core (all its threads: window, link reading, samples; the runner
is another process) and the GUI thread's part of it (frames' mean CPU, the ticks that drew
nothing), step end → drawn p95, and the load average. The Qt event loop runs as in
the app (``QEventLoop.exec``), so no polling loop of the bench's own is counted. ``--profile
N`` adds cProfile's top N functions of the GUI thread (by own time; ``--profile-sort
cumulative``: with what they call). Nothing here runs a GPU.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import multiprocessing as mp
import os
import pstats
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import machine
import numpy as np
import psutil
from PySide6.QtCore import QCoreApplication, QEventLoop, Qt, QTimer

from gpuwatch.core.figures.frame import HeadlineFigures, RunData, headline_figures
from gpuwatch.core.files.recording_reader import open_recording
from gpuwatch.core.files.replay import ReplaySession
from gpuwatch.core.model.messages import DeviceInfo, Hello
from gpuwatch.core.model.metrics import NVML_GPU_UTIL, PROC_CPU
from gpuwatch.core.model.store import MetricStatus
from gpuwatch.core.run.session import Session, SessionState
from gpuwatch.protocol import N_MARKS, RUNNER_KINDS, decode, encode
from gpuwatch.qt.app import create_app
from gpuwatch.qt.main_window import MainWindow
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
    """The runner's side, in its own process: steps batches every 50 ms, or every step when
    steps are longer, each sent once its last step ended (device marks one batch later),
    encoded and sent over a pipe, from ``start_ns`` on, until told to stop."""

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
            marks, next_ns = synthetic_marks(next_ns, n, step_ns, rng)
            while next_ns > time.perf_counter_ns():  # a runner sends steps that have ended
                if stop.wait(0.005):
                    return
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
    """Times each redraw tick of ``window`` that drew a frame, together with the paint it
    posts, and each step's latency: its end mark (the runner's clock, which is this one) to
    the end of the first frame that drew it."""

    def __init__(self, window: MainWindow) -> None:
        self.window = window
        self.frames_ms: list[float] = []
        #: CPU time of the GUI thread per frame: the work itself, without the waits for a CPU
        #: that a loaded machine adds to the wall-clock figure.
        self.cpu_ms: list[float] = []
        self.latencies_ms: list[np.ndarray] = []
        #: Every tick while recording (drawn or not) and their GUI-thread CPU in all.
        self.ticks = 0
        self.ticks_cpu_ms = 0.0
        self.recording = False
        self._drawn_id = -1  # newest step id drawn by an earlier frame
        original = window._tick
        steps = window.session.steps

        def drawn() -> int:
            """Frames drawn so far (a window without that count drew on every tick: the
            code before frame pacing, which this bench also measures for comparison)."""
            return getattr(window.frame, "frames_drawn", window._ticks)

        def timed_tick() -> None:
            started, cpu = time.perf_counter(), time.thread_time()
            drawn_before = drawn()
            # The frame's snapshots include at least the steps stored now (a count is read
            # here, the steps only after a frame: the bench's own cost is not the window's).
            count = steps.count
            original()
            QCoreApplication.sendPostedEvents()  # the paint this tick asked for, now
            if self.recording:
                self.ticks += 1
                self.ticks_cpu_ms += (time.thread_time() - cpu) * 1e3
            if drawn() == drawn_before or not self.recording:
                return
            drawn_ns = time.perf_counter_ns()
            self.frames_ms.append((time.perf_counter() - started) * 1e3)
            self.cpu_ms.append((time.thread_time() - cpu) * 1e3)
            newest = steps.snapshot(last=steps.count - count + 1).rows(slice(0, 1))
            if count and len(newest) and int(newest.step[-1]) > self._drawn_id:
                newest_id = int(newest.step[-1])
                if self._drawn_id >= 0:
                    view = steps.snapshot(last=newest_id - self._drawn_id + 4096)
                    new = (view.step > self._drawn_id) & (view.step <= newest_id)
                    self.latencies_ms.append((drawn_ns - view.host[new, -1]) / 1e6)
                self._drawn_id = newest_id

        window.timer.timeout.disconnect()
        window.timer.timeout.connect(timed_tick)

    def latency_p95(self) -> float | None:
        """Step end → drawn, 95th percentile (ms), or None without measured steps."""
        lat = np.concatenate(self.latencies_ms) if self.latencies_ms else np.empty(0)
        return float(np.percentile(lat, 95)) if len(lat) else None


def spin(seconds: float) -> None:
    """Run the Qt event loop for ``seconds``, as the app does (no polling loop of ours that
    would cost CPU itself)."""
    loop = QEventLoop()
    timer = QTimer()
    timer.setSingleShot(True)
    timer.setTimerType(Qt.TimerType.PreciseTimer)
    timer.timeout.connect(loop.quit)
    timer.start(int(seconds * 1e3))
    loop.exec()


@dataclass(frozen=True)
class Profiling:
    """``--profile N``: the N costliest functions of the GUI thread (none for 0), ranked by
    own time or by time with what they call (``--profile-sort``)."""

    top: int = 0
    order: str = "tottime"


class Measured:
    """This process's CPU time over a stretch of wall time, and cProfile of the GUI thread
    when asked."""

    def __init__(self, profile: Profiling) -> None:
        self.profile = profile
        self._prof = cProfile.Profile() if profile.top else None
        self._proc = psutil.Process()
        self.top: str = ""

    def __enter__(self) -> Measured:
        self._cpu0, self._wall0 = self._proc.cpu_times(), time.perf_counter()
        self._thread0 = time.thread_time()  # entered and left on the GUI thread
        if self._prof is not None:
            self._prof.enable()
        return self

    def __exit__(self, *_: object) -> None:
        if self._prof is not None:
            self._prof.disable()
            out = io.StringIO()
            stats = pstats.Stats(self._prof, stream=out).sort_stats(self.profile.order)
            stats.print_stats(self.profile.top)
            self.top = out.getvalue()
        cpu1 = self._proc.cpu_times()
        self.wall = time.perf_counter() - self._wall0
        cpu_s = (cpu1.user - self._cpu0.user) + (cpu1.system - self._cpu0.system)
        self.cpu_pct = 100 * cpu_s / self.wall
        #: The GUI thread's share of it (the rest: link reading, samples, Qt's own threads).
        self.gui_thread_pct = 100 * (time.thread_time() - self._thread0) / self.wall


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


def case_result(
    name: str, rate: float | None, window: MainWindow, clock: FrameClock, measured: Measured
) -> dict[str, Any]:
    """One case's figures (the keys of ``--json``)."""
    frames = clock.frames_ms
    return {
        "case": name,
        "steps_per_s": rate,
        "seconds": round(measured.wall, 2),
        "frames": len(frames),
        "frames_per_s": round(len(frames) / measured.wall, 2),
        "frame_ms_p50": machine.percentile(frames, 50) if frames else None,
        "frame_ms_p95": machine.percentile(frames, 95) if frames else None,
        "frame_ms_max": max(frames) if frames else None,
        "frame_cpu_ms_p50": machine.percentile(clock.cpu_ms, 50) if frames else None,
        "frame_cpu_ms_p95": machine.percentile(clock.cpu_ms, 95) if frames else None,
        "frame_cpu_ms_mean": float(np.mean(clock.cpu_ms)) if frames else None,
        "ticks_per_s": round(clock.ticks / measured.wall, 2),
        # the ticks that drew nothing: what waiting for the next frame costs
        "idle_ticks_cpu_percent": round(
            (clock.ticks_cpu_ms - sum(clock.cpu_ms)) / 10 / measured.wall, 2
        ),
        "gui_cpu_percent": round(measured.cpu_pct, 2),
        "gui_thread_cpu_percent": round(measured.gui_thread_pct, 2),
        "latency_ms_p95": clock.latency_p95(),
        "stored": window.session.steps.count,
        "dense": window.timeline.dense,
        "load_average": machine.load_average(),
        "profile": measured.top,
    }


def close_window(window: MainWindow, app: Any) -> None:
    window.session.close = lambda *a, **k: None  # type: ignore[method-assign]  # never started
    window.close()
    window.deleteLater()
    app.processEvents()


def run_rate(
    app: Any, rate: float, seconds: float, size: tuple[int, int], profile: Profiling = Profiling()
) -> dict[str, Any]:
    """A simulated run at ``rate`` steps/s, the window following "now"."""
    session = Session(sample_coarse=False)
    now = time.perf_counter_ns()
    session.t0_ns = now - 31 * S
    session._state = SessionState.RUNNING  # as if launched: the window follows "now"
    run = SyntheticRun(session, rate, start_ns=now - 30 * S)  # 30 s of history first
    run.announce()
    window = MainWindow(session, WindowOptions(workload="vision", device="cpu"))
    clock = shown(window, size)
    run.start()
    deadline = time.monotonic() + 60
    while not run.caught_up() and time.monotonic() < deadline:
        spin(0.02)
    spin(2.0)  # then warm up: first layouts, caches
    clock.recording = True
    with Measured(profile) as measured:
        spin(seconds)
    clock.recording = False
    figures, headline_ms = headline_now(session)
    run.stop()
    result = case_result(f"{rate:g} steps/s", rate, window, clock, measured)
    result.update(
        interval_ms=window.timer.interval(),
        filled=filled_share(window),
        headline=headline_text(figures, headline_ms),
    )
    close_window(window, app)
    return result


def run_idle(
    app: Any, seconds: float, size: tuple[int, int], profile: Profiling = Profiling()
) -> dict[str, Any]:
    """The window open with no run (as ``gpuwatch`` starts)."""
    window = MainWindow(Session(sample_coarse=False), WindowOptions(workload="mlp", device="cpu"))
    return measure_at_rest(app, window, "idle (no run)", seconds, size, profile=profile)


def shown(window: Any, size: tuple[int, int]) -> FrameClock:
    """Show ``window`` at ``size``, its frames counted from now on."""
    window.resize(*size)
    window.show()
    return FrameClock(window)


def measure_at_rest(
    app: Any, window: Any, name: str, seconds: float, size: tuple[int, int], *, profile: Profiling
) -> dict[str, Any]:
    """Show ``window``, let it settle, then measure ``seconds`` of it with nothing happening."""
    clock = shown(window, size)
    spin(3.0)
    clock.recording = True
    with Measured(profile) as measured:
        spin(seconds)
    result = case_result(name, None, window, clock, measured)
    close_window(window, app)
    return result


def run_replay(
    app: Any, seconds: float, size: tuple[int, int], profile: Profiling = Profiling()
) -> dict[str, Any]:
    """A replay of a 100,000-step recording (2 ms CPU steps, two configurations), at rest."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "reliability"))
    from synthetic_recording import write_recording  # a test helper: no run needed

    with tempfile.TemporaryDirectory(prefix="gpuwatch-render-") as tmp:
        path = write_recording(Path(tmp) / "rest.gpuwatch", 100_000)
        session = ReplaySession(open_recording(path))
        window = MainWindow(session, WindowOptions())
        return measure_at_rest(app, window, "replay at rest", seconds, size, profile=profile)


def run_live(
    app: Any, seconds: float, size: tuple[int, int], profile: Profiling = Profiling()
) -> dict[str, Any]:
    """A real runner (``mlp`` on the CPU, naive knobs) through the real Session: the GUI
    process's CPU while it trains (the runner is another process, not counted)."""
    session = Session()
    window = MainWindow(session, WindowOptions(workload="mlp", device="cpu"))
    clock = shown(window, size)
    window.start_run()
    deadline = time.monotonic() + 180
    while session.steps.count < 20 and time.monotonic() < deadline:
        if session.state is SessionState.FAILED:
            break
        spin(0.05)
    spin(2.0)
    clock.recording = True
    steps_before = session.steps.count
    with Measured(profile) as measured:
        spin(seconds)
    clock.recording = False
    rate = (session.steps.count - steps_before) / measured.wall
    result = case_result("live mlp (CPU)", None, window, clock, measured)
    result["steps_per_s_observed"] = round(rate, 1)
    window.close()
    app.processEvents()
    return result


def print_row(r: dict[str, Any]) -> None:
    def fmt(value: float | None, spec: str) -> str:
        return "—" if value is None else format(value, spec)

    budget = BUDGETS_P95.get(r["steps_per_s"] or -1.0)
    cpu_budget = CPU_BUDGETS.get(r["steps_per_s"] if r["steps_per_s"] else r["case"])
    verdicts = []
    if budget is not None and r["frame_ms_p95"] is not None:
        verdicts.append(f"p95<={budget:g}: {'met' if r['frame_ms_p95'] <= budget else 'MISSED'}")
    if cpu_budget is not None:
        ok = r["gui_cpu_percent"] <= cpu_budget
        verdicts.append(f"CPU<={cpu_budget:g}%: {'met' if ok else 'MISSED'}")
    print(
        f"{r['case']:>16} {r['frames']:6d} {r['frames_per_s']:6.1f} "
        f"{fmt(r['frame_ms_p50'], '7.1f'):>7} {fmt(r['frame_ms_p95'], '7.1f'):>7} "
        f"{fmt(r['frame_cpu_ms_p50'], '7.1f'):>7} {r['gui_cpu_percent']:9.1f} "
        f"{fmt(r['latency_ms_p95'], '7.0f'):>7} {r['stored']:8d}  {'; '.join(verdicts)}"
    )
    others = r["gui_cpu_percent"] - r["gui_thread_cpu_percent"]
    if r["frame_cpu_ms_mean"] is not None:
        print(
            f"#   GUI thread: frames {r['frames_per_s']:.1f}/s x {r['frame_cpu_ms_mean']:.1f} ms "
            f"(mean), ticks that drew nothing {r['idle_ticks_cpu_percent']:.1f} % "
            f"({r['ticks_per_s']:.0f} ticks/s in all)"
        )
    print(
        f"#   of the GUI CPU: the GUI thread {r['gui_thread_cpu_percent']:.1f} %, "
        f"others {others:.1f} %"
    )
    if r.get("steps_per_s_observed") is not None:
        print(f"#   the runner trained {r['steps_per_s_observed']:,.0f} steps/s meanwhile")
    if r.get("headline"):
        print(f"#   {r['headline']}")
    if r["profile"]:
        print("\n".join(f"#   {line}" for line in r["profile"].strip().splitlines()))
    sys.stdout.flush()


#: The window's budgets on a 2-core machine (docs/performance.md §7): frame p95 (ms) per
#: rate, GUI CPU % per case.
BUDGETS_P95 = {1000.0: 16.0, 10000.0: 33.0}
CPU_BUDGETS: dict[float | str, float] = {
    10.0: 10.0,
    100.0: 10.0,
    1000.0: 25.0,
    10000.0: 40.0,
    "idle (no run)": 1.0,
    "replay at rest": 1.0,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="measured seconds per case")
    parser.add_argument("--rates", default="10,100,1000,10000", help="steps/s, comma-separated")
    parser.add_argument(
        "--cases",
        default="idle,replay,live",
        help="other cases, comma-separated: idle (no run), replay (at rest), live (real mlp "
        "runner on the CPU); empty for none",
    )
    parser.add_argument("--size", default="1600x900", help="window size WxH")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    parser.add_argument(
        "--profile", type=int, default=0, help="cProfile the GUI thread: top N by own time"
    )
    parser.add_argument(
        "--profile-sort",
        choices=("tottime", "cumulative"),
        default="tottime",
        help="rank --profile's functions by own time or by time with what they call",
    )
    args = parser.parse_args(argv)
    profile = Profiling(args.profile, args.profile_sort)
    width, height = (int(v) for v in args.size.split("x"))
    size = (width, height)
    machine.isolate_user_dirs()
    app = create_app()
    runs: list[tuple[str, Any]] = [
        (f"{float(r):g}", lambda r=float(r): run_rate(app, r, args.seconds, size, profile))
        for r in args.rates.split(",")
        if r.strip()
    ]
    others = {"idle": run_idle, "replay": run_replay, "live": run_live}
    for name in (c.strip() for c in args.cases.split(",") if c.strip()):
        runs.append((name, lambda f=others[name]: f(app, args.seconds, size, profile)))
    if not args.json:
        print(
            machine.header(
                "gpuwatch drawing cost (bench/render.py)",
                [
                    f"SIMULATED telemetry into the real Session + MainWindow, offscreen, "
                    f"{width}x{height}, 30 s visible, {args.seconds:g} s per case"
                ],
            )
        )
        print(
            f"{'case':>16} {'frames':>6} {'fps':>6} {'p50 ms':>7} {'p95 ms':>7} "
            f"{'cpu p50':>7} {'GUI CPU %':>9} {'lat p95':>7} {'stored':>8}  budgets"
        )
    results = []
    for _, run in runs:
        result = run()
        results.append(result)
        if not args.json:
            print_row(result)
    if args.json:
        print(json.dumps({"load_average": machine.load_average(), "cases": results}, indent=1))
        return 0
    print(
        "# frames: redraw ticks that drew (a tick with nothing new draws nothing); p50/p95: "
        "wall clock per frame (tick + paint); cpu p50: the GUI thread's CPU time per frame; "
        "lat p95: a step's end mark to the end of the first frame that drew it"
    )
    print(
        f"# GUI CPU %: this process (window, link reading + decoding, NVML-like samples), in % "
        f"of one core; the (simulated or real) runner is another process.\n"
        f"# load average at the end: {machine.load_average()}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
