"""ReplaySession: a recording shown up to a play position equals what the live session held
at that moment; play follows a fake clock at the chosen speed; a replay launches nothing."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fake_knob_session import KNOBS, hello_for

from gpuwatch import protocol
from gpuwatch.core.files.replay import ReplaySession
from gpuwatch.core.model.store import MetricStatus, SeriesStore
from gpuwatch.core.run import session as session_module
from gpuwatch.core.run.session import LaunchSpec, LogLine, Session, SessionError, SessionState

MS = 1_000_000
S = 1_000_000_000
T0 = 50 * S
STEP_MS = 20
PHASE_MS = (8, 1, 4, 4, 2, 1)  # ends 20 ms after start: no `other`
BATCH = 5


class SteppedClock:
    """``perf_counter_ns`` for the live session: the test sets the time of every message."""

    def __init__(self, now_ns: int) -> None:
        self.now_ns = now_ns

    def __call__(self) -> int:
        return self.now_ns


@dataclass
class FakeRecording:
    """What ``open_recording`` returns (docs: the recording API), built from a live session."""

    path: Path
    hello: dict[str, Any] | None
    steps: Any  # a StepsView; only its length matters to a replay
    configs: list[Any]
    coarse: SeriesStore
    t0_ns: int
    t1_ns: int
    recorded: list[tuple[int, dict[str, Any]]]
    meta: dict[str, Any] = field(default_factory=lambda: {"schema_version": 1})
    refusals: list[Any] = field(default_factory=list)
    log: list[Any] = field(default_factory=list)
    bye: dict[str, Any] | None = None
    error: str | None = None
    exit_code: int | None = 0

    def messages(self) -> list[tuple[int, dict[str, Any]]]:
        """Runner messages only: the GUI's own log lines are in ``log`` (as in the reader)."""
        return [
            (t, m)
            for t, m in self.recorded
            if not (m["kind"] == "log" and m.get("source") == "gpuwatch")
        ]

    def __post_init__(self) -> None:
        self.log = [
            LogLine(t, m["level"], "gpuwatch", m["text"])
            for t, m in self.recorded
            if m["kind"] == "log" and m.get("source") == "gpuwatch"
        ]


@dataclass
class LiveRun:
    """The recording, and what the live session showed after each message (checkpoints)."""

    recording: FakeRecording
    checkpoints: list[tuple[int, dict[str, Any]]]


def _marks(start_ns: int, n: int) -> list[list[int]]:
    offsets = np.concatenate(([0], np.cumsum(PHASE_MS))) * MS
    starts = start_ns + np.arange(n, dtype=np.int64) * STEP_MS * MS
    return (starts[:, None] + offsets[None, :]).tolist()


def script(t0: int, n_batches: int = 40, error: bool = False) -> list[tuple[int, dict]]:
    """A CPU run: hello, step batches, a config change, a refusal, log lines, bye."""
    hello = {
        **hello_for(KNOBS),
        "kind": "hello",
        "protocol": protocol.PROTOCOL_VERSION,
        "pid": 4242,
        "versions": {"python": "3.11", "torch": "2.14"},
    }
    hello["config"] = {**hello["config"], "warmup_steps": 2}
    out: list[tuple[int, dict]] = [(t0 + 100 * MS, hello)]
    start = t0 + 200 * MS  # of the next step
    now = start  # arrival time of the last message: strictly increasing
    config = 0
    step = 0
    for b in range(n_batches):
        if b == n_batches // 2:
            now += MS
            values = {**hello["config"]["values"], "num_workers": 2}
            out.append(
                (
                    now,
                    {
                        "kind": "config",
                        "id": 1,
                        "values": values,
                        "changed": {"num_workers": 2},
                        "t_ns": now,
                        "first_step": step,
                        "warmup_steps": 3,
                        "apply_s": 0.4,
                        "request": 1,
                    },
                )
            )
            config = 1
            start = now + 400 * MS
        if b == n_batches // 4:
            out.append(
                (
                    now + MS,
                    {
                        "kind": "refused",
                        "values": {"amp": "fp16"},
                        "message": "fp16 needs CUDA",
                        "request": 2,
                    },
                )
            )
            out.append((now + 2 * MS, {"kind": "log", "level": "info", "text": f"epoch {b}"}))
        ids = list(range(step, step + BATCH))
        now = start + BATCH * STEP_MS * MS + 3 * MS
        out.append(
            (
                now,
                {
                    "kind": "steps",
                    "step": ids,
                    "config": [config] * BATCH,
                    "samples": [32] * BATCH,
                    "host": _marks(start, BATCH),
                },
            )
        )
        step += BATCH
        start += BATCH * STEP_MS * MS
    if error:
        now += MS
        out.append(
            (
                now,
                {
                    "kind": "error",
                    "type": "RuntimeError",
                    "message": "boom",
                    "traceback": "Traceback: ...",
                },
            )
        )
    out.append((now + MS, {"kind": "bye", "reason": "error" if error else "done"}))
    return out


