"""Steps of a user's script, assembled from the events the hooks and the probe API report.

The built-in loop *knows* where its boundaries are; a script's loop is only observed. This class
turns observations (a DataLoader asked for a batch, the outermost forward began, ``backward()``
returned, an optimizer stepped, ``gw.step()`` entered, ...) into the 7 marks of
``protocol.MARKS`` per step, with these rules (the documented limits of zero-code mode):

* **Loader mode** (a DataLoader was seen): a step starts when the loop asks a DataLoader
  iterator for a batch and ends when it asks for the next one. ``data_end`` when that ``next()``
  returns; ``h2d_end`` at the first outermost forward; ``forward_end`` when the outermost forward
  returns, or later at the start of ``backward()`` (in training, once the hooks have learned the
  loop, they report a step's first outermost forward only: see ``autohooks``); ``backward_end``
  when ``backward()`` returns;
  ``optimizer_end`` at ``optimizer.step()``. A boundary reached again later in the same step
  moves forward (several optimizers: the last wins); a boundary of an *earlier* phase reached
  after a later one is ignored (its time stays in the later phase).
* Boundaries not reached collapse onto the previous one: an eval step (no backward, no
  optimizer) shows the time after its forward as ``sync``.
* **Gradient accumulation**: once an optimizer has stepped, a ``next()`` of the same iterator
  in a step that ran ``backward()`` but no ``optimizer.step()`` draws the next micro-batch of
  the same step: a step ends at the optimizer step (4 batches of 64 make one step of 256
  samples). Its marks then hold the *summed* time per phase over its micro-batches (data of
  all of them, then h2d, forward, backward; a micro-batch's time after its backward joins
  ``sync``), from its first ``next()`` to its end; on CUDA its device marks are those of its
  first micro-batch and of its optimizer step. Until the first optimizer step each batch is
  a step (the first cycle shows as single batches, inside the warm-up).
* A second iterator advanced while the step is still in its data phase (``zip(a, b)``) belongs
  to the same step. ``StopIteration`` (end of an epoch) ends the step; the time until the next
  epoch's first ``next()`` is outside any step.
* **Optimizer mode** (no DataLoader seen yet): each ``optimizer.step()`` ends a step and starts
  the next; the first step starts at the first outermost forward.
* **Probe mode** (``gw.step()`` was used once): only the script's ``gw.step()`` delimits steps;
  a ``next(loader)`` just before it becomes its ``data`` phase; hooks and ``gw.phase()`` mark the
  boundaries inside.

``boundary`` is called between two steps (the knob, pause and stop point); it may block (pause)
or raise ``KeyboardInterrupt`` (stop). Steps go out in batches like the built-in loop's.
Everything here runs on the script's main thread; the hooks filter other threads out.

Nothing of ours may raise into the script (``instrument_switch``): the timing backend is called
through ``GuardedBackend``, whose first failure switches device marks off while host marks go
on; a failure of the recorder itself, caught by the hook that called it, ends step detection
(``switch_off_detection``) and keeps the steps recorded until then.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from operator import add, sub
from typing import Any, Protocol

from gpuwatch.protocol import N_MARKS
from gpuwatch.runner.instrument_switch import (
    DEVICE_MARKS,
    STEP_DETECTION,
    InstrumentSwitch,
)
from gpuwatch.runner.step_columns import FlushTimer, StepColumns
from gpuwatch.runner.timing import DeviceMarks, TimingBackend

DATA_END, H2D_END, FORWARD_END, BACKWARD_END, OPTIMIZER_END, END = range(1, N_MARKS)
#: What a step is, as ``bye.step_definition`` says it (docs/design.md "A step's marks").
STEP_DEFINITIONS = ("loader", "accumulation", "optimizer", "probe")
_LATER_MARKS = (0,) * (N_MARKS - 1)


class RecorderLink(Protocol):
    """What the step recorder needs of the runner's link: messages, batched step columns and log
    lines."""

    def send(self, kind: str, **fields: Any) -> None: ...

    def send_batch(self, kind: str, **fields: Any) -> None: ...

    def log(self, level: str, text: str) -> None: ...


def batch_samples(batch: Any, depth: int = 2) -> int | None:
    """First dimension of the batch's first tensor (tensor, tuple/list or dict of them)."""
    if type(batch) is list or type(batch) is tuple:  # the usual (inputs, targets): a call less
        shape = getattr(batch[0], "shape", None) if batch else None
        if isinstance(shape, tuple) and shape and type(shape[0]) is int:  # torch.Size too
            return shape[0]
    shape = getattr(batch, "shape", None)
    if shape is not None:
        try:
            return int(shape[0]) if len(shape) >= 1 else None
        except (TypeError, ValueError):
            return None
    if depth <= 0:
        return None
    if isinstance(batch, list | tuple):  # first: the usual batch, and no ABC check for it
        items: Sequence[Any] = batch
    elif isinstance(batch, Mapping):
        items = list(batch.values())
    else:
        return None
    for item in items:
        found = batch_samples(item, depth - 1)
        if found is not None:
            return found
    return None


