"""Headless ``gpuwatch bench``: run a workload through knob stages and report the scoreboard.

No Qt anywhere on this path, so it works over SSH and in CI. A knob name no built-in
workload has is refused before anything starts; the runner is started next because the rest of
the knob schema (types, ranges, what this device offers) comes from its ``hello``; bad values
are then refused before any stage runs, and the run is always stopped (its whole process tree)
before returning.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from gpuwatch.commands.bench_report import BenchReport, clean_segment, machine_from_hello
from gpuwatch.commands.progress_line import ProgressLine, stop_run
from gpuwatch.core.figures.advisor import advise, context_of
from gpuwatch.core.figures.kernel_window import KernelWindow, describe
from gpuwatch.core.files.recording import Recorder, RecordingError
from gpuwatch.core.model.knob_values import KnobValueError, check_knob_names
from gpuwatch.core.model.messages import Hello
from gpuwatch.core.run.gpu_mismatch import BackgroundCheck
from gpuwatch.core.run.session import LaunchSpec, Session, SessionError, SessionState
from gpuwatch.core.run.tour import Conductor, Skipped, Stage, plan_stages, plan_tour
from gpuwatch.protocol import BUILTIN_KNOB_NAMES

#: The runner imports torch and builds its workload first; a cold start can be slow.
HELLO_TIMEOUT_S = 180.0
TICK_S = 0.25
#: After the runner's hello, how long the GPU check (a survey of the same Python, started
#: beside it) may still take before the stages begin without its sentence.
GPU_CHECK_WAIT_S = 10.0

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


@dataclass(frozen=True)
class BenchOptions:
    """What ``gpuwatch bench`` runs: the workload, where, and its knob stages; ``seconds`` is the
    steady time each stage is measured for."""

    workload: str = "vision"
    device: str = "auto"
    python: str | None = None
    seconds: float = 20.0
    tour: bool = False
    #: ``[--set texts, --then texts, ...]`` as ``k=v`` strings; empty: the baseline only.
    groups: Sequence[Sequence[str]] = field(default_factory=list)
    #: ``--record FILE``: the whole run to a recording (refused if FILE exists).
    record: Path | None = None
    #: ``--capture N``: a kernel window of N steps in each stage, once it has been steady for
    #: half of ``seconds`` (its profiled steps are left out of the stage's figures).
    capture: int | None = None


@dataclass
class BenchOutcome:
    """What the command prints: the report (if anything ran), an error line, the exit code."""

    exit_code: int
    report: BenchReport | None = None
    error: str | None = None


class _Failure(Exception):
    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def run_bench(
    options: BenchOptions,
    *,
    progress: TextIO | None = None,
    session: Session | None = None,
    hello_timeout_s: float = HELLO_TIMEOUT_S,
    tick_s: float = TICK_S,
) -> BenchOutcome:
    """Run the stages and return what was measured; Ctrl-C ends early with a partial report."""
    logging.getLogger("gpuwatch").addHandler(logging.NullHandler())  # errors come back to us
    try:  # a misspelt knob is said at once, not after the runner has imported torch
        check_knob_names(options.groups, BUILTIN_KNOB_NAMES)
    except KnobValueError as exc:
        return BenchOutcome(EXIT_USAGE, error=str(exc))
    out = ProgressLine(progress if progress is not None else sys.stderr)
    session = session or Session()
    gpu_check = BackgroundCheck(options.python)  # can it use the NVIDIA GPU? said once
    conductor: Conductor | None = None
    skipped: list[Skipped] = []
    outcome = BenchOutcome(EXIT_OK)
    recorder = None
    if options.record is not None:
        recorder = Recorder(
            options.record,
            session,
            spec={"command": "bench", "workload": options.workload, "device": options.device},
        )
        try:
            recorder.start()
        except RecordingError as exc:
            return BenchOutcome(EXIT_USAGE, error=str(exc))
    try:
        session.start(LaunchSpec(options.workload, options.device, options.python))
        hello = _wait_for_hello(session, hello_timeout_s, out)
        stages, skipped = _plan(session, options, hello)
        conductor = Conductor(
            session, stages, min_steady_s=options.seconds, revert_slower=options.tour
        )
        _announce(out, hello, stages, skipped, options.seconds)
        gpu_check.say(out.line, timeout=GPU_CHECK_WAIT_S)
        runner_errors = _conduct(session, conductor, out, tick_s, options)
        if conductor.failed is not None:
            code = EXIT_USAGE if conductor.refusal is not None else EXIT_FAILED
            message = conductor.failed
            if code == EXIT_FAILED and runner_errors and runner_errors[-1] not in message:
                message += f" (the runner said: {runner_errors[-1]})"
            outcome = BenchOutcome(code, error=message)
    except _Failure as failure:
        outcome = BenchOutcome(failure.exit_code, error=str(failure))
    except KeyboardInterrupt:
        if conductor is not None:
            conductor.stop()
        outcome = BenchOutcome(EXIT_INTERRUPTED, error="interrupted: stopped the run")
    finally:
        out.clear()
    try:
        if conductor is not None and session.hello is not None:
            outcome.report = build_report(session, conductor, skipped, options)
    finally:
        stop_run(session, out)
        if recorder is not None:
            _close_recorder(recorder, outcome, out)
    return outcome


def _close_recorder(recorder: Recorder, outcome: BenchOutcome, out: ProgressLine) -> None:
    """After the run ended, so the file keeps its outcome; a failed recording is reported."""
    recorder.close()
    if recorder.error is not None:
        outcome.error = f"{outcome.error}; {recorder.error}" if outcome.error else recorder.error
        if outcome.exit_code == EXIT_OK:
            outcome.exit_code = EXIT_FAILED
    else:
        out.line(f"gpuwatch: recorded {recorder.steps_written} steps to {recorder.path}")


def _wait_for_hello(session: Session, timeout_s: float, out: ProgressLine) -> Hello:
    started = time.monotonic()
    while session.hello is None:
        if session.state in (SessionState.FAILED, SessionState.FINISHED):
            raise _Failure(
                f"the run failed: {session.error or 'the runner ended at start'}", EXIT_FAILED
            )
        waited = time.monotonic() - started
        if waited > timeout_s:
            raise _Failure(
                f"the runner did not start within {timeout_s:.0f} s (importing "
                f"torch?); try `gpuwatch doctor`",
                EXIT_FAILED,
            )
        out.show(
            "start", f"starting the runner (it imports torch first)… {waited:.0f} s", tty_only=True
        )
        time.sleep(0.1)
    return session.hello


def _plan(
    session: Session, options: BenchOptions, hello: Hello
) -> tuple[list[Stage], list[Skipped]]:
    knobs = session.knobs
    try:
        if options.tour:
            return plan_tour(knobs, hello.workload or options.workload, hello.device.cores)
        return plan_stages(knobs, options.groups), []
    except KnobValueError as exc:
        raise _Failure(str(exc), EXIT_USAGE) from None


def _announce(
    out: ProgressLine,
    hello: Hello,
    stages: Sequence[Stage],
    skipped: Sequence[Skipped],
    seconds: float,
) -> None:
    device = hello.device
    out.line(
        f"bench: {hello.workload} on {device.name} ({device.kind}), "
        f"{len(stages)} stage(s) of at least {seconds:g} s steady each"
    )
    for item in skipped:
        out.line(f"  skipped {item.label}: {item.reason}")


def _conduct(
    session: Session,
    conductor: Conductor,
    out: ProgressLine,
    tick_s: float,
    options: BenchOptions | None = None,
) -> list[str]:
    """Tick until the tour ends; returns the runner's error lines (first line of each)."""
    announced = -1
    judged = 0
    errors: list[str] = []
    captured: set[int] = set()
    while True:
        if options is not None and options.capture and session.capturing:
            # The stage's kernel window is on its way: its stage ends after it comes, never
            # before (the window would be left out of the report, or straddle two stages).
            # The runner answers every capture, with a window or an error; a run that ends
            # meanwhile is no longer capturing.
            errors += _runner_errors(session)
            time.sleep(tick_s)
            continue
        progress = conductor.tick()
        results = [r for r in conductor.results() if r.kept is not None]
        for result in results[judged:]:
            if result.ratio is not None:
                out.line(f"  {result.verdict}")
        judged = len(results)
        if options is not None and options.capture:
            _capture_when_steady(session, conductor, options, captured, out)
        errors += _runner_errors(session)
        if (
            progress.index != announced
            and progress.state not in ("done", "failed")
            and progress.stage is not None
        ):
            announced = progress.index
            out.line(
                f"stage {progress.index + 1}/{progress.n_stages} {progress.stage.label}: "
                f"{progress.stage.caption}"
            )
        if conductor.done or conductor.failed is not None:
            if conductor.summary:
                out.line(f"tour: {conductor.summary}")
            return errors[-5:]
        out.show((progress.index, progress.state), progress.message)
        time.sleep(tick_s)


