"""``import gpuwatch.probe as gw``: finer points for a script that gpuwatch watches.

gpuwatch finds the steps of an unmodified script by itself (DataLoader iteration, module
forwards, ``backward()``, ``optimizer.step()``). This module is for scripts that want more::

    import gpuwatch.probe as gw

    for epoch in range(epochs):
        workers = gw.knob("num_workers", default=0, choices=[0, 1, 2, 4],
                          help="DataLoader worker processes")
        loader = DataLoader(dataset, batch_size=64, num_workers=workers)
        for x, y in loader:
            with gw.step():                       # this is one training step
                with gw.phase("forward"):
                    loss = loss_fn(model(x), y)
                with gw.phase("backward"):
                    loss.backward()
                with gw.phase("optimizer"):
                    opt.step()
                    opt.zero_grad()

- ``gw.step(samples=None)``: a context manager around one training step. Once used, gpuwatch
  stops detecting steps by itself for the rest of the run; a ``next(loader)`` right before the
  step is still shown as its ``data`` phase. ``samples`` overrides the batch size it counts.
- ``gw.phase(name)``: marks a phase inside the current step; ``name`` is one of ``data``,
  ``h2d``, ``forward``, ``backward``, ``optimizer``, ``sync``.
- ``gw.knob(name, default, *, choices=None, min=None, max=None, help="")``: declares a knob the
  gpuwatch window shows, and returns its current value. A change made in the window is applied
  at the next step boundary; call ``gw.knob`` again (e.g. every epoch or step) to see it.
  The type comes from ``default`` (bool, int, float) or from ``choices`` (a list of values).
- ``gw.active()``: True when gpuwatch is watching this process.

Without gpuwatch (``python train.py``) every call is a cheap no-op: ``step`` and ``phase``
return one shared do-nothing context manager and ``knob`` returns ``default`` (its arguments are
still checked, so a script behaves the same with and without gpuwatch). Spawned DataLoader
workers are fresh interpreters with nothing attached, so calls there are no-ops too.

This module needs only the standard library (no torch, nothing else of gpuwatch), so it can be
imported wherever the training interpreter finds the gpuwatch package.
"""

from __future__ import annotations

import math
from typing import Any, Protocol, TypeVar

__all__ = ["active", "knob", "phase", "step"]

#: The phases a step is made of, in order (the same as ``gpuwatch.protocol.PHASES``).
_PHASE_INDEX = {
    name: index
    for index, name in enumerate(("data", "h2d", "forward", "backward", "optimizer", "sync"))
}


class Agent(Protocol):
    """What the gpuwatch runner attaches to receive the calls (scripts never implement it)."""

    def step_enter(self, samples: int | None) -> None: ...

    def step_exit(self, ok: bool) -> None: ...

    def phase_enter(self, index: int) -> None: ...

    def phase_exit(self, index: int) -> None: ...

    def knob(self, entry: dict[str, Any]) -> Any: ...


_agent: Agent | None = None

#: A knob's value has its default's type: ``True`` declares a bool knob, ``4`` an int knob.
_KnobValue = TypeVar("_KnobValue", bool, int, float, str)


