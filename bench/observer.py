"""Does watching slow the watched? (``python bench/observer.py [--json]``)

The same change, the built-in ``vision`` workload's ``num_workers`` 0 → 2 on the CPU, measured
two ways back to back on this machine:

- **in the window**: the real ``MainWindow`` (offscreen, 1600×900) starts a real runner, follows
  it live, and the change is sent through ``Session.set_knobs``, the call the advisor's Apply
  button makes; the speedup is the one the window's scoreboard shows for the new row, once
  each row has been steady for ``--seconds``;
- **headless**: ``gpuwatch bench --workload vision --device cpu --set num_workers=0 --then
  num_workers=2 --format json``, the same steady seconds per stage.

Interleaved twice (window, bench, bench, window), so a drift in the machine's load falls on both
alike. Prints both speedups (median of the two each) and their ratio, window ÷ bench: the
window's own CPU competes with the DataLoader workers it tells users to add, so a ratio under
the budget (0.9) means the observer visibly changed what it observed. Nothing here runs a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import machine
from render import spin

from gpuwatch.core.figures.segments import SegmentStats
from gpuwatch.core.model.messages import ConfigChange, Refusal
from gpuwatch.core.run.session import Session, SessionState
from gpuwatch.qt.app import create_app
from gpuwatch.qt.main_window import MainWindow
from gpuwatch.qt.window_options import WindowOptions

WORKLOAD, DEVICE, KNOB = "vision", "cpu", "num_workers"
BEFORE, AFTER = 0, 2
#: The window's speedup must be at least this share of the headless one (the budget in
#: docs/performance.md).
RATIO_BUDGET = 0.9
#: The runner imports torch and builds its workload first; a cold start can be slow.
START_TIMEOUT_S = 240.0
#: A stage may take this many times its steady seconds (as ``gpuwatch bench`` allows) plus
#: the transition, before the measurement gives up.
STAGE_FACTOR = 3.0
STAGE_MARGIN_S = 90.0


@dataclass(frozen=True)
class Speedup:
    """One measurement of the change: where, its speedup and both rows' samples/s."""

    where: str  # "window" | "bench"
    speedup: float
    before_per_s: float
    after_per_s: float
    seconds: float  # wall time of the whole measurement, start-up included
    load_average: str


class Failed(Exception):
    """A measurement that could not finish (the run failed, timed out or was refused)."""


def wait_for(what: str, ready: Callable[[], bool], timeout_s: float, session: Session) -> None:
    """Spin the window's event loop until ``ready()``; fail on timeout or a failed run."""
    deadline = time.monotonic() + timeout_s
    while not ready():
        if session.state is SessionState.FAILED:
            raise Failed(f"the run failed while waiting for {what}: {session.error}")
        if time.monotonic() > deadline:
            raise Failed(f"no {what} within {timeout_s:.0f} s")
        spin(0.25)


def scoreboard_row(window: MainWindow, config_id: int) -> SegmentStats | None:
    """The row the window's scoreboard shows for ``config_id`` (refreshed at ~2 Hz)."""
    rows = window.scoreboard.model.rows
    return next((r for r in rows if r.config_id == config_id), None)


def steady_for(window: MainWindow, config_id: int, seconds: float) -> Callable[[], bool]:
    def ready() -> bool:
        row = scoreboard_row(window, config_id)
        return row is not None and row.steady and row.steady_s >= seconds

    return ready


def in_window(seconds: float, size: tuple[int, int]) -> Speedup:
    """The change made in a live window, as the advisor's Apply makes it."""
    started = time.monotonic()
    session = Session()
    window = MainWindow(session, WindowOptions(workload=WORKLOAD, device=DEVICE))
    window.resize(*size)
    window.show()
    try:
        window.start_run()
        wait_for("runner", lambda: bool(session.config_changes()), START_TIMEOUT_S, session)
        stage_s = STAGE_FACTOR * seconds + STAGE_MARGIN_S
        if session.config_values().get(KNOB) != BEFORE:
            apply(window, session, BEFORE, stage_s)
        first = session.config_changes()[-1].id
        wait_for(
            f"{seconds:g} steady s of {KNOB}={BEFORE}",
            steady_for(window, first, seconds),
            stage_s,
            session,
        )
        second = apply(window, session, AFTER, stage_s)
        wait_for(
            f"{seconds:g} steady s of {KNOB}={AFTER}",
            steady_for(window, second, seconds),
            stage_s,
            session,
        )
        before, after = scoreboard_row(window, first), scoreboard_row(window, second)
        assert before is not None and after is not None
        if after.speedup is None or before.samples_per_s is None or after.samples_per_s is None:
            raise Failed("the scoreboard shows no speedup")
        if window.scoreboard.model.baseline_id not in (None, first):
            raise Failed("the scoreboard's baseline is not the first configuration")
        return Speedup(
            "window",
            after.speedup,
            before.samples_per_s,
            after.samples_per_s,
            round(time.monotonic() - started, 1),
            machine.load_average(),
        )
    finally:
        window.close()  # stops the runner with the window
        spin(0.5)


