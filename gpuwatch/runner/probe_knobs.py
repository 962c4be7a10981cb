"""The knobs a watched script declares with ``gpuwatch.probe.knob()``, and live changes to them.

docs/knobs.md §2 applies as for the built-in knobs: the schema goes out (here in a ``knobs``
message each time it grows), a ``set`` is validated all or nothing and answered with ``refused``
or, at the next step boundary, with a ``config`` carrying a new id. Applying a probe knob is only
storing its value: the script reads it at its next ``gw.knob()`` call and acts on it itself, so
``apply_s`` is ~0 and every change gets ``PROBE_WARMUP_STEPS`` transition steps (whatever the
script rebuilds when it sees the value lands in them).

The zero-code knobs of a script (its DataLoaders' worker settings, ``script_knobs``) join the
same schema through ``add_knobs`` with an *owner* that applies them: one ``set`` may change
both kinds, still all or nothing (an owner that fails to apply undoes what the others applied
and the ``set`` is refused); ``rebuilt`` and ``warmup_steps`` then follow the owners' rules.
Values given on the command line (``gpuwatch run --set``) are the starting value of the knob
of that name as soon as it is declared.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from gpuwatch.runner.knobs import REBUILDS, KnobError

#: Transition steps after a probe knob change (docs/knobs.md §2, "probe knobs").
PROBE_WARMUP_STEPS = 3


class KnobLink(Protocol):
    """What probe knobs need of the runner's link: sending schema and config messages, logging a
    line."""

    def send(self, kind: str, **fields: Any) -> None: ...

    def log(self, level: str, text: str) -> None: ...


class KnobOwner(Protocol):
    """Applies the zero-code knobs it added (``add_knobs``)."""

    rebuilds: str

    def apply(self, changed: Mapping[str, Any]) -> str | None:
        """Make ``changed`` (schema name → value) take effect, or raise leaving all as it was;
        returns a note for the log (e.g. when the change waits for the next epoch)."""
        ...

    def warmup_steps(self) -> int: ...

    def rename(self, name: str) -> str:
        """``name`` is wanted by the script's own ``gw.knob``: the owner's new name for it."""
        ...


class ProbeKnobs:
    """Schema, values and config ids of a script's knobs."""

    def __init__(
        self,
        link: KnobLink,
        *,
        clock: Callable[[], int] = time.perf_counter_ns,
        preset: Mapping[str, str] | None = None,
    ):
        self.link = link
        self.clock = clock
        self.config_id = 0
        self.values: dict[str, Any] = {}
        self._schema: dict[str, dict[str, Any]] = {}
        self._owners: dict[str, KnobOwner] = {}
        #: ``--set`` values not yet matched by a declared knob (name → text).
        self.preset: dict[str, str] = dict(preset or {})

    def declare(self, entry: dict[str, Any]) -> Any:
        """``gw.knob()``: the knob's current value; a new knob is announced to the GUI."""
        name = entry["name"]
        if name in self._owners:  # the script's own knob keeps the name it chose
            self._move(name, self._owners[name].rename(name))
        known = self._schema.get(name)
        if known is None:
            self._schema[name] = entry
            self.values[name] = self._preset_value(entry, entry["default"])
            self._announce()
        elif _declaration(known) != _declaration(entry):
            raise ValueError(
                f"gw.knob({name!r}) was declared before with other settings "
                f"(default, choices, min or max); declare it the same way each "
                f"time"
            )
        return self.values[name]

    def taken(self, name: str) -> bool:
        return name in self._schema

    def add_knobs(self, entries: list[dict[str, Any]], owner: KnobOwner) -> None:
        """Zero-code knobs join the schema (names not ``taken``); ``--set`` values for them are
        applied by ``owner`` at once (one that cannot be applied is logged and left out)."""
        starting = {}
        for entry in entries:
            self._schema[entry["name"]] = entry
            self._owners[entry["name"]] = owner
            self.values[entry["name"]] = entry["default"]
            value = self._preset_value(entry, entry["default"])
            if not _identical(value, entry["default"]):
                starting[entry["name"]] = value
        if starting:
            try:
                owner.apply(starting)
            except Exception as exc:
                self.link.log(
                    "error", f"--set {_describe(starting)} could not be applied: {_reason(exc)}"
                )
            else:
                self.values.update(starting)
                self.link.log("info", f"--set {_describe(starting)}: in effect from the start")
        self._announce()

    def update_entry(self, name: str, *, value: Any, **fields: Any) -> None:
        """A zero-code knob's state changed outside a ``set`` (e.g. the script set the flag
        itself): its entry and value as they are now, announced with a ``knobs`` message."""
        self._schema[name] = {**self._schema[name], **fields}
        self.values[name] = value
        self._announce()

    def _announce(self) -> None:
        self.link.send("knobs", knobs=list(self._schema.values()), values=dict(self.values))

    def _move(self, name: str, new: str) -> None:
        self._schema = {
            (new if key == name else key): ({**entry, "name": new} if key == name else entry)
            for key, entry in self._schema.items()
        }
        self.values = {(new if key == name else key): value for key, value in self.values.items()}
        self._owners[new] = self._owners.pop(name)
        self.link.log(
            "warning", f"the script declares its own knob {name!r}: gpuwatch's is now {new!r}"
        )

    def _preset_value(self, entry: Mapping[str, Any], default: Any) -> Any:
        """The ``--set`` value for ``entry`` (consumed), else ``default``."""
        raw = self.preset.pop(entry["name"], None)
        if raw is None:
            return default
        try:
            value = _checked(entry, _parsed(entry, raw))
            _check_usable(entry, value, default)
        except KnobError as exc:
            self.link.log("error", f"--set {entry['name']}={raw}: {exc}; it stays {default}")
            return default
        return value

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
        try:
            owners = self._apply_owned(changed)
        except Exception as exc:
            reason = f"could not apply {_describe(changed)}: {_reason(exc)}"
            self.link.log("error", f"{reason}; the previous settings stay in effect")
            self.link.send(
                "refused",
                request=request,
                values=dict(asked) if isinstance(asked, Mapping) else {},
                message=reason,
            )
            return
        self.values.update(changed)
        flush()
        self.config_id += 1
        warmup = [owner.warmup_steps() for owner in owners]
        parts = {owner.rebuilds for owner in owners}
        if any(name not in self._owners for name in changed):
            warmup.append(PROBE_WARMUP_STEPS)
            parts.add("loop")
        self.link.send(
            "config",
            id=self.config_id,
            request=request,
            values=dict(self.values),
            changed=changed,
            t_ns=t_ns,
            apply_s=round((self.clock() - t_ns) / 1e9, 6),
            first_step=first_step,
            warmup_steps=max(warmup),
            rebuilt=[part for part in REBUILDS if part in parts],
        )

    def _apply_owned(self, changed: Mapping[str, Any]) -> list[KnobOwner]:
        """Apply the zero-code part of ``changed``, owner by owner; on a failure, undo the
        owners already applied and raise."""
        groups: dict[int, tuple[KnobOwner, dict[str, Any]]] = {}
        for name, value in changed.items():
            owner = self._owners.get(name)
            if owner is not None:
                groups.setdefault(id(owner), (owner, {}))[1][name] = value
        done: list[tuple[KnobOwner, dict[str, Any]]] = []
        try:
            for owner, part in groups.values():
                note = owner.apply(part)
                done.append((owner, part))
                if note:
                    self.link.log("info", note)
        except Exception:
            for owner, part in reversed(done):
                with contextlib.suppress(Exception):
                    owner.apply({name: self.values[name] for name in part})
            raise
        return [owner for owner, _ in groups.values()]

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
            _check_usable(entry, clean[name], self.values[name])
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


