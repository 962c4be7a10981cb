"""The GUI's control messages as both training loops (built-in and script) apply them.

Both loops call ``apply_control`` at a step boundary; only *where* the boundary is and how
``stop`` ends the run differ (the built-in loop returns, a script is interrupted), so those
stay with each loop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol


class ControlTarget(Protocol):
    """What a loop exposes to ``apply_control``."""

    paused: bool
    link: Any  # gpuwatch.runner.link.Link (log only)
    knobs: Any  # has handle_set(message, first_step=, flush=)
    capture: Any  # gpuwatch.runner.kernel_capture.KernelCapture


def apply_control(
    target: ControlTarget, message: dict[str, Any], *, next_step: int, flush: Callable[[], None]
) -> None:
    """Apply ``pause``/``resume``/``set``/``capture`` (``stop`` is the caller's)."""
    kind = message["kind"]
    if kind == "pause" and not target.paused:
        target.paused = True
        flush()  # show every finished step before the timeline goes quiet
        target.link.log("info", f"paused after {next_step} step(s)")
    elif kind == "resume" and target.paused:
        target.paused = False
        target.link.log("info", "resumed")
    elif kind == "set":
        target.knobs.handle_set(message, first_step=next_step, flush=flush)
    elif kind == "capture":  # armed now, opened by the loop's next at_boundary
        target.capture.request(message.get("steps"))