def _runner_errors(session: Session) -> list[str]:
    """The first line of each error the runner logged since the last call."""
    return [
        line.text.splitlines()[0]
        for line in session.drain_log()
        if line.level == "error" and line.source == "runner" and line.text
    ]


def _capture_when_steady(
    session: Session,
    conductor: Conductor,
    options: BenchOptions,
    captured: set[int],
    out: ProgressLine,
) -> None:
    """Ask for the current stage's kernel window once it has been steady for half a stage."""
    stages = conductor.stage_configs()
    if not stages or session.capturing or options.capture is None:
        return
    config_id = stages[-1][1]
    if config_id in captured:
        return
    row = next((r for r in session.scoreboard() if r.config_id == config_id), None)
    if row is None or not row.steady or row.steady_s < options.seconds / 2:
        return
    captured.add(config_id)
    try:
        session.request_capture(options.capture)
    except SessionError as exc:
        out.line(f"  no kernel window for this stage: {exc}")


def stage_windows(session: Session) -> dict[int, KernelWindow]:
    """The first kernel window of each configuration (all its recorded steps under it)."""
    view = session.steps.snapshot()
    out: dict[int, KernelWindow] = {}
    for window in session.kernel_windows():
        configs = set(view.config[np.isin(view.step, window.steps)].tolist())
        if len(configs) == 1:
            out.setdefault(configs.pop(), window)
    return out


