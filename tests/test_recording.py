"""Recordings: a real CPU run written by the Recorder, read back by open_recording.

The round trip rebuilds a Session from the file the way a replay does (dispatching the
recorded messages) and must give the same scoreboard as the live session; a process killed
with SIGKILL while recording must leave a file with every committed step.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import math
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from temp_dirs import sweep_after_kill
from waiting import wait_until

from gpuwatch.core.figures.segments import MIN_STEADY_STEPS
from gpuwatch.core.files.recording import SCHEMA_VERSION, Recorder, RecordingError
from gpuwatch.core.files.recording_reader import Recording, open_recording
from gpuwatch.core.run.session import LaunchSpec, Session, SessionState

ROOT = Path(__file__).resolve().parents[1]
#: How long a test waits for the recorder to write what it was given (a loaded machine is slow;
#: the wait ends as soon as it has).
WRITE_WAIT_S = 120.0


@dataclasses.dataclass
class RecordedRun:
    path: Path
    session: Session
    recorder: Recorder
    scoreboard: list


@pytest.fixture(scope="module")
def recorded_run(tmp_path_factory) -> RecordedRun:
    """A real mlp run on the CPU with one knob change (two segments), recorded."""
    path = tmp_path_factory.mktemp("rec") / "run.gpuwatch"
    session = Session()
    recorder = Recorder(path, session, spec={"workload": "mlp", "device": "cpu"}, flush_s=0.1)
    recorder.start()
    try:
        session.start(LaunchSpec(workload="mlp", device="cpu"))
        wait_until(
            lambda: session.state is not SessionState.STARTING,  # RUNNING: hello stored first
            120,
            "the runner's hello",
        )
        assert session.state is SessionState.RUNNING, session.error
        first = session.config_changes()[0]
        wait_until(
            lambda: session.steps.count >= first.warmup_steps + 3 * MIN_STEADY_STEPS,
            60,
            "steady baseline steps",
        )
        request = session.set_knobs({"num_workers": 1}, label="one worker")
        wait_until(lambda: session.answer(request) is not None, 60, "the runner's answer")
        change = session.answer(request)
        assert change.id == 1, change
        enough = change.first_step + change.warmup_steps + 3 * MIN_STEADY_STEPS
        wait_until(
            lambda: session.steps.count and session.steps.snapshot(last=1).step[0] >= enough,
            60,
            "steady steps under config 1",
        )
        session.stop()
        assert session.wait_ended(30)
        recorder.close(timeout=WRITE_WAIT_S)
        scoreboard = session.scoreboard()
    finally:
        recorder.close()
        session.close()
    return RecordedRun(path, session, recorder, scoreboard)


def rebuild(recording: Recording) -> Session:
    """A Session rebuilt from the file: dispatch the messages, load coarse and configs."""
    session = Session(sample_coarse=False)
    for _, message in recording.messages():
        session._dispatch(message)
    session.coarse = recording.coarse
    # A Session stamps config 0 with its own clock; the recording has the exact times/labels.
    session.model._changes = {c.id: c for c in recording.configs}
    return session


def assert_rows_equal(live: list, replayed: list) -> None:
    assert [r.config_id for r in replayed] == [r.config_id for r in live]
    for a, b in zip(live, replayed, strict=True):
        for f in dataclasses.fields(a):
            x, y = getattr(a, f.name), getattr(b, f.name)
            if f.name == "live":
                continue
            if isinstance(x, float):
                assert y is not None and math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12), (
                    f.name,
                    x,
                    y,
                )
            elif isinstance(x, tuple) and x and isinstance(x[0], float):
                assert np.allclose(x, y, rtol=1e-9), f.name
            else:
                assert x == y, (f.name, x, y)


def test_round_trip_gives_the_live_scoreboard(recorded_run: RecordedRun) -> None:
    live = recorded_run.scoreboard
    assert len(live) == 2 and all(r.steady for r in live), live
    assert live[1].label == "one worker"
    recording = open_recording(recorded_run.path)
    assert_rows_equal(live, rebuild(recording).scoreboard())


def test_recording_holds_the_whole_run(recorded_run: RecordedRun) -> None:
    session = recorded_run.session
    recording = open_recording(recorded_run.path)
    live = session.steps.snapshot()
    assert recorded_run.recorder.steps_written == len(live) == len(recording.steps)
    for name in ("step", "config", "samples", "host", "device", "has_device"):
        assert np.array_equal(getattr(recording.steps, name), getattr(live, name)), name
    assert [(c.id, c.label, c.t_ns) for c in recording.configs] == [
        (c.id, c.label, c.t_ns) for c in session.config_changes()
    ]
    assert recording.hello == session.hello
    # The outcome as the session saw it (on a loaded machine the polite stop may time out).
    assert (recording.bye or {}).get("reason") == session.bye_reason
    assert recording.exit_code == session.exit_code is not None
    assert recording.error == session.error
    assert recording.t0_ns == session.t0_ns
    assert recording.t1_ns >= int(live.host[-1, -1])
    assert recording.meta["schema_version"] == SCHEMA_VERSION
    assert recording.meta["spec"] == {"workload": "mlp", "device": "cpu"}
    cpu = recording.coarse.snapshot("proc.cpu")
    assert len(cpu) >= 1 and np.array_equal(cpu.value, session.coarse.snapshot("proc.cpu").value)
    statuses = recording.coarse.statuses()
    assert statuses["nvml.gpu_util"] == session.coarse.statuses()["nvml.gpu_util"]
    assert statuses["nvml.gpu_util"].available is False
    texts = [(line.source, line.text) for line in recording.log]
    assert any(src == "gpuwatch" and "config 1 applied" in t for src, t in texts)
    kinds = [m["kind"] for _, m in recording.messages()]
    assert kinds[0] == "hello" and kinds[-1] == "bye" and "config" in kinds
    times = [t for t, _ in recording.messages()]
    assert times == sorted(times)
    # A closed recording is one self-contained file.
    assert not Path(f"{recorded_run.path}-wal").exists()


def test_opening_never_modifies_the_file(recorded_run: RecordedRun) -> None:
    before = hashlib.sha256(recorded_run.path.read_bytes()).hexdigest()
    listing = sorted(p.name for p in recorded_run.path.parent.iterdir())
    open_recording(recorded_run.path)
    assert hashlib.sha256(recorded_run.path.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in recorded_run.path.parent.iterdir()) == listing


KILLED_RECORDER = textwrap.dedent("""
    import sys, time
    from gpuwatch.core.files.recording import Recorder
    from gpuwatch.core.run.session import LaunchSpec, Session

    session = Session()
    recorder = Recorder(sys.argv[1], session, flush_s=0.1)
    recorder.start()
    session.start(LaunchSpec(workload="mlp", device="cpu"))
    while session.pid is None:
        time.sleep(0.01)
    print("runner", session.pid, flush=True)
    while recorder.steps_written < 60:
        time.sleep(0.02)
    while True:
        print("committed", recorder.steps_written, flush=True)
        time.sleep(0.05)
