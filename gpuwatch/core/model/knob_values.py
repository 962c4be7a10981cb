"""Turn ``knob=value`` text from the command line into typed knob values.

The schema comes from the runner's ``hello.knobs`` (docs/knobs.md §2), so a bad name or value
is caught here, before anything is sent, with one message that says what would be accepted.
The runner checks again (it is the authority); this is only for a clear early answer.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

TRUE_WORDS = frozenset({"true", "1", "on", "yes"})
FALSE_WORDS = frozenset({"false", "0", "off", "no"})


class KnobValueError(ValueError):
    """A knob name or value that cannot be used; the text is one line for the user."""


def split_assignment(text: str) -> tuple[str, str]:
    """``"num_workers=2"`` → ``("num_workers", "2")``; the shape only, no schema needed."""
    name, sep, raw = text.partition("=")
    name, raw = name.strip(), raw.strip()
    if not sep or not name or not raw:
        raise KnobValueError(
            f"{text!r} is not a knob setting: write name=value, e.g. num_workers=2"
        )
    return name, raw


def unknown_knob(name: str, known: Iterable[str]) -> KnobValueError:
    """The one message for a name that is not a knob, listing the ones that are."""
    listed = ", ".join(known) or "none (this runner offers no knobs)"
    return KnobValueError(f"unknown knob {name!r}; known knobs: {listed}")


def check_knob_names(groups: Iterable[Iterable[str]], known: Sequence[str]) -> None:
    """Refuse a setting that is not ``name=value`` or names no knob in ``known``: the check
    that needs no schema, so it can be made before a runner is started for it (the schema
    checks the values, and what this device offers, once the runner is up)."""
    for group in groups:
        for text in group:
            name, _ = split_assignment(text)
            if name not in known:
                raise unknown_knob(name, known)


def schema_by_name(knobs: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """The ``hello.knobs`` schema entries keyed by knob name."""
    return {knob["name"]: knob for knob in knobs}


def parse_value(knob: Mapping[str, Any], raw: str) -> Any:
    """The typed value of ``raw`` for ``knob``, checked against its type, range and choices."""
    name, kind = knob["name"], knob["type"]
    text = raw.strip()
    if kind == "bool":
        word = text.lower()
        if word in TRUE_WORDS:
            return True
        if word in FALSE_WORDS:
            return False
        raise KnobValueError(
            f"{name} must be true or false (also on/off, yes/no, 1/0), got {raw!r}"
        )
    if kind == "int":
        try:
            value: int | float = int(text)
        except ValueError:
            raise KnobValueError(
                f"{name} must be an integer{_range_text(knob)}, got {raw!r}"
            ) from None
        return _in_range(knob, value, raw)
    if kind == "float":
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise KnobValueError(f"{name} must be a number{_range_text(knob)}, got {raw!r}")
        return _in_range(knob, value, raw)
    if kind == "choice":
        choices = [str(c) for c in knob.get("choices") or []]
        for choice in choices:
            if choice.lower() == text.lower():
                return choice
        raise KnobValueError(f"{name} must be one of {', '.join(choices)}, got {raw!r}")
    raise KnobValueError(f"{name} has a type this gpuwatch does not know ({kind!r})")


def _range_text(knob: Mapping[str, Any]) -> str:
    low, high = knob.get("min"), knob.get("max")
    if low is not None and high is not None:
        return f" from {_plain(low)} to {_plain(high)}"
    if low is not None:
        return f" of at least {_plain(low)}"
    if high is not None:
        return f" of at most {_plain(high)}"
    return ""


def _in_range(knob: Mapping[str, Any], value: int | float, raw: str) -> int | float:
    low, high = knob.get("min"), knob.get("max")
    if (low is not None and value < low) or (high is not None and value > high):
        kind = "an integer" if knob["type"] == "int" else "a number"
        raise KnobValueError(f"{knob['name']} must be {kind}{_range_text(knob)}, got {raw!r}")
    return value


def _plain(number: Any) -> str:
    return f"{number:g}" if isinstance(number, float) else str(number)


def check_usable(knob: Mapping[str, Any], value: Any) -> None:
    """Refuse a knob or a choice the runner reported as unusable here, with its reason."""
    if not knob.get("enabled", True):
        reason = knob.get("reason") or "not available here"
        raise KnobValueError(f"{knob['name']} cannot be changed here: {reason}")
    disabled = knob.get("disabled_choices") or {}
    if isinstance(value, str) and value in disabled:
        raise KnobValueError(f"{knob['name']}={value} is not available here: {disabled[value]}")


def parse_assignments(
    knobs: Sequence[Mapping[str, Any]], pairs: Iterable[tuple[str, str]]
) -> dict[str, Any]:
    """Typed values for ``(name, raw)`` pairs; unknown names list the known knobs."""
    schema = schema_by_name(knobs)
    values: dict[str, Any] = {}
    for name, raw in pairs:
        knob = schema.get(name)
        if knob is None:
            raise unknown_knob(name, schema)
        if name in values:
            raise KnobValueError(f"{name} is set twice in one stage")
        value = parse_value(knob, raw)
        if value != knob.get("default"):  # asking for the default of a disabled knob is fine
            check_usable(knob, value)
        values[name] = value
    return values
