"""How fast gpuwatch starts and answers a loader change (``python bench/startup.py``).

Three figures, each from fresh processes, best and median of several:

* ``gpuwatch --version`` (the console script, as a user types it), next to ``python -c pass``
  (the interpreter's own start, a floor no code of ours can go under);
* the window: from the ``gpuwatch`` process's launch to its Qt imports done, the window shown
  and its first redraw, and to the runner's ``hello`` (the runner imports torch; the window
  must not wait for it), plus whether ``torch`` was ever imported in the GUI process;
* a knob change ``num_workers`` 0→2 on a running CPU workload: from ``set_knobs`` to the end
  of the first step trained under the new configuration (the runner's own marks, on the
  shared ``perf_counter_ns`` axis), with the runner's ``apply_s`` beside it, and next to it
  its floor: ``python -c "import torch"`` in a fresh interpreter, measured just before (a
  ``spawn`` worker is such an interpreter; it cannot deliver a batch before torch is imported).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import machine
import numpy as np

from gpuwatch.core.run.session import LaunchSpec, Session, SessionState
from gpuwatch.runner.worker_start import WORKER_START_ENV

BIN = Path(sys.executable).parent

#: Runs the real ``gpuwatch`` command (window + runner) and reports, as one JSON line, when
#: (seconds since the parent started the process) the Qt modules were imported, the window was
#: shown, first redrawn, and the runner said hello; then closes the window. The start is the
#: parent's ``time.time()`` just before it launched the process (``GPUWATCH_BENCH_LAUNCHED``),
#: not ``psutil.Process().create_time()``: on Linux that is the boot time (whole seconds in
#: /proc/stat) plus ticks, which put it 0.6 s early on the development machine.
WINDOW_PROBE = textwrap.dedent("""
    import json, os, sys, time
    launched = float(os.environ["GPUWATCH_BENCH_LAUNCHED"])
    def since_start():
        return time.time() - launched
    marks = {"interpreter": since_start()}
    from gpuwatch.qt import main_window
    marks["qt_imported"] = since_start()
    original_show, original_tick = main_window.MainWindow.show, main_window.MainWindow._tick
    def show(self):
        original_show(self)
        marks.setdefault("shown", since_start())
        marks.setdefault("torch_at_show", "torch" in sys.modules)
    def tick(self):
        original_tick(self)
        marks.setdefault("first_frame", since_start())
        if self.session.hello is not None and "hello" not in marks:
            marks["hello"] = since_start()
            marks["torch_in_gui"] = "torch" in sys.modules
            self.close()
    main_window.MainWindow.show = show
    main_window.MainWindow._tick = tick
    from gpuwatch.cli import main
    code = main(["--workload", "mlp", "--device", "cpu"])
    marks["torch_at_exit"] = "torch" in sys.modules
    print("MARKS " + json.dumps(marks), flush=True)
