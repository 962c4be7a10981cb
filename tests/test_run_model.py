"""RunModel: the fold of runner messages, its listeners, and the typed hello it reads."""

from __future__ import annotations

import contextlib
import logging
import sqlite3

import pytest

from gpuwatch.core.files.recording import Recorder
from gpuwatch.core.files.recording_reader import open_recording
from gpuwatch.core.files.replay import ReplaySession
from gpuwatch.core.model.messages import (
    DEFAULT_WARMUP_STEPS,
    CaptureFailed,
    ChangeRefused,
    ConfigApplied,
    Hello,
    ModelEvent,
    Refusal,
    SessionState,
    StateChanged,
)
from gpuwatch.core.run.run_model import RunModel
from gpuwatch.core.run.session import Session

HELLO = {
    "kind": "hello",
    "protocol": 1,
    "pid": 1,
    "workload": "vision",
    "device": {"kind": "cpu", "cores": 2},
    "versions": {},
    "knobs": [],
    "config": {"id": 0, "values": {"num_workers": 0}, "warmup_steps": 5},
}
NO_EVENTS = {
    "steps": [], "perturbed": [], "names": [], "type": [], "name": [], "stream": [], "start": [],
    "end": [],
}  # fmt: skip
REFUSAL = Refusal(request=3, values={"num_workers": "two"}, message="not an integer", t_ns=7)


def test_a_failing_listener_is_logged_once_and_never_stops_the_others(caplog) -> None:
    model = RunModel()
    seen: list[ModelEvent] = []

    def broken(event: ModelEvent) -> None:
        raise RuntimeError("boom")

    model.add_listener(broken)
    model.add_listener(seen.append)
    with caplog.at_level(logging.ERROR, logger="gpuwatch.core.run.run_model"):
        model.emit(StateChanged(SessionState.RUNNING))
        model.emit(ChangeRefused(REFUSAL))
    assert seen == [StateChanged(SessionState.RUNNING), ChangeRefused(REFUSAL)]
    assert len([r for r in caplog.records if "boom" in (r.exc_text or "")]) == 1


def test_a_removed_listener_hears_nothing_more() -> None:
    model = RunModel()
    seen: list[ModelEvent] = []
    model.add_listener(seen.append)
    model.emit(StateChanged(SessionState.STARTING))
    model.remove_listener(seen.append)  # an equal bound method, not the same object
    model.emit(StateChanged(SessionState.RUNNING))
    assert seen == [StateChanged(SessionState.STARTING)]


def test_a_session_tells_its_model_listeners_of_configs_refusals_and_failures() -> None:
    session = Session(sample_coarse=False)
    seen: list[ModelEvent] = []
    session.model.add_listener(seen.append)
    session._dispatch(HELLO)
    session._dispatch(
        {"kind": "refused", "request": 8, "values": {"num_workers": "two"}, "message": "no"}
    )
    session._dispatch({"kind": "kernels", "status": "failed", "error": "no CUPTI", **NO_EVENTS})
    session._fail("it broke")
    assert [type(e) for e in seen] == [ConfigApplied, ChangeRefused, CaptureFailed, StateChanged]
    applied, refused, failed, state = seen
    assert isinstance(applied, ConfigApplied) and applied.change.id == 0
    assert isinstance(refused, ChangeRefused) and refused.refusal.message == "no"
    assert isinstance(failed, CaptureFailed) and failed.error == "no CUPTI"
    assert state == StateChanged(SessionState.FAILED)


def test_hello_is_read_once_into_typed_fields() -> None:
    hello = Hello.from_message(
        {
            **HELLO,
            "device": {"kind": "cuda", "name": "GPU", "index": 1, "uuid": "GPU-1", "cores": 1e400},
            "knobs": [{"name": "num_workers", "type": "int", "default": 0, "max": 8}],
            "versions": {"torch": "2.14.1"},
            "timing": "cuda_events",
        }
    )
    assert (hello.workload, hello.pid, hello.timing, hello.warmup_steps) == (
        "vision",
        1,
        "cuda_events",
        5,
    )
    assert (hello.device.kind, hello.device.index, hello.device.uuid) == ("cuda", 1, "GPU-1")
    assert hello.device.core_count(default=3) == 3  # infinity is no core count
    assert [k.name for k in hello.knobs] == ["num_workers"] and hello.knobs[0].max == 8
    assert hello.to_message()["knobs"] == [
        {"name": "num_workers", "type": "int", "default": 0, "max": 8}
    ]
    with pytest.raises(ValueError, match="name and a type"):
        Hello.from_message({**HELLO, "knobs": [{"name": "lr"}]})
    with pytest.raises(ValueError, match="device"):
        Hello.from_message({**HELLO, "device": "cpu"})


