"""The run's log lines between the threads that write them and the view that drains them.

Bounded in lines and in bytes, so a script printing faster than anyone reads cannot grow the
GUI without limit. A writer either waits for room (the script's own output when the consumer
keeps all of it: ``run --headless`` prints the user's training log, which must arrive whole;
waiting blocks the script's ``print`` as a slow terminal would) or drops the oldest line.
A waiting writer leaves a few lines of room for the writers that cannot wait (the session's
notices, the runner's messages), so those never push out a line of the output being kept.
Every dropped line is counted, and the next ``drain`` begins with one line saying exactly how
many were dropped, so a reader never mistakes a gap for the whole log.
"""

from __future__ import annotations

import collections
import threading
import time
from dataclasses import dataclass

#: Lines kept between two drains (the window drains ~30 times a second, headless 4 times).
MAX_LINES = 5000
#: Characters kept between two drains: 5,000 lines of 64 KiB would otherwise be 320 MiB.
MAX_CHARS = 8 * 1024 * 1024
#: How long a waiting writer waits for a drain before it drops the oldest line instead: a
#: consumer that stopped draining (its run is ending) must not block the script forever.
WAIT_LIMIT_S = 10.0
#: Lines a waiting writer leaves free for writers that never wait: a drain's worth of notices.
SPARE_LINES = 64


@dataclass(frozen=True)
class LogLine:
    """One line of a run's log: when, how serious, who said it, and whether it is a liveness
    notice."""

    t_ns: int
    level: str  # "info" | "warning" | "error"
    source: str  # "runner" | "gpuwatch"
    text: str
    #: A change of the run's liveness (no step yet, first step, stalled, steps again): shown
    #: wherever the run's state is shown, whatever its level.
    notice: bool = False


class LogBuffer:
    """A bounded FIFO of ``LogLine`` that counts what it drops (thread-safe)."""

    def __init__(
        self,
        max_lines: int = MAX_LINES,
        max_chars: int = MAX_CHARS,
        wait_limit_s: float = WAIT_LIMIT_S,
        spare_lines: int = SPARE_LINES,
    ) -> None:
        self.max_lines = max_lines
        #: Lines a waiting writer leaves free: at most a quarter of the buffer.
        self.spare_lines = min(spare_lines, max_lines // 4)
        self.max_chars = max_chars
        self.wait_limit_s = wait_limit_s
        #: Lines dropped since the buffer was made or cleared (the run's total).
        self.dropped = 0
        self._unreported = 0
        self._lines: collections.deque[LogLine] = collections.deque()
        self._chars = 0
        self._room = threading.Condition()

    def append(self, line: LogLine, *, wait: bool = False) -> None:
        """Add ``line``; when full, wait for a drain (``wait``, at most ``wait_limit_s``) or
        drop the oldest lines until it fits. A waiting writer waits while fewer than
        ``spare_lines`` are free, so a writer that does not wait finds room without dropping."""
        size = len(line.text)
        with self._room:
            if wait:
                deadline = time.monotonic() + self.wait_limit_s
                while self._lines and not self._fits(size, spare=self.spare_lines):
                    left = deadline - time.monotonic()
                    if left <= 0 or not self._room.wait(left):
                        break
            while self._lines and not self._fits(size):
                old = self._lines.popleft()
                self._chars -= len(old.text)
                self.dropped += 1
                self._unreported += 1
            self._lines.append(line)
            self._chars += size

    def drain(self) -> list[LogLine]:
        """Every line held, oldest first; a first line counts those dropped since last time."""
        with self._room:
            lines = list(self._lines)
            self._lines.clear()
            self._chars = 0
            dropped, self._unreported = self._unreported, 0
            self._room.notify_all()
        if dropped:
            t_ns = lines[0].t_ns if lines else time.perf_counter_ns()
            lines.insert(0, LogLine(t_ns, "warning", "gpuwatch", self.dropped_text(dropped)))
        return lines

    def clear(self) -> None:
        with self._room:
            self._lines.clear()
            self._chars = 0
            self.dropped = self._unreported = 0
            self._room.notify_all()

    def __len__(self) -> int:
        return len(self._lines)

    def dropped_text(self, count: int) -> str:
        return (
            f"{count:,} log line(s) dropped here: they came faster than they were read "
            f"(the log holds {self.max_lines:,} lines between two reads)"
        )

    def _fits(self, size: int, spare: int = 0) -> bool:
        return len(self._lines) < self.max_lines - spare and self._chars + size <= self.max_chars
