"""Step timing waiting to be sent: the columns of the ``steps`` and ``device_marks`` messages.

Shared by the built-in loop and a watched script (``step_recorder``): both append one row per
step and hand the lists to the link about every ``protocol.BATCH_INTERVAL_S``, at a step
boundary. A loop that stops reaching boundaries (a hang, a long evaluation, a crash about to
happen) would keep its last steps here forever, so a ``FlushTimer`` thread also sends whatever
has waited that long: a crash loses at most the last interval's steps, a hang none.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from gpuwatch.protocol import BATCH_INTERVAL_S

#: A batch is sent at the latest when it holds this many rows.
MAX_BATCH_STEPS = 2048
_BATCH_INTERVAL_NS = BATCH_INTERVAL_S * 1e9


class SpentTime:
    """ns gpuwatch's instruments spent on the training thread since the last step was added
    (the zero-code hooks add to ``ns``; ``StepColumns.add_step`` moves it into the step's
    ``instrument_ns`` column; the step boundary takes its own time off, see
    ``ScriptControl.at_boundary``). Plain integer arithmetic under the GIL: only the training
    thread adds, and only its own ``add_step`` moves it."""

    __slots__ = ("ns",)

    def __init__(self) -> None:
        self.ns = 0


class BatchLink(Protocol):
    """The part of ``gpuwatch.runner.link.Link`` that sends step batches (never waits)."""

    def send_batch(self, kind: str, **fields: Any) -> None: ...


class StepColumns:
    """Columnar buffers of the ``steps`` and ``device_marks`` messages not yet sent.

    The loop's thread appends; the loop and the flush timer send. A lock keeps a row from
    being split between two batches and keeps batches in order on the link.
    """

    def __init__(self, clock: Callable[[], int] = time.perf_counter_ns) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self.sent_ns = clock()
        #: Set when the instruments' own time is measured: each step then carries it
        #: (``instrument_ns``); None sends no such column.
        self.spent: SpentTime | None = None
        self._reset()

    def _reset(self) -> None:
        self.step: list[int] = []
        self.config: list[int] = []
        self.samples: list[int] = []
        self.host: list[list[int]] = []
        self.instrument_ns: list[int] = []
        self.device_step: list[int] = []
        self.device: list[list[int]] = []

    def add_step(self, step_id: int, config_id: int, samples: int, host: list[int]) -> bool:
        """Append a step's row (with the instruments' time spent since the last one, never
        negative, which starts again from 0); whether the batch is now ``due`` to be sent."""
        with self._lock:
            self.step.append(step_id)
            self.config.append(config_id)
            self.samples.append(samples)
            self.host.append(host)
            spent = self.spent
            if spent is not None:
                ns, spent.ns = spent.ns, 0
                self.instrument_ns.append(ns if ns > 0 else 0)
        return self.due()

    def add_device(self, step_id: int, marks: list[int]) -> None:
        with self._lock:
            self.device_step.append(step_id)
            self.device.append(marks)

    def __len__(self) -> int:
        return max(len(self.step), len(self.device_step))

    def due(self) -> bool:
        """Something has waited ``BATCH_INTERVAL_S``, or the batch is full."""
        return self._clock() - self.sent_ns >= _BATCH_INTERVAL_NS or len(self) >= MAX_BATCH_STEPS

    def send(self, link: BatchLink) -> None:
        """Hand the buffered columns to the link and start new lists (never mutate sent ones)."""
        with self._lock:
            if self.step:
                measured = len(self.instrument_ns) == len(self.step)
                link.send_batch(
                    "steps",
                    step=self.step,
                    config=self.config,
                    samples=self.samples,
                    host=self.host,
                    **({"instrument_ns": self.instrument_ns} if measured else {}),
                )
            if self.device_step:
                link.send_batch("device_marks", step=self.device_step, device=self.device)
            self._reset()
            self.sent_ns = self._clock()


class FlushTimer:
    """Sends ``columns`` every ``interval_s`` when the loop has not (see the module docstring).

    ``send`` is the owner's flush (it may do more than ``StepColumns.send``); it runs on this
    thread, so it must only touch thread-safe state. An error in it ends the timer with one
    ``log`` warning and never reaches the training loop.
    """

    def __init__(
        self,
        columns: StepColumns,
        send: Callable[[], None],
        log: Callable[[str], None],
        *,
        interval_s: float = BATCH_INTERVAL_S,
    ) -> None:
        self._columns = columns
        self._send = send
        self._log = log
        self._interval_s = interval_s
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start sending; a stopped timer starts again (a loop may be run more than once)."""
        previous = self._thread
        if previous is not None and previous.is_alive():
            if not self._stopped.is_set():
                return  # already running
            previous.join()  # a send in flight finishes before the next timer begins
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpuwatch-flush", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop sending (waits up to 1 s for a send in flight)."""
        self._stopped.set()
        thread = self._thread
        if thread is not None and thread.is_alive() and thread is not threading.current_thread():
            thread.join(1.0)

    def _run(self) -> None:
        stopped = self._stopped
        while not stopped.wait(self._interval_s):
            if not len(self._columns) or not self._columns.due():
                continue
            try:
                self._send()
            except Exception as exc:
                self._log(
                    f"steps are now sent only at step boundaries: the flush timer "
                    f"failed ({type(exc).__name__}: {exc})"
                )
                return
