"""Soak: memory of both processes over a long run (``python bench/soak.py``).

Runs the real ``Session`` (and with ``--window`` the real ``MainWindow``, offscreen) against a
live runner — the ``mlp`` workload at its highest step rate (``batch_size=1`` unless ``--set``
says otherwise) — or, with ``--synthetic RATE``, against a torch-free stand-in runner that sends
RATE steps/s over the same authenticated link. Every ``--every`` seconds it prints the steps so
far, the step rate, and the RSS of the GUI process and of the runner (psutil); at the end, the
slope of each RSS in MiB/hour, fitted after the warm-up (the step ring fills at
``capacity / rate`` seconds: until then memory is *supposed* to grow). Flat means |slope| small
against the RSS. Not a test: a 1-hour soak is the default, ``--minutes`` shortens it.
Nothing here runs on a GPU; on a CPU-only machine the figures are CPU figures.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
import machine  # bench/ sibling, importable after the path entry above

MiB = 2**20


def as_runner(argv: list[str]) -> int:
    """The synthetic runner (started by the Session through a wrapper interpreter)."""
    from multiprocessing.connection import Client

    from gpuwatch.protocol import N_MARKS, PROTOCOL_VERSION, encode

    rate = int(os.environ["GPUWATCH_SOAK_RATE"])
    key = (
        sys.stdin.readline()
        if "--authkey-stdin" in argv  # how gpuwatch passes it
        else os.environ["GPUWATCH_AUTHKEY"]
    )
    conn = Client(argv[argv.index("--connect") + 1], authkey=bytes.fromhex(key.strip()))
    stop = threading.Event()

    def read() -> None:
        try:
            while json.loads(conn.recv_bytes()).get("kind") != "stop":
                pass
        except (EOFError, OSError):
            pass
        stop.set()

    threading.Thread(target=read, daemon=True).start()
    conn.send_bytes(
        encode(
            "hello",
            protocol=PROTOCOL_VERSION,
            pid=os.getpid(),
            workload="synthetic",
            device={"kind": "cpu", "name": "synthetic"},
            versions={},
            knobs=[],
            config={"id": 0, "values": {}},
        )
    )
    per_batch, step = max(1, rate // 20), 0
    while not stop.wait(0.05):
        now, step_ns = time.perf_counter_ns(), 50_000_000 // per_batch
        host = [
            [now - (per_batch - i) * step_ns + j * (step_ns // N_MARKS) for j in range(N_MARKS)]
            for i in range(per_batch)
        ]
        try:
            conn.send_bytes(
                encode(
                    "steps",
                    step=list(range(step, step + per_batch)),
                    config=[0] * per_batch,
                    samples=[1] * per_batch,
                    host=host,
                )
            )
        except OSError:
            break
        step += per_batch
    if stop.is_set():
        with contextlib.suppress(OSError):
            conn.send_bytes(encode("bye", reason="stopped"))
    return 0


def wrapper_python(folder: Path, rate: int) -> str:
    """An "interpreter" whose ``-m gpuwatch.runner ...`` is this file's synthetic runner."""
    if sys.platform == "win32":
        raise SystemExit("soak: --synthetic needs a POSIX shell (use the live mlp runner)")
    wrapper = folder / "python"
    wrapper.write_text(
        f'#!/bin/sh\nGPUWATCH_SOAK_RATE={rate} exec "{sys.executable}" '
        f'"{Path(__file__).resolve()}" --as-runner "$@"\n'
    )
    wrapper.chmod(0o755)
    return str(wrapper)


