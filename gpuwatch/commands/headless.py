"""``gpuwatch run --headless SCRIPT``: watch a user's script without a window.

For machines without a display (a remote box, CI): the Session runs the script in the runner,
progress goes to stderr (with the script's own output), an optional Recorder keeps everything
the window would have shown, and a summary goes to stdout at the end. No Qt on this path.

Exit code (``core.outcome`` has the rules): the script's own (``sys.exit(n)`` → n), 1 when it
raised or could not be run, 128 + N when signal N ended it, 0 when ``--seconds`` stopped it at
a step boundary, 124 when it was hung or had to be ended by force, 130 on Ctrl-C. Whatever was
recorded is kept in every case.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from gpuwatch.commands.bench_report import COLUMNS, MISSING
from gpuwatch.commands.progress_line import STOP_TIMEOUT_S, ProgressLine, stop_run
from gpuwatch.core.figures.advisor import RankedRun
from gpuwatch.core.figures.analysis import headline
from gpuwatch.core.figures.frame import RunData, whole_run_figures
from gpuwatch.core.figures.rank_figures import find_straggler, rank_line
from gpuwatch.core.figures.segments import SegmentStats
from gpuwatch.core.model.messages import describe_change
from gpuwatch.core.run.gpu_mismatch import BackgroundCheck
from gpuwatch.core.run.outcome import describe, facts_from, step_definition
from gpuwatch.core.run.session import (
    ACTIVE_STATES,
    LOG_LINES_KEPT,
    LaunchSpec,
    LogLine,
    Session,
)

EXIT_ERROR, EXIT_INTERRUPTED = 1, 130
#: How long stopping may take (polite stop, terminate, kill: see Session).
TICK_S = 0.25
#: A drain this long means the script's output is waiting for us: drain again without a pause.
BUSY_LINES = LOG_LINES_KEPT // 2


@dataclass(frozen=True)
class HeadlessOptions:
    """What ``gpuwatch run --headless`` runs: the script (or ``module``, as ``python -m``) and its
    arguments, where, for how long (``seconds``; None: to its end), and the recording file, if
    any."""

    script: str | None = None
    script_args: Sequence[str] = ()
    device: str = "auto"
    python: str | None = None
    seconds: float | None = None
    record: str | None = None
    cwd: str = field(default_factory=os.getcwd)
    module: str | None = None
    #: Also watch ranks of other machines (``--listen``): where to listen.
    listen: tuple[str, int] | None = None

    def spec(self) -> LaunchSpec:
        return LaunchSpec(
            device=self.device,
            python=self.python,
            script=self.script,
            module=self.module,
            script_args=tuple(self.script_args),
            cwd=self.cwd,
            seconds=self.seconds,
            listen=self.listen,
        )


def run_headless(
    options: HeadlessOptions,
    *,
    out: TextIO | None = None,
    err: TextIO | None = None,
    session: Session | None = None,
    gpu_check: BackgroundCheck | None = None,
) -> int:
    """Run the script to its end (or ``--seconds``, or Ctrl-C); print the summary; exit code.

    ``gpu_check``: whether the training Python can use the NVIDIA GPU here, said once on
    stderr (default: checked beside the run, off its path)."""
    logging.getLogger("gpuwatch").addHandler(logging.NullHandler())  # lines come back to us
    out = out if out is not None else sys.stdout
    err = err if err is not None else sys.stderr
    progress = ProgressLine(err)
    session = session or Session()
    session.keep_all_output = True  # the script's output is the user's log: all of it
    spec = options.spec()
    recorder = None
    interrupted = False
    gpu_check = gpu_check or BackgroundCheck(options.python)
    try:
        if options.record:
            recorder = _start_recorder(options.record, session, spec, err)
            if recorder is None:
                return EXIT_ERROR
        session.start(spec)
        _follow(session, progress, err, gpu_check)
    except KeyboardInterrupt:
        interrupted = True
        progress.line("gpuwatch: interrupted: stopping the script")
    finally:
        progress.clear()
        gpu_check.say(progress.line, timeout=TICK_S)
        _echo_while_stopping(session, progress)
        stop_run(session, progress, "the script")
        _echo(session.drain_log(), progress, session.error)
        if recorder is not None:
            recorder.close()
    outcome = describe(facts_from(session))
    _write_summary(out, session, outcome.sentence, recorder)
    if recorder is not None and recorder.error:
        print(f"gpuwatch: the recording stopped early: {recorder.error}", file=err)
    return EXIT_INTERRUPTED if interrupted else outcome.exit_code


def _start_recorder(path: str, session: Session, spec: LaunchSpec, err: TextIO) -> Any:
    from gpuwatch.core.files.recording import Recorder, RecordingError

    recorder = Recorder(
        path,
        session,
        spec={
            "script": spec.script,
            "module": spec.module,
            "args": list(spec.script_args),
            "cwd": spec.cwd,
            "device": spec.device,
            "python": spec.python,
            "seconds": spec.seconds,
        },
    )
    try:
        recorder.start()
    except RecordingError as exc:
        print(f"gpuwatch: {exc}", file=err)
        return None
    return recorder


def _follow(
    session: Session, progress: ProgressLine, err: TextIO, gpu_check: BackgroundCheck
) -> None:
    """Echo the run's lines and a progress line until the runner and its tree are gone."""
    name = session.spec.name if session.spec else "the script"
    started = time.monotonic()
    wait = TICK_S
    while not session.wait_ended(wait):
        gpu_check.say(progress.line)
        lines = session.drain_log()
        _echo(lines, progress, session.error)
        # A script printing fast fills the log within a tick and then waits for us: read on.
        wait = 0.0 if len(lines) >= BUSY_LINES else TICK_S
        elapsed = time.monotonic() - started
        if session.hello is None:
            progress.show(
                "start",
                f"{name}: starting (the runner imports torch first)… {elapsed:.0f} s",
                tty_only=True,
            )
            continue
        view = session.steps.snapshot(last=64)
        rate = ""
        if len(view):
            h = headline(view, int(view.host[-1, -1]), 5_000_000_000)
            if h.samples_per_s is not None:
                rate = f", {h.samples_per_s:,.1f} samples/s"
        progress.show("run", f"{name}: {elapsed:.0f} s, {session.steps.count:,} steps{rate}")


