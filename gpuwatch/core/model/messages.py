"""Typed forms of the runner's messages that the rest of the GUI side keeps and passes around.

The wire format is ``gpuwatch.protocol``; these are what a message means once it is read: a
configuration that was applied, a change the runner refused, the state of a run, and the
events a run model hands its listeners when one of those rare things changes.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ConfigChange:
    """One applied configuration (a ``config`` message; id 0 comes from ``hello.config``)."""

    id: int
    values: dict[str, Any]
    changed: dict[str, Any]
    t_ns: int
    first_step: int
    warmup_steps: int
    apply_s: float = 0.0
    rebuilt: tuple[str, ...] = ()
    request: int | None = None
    label: str = ""

    @classmethod
    def from_message(cls, message: dict[str, Any], label: str | None = None) -> ConfigChange:
        changed = dict(message["changed"])
        request = message.get("request")
        apply_s = message.get("apply_s")
        rebuilt = message.get("rebuilt")
        return cls(
            id=message["id"],
            values=dict(message["values"]),
            changed=changed,
            t_ns=message["t_ns"],
            first_step=message["first_step"],
            warmup_steps=max(0, message["warmup_steps"]),
            apply_s=float(apply_s)
            if isinstance(apply_s, int | float) and math.isfinite(apply_s)
            else 0.0,
            rebuilt=tuple(str(r) for r in rebuilt) if isinstance(rebuilt, list) else (),
            request=request if isinstance(request, int) else None,
            label=label or describe_change(changed),
        )


@dataclass(frozen=True)
class Refusal:
    """A ``set`` the runner did not apply; training went on unchanged."""

    request: int | None
    values: dict[str, Any]
    message: str
    t_ns: int


def format_value(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def describe_change(changed: dict[str, Any]) -> str:
    """``{"num_workers": 2, "pin_memory": True}`` → ``"num_workers=2, pin_memory=on"``."""
    return ", ".join(f"{k}={format_value(v)}" for k, v in changed.items()) or "no change"


class SessionState(enum.Enum):
    """Where a run is in its life: launched, connected, asked to stop, ended well or not."""

    IDLE = "idle"
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    FINISHED = "finished"
    FAILED = "failed"


#: States in which a runner process exists (or is being started or stopped).
ACTIVE_STATES = frozenset({SessionState.STARTING, SessionState.RUNNING, SessionState.STOPPING})


@dataclass(frozen=True)
class ConfigApplied:
    """The runner applied a configuration (a ``config`` message, or config 0 from hello)."""

    change: ConfigChange


@dataclass(frozen=True)
class ChangeRefused:
    """The runner refused a ``set``; training went on unchanged."""

    refusal: Refusal


@dataclass(frozen=True)
class KernelWindowReady:
    """A kernel capture gave a window.

    ``window`` is a ``gpuwatch.core.figures.kernel_window.KernelWindow``; it is typed loosely
    here because this layer sits below the figures that define it.
    """

    window: Any


@dataclass(frozen=True)
class CaptureFailed:
    """A kernel capture ended without a window (refused or failed): ``error`` says why."""

    error: str


@dataclass(frozen=True)
class StateChanged:
    """The run's state changed, or its liveness did (no step yet, stalled, steps again).

    ``state`` is the state after the change; a liveness change keeps the same state and the
    listener reads the notice from the session.
    """

    state: SessionState


#: What a run model's listeners receive: one of the rare changes a view reacts to.
ModelEvent = ConfigApplied | ChangeRefused | KernelWindowReady | CaptureFailed | StateChanged
#: ``listener(event)``: called on the thread that folded the change (see ``RunModel``).
ModelListener = Callable[[ModelEvent], None]
