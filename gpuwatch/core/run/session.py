"""One watched training run: launch the runner, read its link, sample coarse figures.

The Session is Qt-free. Its threads only write into ring buffers and a log deque; the
window polls ``state``, ``steps``, ``coarse`` and ``drain_log()`` on its redraw timer, so no
object is shared across threads beyond those locked buffers.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
import math
import os
import re
import signal
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gpuwatch import protocol
from gpuwatch.core.figures.kernel_window import KernelWindow, KernelWindowError, describe
from gpuwatch.core.figures.segments import BASELINE_LABEL, Scoreboard, SegmentStats
from gpuwatch.core.model.liveness import Liveness, Transition
from gpuwatch.core.model.log_buffer import LogBuffer, LogLine
from gpuwatch.core.model.messages import (
    ACTIVE_STATES,
    CaptureFailed,
    ChangeRefused,
    ConfigApplied,
    ConfigChange,
    KernelWindowReady,
    Refusal,
    SessionState,
    StateChanged,
)
from gpuwatch.core.model.store import DEFAULT_STEP_CAPACITY, SeriesStore, StepStore
from gpuwatch.core.run import launcher, link
from gpuwatch.core.run.run_model import RunModel
from gpuwatch.core.run.samplers import (
    NvmlSampler,
    ProcessTreeSampler,
    nvml_unavailable_statuses,
)

log = logging.getLogger(__name__)

#: Stop escalation: polite ``stop`` message, then terminate, then kill (seconds per stage).
#: The polite stage lasts the script's grace (``stop_grace_s``: time to reach its next step
#: boundary) plus ``POLITE_STOP_S``. A polite stop normally ends in well under a second; the
#: margin is for a loaded machine, where shutting DataLoader workers down can take seconds and
#: a terminate would lose the runner's last steps and its ``bye``.
POLITE_STOP_S = 10.0
TERMINATE_S = 3.0
#: After the runner exits, how long to wait for its last buffered messages.
LINK_DRAIN_S = 5.0
LOG_LINES_KEPT = 5000
#: The script's output is read in pieces of at most this many bytes: a line without a newline
#: (a progress bar, a binary dump) is shown in pieces instead of growing without bound.
OUTPUT_PIECE_BYTES = 64 * 1024
#: Dropped runner messages each logged with their reason; after that, one line per 1000.
DROPS_LOGGED = 20
#: A script that has not reached a training step this long after it started gets a notice;
#: so does any run whose steps stopped arriving this long ago (a hang).
NO_STEP_NOTICE_S = 30.0
#: Largest integer a knob may have to be shown: the knob panel's editors are 32-bit Qt spin
#: boxes (``gpuwatch.qt.knob_panel.INT_LIMIT``; core cannot import qt).
KNOB_INT_LIMIT = 2**31 - 1
#: Kernel capture windows kept per run (the oldest falls off).
MAX_KERNEL_WINDOWS = 32
#: How often the run clock (``--seconds``, the liveness notices) looks at the time.
CLOCK_TICK_S = 0.1
#: Steps whose median is a run's typical step (stall threshold, stop grace).
TYPICAL_STEPS = 32
#: A stop asks a script to end at its next step boundary; it is interrupted where it is after
#: this many typical steps (at least the minimum, at most the maximum, in seconds).
STOP_GRACE_STEPS = 2.0
STOP_GRACE_MIN_S = 2.0
STOP_GRACE_MAX_S = 60.0


#: ``listener(message, t_ns)``: every valid runner message (and the GUI side's own log lines as
#: ``{"kind": "log", "source": "gpuwatch", ...}``) with its arrival time on the perf_counter axis.
Listener = Callable[[dict[str, Any], int], None]


class SessionError(RuntimeError):
    """A request the session cannot carry out now (e.g. no runner is connected)."""


@dataclass(frozen=True)
class LaunchSpec:
    """What to run: a built-in workload or the user's script, on a device, with which Python.

    ``script`` (a path) replaces the workload; the runner executes it as ``__main__`` with
    ``script_args`` as its argv, in ``cwd`` (like ``python SCRIPT ARGS`` started there).
    ``seconds`` stops the run cleanly that long after the runner's ``hello`` (the script's
    start, not the torch import before it).
    """

    workload: str = "vision"
    device: str = "auto"
    python: str | None = None
    max_steps: int | None = None
    script: str | None = None
    script_args: tuple[str, ...] = ()
    cwd: str | None = None
    seconds: float | None = None

    @property
    def name(self) -> str:
        """What the run is called on screen: the script's file name, or the workload."""
        return Path(self.script).name if self.script else self.workload