""")


def test_kill_9_leaves_every_committed_step(tmp_path: Path) -> None:
    path = tmp_path / "killed.gpuwatch"
    script = tmp_path / "record.py"
    script.write_text(KILLED_RECORDER)
    proc = subprocess.Popen(
        [sys.executable, str(script), str(path)], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    runner_pid = None
    try:
        assert proc.stdout is not None
        runner_pid = int(proc.stdout.readline().split()[1])
        committed = 0
        for line in proc.stdout:
            committed = int(line.split()[1])
            break
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
        if runner_pid is not None:  # the runner notices the closed link; make sure of it
            with contextlib.suppress(ProcessLookupError):
                os.killpg(runner_pid, signal.SIGKILL)
        proc.wait(10)
    sweep_after_kill(proc.pid)
    assert committed >= 60
    recording = open_recording(path)
    assert len(recording.steps) >= committed
    steps = recording.steps.step
    assert np.array_equal(steps, np.arange(steps[0], steps[0] + len(steps))), "no holes"
    assert recording.hello is not None and recording.hello.workload == "mlp"
    assert [c.id for c in recording.configs] == [0]
    assert recording.exit_code is None and recording.bye is None
    assert sum(m["kind"] == "steps" for _, m in recording.messages()) >= 1


def test_recording_started_mid_run_begins_with_what_the_session_holds(tmp_path: Path) -> None:
    session = Session(sample_coarse=False)
    hello = {
        "kind": "hello",
        "protocol": 1,
        "pid": 42,
        "workload": "mlp",
        "device": {"kind": "cpu", "name": "cpu", "cores": 2},
        "versions": {},
        "knobs": [],
        "config": {"values": {"num_workers": 0}, "warmup_steps": 2},
    }
    session._dispatch(hello)
    marks = [[i * 10 + k for k in range(7)] for i in range(5)]
    session._dispatch(
        {
            "kind": "steps",
            "step": list(range(5)),
            "config": [0] * 5,
            "samples": [8] * 5,
            "host": marks,
        }
    )
    recorder = Recorder(tmp_path / "late.gpuwatch", session, flush_s=0.05)
    recorder.start()
    more = [[i * 10 + k for k in range(7)] for i in range(5, 8)]
    session._dispatch(
        {"kind": "steps", "step": [5, 6, 7], "config": [0] * 3, "samples": [8] * 3, "host": more}
    )
    wait_until(lambda: recorder.steps_written == 8, 10, "8 steps written")
    recorder.close(timeout=WRITE_WAIT_S)
    recording = open_recording(tmp_path / "late.gpuwatch")
    assert recording.steps.step.tolist() == list(range(8))
    assert recording.hello is not None and recording.hello.pid == 42
    assert [m["kind"] for _, m in recording.messages()] == ["hello", "steps", "steps"]


def test_a_second_run_ends_the_recording(tmp_path: Path) -> None:
    session = Session(sample_coarse=False)
    recorder = Recorder(tmp_path / "one.gpuwatch", session, flush_s=0.05)
    recorder.start()
    hello = {
        "kind": "hello",
        "protocol": 1,
        "pid": 1,
        "workload": "mlp",
        "device": {"kind": "cpu"},
        "versions": {},
        "knobs": [],
        "config": {},
    }
    session._dispatch(hello)
    session._dispatch({**hello, "pid": 2})
    wait_until(lambda: recorder.error is not None, 10, "the recorder to stop")
    assert "another run" in recorder.error
    recorder.close()
    assert open_recording(tmp_path / "one.gpuwatch").hello.pid == 1


def test_a_full_queue_drops_and_counts_instead_of_blocking(tmp_path: Path) -> None:
    recorder = Recorder(tmp_path / "q.gpuwatch", Session(sample_coarse=False), queue_size=2)
    for _ in range(5):  # not started: nothing drains the queue
        recorder._on_message({"kind": "log", "level": "info", "text": "x"}, 0)
    assert recorder.dropped == 3


def test_recorder_refuses_what_it_cannot_create(tmp_path: Path) -> None:
    session = Session(sample_coarse=False)
    existing = tmp_path / "exists.gpuwatch"
    existing.write_text("keep me")
    with pytest.raises(RecordingError, match="already exists"):
        Recorder(existing, session).start()
    assert existing.read_text() == "keep me"
    with pytest.raises(RecordingError, match="is a directory"):
        Recorder(tmp_path, session).start()
    with pytest.raises(RecordingError, match="does not exist"):
        Recorder(tmp_path / "nope" / "x.gpuwatch", session).start()
    recorder = Recorder(existing, session, overwrite=True)
    recorder.start()
    recorder.close()
    recorder.close()  # idempotent
    assert open_recording(existing).steps.step.size == 0


# ---- Bad files ------------------------------------------------------------------------


def small_recording(path: Path) -> Path:
    session = Session(sample_coarse=False)
    recorder = Recorder(path, session)
    recorder.start()
    session._dispatch(
        {
            "kind": "hello",
            "protocol": 1,
            "pid": 7,
            "workload": "mlp",
            "device": {"kind": "cpu"},
            "versions": {},
            "knobs": [],
            "config": {},
        }
    )
    marks = [[i * 10 + k for k in range(7)] for i in range(2000)]
    session._dispatch(
        {
            "kind": "steps",
            "step": list(range(2000)),
            "config": [0] * 2000,
            "samples": [8] * 2000,
            "host": marks,
        }
    )
    recorder.close(timeout=WRITE_WAIT_S)  # a loaded machine's writer: wait for it, no race
    assert recorder.error is None, recorder.error
    return path


def with_schema_version(path: Path, version: int) -> Path:
    conn = sqlite3.connect(path)
    conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(version),))
    conn.commit()
    conn.close()
    return path


def truncated(path: Path) -> Path:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def foreign_sqlite(path: Path) -> Path:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE notes (text TEXT)")
    conn.commit()
    conn.close()
    return path


def written(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


BAD_FILES = {
    "missing": (lambda p: p / "missing.gpuwatch", "no such file"),
    "directory": (lambda p: p, "is a directory, not a gpuwatch recording"),
    "empty": (lambda p: written(p / "e.gpuwatch", b""), "not a gpuwatch recording (an empty file)"),
    "text": (
        lambda p: written(p / "t.gpuwatch", b"step,ms\n1,2\n" * 50),
        "not a gpuwatch recording (not an SQLite file)",
    ),
    "truncated": (lambda p: truncated(small_recording(p / "cut.gpuwatch")), "is damaged ("),
    "foreign sqlite": (
        lambda p: foreign_sqlite(p / "f.gpuwatch"),
        "not a gpuwatch recording (an SQLite file without gpuwatch tables)",
    ),
    "older": (
        lambda p: with_schema_version(small_recording(p / "o.gpuwatch"), 0),
        f"made by an older gpuwatch (schema 0); this version reads schema {SCHEMA_VERSION}",
    ),
    "newer": (
        lambda p: with_schema_version(small_recording(p / "n.gpuwatch"), 99),
        f"made by a newer gpuwatch (schema 99); this version reads schema {SCHEMA_VERSION}",
    ),
}


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_each_bad_file_gets_its_own_message(tmp_path: Path, case: str) -> None:
    make, expected = BAD_FILES[case]
    path = make(tmp_path)
    with pytest.raises(RecordingError) as info:
        open_recording(path)
    message = str(info.value)
    assert expected in message
    assert str(path) in message
    assert "\n" not in message and "Traceback" not in message


# ---- bench --record --------------------------------------------------------------------


def test_bench_record_refuses_an_existing_file_before_starting(tmp_path: Path, capsys) -> None:
    from gpuwatch.cli import main

    existing = tmp_path / "old.gpuwatch"
    existing.write_bytes(b"precious")
    code = main(["bench", "--device", "cpu", "--record", str(existing)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err == [f"gpuwatch: cannot record to {existing}: the file already exists"]
    assert existing.read_bytes() == b"precious"


def test_a_full_disk_stops_the_recording_not_the_run(tmp_path: Path) -> None:
    session = Session(sample_coarse=False)
    recorder = Recorder(tmp_path / "full.gpuwatch", session, flush_s=0.05)
    recorder.start()
    pages = recorder._conn.execute("PRAGMA page_count").fetchone()[0]
    recorder._conn.execute(f"PRAGMA max_page_count = {pages + 2}")  # SQLITE_FULL, like a disk
    session._dispatch(
        {
            "kind": "hello",
            "protocol": 1,
            "pid": 3,
            "workload": "mlp",
            "device": {"kind": "cpu"},
            "versions": {},
            "knobs": [],
            "config": {},
        }
    )
    n = 5000
    session._dispatch(
        {
            "kind": "steps",
            "step": list(range(n)),
            "config": [0] * n,
            "samples": [1] * n,
            "host": [[i * 7 + k for k in range(7)] for i in range(n)],
        }
    )
    wait_until(lambda: recorder.error is not None, 10, "the recorder to report the error")
    assert "full" in recorder.error and "the run goes on" in recorder.error
    assert not recorder.recording
    session._dispatch({"kind": "log", "level": "info", "text": "training goes on"})
    assert session.steps.count == n
    recorder.close()
    kept = open_recording(tmp_path / "full.gpuwatch")  # what was committed stays readable
    assert len(kept.steps) == recorder.steps_written == 0
