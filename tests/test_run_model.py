"""RunModel: its listeners of rare changes."""

from __future__ import annotations

import logging

from gpuwatch.core.model.messages import (
    CaptureFailed,
    ChangeRefused,
    ConfigApplied,
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
