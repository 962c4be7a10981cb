"""Wire format: round trips, and everything malformed is refused rather than guessed at."""

from __future__ import annotations

import json

import pytest

from gpuwatch import protocol
from gpuwatch.protocol import N_MARKS, ProtocolError, decode, encode


def _steps(n: int = 3) -> dict:
    return {
        "step": list(range(n)),
        "config": [0] * n,
        "samples": [32] * n,
        "host": [[i * 100 + k for k in range(N_MARKS)] for i in range(n)],
    }


def test_steps_round_trip() -> None:
    msg = decode(encode("steps", **_steps()))
    assert msg["kind"] == "steps"
    assert msg["host"][2] == [200 + k for k in range(N_MARKS)]


def test_hello_round_trip_keeps_extra_fields() -> None:
    data = encode(
        "hello",
        protocol=protocol.PROTOCOL_VERSION,
        pid=12,
        workload="vision",
        device={"kind": "cpu"},
        versions={},
        knobs=[],
        config={"id": 0},
        timing="host",
    )
    assert decode(data, allowed=protocol.RUNNER_KINDS)["timing"] == "host"


@pytest.mark.parametrize(
    "payload",
    [
        b"not json",
        b"\xff\xfe",
        b"[1, 2]",
        b'{"no": "kind"}',
        b'{"kind": "bogus"}',
        b'{"kind": "steps", "step": [1], "config": [0], "samples": [1]}',
        (
            b'{"kind": "steps", "step": [1, 2], "config": [0], "samples": [1], '
            b'"host": [[0,0,0,0,0,0,0]]}'
        ),
        b'{"kind": "steps", "step": [1], "config": [0], "samples": [1], "host": [[0, 1]]}',
        (
            b'{"kind": "steps", "step": ["1"], "config": [0], "samples": [1], '
            b'"host": [[0,0,0,0,0,0,0]]}'
        ),
        b'{"kind": "config", "id": true, "values": {}, "t_ns": 1}',
        b'{"kind": "log", "level": "info", "text": NaN}',
        b'{"kind": "capture", "steps": Infinity}',
    ],
)
def test_malformed_messages_are_refused(payload: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode(payload)


def test_kind_not_allowed_on_this_side() -> None:
    with pytest.raises(ProtocolError, match="unexpected message kind"):
        decode(encode("stop"), allowed=protocol.RUNNER_KINDS)


def test_oversized_message_is_refused_both_ways() -> None:
    big = "x" * (protocol.MAX_MESSAGE_BYTES + 1)
    with pytest.raises(ProtocolError, match="exceeds"):
        encode("log", level="info", text=big)
    raw = json.dumps({"kind": "log", "level": "info", "text": big}).encode()
    with pytest.raises(ProtocolError, match="exceeds"):
        decode(raw)


def test_encode_refuses_non_finite_and_unserialisable() -> None:
    with pytest.raises(ProtocolError):
        encode(
            "config",
            id=1,
            values={"x": float("nan")},
            changed={},
            t_ns=0,
            first_step=0,
            warmup_steps=1,
        )
    with pytest.raises(ProtocolError):
        encode(
            "config", id=1, values={"x": object()}, changed={}, t_ns=0, first_step=0, warmup_steps=1
        )


def test_finite_or_none() -> None:
    assert protocol.finite_or_none(float("inf")) is None
    assert protocol.finite_or_none(None) is None
    assert protocol.finite_or_none(0.0) == 0.0