def _check_usable(entry: Mapping[str, Any], value: Any, current: Any) -> None:
    """A disabled knob or choice may only be "set" to the value it has (docs/knobs.md §2)."""
    if _identical(value, current):
        return
    name = entry["name"]
    if not entry.get("enabled", True):
        raise KnobError(f"{name} cannot be changed here: {entry['reason']}")
    reason = (entry.get("disabled_choices") or {}).get(value) if isinstance(value, str) else None
    if reason is not None:
        raise KnobError(f"{name}={value} is not available here: {reason}")


def _plain(limit: float | None) -> str:
    return "any" if limit is None else f"{limit:g}"


#: How a command line writes true and false (as ``gpuwatch bench --set`` reads them).
_TRUE = frozenset({"true", "1", "on", "yes"})
_FALSE = frozenset({"false", "0", "off", "no"})


def _parsed(entry: Mapping[str, Any], raw: str) -> Any:
    """``raw`` text as the knob's type (``_checked`` then checks range and choices)."""
    text, kind = raw.strip(), entry["type"]
    if kind == "bool":
        word = text.lower()
        return True if word in _TRUE else False if word in _FALSE else raw
    if kind in ("int", "float"):
        for convert in (int, float):
            with contextlib.suppress(ValueError):
                return convert(text)
    return raw


def _describe(values: Mapping[str, Any]) -> str:
    return ", ".join(f"{name}={value}" for name, value in values.items())


def _reason(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
