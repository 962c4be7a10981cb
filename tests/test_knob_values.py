"""Command-line knob settings: typed values, and one clear line for anything wrong."""

from __future__ import annotations

import pytest

from gpuwatch.core.model.knob_values import (
    KnobValueError,
    check_knob_names,
    parse_assignments,
    parse_value,
    split_assignment,
)


def knob(name: str, kind: str, **extra) -> dict:
    base = {
        "name": name,
        "type": kind,
        "default": None,
        "min": None,
        "max": None,
        "choices": None,
        "enabled": True,
        "reason": None,
        "disabled_choices": {},
    }
    return {**base, **extra}


WORKERS = knob("num_workers", "int", default=0, min=0, max=16)
PIN = knob("pin_memory", "bool", default=False, enabled=False, reason="needs CUDA")
LATENCY = knob("storage_latency_ms", "float", default=0.0, min=0, max=200, unit="ms")
AMP = knob(
    "amp",
    "choice",
    default="off",
    choices=["off", "fp16", "bf16"],
    disabled_choices={"fp16": "needs CUDA"},
)
LOG = knob("log_every", "int", default=1, min=1, max=1000)
SCHEMA = [WORKERS, PIN, LATENCY, AMP, LOG]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("true", True),
        ("1", True),
        ("on", True),
        ("YES", True),
        ("false", False),
        ("0", False),
        ("Off", False),
        ("no", False),
    ],
)
def test_bool_words(raw: str, expected: bool) -> None:
    assert parse_value(knob("x", "bool"), raw) is expected


def test_int_float_and_choice_are_typed() -> None:
    assert parse_value(WORKERS, "4") == 4 and isinstance(parse_value(WORKERS, "4"), int)
    assert parse_value(LATENCY, "2.5") == 2.5
    assert isinstance(parse_value(LATENCY, "3"), float)
    assert parse_value(AMP, "BF16") == "bf16"


@pytest.mark.parametrize(
    ("spec", "raw", "needle"),
    [
        (WORKERS, "two", "num_workers must be an integer from 0 to 16, got 'two'"),
        (WORKERS, "2.5", "must be an integer"),
        (WORKERS, "17", "num_workers must be an integer from 0 to 16, got '17'"),
        (LATENCY, "nan", "storage_latency_ms must be a number from 0 to 200"),
        (LATENCY, "-1", "from 0 to 200"),
        (AMP, "fp8", "amp must be one of off, fp16, bf16, got 'fp8'"),
        (knob("x", "bool"), "maybe", "x must be true or false"),
    ],
)
def test_bad_values_say_what_is_accepted(spec: dict, raw: str, needle: str) -> None:
    with pytest.raises(KnobValueError) as info:
        parse_value(spec, raw)
    assert needle in str(info.value)
    assert "\n" not in str(info.value)


def test_assignments_parse_against_the_schema() -> None:
    pairs = [split_assignment(t) for t in ("num_workers=2", " amp = bf16 ", "log_every=50")]
    assert parse_assignments(SCHEMA, pairs) == {"num_workers": 2, "amp": "bf16", "log_every": 50}


def test_unknown_knob_lists_the_known_ones() -> None:
    with pytest.raises(KnobValueError) as info:
        parse_assignments(SCHEMA, [("nonsense", "1")])
    message = str(info.value)
    assert message.startswith("unknown knob 'nonsense'; known knobs: num_workers, pin_memory")
    assert "log_every" in message


def test_disabled_knob_and_choice_give_the_runners_reason() -> None:
    with pytest.raises(KnobValueError, match="pin_memory cannot be changed here: needs CUDA"):
        parse_assignments(SCHEMA, [("pin_memory", "true")])
    with pytest.raises(KnobValueError, match="amp=fp16 is not available here: needs CUDA"):
        parse_assignments(SCHEMA, [("amp", "fp16")])
    # Asking a disabled knob for its default is harmless.
    assert parse_assignments(SCHEMA, [("pin_memory", "false")]) == {"pin_memory": False}


def test_a_knob_twice_in_one_stage_is_refused() -> None:
    with pytest.raises(KnobValueError, match="set twice"):
        parse_assignments(SCHEMA, [("num_workers", "1"), ("num_workers", "2")])


@pytest.mark.parametrize("text", ["num_workers", "=2", "num_workers=", ""])
def test_assignment_shape(text: str) -> None:
    with pytest.raises(KnobValueError, match="write name=value"):
        split_assignment(text)


def test_names_are_checked_without_a_schema_the_same_way() -> None:
    known = ("num_workers", "amp")
    check_knob_names([["num_workers=2"], [], ["amp=bf16"]], known)
    with pytest.raises(KnobValueError) as unknown:
        check_knob_names([["num_workers=2"], ["nonsense=1"]], known)
    assert str(unknown.value) == "unknown knob 'nonsense'; known knobs: num_workers, amp"
    with pytest.raises(KnobValueError, match="'amp' is not a knob setting: write name=value"):
        check_knob_names([["amp"]], known)