class Session:
    """Launches and watches one runner at a time; restartable after it ends."""

    def __init__(
        self,
        *,
        step_capacity: int = DEFAULT_STEP_CAPACITY,
        sample_coarse: bool = True,
        no_step_notice_s: float = NO_STEP_NOTICE_S,
        keep_all_output: bool = False,
    ) -> None:
        self.steps = StepStore(step_capacity)
        self.coarse = SeriesStore()
        self.t0_ns = time.perf_counter_ns()
        self.hello: dict[str, Any] | None = None
        self.error: str | None = None
        self.error_type: str | None = None  # the runner's ``error`` type (e.g. SyntaxError)
        self.exit_code: int | None = None
        self.bye_reason: str | None = None
        self.bye: dict[str, Any] | None = None  # the runner's bye (script: code, steps, cuda_used)
        #: Whether the loop makes progress (starting, no step yet, running, stalled, ended).
        self.liveness = Liveness(notice_s=no_step_notice_s, script=False)
        #: Seconds the run had been without a step when its stop was asked for, if it was
        #: stalled then: it was hung, and the outcome says so.
        self.stalled_at_stop_s: float | None = None
        #: "terminated" or "killed" when a stop had to signal the runner's tree (else None).
        self.stop_escalation: str | None = None
        self.stopped_after_s: float | None = None  # set when ``LaunchSpec.seconds`` ran out
        self.spec: LaunchSpec | None = None
        self.dropped_messages = 0
        #: Valid messages that could not be used, per kind (also in ``dropped_messages``).
        self.unusable_messages: dict[str, int] = {}
        self.baseline_id: int | None = None
        self.last_refusal: Refusal | None = None
        self._sample_coarse = sample_coarse
        self._no_step_notice_s = no_step_notice_s
        self._hello_at: float | None = None  # time.monotonic() of the hello
        self._changes: dict[int, ConfigChange] = {}
        self._answers: dict[int, ConfigChange | Refusal] = {}
        self._labels: dict[int, str] = {}  # request id -> label for its segment
        self._next_request = 1
        self._scoreboard = Scoreboard()
        self._windows: collections.deque[KernelWindow] = collections.deque(
            maxlen=MAX_KERNEL_WINDOWS
        )
        self._capture_steps: int | None = None  # a capture asked for, not answered yet
        self._hidden_knobs: set[Any] = set()  # knobs left out of the panel (logged once)
        #: Why the last kernel capture did not give a window (refused or failed), if it did not.
        self.capture_error: str | None = None
        #: Runner notices of instruments that failed and switched themselves off (a ``log``
        #: with ``off``), in order: what is no longer measured, and why.
        self.instruments_off: list[str] = []
        self._listeners: list[Listener] = []
        #: What views read of the run, and where they listen for its rare changes.
        self.model = RunModel()
        self._state = SessionState.IDLE
        self._lock = threading.Lock()
        #: The script's output must reach the consumer whole (headless): when the log is full,
        #: reading it waits for a drain (the script's print blocks) instead of dropping lines.
        self.keep_all_output = keep_all_output
        self._log = LogBuffer(LOG_LINES_KEPT)
        self._proc = None
        self._listener: link.LinkListener | None = None
        self._link: link.Link | None = None
        self._private_dir: Path | None = None
        self._threads: list[threading.Thread] = []
        self._link_thread: threading.Thread | None = None
        self._output_thread: threading.Thread | None = None
        self._samplers: list[Any] = []
        self._stop_requested = threading.Event()
        self._ended = threading.Event()
        self._ended.set()

    # ---- Public API ------------------------------------------------------------------

    @property
    def state(self) -> SessionState:
        return self._state

    @property
    def device_kind(self) -> str | None:
        return self.hello["device"].get("kind") if self.hello else None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def notice(self) -> str | None:
        """What the user should know while the run goes on (no step yet, stalled; else what
        is no longer measured), or None."""
        return self.liveness.notice or "; ".join(self.instruments_off) or None

    @property
    def stop_requested(self) -> bool:
        """True once ``stop`` was called for this run (by the user or ``--seconds``)."""
        return self._stop_requested.is_set()

    @property
    def knobs(self) -> list[dict[str, Any]]:
        """The runner's knob schema (docs/knobs.md §2); empty before ``hello``."""
        return list(self.hello.get("knobs", [])) if self.hello else []

    def add_listener(self, listener: Listener) -> None:
        """Also hand every message to ``listener`` (e.g. a recorder), on the link thread.

        A listener must return at once (queue the message; never block, never mutate it).
        One that raises is removed, with a log line, so it cannot break the link.
        """
        with self._lock:
            self._listeners = [*self._listeners, listener]

    def remove_listener(self, listener: Listener) -> None:
        with self._lock:
            self._listeners = [f for f in self._listeners if f is not listener]

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

    def set_knobs(self, values: dict[str, Any], *, label: str | None = None) -> int | None:
        """Ask the runner to change knobs; returns the request id to pass to ``answer``.

        Values equal to the current ones are dropped; if nothing differs, nothing is sent and
        None is returned. The runner validates (all or nothing) and answers with a ``config``
        or a ``refused`` message.
        """
        current = self.config_values()
        wanted = {
            k: v for k, v in values.items() if k not in current or not _same_value(current[k], v)
        }
        if not wanted:
            return None
        lnk = self._link
        if lnk is None or self._state is not SessionState.RUNNING:
            raise SessionError("no training run is connected: start one first")
        with self._lock:
            request = self._next_request
            self._next_request += 1
            if label:
                self._labels[request] = label
        if not lnk.send("set", values=wanted, request=request):
            raise SessionError("the link to the runner is closed")
        return request

    def answer(self, request: int) -> ConfigChange | Refusal | None:
        """The runner's answer to a ``set_knobs`` request; None until it arrived."""
        with self._lock:
            return self._answers.get(request)

    def label_segment(self, config_id: int, label: str) -> None:
        """Rename a segment on the scoreboard (e.g. the tour naming its stages)."""
        with self._lock:
            change = self._changes.get(config_id)
            if change is not None:
                self._changes[config_id] = dataclasses.replace(change, label=label)

    @property
    def capturing(self) -> bool:
        """A kernel capture was asked for and its window has not come back yet."""
        return self._capture_steps is not None and self._state is SessionState.RUNNING

    def request_capture(self, steps: int) -> None:
        """Profile the next ``steps`` steps (docs/design.md, "Kernel capture").

        The result arrives as a ``KernelWindow`` in ``kernel_windows()``, or as
        ``capture_error``.
        """
        if (
            isinstance(steps, bool)
            or not isinstance(steps, int)
            or not 1 <= steps <= protocol.MAX_CAPTURE_STEPS
        ):
            raise SessionError(
                f"a kernel capture covers 1 to {protocol.MAX_CAPTURE_STEPS} steps, not {steps!r}"
            )
        lnk = self._link
        if lnk is None or self._state is not SessionState.RUNNING:
            raise SessionError("no training run is connected: start one first")
        if self.capturing:
            raise SessionError("a kernel capture is already running: wait for its window")
        self._capture_steps = steps
        self.capture_error = None
        if not lnk.send("capture", steps=steps):
            self._capture_steps = None
            raise SessionError("the link to the runner is closed")
        self._info(f"capturing kernels over the next {steps} step(s) (plus one warm-up step)")

    def kernel_windows(self) -> list[KernelWindow]:
        """The kernel capture windows of this run that succeeded, oldest first."""
        with self._lock:
            return list(self._windows)

    def scoreboard(self) -> list[SegmentStats]:
        """One row per configuration (docs/knobs.md §3), speedups against ``baseline_id``."""
        changes = self.config_changes()
        cores = device_cores(self.hello, os.cpu_count() or 1)
        return self._scoreboard.rows(
            self.steps,
            changes,
            self.coarse,
            device_kind=self.device_kind,
            cores=cores,
            baseline_id=self.baseline_id,
            running=self._state in ACTIVE_STATES,
        )

    def start(self, spec: LaunchSpec) -> None:
        """Launch the runner (non-blocking). Errors become state FAILED with a message."""
        with self._lock:
            if self._state in ACTIVE_STATES:
                raise RuntimeError("a run is already in progress; stop it first")
            self._reset()
            self.spec = spec
            self.liveness = Liveness(notice_s=self._no_step_notice_s, script=bool(spec.script))
            self._state = SessionState.STARTING
        self._state_changed()
        what = f"script {spec.name!r}" if spec.script else f"workload {spec.workload!r}"
        self._info(
            f"starting {what} on {spec.device}: the runner imports "
            f"torch first, which can take several seconds"
        )
        try:
            self._launch(spec)
        except Exception as exc:
            self._fail(f"could not start the runner: {exc}")
            if self._listener is not None:
                self._listener.close()
            self._cleanup_files()
            self._ended.set()
        except BaseException:  # Ctrl-C part-way through the launch
            self._abandon_launch()
            raise

    def _abandon_launch(self) -> None:
        """End what an interrupted launch started. Once the watch thread runs, it owns the end
        (the caller's stop goes the usual way); before that nobody would reap the runner or
        set the run ended, and a stop would wait for an end that never comes."""
        if any(t.name == "gpuwatch-watch" for t in self._threads):
            return
        self._stop_requested.set()
        proc = self._proc
        if proc is not None:
            launcher.end_tree(proc, terminate_after=0.0, kill_after=TERMINATE_S)
        if self._listener is not None:
            self._listener.close()
        self._finish(
            proc.returncode if proc is not None and proc.returncode is not None else -signal.SIGINT
        )

    def stop(self) -> None:
        """Ask the run to end (non-blocking): polite, then terminate, then kill the tree."""
        with self._lock:
            if self._state not in ACTIVE_STATES or self._stop_requested.is_set():
                return
            self._stop_requested.set()
            stopping = self._state is not SessionState.FAILED
            if stopping:
                self._state = SessionState.STOPPING
            self.stalled_at_stop_s = self.liveness.stalled_for(time.monotonic())
        if stopping:
            self._state_changed()
        self._info("stopping")
        self._spawn_thread("gpuwatch-stop", self._escalate_stop)

    def wait_ended(self, timeout: float | None = None) -> bool:
        """Block until the runner and its tree are gone (for the CLI and tests)."""
        return self._ended.wait(timeout)

    def close(self, timeout: float = 15.0) -> None:
        """Stop any run and release threads and files; idempotent."""
        self.stop()
        self._ended.wait(timeout)
        self._stop_samplers()
        deadline = time.monotonic() + timeout
        for t in list(self._threads):
            if t is not threading.current_thread():
                t.join(max(0.0, deadline - time.monotonic()))

    def drain_log(self) -> list[LogLine]:
        """The log lines since the last call; if some had to be dropped (nobody read them in
        time), the first line says how many."""
        return self._log.drain()

    @property
    def log_dropped(self) -> int:
        """Log lines dropped since the session was made (none while ``keep_all_output`` and
        the consumer drains)."""
        return self._log.dropped

    # ---- Launch and threads ----------------------------------------------------------

    def _reset(self) -> None:
        """Forget the previous run (called by ``start`` with ``self._lock`` held)."""
        self.steps.clear()
        self.coarse = SeriesStore()
        self.t0_ns = time.perf_counter_ns()
        self.hello = None
        self.error = None
        self.error_type = None
        self.exit_code = None
        self.bye_reason = None
        self.bye = None
        self.liveness = Liveness(notice_s=self._no_step_notice_s, script=False)
        self.stalled_at_stop_s = None
        self.stop_escalation = None
        self.stopped_after_s = None
        self._hello_at = None
        self.dropped_messages = 0
        self.unusable_messages = {}
        self.baseline_id = None
        self.last_refusal = None
        self._changes.clear()  # the caller holds self._lock
        self._answers.clear()
        self._labels.clear()
        self._scoreboard.clear()
        self._windows.clear()
        self._capture_steps = None
        self.capture_error = None
        self.instruments_off = []
        self._hidden_knobs = set()
        self._link = None
        self._stop_requested.clear()
        self._ended.clear()
        self._threads = [t for t in self._threads if t.is_alive()]

    def _launch(self, spec: LaunchSpec) -> None:
        python = spec.python or launcher.default_python()
        self._private_dir = link.private_dir()
        authkey = link.new_authkey()
        self._listener = link.LinkListener(self._private_dir, authkey)
        extra = ["--max-steps", str(spec.max_steps)] if spec.max_steps else []
        root = launcher.runner_pythonpath(python, self._private_dir)
        if spec.script:
            cmd = launcher.script_command(
                python,
                self._listener.address,
                spec.script,
                spec.script_args,
                device=spec.device,
                root=root,
                extra=extra,
            )
        else:
            cmd = launcher.runner_command(
                python, self._listener.address, spec.workload, spec.device, extra, root=root
            )
        self._proc = launcher.spawn(cmd, launcher.runner_env(), cwd=spec.cwd, authkey=authkey)
        if self._sample_coarse:
            self._add_sampler(ProcessTreeSampler(self.coarse, self._proc.pid))
        self._link_thread = self._spawn_thread("gpuwatch-link", self._read_link)
        self._output_thread = self._spawn_thread("gpuwatch-output", self._read_output)
        self._spawn_thread("gpuwatch-watch", self._watch_process)
        self._spawn_thread("gpuwatch-clock", lambda: self._run_clock(spec))

    def _spawn_thread(self, name: str, target) -> threading.Thread:
        t = threading.Thread(target=self._guarded(target), name=name, daemon=True)
        self._threads.append(t)
        t.start()
        return t

    def _guarded(self, target):
        def run() -> None:
            try:
                target()
            except Exception:
                log.exception("%s failed", threading.current_thread().name)
                self._log_line(
                    "error",
                    "gpuwatch",
                    f"internal error in {threading.current_thread().name}: "
                    f"{traceback.format_exc(limit=3)}",
                )

        return run

    def _read_link(self) -> None:
        listener = self._listener
        conn = listener.accept() if listener is not None else None
        if conn is None:
            return
        self._link = lnk = link.Link(conn)
        while True:
            try:
                message = lnk.recv()
            except link.OversizedMessage as exc:  # the run cannot go on without its link
                self.stop()  # first: stop() leaves a FAILED run alone, and this one must end
                self._fail(str(exc))
                break
            except EOFError:
                break
            except protocol.ProtocolError as exc:
                self.dropped_messages += 1
                n = self.dropped_messages
                if n <= DROPS_LOGGED or n % 1000 == 0:  # a flood must not flood the log
                    self._log_line(
                        "warning",
                        "gpuwatch",
                        f"dropped a message from the runner ({n} so far): {exc}",
                    )
                continue
            self._dispatch(message)
        lnk.close()

    def _dispatch(self, message: dict[str, Any]) -> None:
        """Use one valid message. Whatever it holds, the link thread goes on: a message that
        cannot be used is dropped, counted and, once per kind, logged with the reason."""
        try:
            self._dispatch_kind(message)
        except Exception as exc:
            self._unusable(message["kind"], exc)
            return
        self._notify(message)

    def _unusable(self, kind: str, exc: Exception) -> None:
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
        )

    def _notify(self, message: dict[str, Any]) -> None:
        listeners = self._listeners
        if not listeners:
            return
        t_ns = time.perf_counter_ns()
        for listener in listeners:
            try:
                listener(message, t_ns)
            except Exception as exc:
                self.remove_listener(listener)
                log.exception("listener %r failed", listener)
                self._log_line(
                    "error",
                    "gpuwatch",
                    f"internal error: a listener failed and was detached: {exc}",
                )

    def _dispatch_kind(self, message: dict[str, Any]) -> None:
        kind = message["kind"]
        if kind == "steps":
            self.steps.append(
                message["step"], message["config"], message["samples"], message["host"]
            )
        elif kind == "device_marks":
            self.steps.set_device_marks(message["step"], message["device"])
        elif kind == "hello":
            self._on_hello(message)
        elif kind == "log":
            level = message["level"] if message["level"] in ("info", "warning", "error") else "info"
            off = isinstance(message.get("off"), str)
            if off:
                self.instruments_off.append(message["text"])
            self._log_line(level, "runner", message["text"], notice=off)
        elif kind == "error":
            self.error_type = message["type"]
            self.error = f"{message['type']}: {message['message']}"
            self._log_line("error", "runner", self.error)
            if message.get("traceback"):
                self._log_line("error", "runner", str(message["traceback"]).rstrip())
        elif kind == "bye":
            self.bye = dict(message)
            self.bye_reason = message["reason"]
            self._info(f"runner said goodbye ({message['reason']})")
        elif kind == "config":
            self._on_config(message)
        elif kind == "refused":
            self._on_refused(message)
        elif kind == "knobs":
            self._on_knobs(message)
        elif kind == "kernels":
            self._on_kernels(message)
        elif kind == "device":
            self._on_device(message["device"])
        else:
            self._info(f"runner sent {kind!r}")

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
        self.model.emit(ConfigApplied(change))

    def _on_kernels(self, message: dict[str, Any]) -> None:
        """A capture window (or why there is none); its steps leave the scoreboard."""
        self._capture_steps = None
        try:
            window = KernelWindow.from_message(message)
        except KernelWindowError as exc:
            self.capture_error = str(exc)
            self._log_line("warning", "gpuwatch", str(exc))
            self.model.emit(CaptureFailed(self.capture_error))
            return
        if not window.ok:  # the runner logged the reason already
            self.capture_error = window.error or f"kernel capture {window.status}"
            self.model.emit(CaptureFailed(self.capture_error))
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
        self.model.emit(KernelWindowReady(window))

    def _on_knobs(self, message: dict[str, Any]) -> None:
        """The schema grew (a script declared a knob): show it, with its current value."""
        if self.hello is None:
            return
        self.hello = {**self.hello, "knobs": self._panel_knobs(message["knobs"])}
        with self._lock:
            if self._changes:
                last = self._changes[max(self._changes)]
                values = {**last.values, **message["values"]}
                self._changes[last.id] = dataclasses.replace(last, values=values)

    def _panel_knobs(self, knobs: list[Any]) -> list[Any]:
        """The schema without the integer knobs the knob panel cannot hold (its editors are
        32-bit): each is logged once; the script keeps its value and the scoreboard shows it.
        """
        kept = []
        for knob in knobs:
            too_big = _beyond_panel(knob)
            if too_big is None:
                kept.append(knob)
                continue
            name = knob.get("name")
            if name not in self._hidden_knobs:
                self._hidden_knobs.add(name)
                self._log_line(
                    "warning",
                    "gpuwatch",
                    f"knob {name!r} is not shown: its {too_big} is beyond what the "
                    f"knob panel holds (integers up to ±{KNOB_INT_LIMIT:,}); the "
                    f"script goes on with its value",
                )
        return kept

    def _on_refused(self, message: dict[str, Any]) -> None:
        request = message.get("request")
        refusal = Refusal(
            request if isinstance(request, int) else None,
            dict(message["values"]),
            str(message["message"]),
            time.perf_counter_ns(),
        )
        with self._lock:
            if refusal.request is not None:
                self._labels.pop(refusal.request, None)
                self._answers[refusal.request] = refusal
            self.last_refusal = refusal
        self._log_line("warning", "runner", f"change refused: {refusal.message}")
        self.model.emit(ChangeRefused(refusal))

    def _on_hello(self, hello: dict[str, Any]) -> None:
        if hello["protocol"] != protocol.PROTOCOL_VERSION:
            self.stop()  # first: stop() leaves a FAILED run alone, and this one must end
            self._fail(
                f"the runner speaks protocol {hello['protocol']}, this gpuwatch "
                f"speaks {protocol.PROTOCOL_VERSION}: install the same gpuwatch version "
                f"in the training environment"
            )
            return
        self.hello = {**hello, "knobs": self._panel_knobs(hello["knobs"])}
        self._hello_at = time.monotonic()
        initial = hello["config"]
        values = initial.get("values")
        with self._lock:
            self._changes[0] = ConfigChange(
                id=0,
                values=dict(values) if isinstance(values, dict) else {},
                changed={},
                t_ns=time.perf_counter_ns(),
                first_step=0,
                warmup_steps=initial["warmup_steps"]
                if isinstance(initial.get("warmup_steps"), int)
                else _initial_warmup(values or {}),
                label=BASELINE_LABEL,
            )
            first = self._changes[0]
        self.model.emit(ConfigApplied(first))
        device = hello["device"]
        on_cpu = device.get("kind") != "cuda"
        self.steps.set_device_is_host(on_cpu)
        with self._lock:
            connected = self._state is SessionState.STARTING
            if connected:
                self._state = SessionState.RUNNING
        if connected:
            self._state_changed()
        versions = hello.get("versions", {})
        self._info(
            f"runner pid {hello['pid']}: {hello['workload']} on {device.get('name')} "
            f"(python {versions.get('python')}, torch {versions.get('torch')}, "
            f"timing: {hello.get('timing', 'host')})"
        )
        if not self._sample_coarse:
            return
        if on_cpu:
            nvml_unavailable_statuses(self.coarse, "the runner trains on the CPU")
        elif not device.get("pending"):  # a script's device is named at its first step
            self._add_sampler(
                NvmlSampler.for_device(
                    self.coarse,
                    uuid=device.get("uuid"),
                    pci_bus_id=device.get("pci_bus_id"),
                    index=device.get("index"),
                )
            )

    def _on_device(self, device: dict[str, Any]) -> None:
        """A watched script's CUDA device, known once it ran a step: NVML is matched to it."""
        if self.hello is None:
            return
        pending = (self.hello.get("device") or {}).get("pending")
        self._info(f"the script trains on cuda:{device.get('index')}: {device.get('name')}")
        if not pending:
            return
        self.hello = {**self.hello, "device": dict(device)}
        if self._sample_coarse:
            self._add_sampler(
                NvmlSampler.for_device(
                    self.coarse,
                    uuid=device.get("uuid"),
                    pci_bus_id=device.get("pci_bus_id"),
                    index=device.get("index"),
                )
            )

    def _read_output(self) -> None:
        proc = self._proc
        if proc is None or proc.stdout is None:
            return
        stdout = proc.stdout
        for raw in iter(lambda: stdout.readline(OUTPUT_PIECE_BYTES), b""):
            text = raw.decode("utf-8", "replace").rstrip()
            if text and not is_profiler_noise(text):
                self._log_line("info", "runner", text, wait=self.keep_all_output)

    def _watch_process(self) -> None:
        proc = self._proc
        if proc is None:
            return
        code = proc.wait()
        self.exit_code = code
        if self._listener is not None:
            self._listener.close()  # wakes the link thread if the runner never connected
        if not self._stop_requested.is_set():
            # It ended by itself: make sure no worker outlives it. First, because forked
            # workers and a script's children hold the link and the output pipe open: the
            # drain below would wait for them (what the runner sent is already buffered here).
            launcher.end_tree(proc, terminate_after=1.0, kill_after=TERMINATE_S)
        # Read what the runner sent before it left (last steps, its error, bye).
        for t in (self._link_thread, self._output_thread):
            if t is not None:
                t.join(LINK_DRAIN_S)
        self._finish(code)

    def _run_clock(self, spec: LaunchSpec) -> None:
        """``spec.seconds`` counted from the runner's hello, and the liveness state machine
        (no step yet, first step, stalled, steps again) fed with the steps' arrival."""
        liveness = self.liveness
        while not self._ended.wait(CLOCK_TICK_S):
            hello_at = self._hello_at
            if hello_at is None or self._state is not SessionState.RUNNING:
                continue
            now = time.monotonic()
            transition = liveness.tick(
                now, hello_at=hello_at, steps=self.steps.count, typical_step_s=self.typical_step_s()
            )
            if transition is not None:
                self._announce(transition)
            if (
                spec.seconds is not None
                and now - hello_at >= spec.seconds
                and not self._stop_requested.is_set()
            ):
                self.stopped_after_s = spec.seconds
                self._info(f"stopping after {spec.seconds:g} s (as asked)")
                self.stop()

    def _announce(self, transition: Transition) -> None:
        self._log_line(transition.level, "gpuwatch", transition.text, notice=True)
        self._state_changed()

    def _state_changed(self) -> None:
        """Tell the model's listeners the run's state (or its liveness) changed."""
        self.model.emit(StateChanged(self._state))

    def typical_step_s(self) -> float | None:
        """The median duration of the last few steps (seconds), or None before any."""
        view = self.steps.snapshot(last=TYPICAL_STEPS)
        if not len(view):
            return None
        return float(np.median(view.host[:, -1] - view.host[:, 0])) / 1e9

    def _escalate_stop(self) -> None:
        proc = self._proc
        if proc is None:
            return
        grace = stop_grace_s(self.typical_step_s())
        asked = self._link is not None and self._link.send("stop", grace_s=grace)
        polite = grace + POLITE_STOP_S if asked else 0.0  # no link: nobody to ask
        launcher.end_tree(
            proc, terminate_after=polite, kill_after=TERMINATE_S, on_escalate=self._escalated
        )

    def _escalated(self, how: str) -> None:
        self.stop_escalation = how
        verb = "killing" if how == "killed" else "terminating"
        self._log_line("warning", "gpuwatch", f"the runner did not stop in time: {verb} it")

    def _finish(self, code: int) -> None:
        self._stop_samplers()
        self.liveness.end()
        how = launcher.describe_exit(code)
        with self._lock:
            requested = self._stop_requested.is_set()
            if self._state is SessionState.FAILED:
                pass
            elif self.error is not None:
                self._state = SessionState.FAILED
            elif self.hello is None and self.bye is None and not requested:
                # Not even a runner: e.g. --python /bin/true exits 0 without a word.
                python = (self.spec.python if self.spec else None) or launcher.default_python()
                self._state = SessionState.FAILED
                self.error = (
                    f"the runner {how} before sending anything: is {python} a "
                    f"Python interpreter with torch?"
                )
            elif code == 0 or requested or self._script_exit_code() == code:
                self._state = SessionState.FINISHED  # a script's own sys.exit(n) is no failure
            else:
                self._state = SessionState.FAILED
                self.error = (
                    f"the runner {how} before sending anything"
                    if self.hello is None
                    else f"the runner {how}"
                )
        level = "info" if self._state is SessionState.FINISHED else "error"
        self._log_line(level, "gpuwatch", f"runner {how}")
        self._cleanup_files()
        self._ended.set()
        self._state_changed()

    def _script_exit_code(self) -> int | None:
        """The code a user's script ended with by itself (its bye), if it did."""
        bye = self.bye or {}
        code = bye.get("code")
        if bye.get("reason") == "script_exit" and isinstance(code, int):
            return code
        return None

    def _fail(self, message: str) -> None:
        with self._lock:
            self._state = SessionState.FAILED
            self.error = message
        self._log_line("error", "gpuwatch", message)
        self._state_changed()

    def _cleanup_files(self) -> None:
        if self._private_dir is not None:
            link.remove_private_dir(self._private_dir)
            self._private_dir = None

    # ---- Samplers and log ------------------------------------------------------------

    def _add_sampler(self, sampler: Any) -> None:
        self._samplers.append(sampler)
        sampler.start()

    def _stop_samplers(self) -> None:
        samplers, self._samplers = self._samplers, []
        for s in samplers:
            with contextlib.suppress(Exception):
                s.stop()

    def _info(self, text: str) -> None:
        self._log_line("info", "gpuwatch", text)

    def _log_line(
        self, level: str, source: str, text: str, *, notice: bool = False, wait: bool = False
    ) -> None:
        self._log.append(LogLine(time.perf_counter_ns(), level, source, text, notice), wait=wait)
        if source == "gpuwatch":
            self._notify({"kind": "log", "level": level, "text": text, "source": source})
            log.log(logging.ERROR if level == "error" else logging.INFO, "%s", text)


