"""Whatever a runner message carries, the GUI's link reader survives it.

Values the step rings or SQLite cannot hold, infinities spelled as ``1e400``, a message the
session cannot use, knobs beyond the knob panel's range and a frame over the hard size limit:
each is stored, or refused with a logged reason, and the run goes on (or, for the oversized
frame, ends saying why). The runner is ``scripted_runner.py``: it sends exactly what a test
lists, valid or not.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
from waiting import wait_until

from gpuwatch.core.run.session import LaunchSpec, Session, SessionState

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="a POSIX wrapper interpreter")

SCRIPTED_RUNNER = Path(__file__).with_name("scripted_runner.py")
NOW = 10**15  # a perf_counter_ns() far from zero, as real marks are


@pytest.fixture(scope="module")
def scripted_python(tmp_path_factory) -> str:
    """An "interpreter" that runs ``scripted_runner.py`` whatever the command asks for."""
    wrapper = tmp_path_factory.mktemp("scripted-python") / "python"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{SCRIPTED_RUNNER}" "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


@pytest.fixture
def run(scripted_python, tmp_path, monkeypatch):
    """Start a Session whose runner plays ``actions``; the session is closed afterwards."""
    sessions: list[Session] = []

    def start(actions: list[dict]) -> Session:
        path = tmp_path / f"actions-{len(sessions)}.json"
        path.write_text(json.dumps(actions), encoding="utf-8")
        monkeypatch.setenv("GPUWATCH_SCRIPTED_ACTIONS", str(path))
        session = Session(sample_coarse=False)
        sessions.append(session)
        session.start(LaunchSpec(workload="scripted", device="cpu", python=scripted_python))
        return session

    yield start
    for session in sessions:
        session.close()


def send(kind: str, text: str | None = None, **fields) -> dict:
    """A frame holding ``{"kind": kind, **fields}``, or ``text`` verbatim."""
    return {"send": text if text is not None else json.dumps({"kind": kind, **fields})}


def hello(knobs: list[dict] | None = None) -> dict:
    return send(
        "hello",
        protocol=1,
        pid=1,
        workload="scripted",
        device={"kind": "cpu", "name": "scripted CPU", "cores": 1},
        versions={"python": "3"},
        knobs=knobs or [],
        config={"id": 0, "values": {}, "warmup_steps": 0},
    )


def steps(step: list[int], samples: list[int]) -> dict:
    host = [[NOW + i * 10_000 + j * 1_000 for j in range(7)] for i in range(len(step))]
    return send("steps", step=step, config=[0] * len(step), samples=samples, host=host)


def kernels_with_name_index(index: int) -> dict:
    """A capture window that passes the protocol's checks but not the session's use of it."""
    return send(
        "kernels",
        status="ok",
        steps=[0],
        perturbed=[0],
        names=["k"],
        type=[0],
        name=[index],
        stream=[0],
        start=[NOW],
        end=[NOW + 1000],
    )


def texts(session: Session) -> list[str]:
    return [line.text for line in session.drain_log()]


def finish(session: Session) -> None:
    """Stop the run: the link still works, the runner says bye, the run ends normally."""
    session.stop()
    assert session.wait_ended(30)
    assert session.state is SessionState.FINISHED, session.error
    assert session.bye_reason == "stopped"


def test_values_the_stores_cannot_hold_are_stored_or_refused_and_the_reader_goes_on(run):
    heard: list[dict] = []
    session = run(
        [
            hello(),
            steps([0], [2**31]),  # a running token count: stored
            steps([1], [2**62]),  # still a 64-bit integer: stored
            steps([2**63], [1]),  # a step id no 64-bit column holds: refused
            steps([2], [2**64]),  # as is such a sample count
            send("log", '{"kind":"log","level":"info","text":"loss","value":1e400}'),
            kernels_with_name_index(2**40),  # valid JSON the session cannot use (twice)
            kernels_with_name_index(2**41),
            {"steps": [3, 10]},  # the reader is still there
        ]
    )
    session.add_listener(lambda message, _t: heard.append(message))
    wait_until(
        lambda: session.steps.count >= 12 or session.state is SessionState.FAILED,
        30,
        "the good steps",
    )
    assert session.state is SessionState.RUNNING, session.error
    view = session.steps.snapshot()
    assert view.step.tolist() == [0, 1, *range(3, 13)]
    assert view.samples[:2].tolist() == [2**31, 2**62]
    log = texts(session)
    refused = [t for t in log if t.startswith("dropped a message from the runner")]
    assert sum("outside the signed 64-bit range" in t for t in refused) == 2, refused
    assert any("1e400" in t and "not finite" in t for t in refused), refused
    unusable = [t for t in log if t.startswith("dropped a 'kernels' message")]
    assert len(unusable) == 1, "logged once per kind"
    assert "OverflowError" in unusable[0] and "counted, not logged" in unusable[0]
    assert session.unusable_messages == {"kernels": 2}
    assert session.dropped_messages == 3 + 2
    assert not any("internal error" in t for t in log), log
    for message in heard:  # what a recorder is handed: nothing it could not store
        json.dumps(message, allow_nan=False)
        assert message["kind"] != "kernels"
    finish(session)


def test_knobs_beyond_the_panels_range_are_left_out_with_a_reason(run, qtbot):
    from gpuwatch.qt.knob_panel import KnobPanel

    def knob(name: str, default: int, **extra) -> dict:
        return {
            "name": name,
            "label": name,
            "group": "script",
            "type": "int",
            "default": default,
            "min": None,
            "max": None,
            "choices": None,
            "unit": None,
            "enabled": True,
            "reason": None,
            "disabled_choices": {},
            "help": "",
            **extra,
        }

    workers = knob("workers", 2, min=0, max=16)
    session = run(
        [
            hello([workers]),
            {"steps": [0, 1]},
            send(
                "knobs",
                knobs=[workers, knob("tokens", 2**40)],
                values={"workers": 2, "tokens": 2**40},
            ),
            send(
                "knobs",
                knobs=[workers, knob("tokens", 2**40), knob("budget", 1, max=2**33)],
                values={"workers": 2, "tokens": 2**40, "budget": 1},
            ),
            {"steps": [1, 1]},
        ]
    )
    wait_until(
        lambda: session.steps.count >= 2 or session.state is SessionState.FAILED,
        30,
        "the steps after the knobs",
    )
    assert [k["name"] for k in session.knobs] == ["workers"]
    assert session.config_values()["tokens"] == 2**40, "the value is still known"
    hidden = [t for t in texts(session) if t.startswith("knob ")]
    assert len(hidden) == 2, hidden  # each once, although 'tokens' came twice
    assert "'tokens' is not shown: its default 1,099,511,627,776" in hidden[0]
    assert "'budget' is not shown: its max 8,589,934,592" in hidden[1]
    panel = KnobPanel(session)
    qtbot.addWidget(panel)
    panel.refresh()
    assert list(panel.rows) == ["workers"]
    assert panel.rows["workers"].editor.value() == 2
    finish(session)


def test_a_message_over_the_hard_limit_ends_the_run_saying_why(run):
    session = run([hello(), {"steps": [0, 5]}, {"header": 100 * 2**20}])
    assert session.wait_ended(30)
    assert session.steps.count == 5, "the steps before it are kept"
    assert session.state is SessionState.FAILED
    assert session.error is not None and session.error.startswith(
        "the runner sent a message of 100 MiB, over the 64 MiB limit: "
    )


def test_the_protocol_refuses_every_integer_beyond_64_bits_and_every_infinity() -> None:
    from gpuwatch import protocol

    ok = protocol.decode(
        b'{"kind":"log","level":"info","text":"x","a":9223372036854775807,'
        b'"b":-9223372036854775808,"c":1e308}'
    )
    assert ok["a"] == 2**63 - 1 and ok["b"] == -(2**63) and math.isfinite(ok["c"])
    for bad in (
        b"9223372036854775808",
        b"-9223372036854775809",
        b"1e400",
        b"-1e400",
        b"1" + b"0" * 5000,
    ):
        with pytest.raises(protocol.ProtocolError):
            protocol.decode(b'{"kind":"log","level":"info","text":"x","v":%s}' % bad)
