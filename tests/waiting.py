"""Wait on a condition with a deadline (the non-Qt twin of ``qtbot.waitUntil``)."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(
    condition: Callable[[], object], timeout: float, what: str, interval: float = 0.05
) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)
