"""GUI memory over a simulated hour at 1,000 steps/s (``python bench/memory.py``; budget 4).

3.6 M SIMULATED steps (a CUDA-like run: ``steps`` batches of 50, ``device_marks`` one batch
later, NVML-like samples every 1/6 s) go through the real ``Session`` dispatch into its stores
as fast as this process can make them, while the real window (offscreen) redraws every
``--redraw-every`` batches (5 simulated seconds by default), so its views, snapshots and
scoreboard run over the data all along. Messages are handed over as decoded dicts (the
JSON decoding's garbage is transient and is not what could grow).

Reported: resident set size (psutil RSS) before the first step, after the first simulated
minute (rings filled), every simulated 10 minutes, and at the end; the growth over the hour.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import machine
import numpy as np
import psutil
from render import DEVICE_LAG_NS, NVML_PERIOD_NS, S, synthetic_marks

from gpuwatch.core.model.messages import DeviceInfo, Hello
from gpuwatch.core.model.metrics import NVML_GPU_UTIL
from gpuwatch.core.model.store import MetricStatus
from gpuwatch.core.run.session import Session
from gpuwatch.qt.app import create_app
from gpuwatch.qt.main_window import MainWindow
from gpuwatch.qt.window_options import WindowOptions

MB = 1024 * 1024


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=float, default=1.0, help="simulated hours")
    parser.add_argument("--rate", type=float, default=1000.0, help="simulated steps/s")
    parser.add_argument(
        "--redraw-every", type=int, default=100, help="window redraw every this many 50 ms batches"
    )
    args = parser.parse_args(argv)
    machine.isolate_user_dirs()
    app = create_app()
    batch = max(1, round(args.rate * 0.05))
    batches = int(args.hours * 3600 / 0.05)
    print(
        machine.header(
            "gpuwatch GUI memory over a simulated run (bench/memory.py)",
            [
                f"SIMULATED {args.rate:g} steps/s for {args.hours:g} h = "
                f"{batch * batches:,} steps in {batches:,} batches; window redraw "
                f"every {args.redraw_every} batches"
            ],
        )
    )
    session = Session(sample_coarse=False)
    session.hello = Hello(
        workload="synthetic", device=DeviceInfo(kind="cuda", name="SIMULATED GPU")
    )
    session.steps.set_device_is_host(False)
    session.coarse.set_status(
        MetricStatus(
            NVML_GPU_UTIL, "NVML GPU utilization", "%", True, period_s=1 / 6, source="simulated"
        )
    )
    window = MainWindow(session, WindowOptions(workload="vision", device="cpu"))
    window.timer.stop()  # redraws are driven below, at simulated-time intervals
    window.resize(1600, 900)
    window.show()
    app.processEvents()
    proc = psutil.Process()
    gc.collect()
    rss0 = proc.memory_info().rss
    print(f"\n{'simulated':>10} {'steps':>10} {'RSS MB':>8} {'vs start':>9} {'wall s':>7}")
    print(f"{0:>9.0f}s {0:>10,} {rss0 / MB:8.1f} {0:+9.1f} {0:7.1f}")
    rng = np.random.default_rng(0)
    step_ns = S / args.rate
    t_ns = session.t0_ns + S
    next_sample = t_ns
    next_id = 0
    pending: tuple[list[int], list[list[int]]] | None = None
    rss_minute = None
    started = time.perf_counter()
    report_every = int(600 / 0.05)
    for b in range(1, batches + 1):
        marks, t_ns = synthetic_marks(t_ns, batch, step_ns, rng)
        ids = list(range(next_id, next_id + batch))
        next_id += batch
        session._dispatch(
            {
                "kind": "steps",
                "step": ids,
                "config": [0] * batch,
                "samples": [32] * batch,
                "host": marks.tolist(),
            }
        )
        if pending is not None:
            session._dispatch({"kind": "device_marks", "step": pending[0], "device": pending[1]})
        pending = (ids, (marks + DEVICE_LAG_NS).tolist())
        if next_sample + NVML_PERIOD_NS <= t_ns:
            k = (t_ns - next_sample) // NVML_PERIOD_NS
            t0 = next_sample + NVML_PERIOD_NS * np.arange(k, dtype=np.int64)
            session.coarse.append_many(
                NVML_GPU_UTIL,
                t0.tolist(),
                (t0 + NVML_PERIOD_NS).tolist(),
                rng.uniform(40, 90, k).tolist(),
            )
            next_sample += int(k) * NVML_PERIOD_NS
        if b % args.redraw_every == 0:
            window.redraw_now()  # a full frame whatever the pacing: time here is simulated
            app.processEvents()
        if b == int(60 / 0.05):
            rss_minute = proc.memory_info().rss
        if b % report_every == 0 or b == batches:
            rss = proc.memory_info().rss
            print(
                f"{b * 0.05:>9.0f}s {next_id:>10,} {rss / MB:8.1f} {(rss - rss0) / MB:+9.1f} "
                f"{time.perf_counter() - started:7.1f}"
            )
            sys.stdout.flush()
    gc.collect()
    rss1 = proc.memory_info().rss
    window.close()
    print(
        f"\nRSS growth over the run: {(rss1 - rss0) / MB:+.1f} MB from before the first step, "
        f"{(rss1 - (rss_minute or rss0)) / MB:+.1f} MB after the first simulated minute "
        f"(budget <= 100 MB: {'met' if rss1 - rss0 <= 100 * MB else 'MISSED'})"
    )
    print(f"# load average at the end: {machine.load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
