"""From a step's end in the runner to its span on screen (``python bench/latency.py``).

The real window (offscreen) starts a real runner (``mlp`` on the CPU, its
naive configuration) and trains. Both processes read the same ``perf_counter_ns`` clock
(system-wide on Linux and Windows; docs/design.md, "A step's marks"), so a step's latency
is exact: the runner's end
mark of the step → the end of the first frame (redraw tick + the paint it posts) whose data
included it. What it is made of: the runner's batching (a message at most every ~50 ms), the
link, decoding, then waiting for the next ~33 ms redraw tick, and the frame itself.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import machine
import numpy as np
from PySide6.QtCore import QCoreApplication

from gpuwatch.core.run.session import Session, SessionState
from gpuwatch.qt.app import create_app
from gpuwatch.qt.main_window import MainWindow
from gpuwatch.qt.window_options import WindowOptions


class DrawLatency:
    """Per step: end of the frame that first drew it − the step's end mark (ns)."""

    def __init__(self, window: MainWindow) -> None:
        self.window = window
        self.latencies_ms: list[np.ndarray] = []
        self.frames_ms: list[float] = []
        self.recording = False
        self._drawn_id = -1  # newest step id drawn by an earlier frame
        original = window._tick
        steps = window.session.steps

        def tick() -> None:
            started = time.perf_counter_ns()
            drawn_before = window.frame.frames_drawn
            newest = steps.snapshot(last=1)  # this frame's snapshots include at least this
            original()
            QCoreApplication.sendPostedEvents()  # the paint this tick asked for
            drawn_ns = time.perf_counter_ns()
            if not len(newest) or window.frame.frames_drawn == drawn_before:
                return  # a tick that drew nothing (no frame due) drew no step
            newest_id = int(newest.step[-1])
            if newest_id > self._drawn_id and self.recording:
                view = steps.snapshot(last=newest_id - self._drawn_id + 4096)
                new = (view.step > self._drawn_id) & (view.step <= newest_id)
                self.latencies_ms.append((drawn_ns - view.host[new, -1]) / 1e6)
                self.frames_ms.append((drawn_ns - started) / 1e6)
            self._drawn_id = max(self._drawn_id, newest_id)

        window.timer.timeout.disconnect()
        window.timer.timeout.connect(tick)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="measured seconds")
    parser.add_argument("--workload", default="mlp")
    args = parser.parse_args(argv)
    machine.isolate_user_dirs()
    app = create_app()
    print(
        machine.header(
            "gpuwatch step-to-screen latency (bench/latency.py)",
            [
                f"real runner ({args.workload}, CPU, naive knobs) + real window "
                f"offscreen; {args.seconds:g} s measured after the first steps"
            ],
        )
    )
    session = Session()
    window = MainWindow(session, WindowOptions(workload=args.workload, device="cpu"))
    window.resize(1600, 900)
    window.show()
    probe = DrawLatency(window)
    window.start_run()
    started = time.monotonic()
    while session.steps.count < 20:
        app.processEvents()
        time.sleep(0.002)
        if session.state is SessionState.FAILED or time.monotonic() - started > 180:
            print(f"the run did not start: {session.error or 'timeout'}")
            return 1
    runner_up_s = time.monotonic() - started
    probe.recording = True
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        app.processEvents()
        time.sleep(0.001)
    probe.recording = False
    steps = session.steps.count
    window.close()
    app.processEvents()
    lat = np.concatenate(probe.latencies_ms) if probe.latencies_ms else np.empty(0)
    print(
        f"runner's first 20 steps in after {runner_up_s:.1f} s; {steps} steps in total; "
        f"{len(lat)} steps measured over {len(probe.frames_ms)} frames"
    )
    if len(lat):
        p50, p95 = np.percentile(lat, [50, 95])
        print(
            f"step end -> drawn   p50 {p50:.1f} ms, p95 {p95:.1f} ms, max {lat.max():.1f} ms"
            f"   (budget p95 <= 150 ms: {'met' if p95 <= 150 else 'MISSED'})"
        )
        f50, f95 = np.percentile(probe.frames_ms, [50, 95])
        print(f"frames meanwhile    p50 {f50:.1f} ms, p95 {f95:.1f} ms")
    print(f"# load average at the end: {machine.load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