""")


def gpuwatch_command() -> list[str]:
    script = shutil.which("gpuwatch", path=str(BIN))
    return [script] if script else [sys.executable, "-m", "gpuwatch"]


def wall_of(command: list[str], runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return times


def window_marks(runs: int) -> list[dict[str, float]]:
    results = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="gpuwatch-startup-") as home:
            env = {
                **os.environ,
                "QT_QPA_PLATFORM": "offscreen",
                "GPUWATCH_SETTINGS_DIR": str(Path(home) / "settings"),
                "GPUWATCH_LOG_DIR": str(Path(home) / "logs"),
            }
            env["GPUWATCH_BENCH_LAUNCHED"] = repr(time.time())
            done = subprocess.run(
                [sys.executable, "-c", WINDOW_PROBE],
                env=env,
                capture_output=True,
                text=True,
                timeout=180,
                check=False,
            )
        line = next((ln for ln in done.stdout.splitlines() if ln.startswith("MARKS ")), None)
        if line is None:
            raise RuntimeError(f"the window probe failed:\n{done.stderr[-2000:]}")
        results.append(json.loads(line[len("MARKS ") :]))
    return results


def wait(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.005)


def knob_changes(
    workload: str, changes: int, steady_s: float, start_method: str | None = None
) -> list[dict[str, float]]:
    """Alternate num_workers 0→2 and back on one run; time each 0→2 to its first step.
    ``start_method`` forces how the workers start (``GPUWATCH_WORKER_START``: ``spawn`` is
    Windows' way); each change's ``first_batch_s`` is the runner's own "delivered their
    first batch in" figure."""
    session = Session(sample_coarse=False)
    saved = os.environ.get(WORKER_START_ENV)
    if start_method:
        os.environ[WORKER_START_ENV] = start_method  # the launcher passes it to the runner
    try:
        session.start(LaunchSpec(workload=workload, device="cpu"))
    finally:
        if saved is None:
            os.environ.pop(WORKER_START_ENV, None)
        else:
            os.environ[WORKER_START_ENV] = saved
    out = []
    delivered: list[float] = []

    def read_log() -> None:
        for line in session.drain_log():
            found = re.search(r"delivered their first batch in ([\d.]+) s", line.text)
            if found:
                delivered.append(float(found[1]))

    try:
        wait(lambda: session.steps.count > 5, 180, "the first steps")
        for _ in range(changes):
            for target in (2, 0):
                time.sleep(steady_s)  # a few steady steps under the current setting
                t_set = time.perf_counter_ns()
                request = session.set_knobs({"num_workers": target})
                wait(lambda r=request: session.answer(r) is not None, 120, "the config answer")
                change = session.answer(request)
                assert change is not None and hasattr(change, "id"), f"refused: {change}"
                new_id = change.id

                def first_new_step(new_id: int = new_id, t_set: int = t_set) -> int | None:
                    view = session.steps.snapshot(since_ns=t_set)
                    rows = (view.config == new_id).nonzero()[0]
                    return int(view.host[rows[0], -1]) if len(rows) else None

                wait(lambda: first_new_step() is not None, 120, "a step under the new config")
                read_log()
                end_ns = first_new_step()
                assert end_ns is not None
                if target != 2:
                    continue
                wait(
                    lambda n=new_id, t=t_set: (
                        int((session.steps.snapshot(since_ns=t).config == n).sum()) >= 5
                    ),
                    120,
                    "five steps under it",
                )
                before = session.steps.snapshot(since_ns=t_set - int(steady_s * 1e9))
                view = session.steps.snapshot(since_ns=t_set)
                step_s = (view.host[:, -1] - view.host[:, 0]) / 1e9
                new_rows = (view.config == new_id).nonzero()[0]
                around = step_s[: new_rows[4] + 1]  # from the set to 5 steps into the change
                old = before.host[before.host[:, -1] < t_set]
                out.append(
                    {
                        "first_batch_s": delivered[-1] if delivered else float("nan"),
                        "first_step_s": (end_ns - t_set) / 1e9,
                        "apply_s": change.apply_s,
                        "set_to_apply_s": (change.t_ns - t_set) / 1e9,
                        "longest_step_s": float(around.max()),
                        "steady_step_s": float(np.median((old[:, -1] - old[:, 0]) / 1e9))
                        if len(old)
                        else float("nan"),
                    }
                )
    finally:
        session.stop()
        session.wait_ended(60)
        session.close()
    if session.state is SessionState.FAILED:
        raise RuntimeError(f"the run failed: {session.error}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="repetitions of --version")
    parser.add_argument("--window-runs", type=int, default=3)
    parser.add_argument("--changes", type=int, default=3, help="num_workers 0→2 changes")
    parser.add_argument("--workload", default="vision", help="workload for the knob change")
    parser.add_argument(
        "--start-methods",
        default="",
        help="comma-separated worker start methods to time the change with (spawn, "
        "forkserver); default: the runner's own choice",
    )
    parser.add_argument(
        "--changes-only", action="store_true", help="only the knob change, not the start-up"
    )
    args = parser.parse_args(argv)
    print(machine.header("gpuwatch start-up (bench/startup.py)"))
    if args.changes_only:
        return print_knob_changes(args)

    floor = wall_of([sys.executable, "-c", "pass"], args.runs)
    version = wall_of([*gpuwatch_command(), "--version"], args.runs)
    print(
        f"\npython -c pass            best {min(floor):.3f} s, median "
        f"{statistics.median(floor):.3f} s"
    )
    print(
        f"gpuwatch --version        best {min(version):.3f} s, median "
        f"{statistics.median(version):.3f} s   (budget <= 0.5 s)"
    )
    sys.stdout.flush()

    marks = window_marks(args.window_runs)
    print(
        f"\nwindow (gpuwatch --workload mlp --device cpu, {args.window_runs} runs; seconds "
        "since the process was launched)"
    )
    for key, label in (
        ("interpreter", "interpreter up (before our imports)"),
        ("qt_imported", "Qt, pyqtgraph and the window imported"),
        ("shown", "window shown"),
        ("first_frame", "first redraw"),
        ("hello", "runner hello (torch imported there)"),
    ):
        print(f"  {label:38s} {machine.spread([m[key] for m in marks], '{:.2f}')}")
    print(
        f"  window shown <= 2 s before the runner is up: "
        f"{'met' if max(m['shown'] for m in marks) <= 2.0 else 'MISSED'}; runner up "
        f"{machine.spread([m['hello'] - m['shown'] for m in marks], '{:.2f}')} s after it"
    )
    torch_seen = any(m.get("torch_in_gui") or m.get("torch_at_exit") for m in marks)
    print(f"  torch imported in the GUI process: {'YES (a bug)' if torch_seen else 'never'}")
    sys.stdout.flush()

    if args.changes < 1:
        print(f"\n# load average at the end: {machine.load_average()}")
        return 0
    return print_knob_changes(args)


def print_knob_changes(args: argparse.Namespace) -> int:
    """The knob change's figures, once per asked start method."""
    torch_floor = wall_of([sys.executable, "-c", "import torch"], 3)
    for method in [m.strip() for m in args.start_methods.split(",") if m.strip()] or [None]:
        print_changes(args, method, torch_floor)
    print(f"\n# load average at the end: {machine.load_average()}")
    return 0


def print_changes(args: argparse.Namespace, method: str | None, torch_floor: list[float]) -> None:
    changes = knob_changes(args.workload, args.changes, steady_s=2.0, start_method=method)
    how = f"workers started by {method}" if method else "the runner's own worker start"
    print(
        f"\nknob change num_workers 0→2 on {args.workload} (CPU), {len(changes)} changes on one "
        f"run, {how}"
    )
    print(
        f"  set -> workers' first batch       "
        f"{machine.spread([c['first_batch_s'] for c in changes])} s   (the runner's own figure)"
    )
    first = [c["first_step_s"] for c in changes]
    print(f"  set -> first step under it ends   {machine.spread(first)} s   (budget <= 3 s)")
    print(
        f"  floor: python -c 'import torch'   {machine.spread(torch_floor)} s   (3 fresh "
        "interpreters, just before the changes)"
    )
    print(
        f"  runner's apply_s                  "
        f"{machine.spread([c['apply_s'] for c in changes], '{:.3f}')} s"
    )
    print(
        f"  set -> runner applies (t_ns)      "
        f"{machine.spread([c['set_to_apply_s'] for c in changes], '{:.3f}')} s"
    )
    print(
        f"  longest step, set .. 5th new step "
        f"{machine.spread([c['longest_step_s'] for c in changes], '{:.3f}')} s   (steady step "
        f"before: {machine.spread([c['steady_step_s'] for c in changes], '{:.3f}')} s)"
    )


if __name__ == "__main__":
    sys.exit(main())