def slope_mib_per_h(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, bytes) in MiB per hour; NaN with fewer than 3 points."""
    if len(points) < 3:
        return float("nan")
    n = len(points)
    mx = sum(t for t, _ in points) / n
    my = sum(v for _, v in points) / n
    var = sum((t - mx) ** 2 for t, _ in points)
    cov = sum((t - mx) * (v - my) for t, v in points)
    return cov / var * 3600 / MiB if var else float("nan")


def rss(pid: int | None) -> float | None:
    try:
        return float(psutil.Process(pid).memory_info().rss) if pid else None
    except psutil.Error:
        return None


class Soak:
    """Samples both processes every ``every`` seconds until ``seconds`` have passed."""

    def __init__(self, session, seconds: float, every: float, warmup_s: float) -> None:
        self.session = session
        self.seconds, self.every, self.warmup_s = seconds, every, warmup_s
        self.gui: list[tuple[float, float]] = []
        self.runner: list[tuple[float, float]] = []
        self.started = time.monotonic()
        self.last = (self.started, 0)

    def sample(self) -> bool:
        """Print one line; False once the soak is over (or the run ended)."""
        now = time.monotonic()
        t = now - self.started
        count = self.session.steps.count
        rate = (count - self.last[1]) / max(now - self.last[0], 1e-9)
        self.last = (now, count)
        gui, runner = rss(os.getpid()), rss(self.session.pid)
        if t >= self.warmup_s:
            self.gui.append((t, gui or 0.0))
            if runner is not None:
                self.runner.append((t, runner))
        print(
            f"{t:8.0f} {count:12,d} {rate:10,.0f} {(gui or 0) / MiB:10.1f} "
            f"{(runner or 0) / MiB:11.1f}",
            flush=True,
        )
        return t < self.seconds and self.session.state.value in ("starting", "running")

    def report(self) -> None:
        for name, points in (("GUI", self.gui), ("runner", self.runner)):
            if points:
                print(
                    f"# {name} RSS: {points[0][1] / MiB:.1f} -> {points[-1][1] / MiB:.1f} MiB "
                    f"after warm-up; slope {slope_mib_per_h(points):+.2f} MiB/h "
                    f"({len(points)} samples)"
                )
        print(
            f"# state at the end: {self.session.state.value}"
            + (f" ({self.session.error})" if self.session.error else "")
        )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--as-runner"]:
        return as_runner(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=60.0, help="how long (default 60)")
    parser.add_argument("--every", type=float, default=30.0, help="seconds between samples")
    parser.add_argument(
        "--warmup",
        type=float,
        default=None,
        help="seconds left out of the slope (default: 20%% of the run)",
    )
    parser.add_argument("--workload", default="mlp", help="live runner workload (default mlp)")
    parser.add_argument(
        "--set",
        nargs="*",
        default=["batch_size=1"],
        metavar="K=V",
        help="knob values for the live runner (default: batch_size=1)",
    )
    parser.add_argument(
        "--synthetic",
        type=int,
        metavar="RATE",
        help="a torch-free runner sending RATE steps/s instead",
    )
    parser.add_argument(
        "--capacity", type=int, default=None, help="step ring size (default: the Session's)"
    )
    parser.add_argument("--window", action="store_true", help="also draw the window offscreen")
    args = parser.parse_args(argv)

    from gpuwatch.core.model.knob_values import KnobValueError, parse_assignments, split_assignment
    from gpuwatch.core.model.store import DEFAULT_STEP_CAPACITY
    from gpuwatch.core.run.session import LaunchSpec, Session, SessionState

    seconds = args.minutes * 60
    capacity = args.capacity or DEFAULT_STEP_CAPACITY
    tmp = Path(tempfile.mkdtemp(prefix="gpuwatch-soak-"))
    if args.synthetic:
        spec = LaunchSpec(
            workload="synthetic", device="cpu", python=wrapper_python(tmp, args.synthetic)
        )
        what = f"synthetic runner at {args.synthetic:,} steps/s"
    else:
        spec = LaunchSpec(workload=args.workload, device="cpu")
        what = f"live {args.workload} runner on the CPU, {' '.join(args.set) or 'defaults'}"
    print(
        machine.header(
            "gpuwatch soak: RSS of the GUI process and the runner over time",
            [
                f"{what}; window: {'offscreen' if args.window else 'no'}; {args.minutes:g} min; "
                f"step ring {capacity:,}"
            ],
        )
    )
    session = Session(step_capacity=capacity)
    session.start(spec)
    deadline = time.monotonic() + 300
    while session.hello is None and session.state is SessionState.STARTING:
        if time.monotonic() > deadline:
            break
        time.sleep(0.1)
    if session.state is not SessionState.RUNNING:
        print(f"soak: the run did not start: {session.error}", file=sys.stderr)
        session.close()
        return 1
    if args.set and not args.synthetic:
        try:
            pairs = [split_assignment(text) for text in args.set]
            session.set_knobs(parse_assignments(session.knobs, pairs))
        except KnobValueError as exc:
            print(f"soak: {exc}", file=sys.stderr)
            session.close()
            return 2
    soak = Soak(
        session, seconds, args.every, args.warmup if args.warmup is not None else 0.2 * seconds
    )
    print(f"# {'seconds':>6} {'steps':>12} {'steps/s':>10} {'GUI MiB':>10} {'runner MiB':>11}")
    try:
        if args.window:
            _run_with_window(session, soak)
        else:
            while soak.sample():
                time.sleep(args.every)
    finally:
        session.close()
    soak.report()
    return 0


def _run_with_window(session, soak: Soak) -> None:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QTimer, qInstallMessageHandler

    from gpuwatch.qt.app import create_app
    from gpuwatch.qt.main_window import MainWindow
    from gpuwatch.qt.window_options import WindowOptions

    app = create_app()
    previous = None

    def quiet(mode, context, message: str) -> None:  # offscreen has no window manager
        if "propagateSizeHints" not in message and previous is not None:
            previous(mode, context, message)

    previous = qInstallMessageHandler(quiet)
    window = MainWindow(session, WindowOptions(workload="mlp", device="cpu"))
    window.resize(1280, 800)
    window.show()
    timer = QTimer()

    def tick() -> None:
        if not soak.sample():
            timer.stop()
            window.close()
            app.quit()

    timer.timeout.connect(tick)
    timer.start(int(soak.every * 1000))
    app.exec()


if __name__ == "__main__":
    raise SystemExit(main())