#: What torch.profiler's C++ side prints on every kernel capture and means nothing to a user:
#: Kineto's USDT start/stop probes, and a CUDA build on a machine without a GPU failing to count
#: devices (CUDA error 35, ``cudaErrorInsufficientDriver``).
_PROFILER_NOISE = re.compile(
    r"^(USDT:.*\] profiler_(start|stop)$"
    r"|ERROR:.*gpuGetDeviceCount failed with code 35$)"
)


def is_profiler_noise(line: str) -> bool:
    """A runner output line from the profiler's start/stop that is harmless (not shown)."""
    return _PROFILER_NOISE.match(line) is not None


def stop_grace_s(typical_step_s: float | None) -> float:
    """How long a stopped script may take to reach its next step boundary: about two typical
    steps, so a long step finishes instead of being cut (bounded: a hang must still end)."""
    if typical_step_s is None:
        return STOP_GRACE_MIN_S
    return min(STOP_GRACE_MAX_S, max(STOP_GRACE_MIN_S, STOP_GRACE_STEPS * typical_step_s))


def device_cores(hello: dict[str, Any] | None, default: int = 1) -> int:
    """The runner's core count from its hello; ``default`` when it sent none or nonsense
    (a ``1e400`` parses as infinity, which no int holds)."""
    cores = hello["device"].get("cores") if hello is not None else None
    if (
        isinstance(cores, int | float)
        and not isinstance(cores, bool)
        and math.isfinite(cores)
        and cores >= 1
    ):
        return int(cores)
    return default


def _beyond_panel(knob: Any) -> str | None:
    """Which integer of an ``int`` knob's schema (default, min, max) the panel cannot hold."""
    if not isinstance(knob, dict) or knob.get("type") != "int":
        return None
    for field in ("default", "min", "max"):
        value = knob.get(field)
        if isinstance(value, int) and not -KNOB_INT_LIMIT <= value <= KNOB_INT_LIMIT:
            return f"{field} {value:,}"
    return None


def _initial_warmup(values: dict[str, Any]) -> int:
    """Transition steps of config 0 (docs/knobs.md §2): the loader rule plus 3."""
    workers = values.get("num_workers", 0)
    prefetch = values.get("prefetch_factor", 2)
    if not isinstance(workers, int) or not isinstance(prefetch, int):
        return 5
    return 2 + workers * prefetch + 3


def _same_value(a: Any, b: Any) -> bool:
    """Equal as knob values: 2 == 2.0 (the runner accepts both), but True is not 1."""
    return a == b and isinstance(a, bool) == isinstance(b, bool)