class GuardedBackend(TimingBackend):
    """``inner`` as the recorder calls it from inside the script's own calls: its first failure
    (e.g. ``Event.record`` after the script changed the current device) switches device marks
    off with one notice, and from then on every call is a no-op; host marks are unaffected.
    ``on`` is False from the start for an inert backend (a CPU's): the recorder reads it and
    makes no call at all while it is False."""

    def __init__(self, inner: TimingBackend, switch: InstrumentSwitch) -> None:
        self.inner = inner
        self.kind = inner.kind
        self._switch = switch
        self.on = not inner.inert

    def begin(self, step_id: int) -> None:
        if self.on:
            try:
                self.inner.begin(step_id)
            except Exception as exc:
                self._failed("begin", exc)

    def mark(self, index: int) -> None:
        if self.on:
            try:
                self.inner.mark(index)
            except Exception as exc:
                self._failed("mark", exc)

    def end(self) -> None:
        if self.on:
            try:
                self.inner.end()
            except Exception as exc:
                self._failed("end", exc)

    def poll(self, *, wait: bool = False) -> list[DeviceMarks]:
        if self.on:
            try:
                return self.inner.poll(wait=wait)
            except Exception as exc:
                self._failed("poll", exc)
        return []

    def _failed(self, call: str, exc: Exception) -> None:
        self.on = False
        self._switch.switch_off(DEVICE_MARKS, f"timing backend ({self.kind}, {call})", exc)


@dataclass
class _Accumulated:
    """The micro-batches an accumulating step has had before its current one: when it began,
    their summed time per phase, samples and count."""

    start: int
    phases: list[int]
    samples: int = 0
    batches: int = 0


