"""The generic training loop, instrumented at the phase boundaries of ``protocol.MARKS``
(docs/design.md, "A step's marks").

One step is: ``start`` → ``next(loader)`` → ``data_end`` → copies → ``h2d_end`` → model+loss →
``forward_end`` → ``backward()`` → ``backward_end`` → ``optimizer.step(); zero_grad()`` →
``optimizer_end`` → ``.item()`` when due (``log_every``) → ``end``. Each boundary takes a host
``perf_counter_ns`` mark, then lets the timing backend place its device mark. Epochs are
invisible: an exhausted loader is re-created inside ``next`` and that cost counts as ``data``.

The loop never talks to the socket: it appends marks to column lists and hands a batch to the
link about every ``BATCH_INTERVAL_S`` (so a fast loop sends ~20 messages/s, not one per step).
Each step carries the ns the loop's own instruments spent on it (``instrument_ns``: the timing
backend's calls, which do nothing on a CPU and are then not made, and the bookkeeping after the
step), so the window and ``gpuwatch bench`` can say what gpuwatch costs the run.
Control messages are handled only between steps, so ``stop`` always finishes the current step;
a ``set`` is applied there too (``reconfigure``), and the steps from then on carry its config id.
The step itself is computed by ``TrainingState`` (model, precision, optimizer) from batches of a
``BatchSource`` (the loader), so every knob acts at exactly these boundaries.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from gpuwatch.protocol import N_MARKS
from gpuwatch.runner.batch_source import BatchSource
from gpuwatch.runner.controls import apply_control
from gpuwatch.runner.kernel_capture import KernelCapture
from gpuwatch.runner.knobs import KnobSchema
from gpuwatch.runner.reconfigure import Reconfigurer
from gpuwatch.runner.step_columns import FlushTimer, SpentTime, StepColumns
from gpuwatch.runner.timing import TimingBackend
from gpuwatch.runner.workloads import Workload

if TYPE_CHECKING:
    import threading

    import torch

    from gpuwatch.runner.training_state import TrainingState

#: While paused, how often the loop re-checks that the link is still there.
PAUSE_POLL_S = 0.2
#: Minimum time between two "device marks skipped" warnings.
SKIP_WARN_INTERVAL_NS = 10_000_000_000


class LoopLink(Protocol):
    """What the loop needs from ``gpuwatch.runner.link.Link``.

    Per step only calls that never wait (``send_batch``, ``log``). ``send`` answers a knob
    change (``config``/``refused``): rare, at a boundary, and not to be dropped, so it may wait
    up to ``link.PUT_TIMEOUT_S`` when the GUI is far behind.
    """

    controls: queue.Queue[dict[str, Any]]
    lost: threading.Event

    def send(self, kind: str, **fields: Any) -> None: ...

    def send_batch(self, kind: str, **fields: Any) -> None: ...

    def log(self, level: str, text: str) -> None: ...


class TrainingLoop:
    """Runs ``workload`` until stopped, the step limit, or the GUI going away.

    ``state`` holds the knob values the run starts with (config ``config_id``); ``schema``
    validates every ``set``.
    """

    def __init__(
        self,
        workload: Workload,
        *,
        state: TrainingState,
        schema: KnobSchema,
        backend: TimingBackend,
        link: LoopLink,
        max_steps: int | None = None,
        config_id: int = 0,
        clock: Callable[[], int] = time.perf_counter_ns,
    ) -> None:
        self.workload = workload
        self.state = state
        self.backend = backend
        self.link = link
        self.max_steps = max_steps
        self.clock = clock
        self.batches = BatchSource(workload, state.values)
        self.knobs = Reconfigurer(
            schema, state, self.batches, link, config_id=config_id, clock=clock
        )
        self.steps_done = 0
        self.last_loss: float | None = None
        self.paused = False
        #: Kernel capture windows (``capture`` messages), opened and advanced between steps.
        self.capture = KernelCapture(link, device=state.device.type)
        self._columns = StepColumns(clock)
        #: The ns the loop's instruments spent since the last step was added (sent with it).
        self._spent = self._columns.spent = SpentTime()
        #: Sends finished steps while a step hangs (e.g. a stuck DataLoader worker).
        self._flush_timer = FlushTimer(
            self._columns, lambda: self._columns.send(link), lambda text: link.log("warning", text)
        )
        self._last_host: list[int] = []
        self._loss_sum: torch.Tensor | None = None
        self._loss_count = 0
        self._skips_reported = 0
        self._skip_warned_ns = 0

    @property
    def config_id(self) -> int:
        """The config id of the steps trained from now on."""
        return self.knobs.config_id

    def run(self) -> str:
        """Train; returns the ``bye`` reason: ``stopped``, ``max_steps`` or ``link_closed``."""
        reason: str | None = None
        self._flush_timer.start()
        try:
            while reason is None:
                reason = self._between_steps()
                if reason is None:
                    self._run_step()
        finally:
            self._flush_timer.stop()
            self.capture.close()
            self.batches.close()
        if reason != "link_closed":
            self._collect_device(wait=True)
            self._columns.send(self.link)
        return reason

    def _run_step(self) -> None:
        """One step; a failure caused by a fresh knob change reverts it instead of ending."""
        step_id = self.steps_done
        try:
            self._step(step_id)
        except Exception as exc:
            if not self.knobs.step_failed(exc, step_id=step_id, flush=self._flush):
                raise
            return
        self.steps_done += 1
        self.knobs.step_done()
        self._after_step()

    def _between_steps(self) -> str | None:
        """Apply control messages; block while paused. Returns a reason to stop, or None."""
        while True:
            if self.link.lost.is_set():
                return "link_closed"
            if self.max_steps is not None and self.steps_done >= self.max_steps:
                return "max_steps"
            try:
                if self.paused:
                    message = self.link.controls.get(timeout=PAUSE_POLL_S)
                else:
                    message = self.link.controls.get_nowait()
            except queue.Empty:
                if self.paused:
                    continue
                self.capture.at_boundary(self.steps_done)
                return None
            if message["kind"] == "stop":
                return "stopped"
            apply_control(self, message, next_step=self.steps_done, flush=self._flush)

    def _step(self, step_id: int) -> None:
        """One instrumented training step; see the module docstring for the boundaries."""
        clock, backend, state = self.clock, self.backend, self.state
        host = [0] * N_MARKS
        config_id = self.config_id
        marks = not backend.inert
        spent = 0

        def at(index: int) -> None:
            nonlocal spent
            now = host[index] = clock()
            if marks:
                backend.mark(index)
                spent += clock() - now

        if marks:
            start = clock()
            backend.begin(step_id)
            spent += clock() - start
        at(0)
        batch = self.batches.next_batch()
        at(1)
        batch = state.to_device(batch)
        at(2)
        loss = state.loss(batch)
        at(3)
        state.backward(loss)
        at(4)
        state.optimizer_step()
        at(5)
        self._sync_phase(loss)
        at(6)
        start = clock()
        if marks:
            backend.end()
        self._spent.ns += spent
        self._columns.add_step(step_id, config_id, self.workload.samples(batch), host)
        self._last_host = host
        self._spent.ns += clock() - start  # the next step's share: this one is added already

    def _sync_phase(self, loss: torch.Tensor) -> None:
        """Read the loss on the host every ``log_every`` steps; 1 is the naive per-step sync.

        In between, the sum stays on the device, so no step but every N-th waits for it.
        """
        log_every = int(self.state.values["log_every"])
        if log_every <= 1:
            self.last_loss = loss.item()
            self._loss_sum, self._loss_count = None, 0  # left over from a larger log_every
            return
        detached = loss.detach()
        self._loss_sum = detached if self._loss_sum is None else self._loss_sum + detached
        self._loss_count += 1
        if self._loss_count >= log_every:
            self.last_loss = (self._loss_sum / self._loss_count).item()
            self._loss_sum, self._loss_count = None, 0

    def _after_step(self) -> None:
        start = self.clock()
        self._after_step_work()
        self._spent.ns += self.clock() - start

    def _after_step_work(self) -> None:
        self._collect_device(wait=False)
        host = self._last_host  # the columns may have been sent by the flush timer already
        if self.steps_done == 1:
            first_ms = (host[-1] - host[0]) / 1e6
            loss = "" if self.last_loss is None else f", loss {self.last_loss:.3f}"
            self.link.log("info", f"first step done in {first_ms:.0f} ms{loss}")
        compiled = self.state.take_compiled()
        if compiled is not None:  # compilation happens in the first forward and backward
            self.link.log("info", f"compiled ({compiled}) in {(host[4] - host[2]) / 1e9:.1f} s")
        if self._columns.due():  # asked now: the flush timer may have sent since the step
            self._columns.send(self.link)

    def _collect_device(self, *, wait: bool) -> None:
        for step_id, marks in self.backend.poll(wait=wait):
            self._columns.add_device(step_id, marks)
        skipped = self.backend.skipped
        now = self.clock()
        if skipped > self._skips_reported and now - self._skip_warned_ns > SKIP_WARN_INTERVAL_NS:
            self.link.log(
                "warning",
                f"{skipped - self._skips_reported} step(s) left without "
                "device marks: the device is far behind the host (event pool empty)",
            )
            self._skips_reported, self._skip_warned_ns = skipped, now

    def _flush(self) -> None:
        self._columns.send(self.link)