def window_json(window: KernelWindow) -> dict[str, Any]:
    """The ``kernel_window`` object of a bench segment (docs/knobs.md §5)."""
    summary = window.summary()
    return {
        "steps": list(window.steps),
        "device": window.device,
        **summary.to_json(),
        "text": describe(summary, window.device),
    }


def build_report(
    session: Session, conductor: Conductor, skipped: Sequence[Skipped], options: BenchOptions
) -> BenchReport:
    """The scoreboard rows of the stages reached, in stage order, labelled by stage (a reverted
    one says so, with ``kept`` false), and the advisor's findings on the last of them."""
    hello = session.hello
    rows = {row.config_id: row for row in session.scoreboard()}
    segments = []
    results = conductor.results()
    staged = [rows[r.config_id] for r in results if r.config_id in rows]
    findings = [f.to_json() for f in advise(staged, context_of(session))]
    windows = stage_windows(session) if options.capture else {}
    for result in results:
        stage, config_id = result.stage, result.config_id
        row = rows.get(config_id)
        segment = (
            row.to_json()
            if row is not None
            else {"settings": stage.values, "changed": stage.changes, "steps": 0, "steady_steps": 0}
        )
        segment["label"] = result.label
        segment["kept"] = result.kept
        if config_id in windows:
            segment["kernel_window"] = window_json(windows[config_id])
        segments.append(clean_segment(segment))
    return BenchReport(
        machine=machine_from_hello(hello),
        workload=(hello.workload if hello else "") or options.workload,
        seconds_per_stage=options.seconds,
        segments=segments,
        skipped=[{"label": s.label, "reason": s.reason} for s in skipped],
        baseline=segments[0]["label"] if segments else None,
        findings=findings,
        summary=conductor.summary,
        instrumentation_share=session.steps.instrument_share(),
    )