def test_a_hello_without_warmup_steps_gets_the_one_default() -> None:
    old = {**HELLO, "config": {"id": 0, "values": {"num_workers": 4, "prefetch_factor": 2}}}
    assert Hello.from_message(old).warmup_steps == DEFAULT_WARMUP_STEPS
    model = RunModel()
    model.fold(old)
    assert model.config_changes()[0].warmup_steps == DEFAULT_WARMUP_STEPS


def test_the_fold_uses_one_handler_per_kind_and_names_unknown_kinds() -> None:
    lines: list[tuple[str, str, str, bool]] = []
    model = RunModel(clock=lambda: 123, log_line=lambda *line: lines.append(line))
    model.fold(HELLO)
    model.fold({"kind": "log", "level": "warning", "text": "marks off", "off": "device_marks"})
    model.fold({"kind": "surprise"})
    assert model.hello is not None and model.config_changes()[0].t_ns == 123
    assert model.instruments_off == ["marks off"]
    assert ("warning", "runner", "marks off", True) in lines
    assert any("'surprise'" in text for _, _, text, _ in lines)
    with pytest.raises(KeyError):
        model.fold({"kind": "steps"})  # malformed: the owner counts it (``unusable``)
    model.unusable("steps", KeyError("step"))
    assert model.unusable_messages == {"steps": 1} and model.dropped_messages == 1


def test_an_old_recording_without_warmup_in_hello_still_opens(tmp_path) -> None:
    """A recording from before the runner sent ``warmup_steps``: its configs table gives
    config 0's warm-up as the live window used it; without that row, the one default."""
    session = Session(sample_coarse=False)
    session._dispatch({**HELLO, "config": {"id": 0, "values": {"num_workers": 0}}})
    path = tmp_path / "old.gpuwatch"
    recorder = Recorder(path, session, flush_s=0.05)
    recorder.start()
    recorder.close()
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("UPDATE configs SET warmup_steps = 7 WHERE id = 0")
    recording = open_recording(path)
    assert recording.hello is not None and recording.hello.warmup_steps == 7
    assert ReplaySession(recording).config_changes()[0].warmup_steps == 7
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("DELETE FROM configs WHERE id = 0")
    recording = open_recording(path)
    assert recording.hello is not None and recording.hello.warmup_steps == DEFAULT_WARMUP_STEPS
    assert ReplaySession(recording).config_changes()[0].warmup_steps == DEFAULT_WARMUP_STEPS


@pytest.mark.parametrize(
    ("traceback", "logged"),
    [
        # As python prints it: the traceback ends with the type and message, said once.
        (
            'Traceback (most recent call last):\n  File "t.py", line 1\nValueError: bad lr\n',
            ['Traceback (most recent call last):\n  File "t.py", line 1\nValueError: bad lr'],
        ),
        # No traceback (a missing module, a Python without torch): the one line.
        ("", ["ValueError: bad lr"]),
        # A traceback that does not end with it (cut, or another error's): both.
        (
            "Traceback (most recent call last):\n  ...\n",
            ["ValueError: bad lr", "Traceback (most recent call last):\n  ..."],
        ),
    ],
)
def test_an_error_is_logged_once_as_python_prints_it(traceback: str, logged: list[str]) -> None:
    lines: list[tuple[str, str, str, bool]] = []
    model = RunModel(clock=lambda: 123, log_line=lambda *line: lines.append(line))
    model.fold({"kind": "error", "type": "ValueError", "message": "bad lr", "traceback": traceback})
    assert model.error == "ValueError: bad lr" and model.error_type == "ValueError"
    assert [text for level, source, text, _ in lines if level == "error"] == logged
