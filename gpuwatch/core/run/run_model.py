"""What a view reads of a run: the runner's messages folded into stores, changes and answers.

A ``RunModel`` has no process, no thread and no socket of its own: ``Session`` (a live run)
and ``ReplaySession`` (a recording) both own one and feed it messages, so a replay shows what
the live window showed through the same code. Each message kind has one small handler
(``_handlers``); the owner supplies the clock (a replay's is the recorded time) and where log
lines go.

Rare changes (a configuration applied, a change refused, a kernel window or a failed capture,
the run's state) are also handed to listeners as typed events
(``gpuwatch.core.model.messages.ModelEvent``). A listener is called on the thread that made
the change: the link thread for the runner's messages, the session's clock or watch thread
for liveness and the run's end, the caller's thread for ``start`` and ``stop``. It must return
at once; one that raises is logged once and never stops the fold.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from gpuwatch import protocol
from gpuwatch.core.figures.kernel_window import KernelWindow, KernelWindowError, describe
from gpuwatch.core.figures.segments import BASELINE_LABEL, Scoreboard, SegmentStats
from gpuwatch.core.model.messages import (
    CaptureFailed,
    ChangeRefused,
    CollectiveSample,
    ConfigApplied,
    ConfigChange,
    DeviceInfo,
    Hello,
    KernelWindowReady,
    KnobSpec,
    ModelEvent,
    ModelListener,
    Refusal,
)
from gpuwatch.core.model.store import DEFAULT_STEP_CAPACITY, SeriesStore, StepStore

log = logging.getLogger(__name__)

#: Largest integer a knob may have to be shown: the knob panel's editors are 32-bit Qt spin
#: boxes (``gpuwatch.qt.knob_panel.INT_LIMIT``; core cannot import qt).
KNOB_INT_LIMIT = 2**31 - 1
#: Kernel capture windows kept per run (the oldest falls off).
MAX_KERNEL_WINDOWS = 32
#: DDP all-reduce samples kept per run (DDP times one iteration in a hundred).
MAX_COLLECTIVE_SAMPLES = 1024
#: Steps whose median is a run's typical step (stall threshold, stop grace).
TYPICAL_STEPS = 32
#: The recent past over which ``RunModel.instrumentation_share`` is taken (seconds).
INSTRUMENT_WINDOW_S = 10.0

#: ``log_line(level, source, text, notice)``: where the fold's log lines go (the owner's log).
LogSink = Callable[[str, str, str, bool], None]


class RunModel:
    """The state of one run as its messages describe it, and the listeners of its changes."""

    def __init__(
        self,
        *,
        step_capacity: int = DEFAULT_STEP_CAPACITY,
        clock: Callable[[], int] | None = None,
        log_line: LogSink | None = None,
    ) -> None:
        self.steps = StepStore(step_capacity)
        self.coarse = SeriesStore()
        self._clock = clock or _perf_counter_ns
        self._log_line: LogSink = log_line or (lambda level, source, text, notice: None)
        self._lock = threading.Lock()
        self._listeners: list[ModelListener] = []
        self._failed_listeners: set[int] = set()
        self._changes: dict[int, ConfigChange] = {}
        self._answers: dict[int, ConfigChange | Refusal] = {}
        self._labels: dict[int, str] = {}  # request id -> label for its segment
        self._next_request = 1
        self._scoreboard = Scoreboard()
        self._windows: collections.deque[KernelWindow] = collections.deque(
            maxlen=MAX_KERNEL_WINDOWS
        )
        self._collective: collections.deque[CollectiveSample] = collections.deque(
            maxlen=MAX_COLLECTIVE_SAMPLES
        )
        self._handlers: dict[str, Callable[[dict[str, Any]], None]] = {
            "hello": self._on_hello,
            "steps": self._on_steps,
            "device_marks": self._on_device_marks,
            "log": self._on_log,
            "error": self._on_error,
            "bye": self._on_bye,
            "config": self._on_config,
            "refused": self._on_refused,
            "knobs": self._on_knobs,
            "kernels": self._on_kernels,
            "device": self._on_device,
            "collective": self._on_collective,
        }
        self.reset()

    def reset(self, coarse: SeriesStore | None = None) -> None:
        """Forget the run (a new one starts, or a replay rebuilds); listeners stay."""
        self.steps.clear()
        self.coarse = coarse if coarse is not None else SeriesStore()
        self.t0_ns = self._clock()
        self.hello: Hello | None = None
        self.error: str | None = None
        self.error_type: str | None = None  # the runner's ``error`` type (e.g. SyntaxError)
        self.bye_reason: str | None = None
        self.bye: dict[str, Any] | None = None  # the runner's bye (script: code, steps, cuda_used)
        self.dropped_messages = 0
        #: Valid messages that could not be used, per kind (also in ``dropped_messages``).
        self.unusable_messages: dict[str, int] = {}
        self.baseline_id: int | None = None
        self.last_refusal: Refusal | None = None
        #: Why the last kernel capture did not give a window (refused or failed), if it did not.
        self.capture_error: str | None = None
        #: Steps of a kernel capture asked for and not answered yet.
        self.capture_pending: int | None = None
        #: Runner notices of instruments that failed and switched themselves off (a ``log``
        #: with ``off``), in order: what is no longer measured, and why.
        self.instruments_off: list[str] = []
        self._hidden_knobs: set[str] = set()  # knobs left out of the panel (logged once)
        with self._lock:
            self._changes.clear()
            self._answers.clear()
            self._labels.clear()
        self._scoreboard.clear()
        self._windows.clear()
        self._collective.clear()

    # ---- What views read -------------------------------------------------------------

    @property
    def device_kind(self) -> str | None:
        return self.hello.device.kind if self.hello else None

    @property
    def knobs(self) -> list[dict[str, Any]]:
        """The knob schema entries as sent (docs/knobs.md §2); empty before ``hello``."""
        return [k.to_message() for k in self.hello.knobs] if self.hello else []

    def config_values(self) -> dict[str, Any]:
        """The knob values in force now (the latest applied configuration)."""
        with self._lock:
            if not self._changes:
                return {}
            return dict(self._changes[max(self._changes)].values)

    def config_changes(self) -> list[ConfigChange]:
        """Every applied configuration of this run, id 0 first."""
        with self._lock:
            return [self._changes[i] for i in sorted(self._changes)]

    def answer(self, request: int) -> ConfigChange | Refusal | None:
        """The runner's answer to a ``set`` request; None until it arrived."""
        with self._lock:
            return self._answers.get(request)

    def kernel_windows(self) -> list[KernelWindow]:
        """The kernel capture windows of this run that succeeded, oldest first."""
        with self._lock:
            return list(self._windows)

    def scoreboard(self, *, running: bool, default_cores: int = 1) -> list[SegmentStats]:
        """One row per configuration (docs/knobs.md §3), speedups against ``baseline_id``."""
        cores = self.hello.device.core_count(default_cores) if self.hello else default_cores
        return self._scoreboard.rows(
            self.steps,
            self.config_changes(),
            self.coarse,
            device_kind=self.device_kind,
            cores=cores,
            baseline_id=self.baseline_id,
            running=running,
        )

    def instrumentation_share(self) -> float | None:
        """gpuwatch's own footprint in the run it watches: the share (0..1) of step time
        that the runner's hooks and step recording spent, over the last
        ``INSTRUMENT_WINDOW_S`` of steps, as the runner measured it around its hook bodies
        (``steps.instrument_ns``). None until known: a built-in workload, a runner that does
        not measure it, or a recording, which does not keep it. It leaves out what no hook
        body sees (torch's slower module-call path while a global hook exists, the link's
        sender thread): ``bench/overhead.py --script`` prices the whole."""
        return self.steps.instrument_share(int(INSTRUMENT_WINDOW_S * 1e9))

    def typical_step_s(self) -> float | None:
        """The median duration of the last few steps (seconds), or None before any."""
        view = self.steps.snapshot(last=TYPICAL_STEPS)
        if not len(view):
            return None
        return float(np.median(view.host[:, -1] - view.host[:, 0])) / 1e9

    # ---- What the owner changes ------------------------------------------------------

    def next_request(self, label: str | None = None) -> int:
        """A new ``set`` request id; ``label`` names the segment it will start."""
        with self._lock:
            request = self._next_request
            self._next_request += 1
            if label:
                self._labels[request] = label
        return request

    def label_segment(self, config_id: int, label: str) -> None:
        """Rename a segment on the scoreboard (e.g. the tour naming its stages)."""
        with self._lock:
            change = self._changes.get(config_id)
            if change is not None:
                self._changes[config_id] = dataclasses.replace(change, label=label)

    def retime_config(self, config_id: int, t_ns: int) -> None:
        """Move a configuration's time (a replay restores the time the live run gave it)."""
        with self._lock:
            change = self._changes.get(config_id)
            if change is not None:
                self._changes[config_id] = dataclasses.replace(change, t_ns=t_ns)

    # ---- Folding messages ------------------------------------------------------------

    def fold(self, message: dict[str, Any]) -> None:
        """Use one valid runner message; raises if it cannot be used (see ``unusable``)."""
        handler = self._handlers.get(message["kind"])
        if handler is None:
            self._info(f"runner sent {message['kind']!r}")
        else:
            handler(message)

    def unusable(self, kind: str, exc: Exception) -> None:
        """Count a message ``fold`` could not use; the first of each kind is logged."""
        self.dropped_messages += 1
        seen = self.unusable_messages.get(kind, 0)
        self.unusable_messages[kind] = seen + 1
        if seen:
            return
        log.warning("could not use a %r message from the runner", kind, exc_info=exc)
        self._log_line(
            "warning",
            "gpuwatch",
            f"dropped a {kind!r} message from the runner that gpuwatch could not "
            f"use ({type(exc).__name__}: {protocol.shorten(str(exc), 300)}); "
            f"further {kind!r} messages that fail are counted, not logged",
            False,
        )

    def _info(self, text: str) -> None:
        self._log_line("info", "gpuwatch", text, False)

    def _on_steps(self, message: dict[str, Any]) -> None:
        self.steps.append(
            message["step"],
            message["config"],
            message["samples"],
            message["host"],
            message.get("instrument_ns"),
        )

    def _on_device_marks(self, message: dict[str, Any]) -> None:
        self.steps.set_device_marks(message["step"], message["device"])

    def _on_log(self, message: dict[str, Any]) -> None:
        level = message["level"] if message["level"] in ("info", "warning", "error") else "info"
        off = isinstance(message.get("off"), str)
        if off:
            self.instruments_off.append(message["text"])
        self._log_line(level, "runner", message["text"], off)

    def _on_error(self, message: dict[str, Any]) -> None:
        self.error_type = message["type"]
        self.error = f"{message['type']}: {message['message']}"
        trace = str(message.get("traceback") or "").rstrip()
        # As python prints it: a traceback that ends with the type and message says it all.
        if not trace or trace.splitlines()[-1].strip() != self.error:
            self._log_line("error", "runner", self.error, False)
        if trace:
            self._log_line("error", "runner", trace, False)

    def _on_bye(self, message: dict[str, Any]) -> None:
        self.bye = dict(message)
        self.bye_reason = message["reason"]
        self._info(f"runner said goodbye ({message['reason']})")

    def _on_hello(self, message: dict[str, Any]) -> None:
        hello = Hello.from_message(message)
        hello = dataclasses.replace(hello, knobs=self._panel_knobs(hello.knobs))
        self.hello = hello
        with self._lock:
            first = self._changes[0] = ConfigChange(
                id=0,
                values=dict(hello.config_values),
                changed={},
                t_ns=self._clock(),
                first_step=0,
                warmup_steps=hello.warmup_steps,
                label=BASELINE_LABEL,
            )
        self.steps.set_device_is_host(hello.device.kind != "cuda")
        versions = hello.versions
        self._info(
            f"runner pid {hello.pid}: {hello.workload} on {hello.device.name} "
            f"(python {versions.get('python')}, torch {versions.get('torch')}, "
            f"timing: {hello.timing})"
        )
        self.emit(ConfigApplied(first))

    def _on_collective(self, message: dict[str, Any]) -> None:
        self._collective.append(CollectiveSample.from_message(message, self._clock()))

    def collective(self, until_ns: int | None = None) -> list[CollectiveSample]:
        """DDP's all-reduce samples, oldest first (those arrived by ``until_ns``, if given)."""
        samples = list(self._collective)
        return samples if until_ns is None else [s for s in samples if s.t_ns <= until_ns]

    def _on_device(self, message: dict[str, Any]) -> None:
        """A watched script's CUDA device, known once it ran a step: hello takes its name."""
        if self.hello is None:
            return
        device = DeviceInfo.from_message(message["device"])
        self._info(f"the script trains on cuda:{device.index}: {device.name}")
        if self.hello.device.pending:
            self.hello = dataclasses.replace(self.hello, device=device)

    def _on_config(self, message: dict[str, Any]) -> None:
        request = message.get("request")
        with self._lock:
            label = self._labels.pop(request, None) if isinstance(request, int) else None
            change = ConfigChange.from_message(message, label)
            self._changes[change.id] = change
            if change.request is not None:
                self._answers[change.request] = change
        cost = f" in {change.apply_s:.2f} s" if change.apply_s >= 0.01 else ""
        self._info(f"config {change.id} applied{cost}: {change.label}")
        self.emit(ConfigApplied(change))

    def _on_refused(self, message: dict[str, Any]) -> None:
        request = message.get("request")
        refusal = Refusal(
            request if isinstance(request, int) else None,
            dict(message["values"]),
            str(message["message"]),
            self._clock(),
        )
        with self._lock:
            if refusal.request is not None:
                self._labels.pop(refusal.request, None)
                self._answers[refusal.request] = refusal
            self.last_refusal = refusal
        self._log_line("warning", "runner", f"change refused: {refusal.message}", False)
        self.emit(ChangeRefused(refusal))

    def _on_knobs(self, message: dict[str, Any]) -> None:
        """The schema grew (a script declared a knob): show it, with its current value."""
        if self.hello is None:
            return
        knobs = tuple(KnobSpec.from_message(k) for k in message["knobs"])
        self.hello = dataclasses.replace(self.hello, knobs=self._panel_knobs(knobs))
        with self._lock:
            if self._changes:
                last = self._changes[max(self._changes)]
                values = {**last.values, **message["values"]}
                self._changes[last.id] = dataclasses.replace(last, values=values)

    def _panel_knobs(self, knobs: tuple[KnobSpec, ...]) -> tuple[KnobSpec, ...]:
        """The schema without the integer knobs the knob panel cannot hold (its editors are
        32-bit): each is logged once; the script keeps its value and the scoreboard shows it.
        """
        kept = []
        for knob in knobs:
            too_big = _beyond_panel(knob)
            if too_big is None:
                kept.append(knob)
                continue
            if knob.name not in self._hidden_knobs:
                self._hidden_knobs.add(knob.name)
                self._log_line(
                    "warning",
                    "gpuwatch",
                    f"knob {knob.name!r} is not shown: its {too_big} is beyond what the "
                    f"knob panel holds (integers up to ±{KNOB_INT_LIMIT:,}); the "
                    f"script goes on with its value",
                    False,
                )
        return tuple(kept)

    def _on_kernels(self, message: dict[str, Any]) -> None:
        """A capture window (or why there is none); its steps leave the scoreboard."""
        self.capture_pending = None
        try:
            window = KernelWindow.from_message(message)
        except KernelWindowError as exc:
            self.capture_error = str(exc)
            self._log_line("warning", "gpuwatch", str(exc), False)
            self.emit(CaptureFailed(self.capture_error))
            return
        if not window.ok:  # the runner logged the reason already
            self.capture_error = window.error or f"kernel capture {window.status}"
            self.emit(CaptureFailed(self.capture_error))
            return
        recent = self.steps.snapshot(last=4096)
        configs = set(recent.config[np.isin(recent.step, window.perturbed)].tolist())
        with self._lock:
            self._windows.append(window)
            if self._changes:  # the latest steps may still be on their way
                configs.add(max(self._changes))
        self._scoreboard.mark_profiled(window.perturbed, sorted(configs))
        steps = f"{window.steps[0]}-{window.steps[-1]}" if window.steps else "none"
        summary = describe(window.summary(), window.device)
        self._info(f"kernel window over steps {steps}: {summary}")
        self.emit(KernelWindowReady(window))

    # ---- Listeners of rare changes ---------------------------------------------------

    def add_listener(self, listener: ModelListener) -> None:
        """Call ``listener(event)`` on every rare change (see the module docstring)."""
        with self._lock:
            self._listeners = [*self._listeners, listener]

    def remove_listener(self, listener: ModelListener) -> None:
        """Detach ``listener``; compared by equality, so a bound method can be passed again."""
        with self._lock:
            self._listeners = [f for f in self._listeners if f != listener]

    def emit(self, event: ModelEvent) -> None:
        """Hand ``event`` to every listener; a failing listener is logged once and kept."""
        for listener in self._listeners:
            try:
                listener(event)
            except Exception:
                key = id(listener)
                if key not in self._failed_listeners:
                    self._failed_listeners.add(key)
                    log.exception("a run model listener %r failed on %r", listener, event)


