"""The knobs a watched script declares with ``gpuwatch.probe.knob()``, and live changes to them.

docs/knobs.md §2 applies as for the built-in knobs: the schema goes out (here in a ``knobs``
message each time it grows), a ``set`` is validated all or nothing and answered with ``refused``
or, at the next step boundary, with a ``config`` carrying a new id. Applying a probe knob is only
storing its value: the script reads it at its next ``gw.knob()`` call and acts on it itself, so
``apply_s`` is ~0 and every change gets ``PROBE_WARMUP_STEPS`` transition steps (whatever the
script rebuilds when it sees the value lands in them).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from gpuwatch.runner.knobs import KnobError

#: Transition steps after a probe knob change (docs/knobs.md §2, "probe knobs").
PROBE_WARMUP_STEPS = 3


class KnobLink(Protocol):
    def send(self, kind: str, **fields: Any) -> None: ...

    def log(self, level: str, text: str) -> None: ...


class ProbeKnobs:
    """Schema, values and config ids of a script's knobs."""

    def __init__(self, link: KnobLink, *, clock: Callable[[], int] = time.perf_counter_ns):
        self.link = link
        self.clock = clock
        self.config_id = 0
        self.values: dict[str, Any] = {}
        self._schema: dict[str, dict[str, Any]] = {}

    def declare(self, entry: dict[str, Any]) -> Any:
        """``gw.knob()``: the knob's current value; a new knob is announced to the GUI."""
        name = entry["name"]
        known = self._schema.get(name)
        if known is None:
            self._schema[name] = entry
            self.values[name] = entry["default"]
            self.link.send("knobs", knobs=list(self._schema.values()), values=dict(self.values))
        elif _declaration(known) != _declaration(entry):
            raise ValueError(
                f"gw.knob({name!r}) was declared before with other settings "
                f"(default, choices, min or max); declare it the same way each "
                f"time"
            )
        return self.values[name]

    def handle_set(
        self, message: Mapping[str, Any], *, first_step: int, flush: Callable[[], None]
    ) -> None:
        """Answer one ``set`` (between two steps): ``refused``, nothing to do, or ``config``."""
        request = message.get("request")
        if not isinstance(request, int) or isinstance(request, bool):
            request = None
        asked = message.get("values")
        try:
            clean = self._validate(asked)
        except KnobError as exc:
            self.link.send(
                "refused",
                request=request,
                values=dict(asked) if isinstance(asked, Mapping) else {},
                message=str(exc),
            )
            return
        changed = {
            name: value for name, value in clean.items() if not _identical(self.values[name], value)
        }
        if not changed:
            described = ", ".join(f"{k}={v}" for k, v in clean.items()) or "an empty set"
            self.link.log("info", f"nothing to change: {described} is already in effect")
            return
        t_ns = self.clock()
        self.values.update(changed)
        flush()
        self.config_id += 1
        self.link.send(
            "config",
            id=self.config_id,
            request=request,
            values=dict(self.values),
            changed=changed,
            t_ns=t_ns,
            apply_s=round((self.clock() - t_ns) / 1e9, 6),
            first_step=first_step,
            warmup_steps=PROBE_WARMUP_STEPS,
            rebuilt=["loop"],
        )

    def _validate(self, values: Any) -> dict[str, Any]:
        if not isinstance(values, Mapping):
            raise KnobError("a set must carry an object of knob values")
        clean = {}
        for name, value in values.items():
            entry = self._schema.get(name)
            if entry is None:
                declared = (
                    f"this script declares {', '.join(self._schema)}"
                    if self._schema
                    else "this script declares no knobs (gpuwatch.probe.knob)"
                )
                raise KnobError(f"unknown knob {name!r}: {declared}")
            clean[name] = _checked(entry, value)
        return clean


def _declaration(entry: Mapping[str, Any]) -> tuple[Any, ...]:
    return (entry["type"], entry["default"], entry["choices"], entry["min"], entry["max"])


def _identical(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def _checked(entry: Mapping[str, Any], value: Any) -> Any:
    name, kind = entry["name"], entry["type"]
    if kind == "bool":
        if not isinstance(value, bool):
            raise KnobError(f"{name} must be true or false, got {value!r}")
        return value
    if kind == "choice":
        choices = entry["choices"]
        for choice in choices:
            if _identical(choice, value) or (
                isinstance(value, int | float)
                and not isinstance(value, bool)
                and isinstance(choice, int | float)
                and not isinstance(choice, bool)
                and choice == value
            ):
                return choice
        for choice in choices:  # "2" from a command line means the choice 2
            if isinstance(value, str) and str(choice).lower() == value.strip().lower():
                return choice
        raise KnobError(f"{name} must be one of {', '.join(map(str, choices))}, got {value!r}")
    low, high = entry["min"], entry["max"]
    number = value if isinstance(value, int | float) and not isinstance(value, bool) else None
    if number is not None and (
        not math.isfinite(number) or (kind == "int" and not float(number).is_integer())
    ):
        number = None
    if number is None or (low is not None and number < low) or (high is not None and number > high):
        what = "an integer" if kind == "int" else "a number"
        span = "" if low is None and high is None else f" from {_plain(low)} to {_plain(high)}"
        raise KnobError(f"{name} must be {what}{span}, got {value!r}")
    return int(number) if kind == "int" else float(number)


def _plain(limit: float | None) -> str:
    return "any" if limit is None else f"{limit:g}"
