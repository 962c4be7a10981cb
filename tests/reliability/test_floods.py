"""Nothing of the user's is lost silently under a flood, and no number stops a record.

The script's output reaches ``run --headless`` whole (its training log); the log between the
session's threads and its reader is bounded and says exactly how many lines it dropped; a
message flood faster than the recorder writes stays within the recorder's memory bound, and
the drops are counted in the file, the run's log and the headless summary; infinities (a
``1e400``) neither stop a recording nor crash the summary.
"""

from __future__ import annotations

import io
import json
import sys
import textwrap
import threading
import time
import tracemalloc
from pathlib import Path

import pytest
from waiting import wait_until

from gpuwatch.commands import headless
from gpuwatch.commands.headless import HeadlessOptions, run_headless, summary_lines
from gpuwatch.core.files import recording as recording_module
from gpuwatch.core.files.recording import Recorder
from gpuwatch.core.files.recording_reader import open_recording
from gpuwatch.core.model.log_buffer import LogBuffer
from gpuwatch.core.run.session import LOG_LINES_KEPT, Session

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX runner")

#: Ten times what the log holds between two reads: headless reads every quarter second, so a
#: reader that dropped lines instead of holding the script back would lose most of them.
LINES = 10 * LOG_LINES_KEPT
LONG_LINE = 300_000  # characters without a newline: read in pieces, all of them shown
PRINTER = textwrap.dedent(f"""
    import sys
    write = sys.stdout.write
    for i in range({LINES}):
        write(f"line {{i}}\\n")
    write("L" * {LONG_LINE} + "\\n")
    write("last line\\n")
""")


def test_headless_prints_every_line_of_a_script_that_floods_its_output(tmp_path: Path) -> None:
    script = tmp_path / "printer.py"
    script.write_text(PRINTER)
    out, err = io.StringIO(), io.StringIO()
    code = run_headless(
        HeadlessOptions(script=str(script), device="cpu", cwd=str(tmp_path)), out=out, err=err
    )
    lines = err.getvalue().splitlines()
    printed = [line for line in lines if line.startswith("line ")]
    assert printed == [f"line {i}" for i in range(LINES)], (
        f"{LINES - len(printed):,} of {LINES:,} lines missing"
    )
    pieces = [line for line in lines if line.startswith("L")]
    assert "".join(pieces) == "L" * LONG_LINE and len(pieces) > 1
    assert "last line" in lines
    assert not any("dropped" in line for line in lines)
    assert code == 0, out.getvalue() + err.getvalue()[-2000:]


def test_the_log_between_threads_is_bounded_and_counts_what_it_drops() -> None:
    session = Session(sample_coarse=False)
    extra = 7_000
    for i in range(LOG_LINES_KEPT + extra):
        session._log_line("info", "runner", f"line {i}")
    lines = session.drain_log()
    assert len(lines) == LOG_LINES_KEPT + 1
    assert lines[0].source == "gpuwatch" and lines[0].level == "warning"
    assert lines[0].text.startswith(f"{extra:,} log line(s) dropped")
    assert (
        lines[1].text == f"line {extra}" and lines[-1].text == f"line {LOG_LINES_KEPT + extra - 1}"
    )
    assert session.log_dropped == extra
    assert session.drain_log() == []  # said once

    buffer = LogBuffer(max_chars=4 * 2**20)
    for i in range(40):
        buffer.append(session_line(f"{i:02d}" + "x" * 2**20))
    kept = buffer.drain()
    assert sum(len(line.text) for line in kept[1:]) <= 4 * 2**20 and kept[-1].text[:2] == "39"
    assert kept[0].text.startswith(f"{40 - len(kept) + 1} log line(s) dropped")


def test_a_waiting_writer_gets_every_line_through_and_gives_up_without_a_reader() -> None:
    buffer = LogBuffer(max_lines=10, wait_limit_s=0.2)
    drained: list[str] = []
    done = threading.Event()

    def write() -> None:
        for i in range(1000):
            buffer.append(session_line(f"{i}"), wait=True)
        done.set()

    writer = threading.Thread(target=write)
    writer.start()
    while not (done.is_set() and not len(buffer)):
        drained += [line.text for line in buffer.drain()]
    writer.join()
    assert drained == [str(i) for i in range(1000)] and buffer.dropped == 0
    for i in range(11):  # nobody drains: the writer waits its limit, then drops the oldest
        buffer.append(session_line(f"late {i}"), wait=True)
    assert buffer.dropped == 1 and buffer.drain()[0].text.startswith("1 log line(s)")


def test_a_line_that_cannot_wait_does_not_push_out_kept_output() -> None:
    """The session's notices arrive while the script's output waits for a drain: they take
    the room the waiting writer leaves, and no line of the kept output is dropped."""
    buffer = LogBuffer(max_lines=40, wait_limit_s=30.0)

    def write() -> None:
        for i in range(100):
            buffer.append(session_line(f"{i}"), wait=True)

    writer = threading.Thread(target=write, daemon=True)  # a failed test leaves it waiting
    writer.start()
    wait_until(
        lambda: len(buffer) == buffer.max_lines - buffer.spare_lines, 10, "the writer blocked"
    )
    notices = 8  # fewer than the spare lines of a 40-line buffer
    for i in range(notices):
        buffer.append(session_line(f"notice {i}"))
    assert buffer.dropped == 0
    drained: list[str] = []
    while writer.is_alive() or len(buffer):
        drained += [line.text for line in buffer.drain()]
    writer.join()
    assert [t for t in drained if not t.startswith("notice")] == [str(i) for i in range(100)]
    assert sum(t.startswith("notice") for t in drained) == notices
    assert buffer.dropped == 0