class _NoOp:
    """The shared context manager returned when nobody is watching."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_NOOP = _NoOp()


class _Step:
    __slots__ = ("_agent", "_samples")

    def __init__(self, agent: Agent, samples: int | None) -> None:
        self._agent = agent
        self._samples = samples

    def __enter__(self) -> None:
        self._agent.step_enter(self._samples)

    def __exit__(self, exc_type: object, *rest: object) -> None:
        self._agent.step_exit(exc_type is None)


class _Phase:
    __slots__ = ("_agent", "_index")

    def __init__(self, agent: Agent, index: int) -> None:
        self._agent = agent
        self._index = index

    def __enter__(self) -> None:
        self._agent.phase_enter(self._index)

    def __exit__(self, *exc: object) -> None:
        self._agent.phase_exit(self._index)


def active() -> bool:
    """True when a gpuwatch runner is watching this process."""
    return _agent is not None


def step(samples: int | None = None) -> _Step | _NoOp:
    """``with gw.step():`` around one training step (see the module docstring)."""
    agent = _agent
    if agent is None:
        return _NOOP
    if samples is not None and (
        not isinstance(samples, int) or isinstance(samples, bool) or samples < 0
    ):
        raise ValueError(f"gw.step(samples=...) must be a non-negative integer, got {samples!r}")
    return _Step(agent, samples)


def phase(name: str) -> _Phase | _NoOp:
    """``with gw.phase("forward"):`` marks where a phase of the current step ends."""
    index = _PHASE_INDEX.get(name)
    if index is None:
        raise ValueError(f"gw.phase({name!r}): the phases are {', '.join(_PHASE_INDEX)}")
    agent = _agent
    if agent is None:
        return _NOOP
    return _Phase(agent, index)


def knob(
    name: str,
    default: _KnobValue,
    *,
    choices: list[_KnobValue] | tuple[_KnobValue, ...] | None = None,
    min: float | None = None,
    max: float | None = None,
    help: str = "",
) -> _KnobValue:
    """Declare a live knob and return its current value (``default`` without gpuwatch)."""
    entry = knob_entry(name, default, choices=choices, low=min, high=max, text=help)
    agent = _agent
    if agent is None:
        return default
    # The runner hands out only values it validated against ``entry`` (type, choices, limits).
    value: _KnobValue = agent.knob(entry)
    return value


def knob_entry(
    name: str,
    default: Any,
    *,
    choices: Any = None,
    low: Any = None,
    high: Any = None,
    text: str = "",
) -> dict[str, Any]:
    """The knob's schema entry (docs/knobs.md §2), or ``ValueError`` saying what is wrong."""
    where = f"gw.knob({name!r})"
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(
            f"gw.knob: the name must be an identifier such as 'num_workers', got {name!r}"
        )
    if not isinstance(text, str):
        raise ValueError(f"{where}: help must be a string")
    if choices is not None:
        if isinstance(choices, str | bytes) or not isinstance(choices, list | tuple) or not choices:
            raise ValueError(f"{where}: choices must be a non-empty list")
        if not all(_is_scalar(c) for c in choices):
            raise ValueError(f"{where}: choices must be numbers, strings or booleans")
        if not any(_same(c, default) for c in choices):
            raise ValueError(
                f"{where}: default {default!r} is not one of the choices {list(choices)!r}"
            )
        if low is not None or high is not None:
            raise ValueError(f"{where}: give choices or min/max, not both")
        kind, low, high, listed = "choice", None, None, list(choices)
    else:
        listed = None
        if isinstance(default, bool):
            kind = "bool"
        elif isinstance(default, int):
            kind = "int"
        elif isinstance(default, float) and math.isfinite(default):
            kind = "float"
        else:
            raise ValueError(
                f"{where}: default must be a bool, int or float (or give choices), got {default!r}"
            )
        if kind == "bool" and (low is not None or high is not None):
            raise ValueError(f"{where}: a bool knob has no min/max")
        for label, limit in (("min", low), ("max", high)):
            if limit is not None and (
                isinstance(limit, bool)
                or not isinstance(limit, int | float)
                or not math.isfinite(limit)
            ):
                raise ValueError(f"{where}: {label} must be a number, got {limit!r}")
        if (low is not None and default < low) or (high is not None and default > high):
            raise ValueError(f"{where}: default {default!r} is outside min/max")
    return {
        "name": name,
        "label": name,
        "group": "script",
        "type": kind,
        "default": default,
        "min": low,
        "max": high,
        "choices": listed,
        "unit": None,
        "enabled": True,
        "reason": None,
        "disabled_choices": {},
        "rebuilds": "loop",
        "help": text,
    }


def _is_scalar(value: Any) -> bool:
    return isinstance(value, str | bool | int) or (
        isinstance(value, float) and math.isfinite(value)
    )


def _same(a: Any, b: Any) -> bool:
    """Equal *and* of the same kind: ``True`` is not the choice ``1``, ``"1"`` is not ``1``."""
    if isinstance(a, str) or isinstance(b, str) or isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return bool(a == b)


def attach_runner(agent: Agent | None) -> None:
    """Called by the gpuwatch runner (``None`` detaches); scripts never need this."""
    global _agent  # noqa: PLW0603 - the one switch between no-op and watched
    _agent = agent
