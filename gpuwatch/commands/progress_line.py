"""Progress on stderr for the headless commands (``bench``, ``run --headless``), and ending
their run the same way: one line rewritten in place on a terminal, plain lines in a log file.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

from gpuwatch.core.run.session import ACTIVE_STATES, Session

#: How long stopping may take (polite stop, terminate, kill: see Session).
STOP_TIMEOUT_S = 20.0


class ProgressLine:
    """Progress on stderr: one line rewritten in place on a terminal, else plain lines.

    Plain lines come at most every ``min_interval_s`` (when the stage or state changes) and
    every ``heartbeat_s`` otherwise, so a log file stays readable.
    """

    def __init__(
        self,
        stream: TextIO,
        *,
        tty: bool | None = None,
        min_interval_s: float = 1.0,
        heartbeat_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._stream = stream
        self._tty = stream.isatty() if tty is None else tty
        self._min_interval_s = min_interval_s
        self._heartbeat_s = heartbeat_s
        self._clock = clock
        self._last_at = -float("inf")
        self._last_key: object = None
        self._shown = False

    def show(self, key: object, text: str, *, tty_only: bool = False) -> None:
        """Update the in-place line; ``key`` (stage, state) changing makes it print sooner.

        ``tty_only`` messages (starting, stopping) are left out of plain output, so a usage
        error reads as one line there.
        """
        now = self._clock()
        if self._tty:
            if now - self._last_at >= 0.2 or key != self._last_key:
                self._write(f"\r{text}\x1b[K")
                self._shown = True
                self._last_at, self._last_key = now, key
            return
        if tty_only:
            return
        since = now - self._last_at
        if (key != self._last_key and since >= self._min_interval_s) or since >= self._heartbeat_s:
            self._write(text + "\n")
            self._last_at, self._last_key = now, key

    def line(self, text: str) -> None:
        """A line that stays (the plan, a stage's caption)."""
        self.clear()
        self._write(text + "\n")

    def clear(self) -> None:
        if self._tty and self._shown:
            self._write("\r\x1b[K")
            self._shown = False

    def _write(self, text: str) -> None:
        self._stream.write(text)
        self._stream.flush()


def stop_run(session: Session, out: ProgressLine, what: str = "the run") -> None:
    """Stop the run (its whole process tree) and release the session, saying so on a TTY."""
    if session.state in ACTIVE_STATES:
        out.show("stop", f"stopping {what}…", tty_only=True)
    session.stop()
    if not session.wait_ended(STOP_TIMEOUT_S):
        out.line("gpuwatch: the runner did not end in time; it may still be running")
    session.close()
    out.clear()