def cpu_samples(t0: int, until_ns: int) -> tuple[list[int], list[int], list[float]]:
    k = np.arange((until_ns - t0) // S + 1, dtype=np.int64)
    return (t0 + k * S).tolist(), (t0 + (k + 1) * S).tolist(), (100.0 + 10 * k).tolist()


def snapshot_of(session: Session) -> dict[str, Any]:
    """Everything the window reads from a session, in comparable form."""
    steps = session.steps.snapshot()
    return {
        "hello": session.hello,
        "steps": (
            steps.step.tolist(),
            steps.config.tolist(),
            steps.host.tolist(),
            steps.device.tolist(),
            steps.has_device.tolist(),
        ),
        "changes": session.config_changes(),
        "values": session.config_values(),
        "knobs": session.knobs,
        "refusal": session.last_refusal,
        "coarse": {
            n: session.coarse.snapshot(n).value.tolist()
            for n in session.coarse.names()
            if len(session.coarse.snapshot(n))
        },
        "statuses": session.coarse.statuses(),
        "device_kind": session.device_kind,
        "t0_ns": session.t0_ns,
    }


def live_run(monkeypatch, n_batches: int = 40, error: bool = False) -> LiveRun:
    """Dispatch the script into a real Session at scripted times, recording like Recorder."""
    clock = SteppedClock(T0)
    monkeypatch.setattr(session_module.time, "perf_counter_ns", clock)
    live = Session(sample_coarse=False)
    recorded: list[tuple[int, dict]] = []
    live.add_listener(lambda message, t_ns: recorded.append((t_ns, message)))
    msgs = script(T0, n_batches, error)
    end = msgs[-1][0]
    all_t0, all_t1, all_v = cpu_samples(T0, end)
    live.coarse.set_status(MetricStatus("proc.cpu", "runner CPU", "%", True, period_s=1.0))
    checkpoints = []
    fed = 0
    for t_ns, message in msgs:
        clock.now_ns = t_ns
        while fed < len(all_t1) and all_t1[fed] <= t_ns:  # the sampler's samples so far
            live.coarse.append("proc.cpu", all_t0[fed], all_t1[fed], all_v[fed])
            fed += 1
        live._dispatch(message)
        # Running from the hello until the runner leaves after its bye.
        live._state = SessionState.FINISHED if message["kind"] == "bye" else SessionState.RUNNING
        checkpoints.append(
            (
                t_ns,
                {
                    **snapshot_of(live),
                    "rows": live.scoreboard(),
                    "log": [dataclasses.astuple(x) for x in live.drain_log()],
                },
            )
        )
    monkeypatch.undo()
    coarse = SeriesStore()
    coarse.set_status(MetricStatus("proc.cpu", "runner CPU", "%", True, period_s=1.0))
    coarse.append_many("proc.cpu", all_t0, all_t1, all_v)
    rec = FakeRecording(
        path=Path("/recordings/run.gpuwatch"),
        hello=live.hello,
        steps=live.steps.snapshot(),
        configs=live.config_changes(),
        coarse=coarse,
        t0_ns=T0,
        t1_ns=all_t1[-1],
        recorded=recorded,
        error="RuntimeError: boom" if error else None,
    )
    return LiveRun(rec, checkpoints)


def seconds(t_ns: int) -> float:
    return (t_ns - T0) / 1e9


def test_opens_at_the_end_showing_the_whole_run(monkeypatch):
    run = live_run(monkeypatch)
    replay = ReplaySession(run.recording)
    assert replay.at_end and not replay.playing
    assert replay.duration_s == pytest.approx(seconds(run.recording.t1_ns))
    assert replay.position_s == pytest.approx(replay.duration_s)
    assert replay.state is SessionState.FINISHED
    assert len(replay.steps.snapshot()) == len(run.recording.steps)
    assert [c.id for c in replay.config_changes()] == [0, 1]


def test_stores_after_a_seek_equal_the_live_data_up_to_then(monkeypatch):
    run = live_run(monkeypatch)
    replay = ReplaySession(run.recording)
    # Backwards (rebuild from the start) and forwards (incremental), in a scrambled order.
    picks = [5, 1, 30, 12, 0, 44, 13, len(run.checkpoints) - 1, 22]
    for i in picks:
        t_ns, live = run.checkpoints[i]
        replay.seek(seconds(t_ns))
        got = snapshot_of(replay)
        for key, value in live.items():
            if key in ("rows", "log"):
                continue
            assert got[key] == value, f"{key} differs after seeking to message {i}"
    replay.seek(seconds(run.checkpoints[20][0]))
    replay.seek(seconds(run.checkpoints[10][0]))
    assert snapshot_of(replay)["steps"] == run.checkpoints[10][1]["steps"]


def test_scoreboard_equals_the_live_one_mid_run_and_at_the_end(monkeypatch):
    run = live_run(monkeypatch)
    replay = ReplaySession(run.recording)
    for i in (len(run.checkpoints) // 2 + 3, len(run.checkpoints) - 2, 5, len(run.checkpoints) - 1):
        t_ns, live = run.checkpoints[i]
        replay.seek(seconds(t_ns))
        rows = replay.scoreboard()
        assert [dataclasses.replace(r, coarse_util=None) for r in rows] == [
            dataclasses.replace(r, coarse_util=None) for r in live["rows"]
        ]
        # The live board froze row 0 before the 1 s CPU sample over its end had arrived.
        assert [r.coarse_util for r in rows] == pytest.approx(
            [r.coarse_util for r in live["rows"]], abs=0.02
        )
    replay.seek(replay.duration_s)
    rows = replay.scoreboard()
    assert [r.config_id for r in rows] == [0, 1]
    assert not any(r.live for r in rows)
    assert all(r.samples_per_s == pytest.approx(32 / (STEP_MS / 1e3)) for r in rows)


def test_log_replays_runner_and_gpuwatch_lines_once_with_their_times(monkeypatch):
    run = live_run(monkeypatch)
    live_log = [line for _, cp in run.checkpoints for line in cp["log"]]
    replay = ReplaySession(run.recording)
    got = [dataclasses.astuple(x) for x in replay.drain_log()]
    assert got == live_log
    generation = replay.generation
    replay.seek(0.0)
    assert replay.generation == generation + 1
    assert replay.drain_log() == []


def test_play_follows_the_clock_times_the_speed_and_stops_at_the_end(monkeypatch):
    run = live_run(monkeypatch)
    now = [100.0]
    replay = ReplaySession(run.recording, clock=lambda: now[0])
    replay.seek(0.5)
    replay.play()
    assert replay.playing and not replay.tick()  # no time has passed
    now[0] += 0.25
    assert replay.tick()
    assert replay.position_s == pytest.approx(0.75)
    replay.speed = 4.0
    now[0] += 0.25
    replay.tick()
    assert replay.position_s == pytest.approx(1.75)
    count = replay.steps.count
    assert count == sum(
        len(m["step"])
        for t, m in run.recording.recorded
        if m["kind"] == "steps" and t <= T0 + 1.75 * S
    )
    replay.pause()
    now[0] += 10.0
    assert not replay.tick() and replay.position_s == pytest.approx(1.75)
    replay.play()
    now[0] += 1000.0
    replay.tick()
    assert replay.at_end and not replay.playing
    replay.play()  # at the end: plays again from the start
    assert replay.position_s == 0.0 and replay.playing


@pytest.mark.parametrize("factor", [0.1, 17.0, 0.0])
def test_speed_outside_the_range_is_refused_with_a_message(monkeypatch, factor):
    replay = ReplaySession(live_run(monkeypatch, n_batches=4).recording)
    with pytest.raises(ValueError, match=r"between 0\.25x and 16x"):
        replay.speed = factor
    assert replay.speed == 1.0


def test_a_replay_launches_nothing_and_says_why(monkeypatch):
    replay = ReplaySession(live_run(monkeypatch, n_batches=4).recording)
    with pytest.raises(SessionError, match=r"run\.gpuwatch is a recording"):
        replay.start(LaunchSpec())
    with pytest.raises(SessionError, match="no run to stop"):
        replay.stop()
    with pytest.raises(SessionError, match="read-only"):
        replay.set_knobs({"num_workers": 4})
    replay.close()
    assert replay.wait_ended(0)


def test_a_failed_run_replays_as_failed_with_its_error(monkeypatch):
    replay = ReplaySession(live_run(monkeypatch, n_batches=4, error=True).recording)
    assert replay.state is SessionState.FAILED
    assert replay.error == "RuntimeError: boom"
    assert replay.bye_reason == "error"


def test_rebuild_from_the_start_is_fast_for_an_hour_long_file():
    """An hour at 50 steps/s in 50 ms batches (72,000 step messages, 180,000 steps)."""
    hello = {
        **hello_for(KNOBS),
        "kind": "hello",
        "protocol": protocol.PROTOCOL_VERSION,
        "pid": 1,
        "versions": {},
    }
    messages: list[tuple[int, dict]] = [(T0, hello)]
    per_batch, batch_ns = 2, 50 * MS
    n = 3600 * S // batch_ns
    offsets = (np.concatenate(([0], np.cumsum(PHASE_MS))) * MS).tolist()
    for b in range(n):
        start = T0 + b * batch_ns
        ids = [b * per_batch, b * per_batch + 1]
        host = [[start + o for o in offsets], [start + 25 * MS + o for o in offsets]]
        messages.append(
            (
                start + batch_ns,
                {"kind": "steps", "step": ids, "config": [0, 0], "samples": [32, 32], "host": host},
            )
        )
    coarse = SeriesStore()
    steps = [None] * (n * per_batch)
    rec = FakeRecording(
        path=Path("hour.gpuwatch"),
        hello=hello,
        steps=steps,
        configs=[],
        coarse=coarse,
        t0_ns=T0,
        t1_ns=messages[-1][0],
        recorded=messages,
    )
    replay = ReplaySession(rec)
    assert replay.steps.count == n * per_batch
    started = time.perf_counter()
    replay.seek(0.0)
    replay.seek(replay.duration_s)
    rebuild_s = time.perf_counter() - started
    print(f"rebuild of {n} messages / {n * per_batch} steps: {rebuild_s:.2f} s")
    assert rebuild_s < 10.0


def test_a_real_recording_replays_to_what_the_live_session_showed(tmp_path):
    """Round trip through the real Recorder and open_recording (a session fed messages)."""
    from gpuwatch.core.files.recording import Recorder
    from gpuwatch.core.files.recording_reader import open_recording

    live = Session(sample_coarse=False)
    live._state = SessionState.RUNNING  # as if launched: the recorder follows a run
    recorder = Recorder(tmp_path / "run.gpuwatch", live, flush_s=0.01)
    recorder.start()
    for _, message in script(live.t0_ns + S):
        live._dispatch(message)
    live.label_segment(1, "workers")
    live._state = SessionState.FINISHED
    recorder.close()
    assert recorder.error is None
    replay = ReplaySession(open_recording(tmp_path / "run.gpuwatch"))
    assert replay.at_end and replay.state is SessionState.FINISHED
    assert snapshot_of(replay)["steps"] == snapshot_of(live)["steps"]
    assert replay.config_changes() == live.config_changes()
    assert replay.scoreboard() == live.scoreboard()
    texts = [line.text for line in replay.drain_log()]
    assert "epoch 10" in texts and any(t.startswith("config 1 applied") for t in texts)
    assert len([t for t in texts if t.startswith("config 1 applied")]) == 1