def _echo_while_stopping(session: Session, progress: ProgressLine) -> None:
    """Ask the run to stop and keep echoing its output until it ended: the script may be
    blocked printing (its output waits for us), and must reach its step boundary."""
    if session.state in ACTIVE_STATES:
        progress.show("stop", "stopping the script…", tty_only=True)
    session.stop()
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while not session.wait_ended(TICK_S) and time.monotonic() < deadline:
        _echo(session.drain_log(), progress, session.error)
    _echo(session.drain_log(), progress, session.error)


def _echo(lines: list[LogLine], progress: ProgressLine, error: str | None) -> None:
    """The script's output as it printed it; gpuwatch's own warnings and errors as notes.

    gpuwatch's info lines (starting, config applied, ...) stay out: the summary says it all;
    but every change of the run's liveness is shown (a notice, and the line that clears it).
    So does the run's ``error`` when it came without a traceback (a missing module, a Python
    without torch): the summary's first line is that sentence.
    """
    for line in lines:
        if line.source == "runner" and line.level == "error" and line.text == error:
            continue
        if line.source == "runner":
            progress.line(line.text)
        elif line.level != "info" or line.notice:
            progress.line(f"gpuwatch: {line.text}")


def summary_lines(session: Session, sentence: str, recording: str | None = None) -> list[str]:
    """The end-of-run summary: what happened, what a step was, the run's figures by the
    scoreboard's rules (steady steps: warm-up and profiled steps left out) and over all steps,
    each labelled, what gpuwatch stopped measuring (an instrument that failed), the
    scoreboard if knobs changed, and where the recording is.

    The steady figures come first because they are the ones to compare: warm-up steps (loader
    start, first iterations) can be slow or input-bound enough to turn a comparison around."""
    lines = [sentence]
    rows = session.scoreboard()
    f = whole_run_figures(RunData.of(session))
    if f is not None:
        definition = step_definition(session.bye)
        lines.append(f"steps: {session.steps.count:,}" + (f" · {definition}" if definition else ""))
        if len(rows) == 1:
            lines.append(steady_line(rows[0]))
        elif rows:
            lines.append("steady steps: per configuration, in the table below")
        lines.append(
            "all steps ("
            + ("every configuration, " if len(rows) > 1 else "")
            + "warm-up included): "
            + _figures(
                f.samples_per_s,
                f.step_ms_p50,
                f.step_ms_p95,
                None if f.busy_pct is None else f.busy_pct / 100.0,
                dict(f.phase_shares).get("data"),
            )
        )
        lines.append(
            "busy = "
            + (
                "CUDA stream active (an upper bound)"
                if session.device_kind == "cuda"
                else "share of time in compute phases (host timing, CPU)"
            )
            + "; input wait = time in next(loader)"
        )
        share = session.steps.instrument_share()
        if share is not None:
            lines.append(
                f"gpuwatch's instrumentation: {share * 100:.2f} % of step time "
                "(its hooks or marks and their bookkeeping, as the runner timed them)"
            )
    lines += rank_lines(session)
    lines += [f"gpuwatch: {text}" for text in session.instruments_off]
    if len(rows) > 1:
        lines.append("")
        lines += scoreboard_lines(rows)
    if recording:
        lines.append(f"recording: {recording}")
    return lines