class StepRecorder:
    """See the module docstring. ``config_id`` gives the id the next step is trained under."""

    def __init__(
        self,
        link: RecorderLink,
        backend: TimingBackend,
        *,
        boundary: Callable[[int], None],
        config_id: Callable[[], int],
        clock: Callable[[], int] = time.perf_counter_ns,
    ) -> None:
        self.link = link
        #: Which instruments failed and are off (each said so once).
        self.switch = InstrumentSwitch(link)
        self.backend = GuardedBackend(backend, self.switch)
        #: False once step detection failed and switched itself off.
        self.detecting = True
        self.clock = clock
        self._boundary = boundary
        self._config_id = config_id
        self._columns = StepColumns(clock)
        #: Sends finished steps the script's loop has not (it hangs, or is about to crash).
        self.flush_timer = FlushTimer(
            self._columns, self._send_buffered, lambda text: link.log("warning", text)
        )
        #: Steps recorded (and sent, or queued to be sent).
        self.steps = 0
        #: "auto" until the script uses ``gw.step()``, then "probe".
        self.instrumentation = "auto"
        self.saw_loader = False
        self._host: list[int] | None = None
        self._reached = 0
        self._samples: int | None = None
        self._config = 0
        self._iterator: int | None = None
        self._call: tuple[int, int] | None = None  # (iterator, perf_counter_ns) of next()
        self._pending_data: tuple[int, int, int | None] | None = None  # probe: start, end, n
        self._probe_depth = 0
        self._probe_samples: int | None = None
        #: Calls seen: what the script did (trained, or only evaluated), for the summary.
        self.optimizer_steps = 0
        self.backward_passes = 0
        #: True once a step held several micro-batches (gradient accumulation); how many
        #: batches the last such step held.
        #: Batches in the last accumulating step (1: the script does not accumulate).
        self.batches_per_step = 1
        self._acc: _Accumulated | None = None  # the open step's earlier micro-batches
        #: Marks a boundary of the open step: ``_mark_later_batch`` for an accumulating
        #: step's later micro-batches (a swap, so a plain step pays nothing for it).
        self._mark: Callable[[int, int], None] = self._mark_step

    @property
    def columns(self) -> StepColumns:
        """The step rows waiting to be sent (``script_instruments`` has each carry the time
        the hooks spent on it)."""
        return self._columns

    # --- DataLoader iteration -------------------------------------------------------------

    def next_called(self, iterator: int) -> None:
        now = self.clock()
        if self.instrumentation == "probe":
            self._call = (iterator, now)
            return
        self.saw_loader = True
        if self._host is not None and self._iterator is None:
            self._drop()  # a step of optimizer mode, which ends now that a loader shows up
        elif self._host is not None:
            if iterator != self._iterator and self._reached <= DATA_END:
                return  # zip(a, b): still the same step's data phase
            if (
                self._reached == BACKWARD_END
                and self.optimizer_steps
                and iterator == self._iterator
            ):
                self._fold(now)  # gradient accumulation: the next micro-batch of this step
                self._call = (iterator, now)
                return
            self._close(now)
        self._boundary(self.steps)
        self._call = (iterator, self.clock())

    def next_returned(self, iterator: int, batch: Any) -> None:
        now = self.clock()
        call, self._call = self._call, None
        if self.instrumentation == "probe":
            if self._host is not None:
                self._mark(DATA_END, now)
                if self._probe_samples is None and self._samples is None:
                    self._samples = batch_samples(batch)
            elif call is not None and call[0] == iterator:
                self._pending_data = (call[1], now, batch_samples(batch))
            return
        if self._host is not None:  # a zip's other iterator, or an accumulating step's batch
            if self._reached == 0 and self._acc is not None:
                self._samples = batch_samples(batch)
            if self._reached <= DATA_END:
                self._mark(DATA_END, now)
            return
        if call is None or call[0] != iterator:
            return
        self._open(call[1])
        self._iterator = iterator
        self._samples = batch_samples(batch)
        self._mark(DATA_END, now)

    def loader_exhausted(self, iterator: int) -> None:
        """``StopIteration``: the epoch is over; the next ``next()`` starts the next step. An
        accumulating step whose epoch ended before its optimizer step ends here."""
        if self._call is not None and self._call[0] == iterator:
            self._call = None
            if self._acc is not None and self._reached == 0 and self._host is not None:
                self._samples = 0  # the batch asked for never came
                self._close(self._host[0])

    # --- model, autograd, optimizer -------------------------------------------------------

    def forward_started(self) -> None:
        now = self.clock()
        if self._host is None and self.instrumentation == "auto" and not self.saw_loader:
            self._open(now)  # optimizer mode: the first step starts at the first forward
        if self._reached < H2D_END:
            self._mark(H2D_END, now)

    def forward_returned(self) -> None:
        if self._reached >= H2D_END:
            self._mark(FORWARD_END, self.clock())

    def backward_started(self) -> None:
        self._mark(FORWARD_END, self.clock())

    def backward_returned(self) -> None:
        self._mark(BACKWARD_END, self.clock())
        self.backward_passes += 1

    def optimizer_stepped(self) -> None:
        now = self.clock()
        self._mark(OPTIMIZER_END, now)
        self.optimizer_steps += 1
        if self.instrumentation == "auto" and not self.saw_loader and self._host is not None:
            self._close(now)
            self._boundary(self.steps)
            self._open(self.clock())

    # --- gpuwatch.probe -------------------------------------------------------------------

    def step_enter(self, samples: int | None) -> None:
        self._probe_depth += 1
        if self._probe_depth > 1:
            return
        if self.instrumentation == "auto":
            self.instrumentation = "probe"
            if self._host is not None and self._reached == DATA_END:  # next(loader) just ran
                self._pending_data = (self._host[0], self._host[DATA_END], self._samples)
            self._drop()
            self.link.log(
                "info",
                "the script marks its steps with gpuwatch.probe.step(): "
                "automatic step detection is off from here on",
            )
        self._boundary(self.steps)
        now = self.clock()
        pending, self._pending_data = self._pending_data, None
        self._probe_samples = samples
        if pending is not None:
            self._open(pending[0])
            self._mark(DATA_END, pending[1])
            self._samples = pending[2]
        else:
            self._open(now)

    def step_exit(self, ok: bool) -> None:
        self._probe_depth = max(0, self._probe_depth - 1)
        if self._probe_depth:
            return
        if ok and self._host is not None:
            self._close(self.clock())
        else:
            self._drop()

    def phase_enter(self, index: int) -> None:
        if index > 0:
            self._mark(index, self.clock())

    def phase_exit(self, index: int) -> None:
        self._mark(index + 1, self.clock())

    # --- a failure of ours ------------------------------------------------------------------

    def switch_off_detection(self, where: str, exc: Exception) -> None:
        """A hook (``where``) caught a failure of step detection: forget the open step (its
        marks cannot be trusted), keep and send the finished ones, say so once. Never raises."""
        self.detecting = False
        self._drop()
        self._call = None
        self._pending_data = None
        self.switch.switch_off(STEP_DETECTION, where, exc)
        # if this fails, the finished steps stay buffered for finish() and the flush timer
        with contextlib.suppress(Exception):
            self.flush()

    # --- the end --------------------------------------------------------------------------

    def finish(self, *, keep_open: bool = True) -> None:
        """The script is over: keep an open loader step that got past its data phase (a loop
        left with ``break``; it ends at its last boundary), send everything, wait for the
        device marks. An optimizer-mode step without its ``optimizer.step()`` is dropped, and
        so is any open step when ``keep_open`` is false (a stop interrupted it mid-step: a cut
        step's figures would be wrong)."""
        self.flush_timer.stop()
        if (
            keep_open
            and self._host is not None
            and self._iterator is not None
            and self._reached > DATA_END
        ):
            self._close(self._host[self._reached])
        else:
            self._drop()
        for step_id, marks in self.backend.poll(wait=True):
            self._columns.add_device(step_id, marks)
        self.flush()

    def flush(self) -> None:
        self._columns.send(self.link)

    def _send_buffered(self) -> None:
        """The flush timer's send: only what is buffered (the backend is the loop's alone)."""
        self._columns.send(self.link)

    # --- marks ----------------------------------------------------------------------------

    # Every hook of every step of the script runs through these: each backend call is made only
    # while the backend is ``on`` (never on a CPU, whose backend does nothing), and the common
    # case of the next boundary reached after the last one loops over nothing.

    def _open(self, start_ns: int) -> None:
        self._host = [start_ns, *_LATER_MARKS]
        self._reached = 0
        self._samples = None
        self._config = self._config_id()
        backend = self.backend
        if backend.on:
            backend.begin(self.steps)
            backend.mark(0)

    def _mark_step(self, index: int, now: int) -> None:
        """Boundary ``index`` reached at ``now``: skipped ones collapse onto the previous mark;
        an earlier boundary than the last one reached is ignored."""
        host, reached = self._host, self._reached
        if host is None or index < reached or index >= END:
            return
        last = host[reached]
        backend = self.backend
        if index > reached + 1:
            for skipped in range(reached + 1, index):
                host[skipped] = last
                if backend.on:
                    backend.mark(skipped)
        host[index] = now if now > last else last
        if backend.on:
            backend.mark(index)
        self._reached = index

    def _mark_later_batch(self, index: int, now: int) -> None:
        """``_mark_step`` for an accumulating step's second and later micro-batches: their
        device marks up to ``backward_end`` are not recorded again (the step's are its first
        batch's, so its stream-active span covers every batch)."""
        host, reached = self._host, self._reached
        if host is None or index < reached or index >= END:
            return
        last = host[reached]
        if index > reached + 1:
            backend = self.backend
            for skipped in range(reached + 1, index):
                host[skipped] = last
                if skipped > BACKWARD_END and backend.on:
                    backend.mark(skipped)
        host[index] = now if now > last else last
        if index > BACKWARD_END and self.backend.on:
            self.backend.mark(index)
        self._reached = index

    def _close(self, end_ns: int) -> None:
        host = self._host
        assert host is not None
        acc = self._acc
        last = host[self._reached]
        backend = self.backend
        for skipped in range(self._reached + 1, END):
            host[skipped] = last
            if backend.on and (acc is None or skipped > BACKWARD_END):  # else its first batch
                backend.mark(skipped)
        host[END] = end_ns if end_ns > last else last
        if backend.on:
            backend.mark(END)
            backend.end()
        samples = self._probe_samples if self._probe_samples is not None else self._samples
        samples = 1 if samples is None else samples
        if acc is not None:
            host, samples = self._unfolded(acc, host), samples + acc.samples
        due = self._columns.add_step(self.steps, self._config, samples, host)
        self.steps += 1
        self._host = None
        self._reached = 0
        self._iterator = None
        if self.steps == 1:
            self.link.log("info", f"first step seen: {(host[END] - host[0]) / 1e6:.0f} ms")
        if backend.on:
            for step_id, marks in backend.poll(wait=False):
                self._columns.add_device(step_id, marks)
        if due:
            self._columns.send(self.link)

    def _drop(self) -> None:
        """Forget an open step that will never be complete (a mode switch, a ``gw.step()``
        body that raised). Its CUDA event set is not ended, so no device marks are ever sent
        for it (the id is reused by the next step); the backend leaves that set unused."""
        self._host = None
        self._reached = 0
        self._iterator = None
        if self._acc is not None:
            self._acc = None
            self._mark = self._mark_step

    # --- gradient accumulation ------------------------------------------------------------

    def _fold(self, now: int) -> None:
        """The open step's micro-batch ends at ``now`` (its loop asks for the next batch): add
        its phases to the step's sums and start the next micro-batch's marks at ``now``."""
        host = self._host
        assert host is not None
        acc = self._acc
        if acc is None:
            acc = self._acc = _Accumulated(start=host[0], phases=[0] * END)
            self._mark = self._mark_later_batch
            if self.batches_per_step == 1:
                self.link.log(
                    "info",
                    "the script accumulates gradients (several backward() per "
                    "optimizer.step()): a step now ends at optimizer.step() and holds all "
                    "its batches",
                )
        phases, reached = acc.phases, self._reached
        # phase i += host[i + 1] - host[i], for each phase reached (in C: it runs every batch)
        phases[:reached] = map(add, phases, map(sub, host[1 : reached + 1], host))
        phases[OPTIMIZER_END] += now - host[reached]  # after its backward: ``sync``
        acc.samples += 1 if self._samples is None else self._samples
        acc.batches += 1
        self._samples = None
        host[0] = now
        self._reached = 0

    def _unfolded(self, acc: _Accumulated, host: list[int]) -> list[int]:
        """The marks of an accumulating step: from its first ``next()``, each phase's summed
        time over its micro-batches; the step's end stays where it was."""
        marks = [acc.start]
        for i in range(END):
            marks.append(marks[i] + acc.phases[i] + host[i + 1] - host[i])
        self.batches_per_step = acc.batches + 1
        self._acc = None
        self._mark = self._mark_step
        return marks

    @property
    def accumulating(self) -> bool:
        """Whether a step has held several micro-batches (gradient accumulation)."""
        return self.batches_per_step > 1 or self._acc is not None

    def step_definition(self) -> str:
        """What a step was (one of ``STEP_DEFINITIONS``), for the run's ``bye``."""
        if self.instrumentation == "probe":
            return "probe"
        if self.accumulating:
            return "accumulation"
        return "loader" if self.saw_loader else "optimizer"

    def bye_fields(self) -> dict[str, Any]:
        """What the run's ``bye`` says of its steps: how a step was delimited, and whether the
        script trained (optimizer steps), only ran backward passes, or only evaluated."""
        return {
            "step_definition": self.step_definition(),
            "batches_per_step": self.batches_per_step,
            "optimizer_steps": self.optimizer_steps,
            "backward_passes": self.backward_passes,
        }