def session_line(text: str):
    from gpuwatch.core.model.log_buffer import LogLine

    return LogLine(time.perf_counter_ns(), "info", "runner", text)


def _hello(session: Session) -> None:
    session._dispatch(
        {
            "kind": "hello",
            "protocol": 1,
            "pid": 7,
            "workload": "flood",
            "device": {"kind": "cpu", "name": "test CPU", "cores": 2},
            "versions": {},
            "knobs": [],
            "config": {"id": 0, "values": {}, "warmup_steps": 0},
        }
    )


def _steps(first: int, count: int) -> dict:
    now = time.perf_counter_ns()
    return {
        "kind": "steps",
        "step": list(range(first, first + count)),
        "config": [0] * count,
        "samples": [1] * count,
        "host": [[now + i * 10_000 + j * 1_000 for j in range(7)] for i in range(count)],
    }


def test_a_flood_faster_than_the_recorder_is_bounded_counted_and_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer is held (a slow disk) while 100 MiB of logs and 100,000 steps arrive: the
    recorder keeps at most its memory bound, counts every message and step it drops, and says
    so in the file's meta, the run's log and the headless summary."""
    release = threading.Event()
    original = recording_module.Recorder._write

    def slow_disk(recorder, batch, *, final):
        release.wait(60)
        return original(recorder, batch, final=final)

    monkeypatch.setattr(recording_module.Recorder, "_write", slow_disk)
    session = Session(sample_coarse=False)
    _hello(session)
    recorder = Recorder(tmp_path / "flood.gpuwatch", session, flush_s=0.05, queue_bytes=32 * 2**20)
    recorder.start()
    tracemalloc.start()
    try:
        for i in range(100):
            session._dispatch({"kind": "log", "level": "info", "text": f"{i:03d}" + "x" * 2**20})
            session._dispatch(_steps(i * 1000, 1000))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    print(
        f"\npeak {peak / 2**20:.1f} MiB while 100 MiB of logs and 100,000 steps arrived; "
        f"{recorder.dropped} messages dropped ({recorder.dropped_steps:,} steps)"
    )
    assert peak < 64 * 2**20, "the recorder held more than its bound"
    assert recorder.dropped > 0 and recorder.dropped_steps > 0
    assert recorder.dropped_steps < 50_000, "a log flood crowded out the steps"
    release.set()
    wait_until(
        lambda: any("cannot keep up" in line.text for line in session._log._lines),
        30,
        "the drop note in the run's log",
    )
    recorder.close()
    assert recorder.error is None
    recording = open_recording(recorder.path)
    assert len(recording.steps) + recorder.dropped_steps == 100_000
    assert recording.meta["dropped_messages"] == recorder.dropped
    assert recording.meta["dropped_steps"] == recorder.dropped_steps
    assert any("cannot keep up" in line.text for line in recording.log)
    out = io.StringIO()
    headless._write_summary(out, session, "done", recorder)
    assert (
        f"{recorder.dropped:,} messages dropped, {recorder.dropped_steps:,} of them steps"
        in out.getvalue()
    )


def test_infinities_neither_stop_a_recording_nor_crash_the_summary(tmp_path: Path) -> None:
    """The link refuses ``1e400`` now; what gets past it (a replayed or future message) must
    still be recorded and summarised: the values parse as the link once parsed them."""
    session = Session(sample_coarse=False)
    recorder = Recorder(tmp_path / "inf.gpuwatch", session, flush_s=0.05)
    recorder.start()
    session._dispatch(
        json.loads(
            '{"kind":"hello","protocol":1,"pid":5,"workload":"x","device":{"kind":"cpu",'
            '"name":"c","cores":1e400},"versions":{},"knobs":[{"name":"lr","type":"float","default":1e400}],'
            '"config":{"id":0,"values":{"lr":1e400},"warmup_steps":0},"batch_size":1}'
        )
    )
    session._dispatch(_steps(0, 10))
    now = time.perf_counter_ns()
    session._dispatch(
        json.loads(
            '{"kind":"config","id":1,"request":null,"values":{"lr":-1e400},"changed":{"lr":-1e400},'
            f'"t_ns":{now},"apply_s":1e400,"first_step":10,"warmup_steps":0,"rebuilt":[]}}'
        )
    )
    session._dispatch(_steps(10, 10))
    wait_until(lambda: recorder.steps_written == 20 or recorder.error, 10, "the steps written")
    lines = summary_lines(session, "done")
    assert any("lr=-inf" in line for line in lines), lines
    recorder.close()
    assert recorder.error is None
    recording = open_recording(recorder.path)
    assert len(recording.steps) == 20
    assert [c.changed for c in recording.configs] == [{}, {"lr": None}]
    assert recording.hello is not None and recording.hello.device.cores is None