def rank_lines(session: Session) -> list[str]:
    """A run of many ranks: each rank's figures, their sum, each configuration over the
    ranks, and the straggler if one stands out (``rank_figures``); nothing for one process."""
    if not isinstance(session, RankedRun):
        return []
    figures = list(session.rank_figures(last=None))
    if not figures:
        return []
    world = figures[0].world_size or len(figures)
    nodes = len({(f.node, f.node_rank) for f in figures})
    heard = f"{len(figures)} of {world}" if len(figures) != world else f"{world}"
    total = sum(f.samples_per_s or 0.0 for f in figures)
    lines = [
        f"ranks: {heard} ({nodes} node{'s' if nodes != 1 else ''}); all ranks together: "
        f"{total:,.1f} samples/s; figures above are rank 0's"
    ]
    lines += [rank_line(f) for f in figures]
    for row in session.scoreboard():
        if row.ranks_samples_per_s is None or row.rank_step_ms is None:
            continue
        fastest, slowest = row.rank_step_ms
        lines.append(
            f"{row.label or f'config {row.config_id}'}, steady steps of {row.ranks_counted} "
            f"ranks: {row.ranks_samples_per_s:,.1f} samples/s together · rank step p50 "
            f"{fastest:.1f}–{slowest:.1f} ms"
        )
    straggler = find_straggler(figures)
    lines.append(
        f"straggler: {straggler.sentence}"
        if straggler is not None
        else "straggler: none (no rank's input wait, forward or step time stands out)"
    )
    return lines


def steady_line(row: SegmentStats) -> str:
    """One configuration's steady figures, as the scoreboard shows them."""
    counted = f"{row.steady_steps:,} of {row.steps:,}"
    label = f"steady steps ({counted}, warm-up left out as on the scoreboard)"
    wait = row.waiting
    if wait is not None:
        return f"{label}: {wait.text()}"
    return f"{label}: " + _figures(
        row.samples_per_s,
        row.step_ms_p50,
        row.step_ms_p95,
        row.busy_share,
        row.input_wait_share,
    )


def _figures(
    samples_per_s: float | None,
    p50: float | None,
    p95: float | None,
    busy: float | None,
    input_wait: float | None,
) -> str:
    return (
        f"samples/s: {_fig(samples_per_s, '{:,.1f}')} · "
        f"step p50/p95: {_fig(p50, '{:.1f}')}/{_fig(p95, '{:.1f}')} ms"
        f" · busy: {_pct(busy)} · input wait: {_pct(input_wait)}"
    )


def scoreboard_lines(rows: Sequence[SegmentStats]) -> list[str]:
    """One Markdown table row per knob configuration (the columns of ``gpuwatch bench``); a
    configuration without steady figures says how many steady steps it had."""
    headers = ("config", "settings changed", *(c[0] for c in COLUMNS[:5]), "speedup")
    out = [
        "| " + " | ".join(headers) + " |",
        "|" + "|".join(["---", "---"] + ["---:"] * (len(headers) - 2)) + "|",
    ]
    for row in rows:
        data = row.to_json()
        cells = [row.label, describe_change(row.changed) if row.changed else "—"]
        cells += [_cell(data[key], md) for _, key, md, _ in COLUMNS[:5]]
        cells.append(_cell(row.speedup, "{:.2f}×"))
        wait = row.waiting
        if wait is not None and data[COLUMNS[0][1]] is None:
            cells[2] = wait.text()
        out.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return out


def _write_summary(out: TextIO, session: Session, sentence: str, recorder: Any) -> None:
    recording = None
    if recorder is not None:
        recording = f"{recorder.path} ({recorder.steps_written:,} steps written"
        if recorder.dropped:
            recording += (
                f"; {recorder.dropped:,} messages dropped, {recorder.dropped_steps:,} "
                f"of them steps: they came faster than the disk took them"
            )
        recording += ")"
    lines = summary_lines(session, sentence, recording)
    if session.log_dropped:
        lines.append(
            f"gpuwatch: {session.log_dropped:,} log line(s) were dropped (the "
            f"script printed faster than they could be shown)"
        )
    out.write("\n".join(lines) + "\n")
    out.flush()


def _cell(value: float | None, fmt: str) -> str:
    if value is None:
        return MISSING
    return fmt[4:].format(value * 100.0) if fmt.startswith("pct:") else fmt.format(value)


def _fig(value: float | None, fmt: str) -> str:
    return MISSING if value is None else fmt.format(value)


def _pct(share: float | None) -> str:
    return MISSING if share is None else f"{100.0 * share:.0f} %"