def apply(window: MainWindow, session: Session, value: int, timeout_s: float) -> int:
    """Send ``KNOB=value`` through the call the advisor's Apply makes; the new config's id."""
    request = window.advisor.session.set_knobs({KNOB: value})
    if request is None:
        return session.config_changes()[-1].id
    answer: list[ConfigChange | Refusal] = []

    def answered() -> bool:
        got = session.answer(request)
        if got is not None:
            answer.append(got)
        return bool(answer)

    wait_for(f"an answer to {KNOB}={value}", answered, timeout_s, session)
    if isinstance(answer[0], Refusal):
        raise Failed(f"{KNOB}={value} was refused: {answer[0].message}")
    return answer[0].id


def headless(seconds: float) -> Speedup:
    """The same change through ``gpuwatch bench`` (no window)."""
    started = time.monotonic()
    command = [
        sys.executable,
        "-m",
        "gpuwatch",
        "bench",
        "--workload",
        WORKLOAD,
        "--device",
        DEVICE,
        "--seconds",
        f"{seconds:g}",
        "--format",
        "json",
        "--set",
        f"{KNOB}={BEFORE}",
        "--then",
        f"{KNOB}={AFTER}",
    ]
    limit = START_TIMEOUT_S + 2 * (STAGE_FACTOR * seconds + STAGE_MARGIN_S)
    done = subprocess.run(command, capture_output=True, text=True, timeout=limit, check=False)
    if done.returncode != 0:
        raise Failed(f"gpuwatch bench exited {done.returncode}: {done.stderr.strip()[-400:]}")
    segments = json.loads(done.stdout)["segments"]
    if len(segments) != 2 or segments[1]["speedup"] is None:
        raise Failed(f"gpuwatch bench measured {len(segments)} stage(s) without a speedup")
    return Speedup(
        "bench",
        float(segments[1]["speedup"]),
        float(segments[0]["samples_per_s"]),
        float(segments[1]["samples_per_s"]),
        round(time.monotonic() - started, 1),
        machine.load_average(),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--seconds", type=float, default=20.0, help="steady seconds per configuration"
    )
    parser.add_argument("--pairs", type=int, default=2, help="window/bench pairs (interleaved)")
    parser.add_argument("--size", default="1600x900", help="window size WxH")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args = parser.parse_args(argv)
    width, height = (int(v) for v in args.size.split("x"))
    machine.isolate_user_dirs()
    create_app()
    if not args.json:
        print(
            machine.header(
                "gpuwatch observer effect (bench/observer.py)",
                [
                    f"{WORKLOAD} on the CPU, {KNOB} {BEFORE} -> {AFTER}: in the window "
                    f"(offscreen {width}x{height}, Apply's call) vs gpuwatch bench, "
                    f"{args.seconds:g} steady s per configuration, {args.pairs} pair(s)"
                ],
            )
        )
    window_runs: list[Speedup] = []
    bench_runs: list[Speedup] = []
    for pair in range(args.pairs):
        order = ("window", "bench") if pair % 2 == 0 else ("bench", "window")
        for where in order:
            try:
                if where == "window":
                    result = in_window(args.seconds, (width, height))
                    window_runs.append(result)
                else:
                    result = headless(args.seconds)
                    bench_runs.append(result)
            except Failed as exc:
                print(f"{where}: {exc}", file=sys.stderr)
                return 1
            if not args.json:
                print(
                    f"{result.where:>6}: {result.speedup:.2f}x  ({result.before_per_s:,.1f} -> "
                    f"{result.after_per_s:,.1f} samples/s; {result.seconds:.0f} s; "
                    f"load {result.load_average})"
                )
                sys.stdout.flush()
    window_speedup = statistics.median(r.speedup for r in window_runs)
    bench_speedup = statistics.median(r.speedup for r in bench_runs)
    ratio = window_speedup / bench_speedup
    if args.json:
        document = {
            "window_speedup": window_speedup,
            "bench_speedup": bench_speedup,
            "ratio": ratio,
            "ratio_budget": RATIO_BUDGET,
            "met": ratio >= RATIO_BUDGET,
            "runs": [asdict(r) for r in (*window_runs, *bench_runs)],
            "load_average": machine.load_average(),
        }
        print(json.dumps(document, indent=1))
        return 0
    verdict = "met" if ratio >= RATIO_BUDGET else "MISSED"
    print(
        f"speedup in the window {window_speedup:.2f}x, gpuwatch bench {bench_speedup:.2f}x "
        f"(medians): ratio {ratio:.2f} (budget >= {RATIO_BUDGET:g}: {verdict})"
    )
    print(f"# load average at the end: {machine.load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