def _perf_counter_ns() -> int:
    """``time.perf_counter_ns`` looked up at each call, so a test's patched clock is seen."""
    return time.perf_counter_ns()


def _beyond_panel(knob: KnobSpec) -> str | None:
    """Which integer of an ``int`` knob's schema (default, min, max) the panel cannot hold."""
    if knob.type != "int":
        return None
    for name, value in (("default", knob.default), ("min", knob.min), ("max", knob.max)):
        if isinstance(value, int) and not -KNOB_INT_LIMIT <= value <= KNOB_INT_LIMIT:
            return f"{name} {value:,}"
    return None


class ModelAccess:
    """What views read of a run, on its owner (``Session``, ``ReplaySession``): each name
    delegates to the owner's ``model``, so call sites read ``session.steps`` as before."""

    model: RunModel

    @property
    def steps(self) -> StepStore:
        return self.model.steps

    @property
    def coarse(self) -> SeriesStore:
        return self.model.coarse

    @coarse.setter
    def coarse(self, coarse: SeriesStore) -> None:
        self.model.coarse = coarse

    @property
    def t0_ns(self) -> int:
        return self.model.t0_ns

    @t0_ns.setter
    def t0_ns(self, t0_ns: int) -> None:
        self.model.t0_ns = t0_ns

    @property
    def hello(self) -> Hello | None:
        return self.model.hello

    @hello.setter
    def hello(self, hello: Hello | None) -> None:
        self.model.hello = hello

    @property
    def error(self) -> str | None:
        return self.model.error

    @error.setter
    def error(self, error: str | None) -> None:
        self.model.error = error

    @property
    def error_type(self) -> str | None:
        return self.model.error_type

    @property
    def bye(self) -> dict[str, Any] | None:
        return self.model.bye

    @bye.setter
    def bye(self, bye: dict[str, Any] | None) -> None:
        self.model.bye = bye

    @property
    def bye_reason(self) -> str | None:
        return self.model.bye_reason

    @property
    def baseline_id(self) -> int | None:
        return self.model.baseline_id

    @baseline_id.setter
    def baseline_id(self, config_id: int | None) -> None:
        self.model.baseline_id = config_id

    @property
    def last_refusal(self) -> Refusal | None:
        return self.model.last_refusal

    @property
    def capture_error(self) -> str | None:
        return self.model.capture_error

    @capture_error.setter
    def capture_error(self, error: str | None) -> None:
        self.model.capture_error = error

    @property
    def instruments_off(self) -> list[str]:
        return self.model.instruments_off

    @property
    def dropped_messages(self) -> int:
        return self.model.dropped_messages

    @property
    def unusable_messages(self) -> dict[str, int]:
        return self.model.unusable_messages

    @property
    def device_kind(self) -> str | None:
        return self.model.device_kind

    @property
    def knobs(self) -> list[dict[str, Any]]:
        return self.model.knobs

    def config_values(self) -> dict[str, Any]:
        return self.model.config_values()

    def config_changes(self) -> list[ConfigChange]:
        return self.model.config_changes()

    def answer(self, request: int) -> ConfigChange | Refusal | None:
        return self.model.answer(request)

    def label_segment(self, config_id: int, label: str) -> None:
        self.model.label_segment(config_id, label)

    def kernel_windows(self) -> list[KernelWindow]:
        return self.model.kernel_windows()

    def typical_step_s(self) -> float | None:
        return self.model.typical_step_s()

    def instrumentation_share(self) -> float | None:
        """``RunModel.instrumentation_share``: the runner's instruments' share of step time
        over the recent past, or None until known."""
        return self.model.instrumentation_share()
