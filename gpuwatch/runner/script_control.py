"""The GUI's control messages for a watched script: acted on at the script's step boundaries.

The built-in loop drains ``link.controls`` between its own steps. A script's loop is not ours,
so the step recorder calls ``at_boundary`` between two steps instead: a ``set`` is applied to the
probe knobs there, ``pause`` blocks there, and ``stop`` (or the GUI going away, or
``--max-steps``) raises ``KeyboardInterrupt`` there, which is what Ctrl-C does: the script's
``finally`` blocks run and its DataLoader workers are shut down.

A script may not reach a boundary again (stuck in a long evaluation, or no boundary at all): a
watcher thread then interrupts the main thread itself a grace period after the stop
(a SIGINT to the main thread: Ctrl-C again, wherever the script is). The GUI sends the grace
with the stop (about two of the script's typical steps, so a long step is not cut); the step
that was interrupted is not counted. If even that does not end the script, the GUI terminates
the process tree.

``at_boundary`` runs inside the script's own calls (the step recorder calls it from a hook), so
a failure of gpuwatch's there never reaches the script (``instrument_switch``): a failing kernel
capture switches itself off (later capture requests are refused, saying why), a control message
that cannot be applied is dropped; either says so once. A stop still raises.
"""

from __future__ import annotations

import _thread
import contextlib
import math
import queue
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from gpuwatch.runner.controls import apply_control
from gpuwatch.runner.instrument_switch import CONTROLS, KERNEL_CAPTURE, InstrumentSwitch
from gpuwatch.runner.kernel_capture import KernelCapture, send_no_kernels
from gpuwatch.runner.link import Link
from gpuwatch.runner.probe_knobs import ProbeKnobs
from gpuwatch.runner.step_columns import SpentTime

#: While paused, how often the boundary re-checks for resume/stop.
PAUSE_POLL_S = 0.2
#: The grace a ``stop`` may ask for is clamped to this range (seconds).
GRACE_RANGE_S = (0.1, 600.0)


class ScriptControl:
    """See the module docstring; ``stop_reason`` says why the script was stopped, if it was."""

    def __init__(
        self,
        link: Link,
        knobs: ProbeKnobs,
        *,
        max_steps: int | None = None,
        stop_grace_s: float = 2.0,
        device: str = "cpu",
    ) -> None:
        self.link = link
        self.knobs = knobs
        #: Which of the controls' instruments failed and are off.
        self.switch = InstrumentSwitch(link)
        #: Kernel capture windows over the script's steps (closed by ``script_done``).
        self.capture = KernelCapture(link, device=device)
        self.max_steps = max_steps
        self.stop_grace_s = stop_grace_s
        #: "stopped", "max_steps" or "link_closed" once the script is to stop.
        self.stop_reason: str | None = None
        #: A stop for a step count (a rank of a distributed job: every rank stops after the
        #: same step, so none is left waiting in a collective for the others).
        self.stop_at: int | None = None
        #: Steps finished when the last boundary was reached (read by the control thread).
        self.steps_done = 0
        self.paused = False
        #: True once the script was interrupted where it was (no step boundary in time).
        self.interrupted = False
        self.flush: Callable[[], None] = lambda: None
        #: The hooks' own time, shared with them (``script_instruments``).
        self.spent = SpentTime()
        #: Controls from the control thread. A ``SimpleQueue``: its ``empty()``, asked at every
        #: boundary, is one call in C (``Queue.empty`` runs Python code and takes a lock).
        self._inbox: queue.SimpleQueue[dict[str, Any]] = queue.SimpleQueue()
        #: Controls for a later step (``at_step``: every rank of a distributed job applies a
        #: knob change at the same step), oldest first; only the boundary thread touches it.
        self._later: list[dict[str, Any]] = []
        #: The kernel capture has work at the next boundary: a control was applied, or its
        #: last boundary said so (work only ever starts with a ``capture`` control).
        self._capture_due = False
        self._lock = threading.Lock()
        self._running = False
        self._stop_raised = False
        self._closed = threading.Event()
        self._thread = threading.Thread(
            target=self._watch, name="gpuwatch-script-control", daemon=True
        )

    def start(self) -> None:
        """The script is about to run (called from the main thread): interrupting it is
        allowed, and possible (``make_interruptible``), from now on."""
        make_interruptible()
        with self._lock:
            self._running = True
        self._thread.start()

    def script_done(self) -> None:
        """The script returned (or raised): never interrupt the runner's own teardown."""
        with self._lock:
            self._running = False
        self._closed.set()
        try:
            self.capture.close()
        except Exception as exc:  # never let our teardown change the script's outcome
            self.switch.switch_off(KERNEL_CAPTURE, "kernel capture (close)", exc)

    def at_boundary(self, next_step: int) -> None:
        """Between two steps: apply queued controls; may block (pause) or raise (stop).

        It runs inside a hook whose whole time counts as the instruments' own (``spent``);
        its own time is taken off again: a pause is the user's, a knob change the script's
        reconfiguration, not the hooks' footprint. (One function: it runs at every step.)"""
        start = time.perf_counter_ns()
        try:
            self.steps_done = next_step
            if (
                self.stop_reason is None
                and self.max_steps is not None
                and next_step >= self.max_steps
            ):
                self.stop_reason = "max_steps"
            if self.stop_reason is None and self.stop_at is not None and next_step >= self.stop_at:
                self.stop_reason = "stopped"
            while True:
                if self.stop_reason is not None:
                    with self._lock:
                        self._stop_raised = True
                    raise KeyboardInterrupt(f"gpuwatch: {self.stop_reason}")
                if self._later and _step_of(self._later[0]) <= next_step:
                    self._apply(self._later.pop(0), next_step)
                    continue
                if not self.paused and self._inbox.empty():  # the usual boundary: nothing queued
                    if self._capture_due:
                        self._capture_at_boundary(next_step)
                    return
                try:
                    message = (
                        self._inbox.get(timeout=PAUSE_POLL_S)
                        if self.paused
                        else self._inbox.get_nowait()
                    )
                except queue.Empty:
                    if self.paused:
                        continue
                    if self._capture_due:
                        self._capture_at_boundary(next_step)
                    return
                if _step_of(message) > next_step:
                    self._later.append(message)
                    self._later.sort(key=_step_of)
                    continue
                self._apply(message, next_step)
        finally:
            self.spent.ns -= time.perf_counter_ns() - start

    def _apply(self, message: dict[str, Any], next_step: int) -> None:
        if message["kind"] == "capture":
            if self.switch.is_off(KERNEL_CAPTURE):
                self._refuse_capture()
                return
            self._capture_due = True
        try:
            apply_control(self, message, next_step=next_step, flush=self.flush)
        except Exception as exc:
            self.switch.switch_off(CONTROLS, f"{message['kind']!r} control", exc)

    def _capture_at_boundary(self, next_step: int) -> None:
        self._capture_due = False
        if self.switch.is_off(KERNEL_CAPTURE):
            return
        try:
            self._capture_due = self.capture.at_boundary(next_step)
        except Exception as exc:
            self.switch.switch_off(KERNEL_CAPTURE, "kernel capture", exc)
            with contextlib.suppress(Exception):  # already off and said so
                self.capture.close()

    def _refuse_capture(self) -> None:
        error = self.switch.off[KERNEL_CAPTURE.name]
        send_no_kernels(self.link, "refused", error, self.capture.device)

    def _watch(self) -> None:
        """Move controls to the inbox; a stop or a lost link arms the interrupt fallback."""
        while not self._closed.is_set():
            try:
                message = self.link.controls.get(timeout=0.2)
            except queue.Empty:
                if self.link.lost.is_set():
                    self._request_stop("link_closed")
                    return
                continue
            if message["kind"] == "stop":
                at_step = message.get("at_step")
                grace = grace_s(message, self.stop_grace_s)
                if isinstance(at_step, int) and not isinstance(at_step, bool):
                    self.stop_at = at_step
                    self._arm_stall_interrupt(grace)
                    if self.steps_done > at_step:  # the others stop before this rank does
                        self.link.log(
                            "warning",
                            f"the stop for step {at_step} came at step {self.steps_done}: "
                            "this rank stops at its next step, and the others may wait "
                            "for it until the stop's patience runs out",
                        )
                else:
                    self._request_stop("stopped", grace)
            else:
                self._inbox.put(message)

    def _request_stop(self, reason: str, grace: float | None = None) -> None:
        if self.stop_reason is None:
            self.stop_reason = reason
        self._arm_interrupt(self.stop_grace_s if grace is None else grace)

    def _arm_interrupt(self, grace: float) -> None:
        """Interrupt the script where it is unless it stopped at a boundary within ``grace``."""
        timer = threading.Timer(grace, self._interrupt, args=(grace,))
        timer.daemon = True
        timer.start()

    def _arm_stall_interrupt(self, grace: float) -> None:
        """A stop after a later step (every rank of a job stops after the same one): interrupt
        the script only when ``grace`` passes without a step boundary. The ranks reach that
        step in lockstep however much a loaded machine slows them; a timer from the message
        would interrupt a rank slowed to just short of it while the others stop on it, and
        they would end a step apart. A rank stuck in a collective (a peer gone) still ends."""

        def watch() -> None:
            seen = self.steps_done
            while not self._closed.wait(grace):
                with self._lock:
                    if not self._running or self._stop_raised:
                        return
                if self.steps_done == seen:
                    self._interrupt(
                        grace,
                        f"the script reached no step boundary for {grace:.1f} s on its way "
                        f"to the stop after step {self.stop_at}",
                    )
                    return
                seen = self.steps_done

        threading.Thread(target=watch, name="gpuwatch-stop-stall", daemon=True).start()

    def _interrupt(self, grace: float, why: str | None = None) -> None:
        with self._lock:
            if self._running and not self._stop_raised:
                self._stop_raised = True
                self.interrupted = True
                if self.stop_reason is None:  # a stop for a step count the script never reached
                    self.stop_reason = "stopped"
                late = (
                    why or f"the script reached no step boundary within {grace:.1f} s of the stop"
                )
                self.link.log(
                    "warning",
                    f"{late}: interrupting it (the step it was in is not counted)",
                )
                interrupt_main_thread()


def make_interruptible() -> None:
    """Let the stop's interrupt reach the script when SIGINT was ignored when we started.

    A shell starts a background job (``gpuwatch run … &``) or a ``nohup`` command with SIGINT
    ignored, and an ignored signal stays ignored across ``exec``: Python then installs no
    Ctrl-C handler, and the SIGINT ``interrupt_main_thread`` aims at the main thread would be
    dropped, so a script stuck between steps would only end when the stop gives up and
    terminates it. Here ``signal.default_int_handler`` is installed instead, before the script
    runs; a handler the script sets later (``SIG_IGN`` included) still wins.

    What the script sees differs from ``python SCRIPT &`` in one way: ``signal.getsignal``
    answers ``default_int_handler`` instead of ``SIG_IGN``, and programs it starts begin with
    SIGINT at its default instead of ignored. A handler can only be set from the main thread,
    before the script blocks, so it cannot wait for the stop. Nothing else sends the runner
    SIGINT: it leads its own session, which no terminal's Ctrl-C reaches, so the only SIGINT
    it gets is the stop's own, or one sent to its pid on purpose (which then interrupts it, as
    it would a foreground ``python SCRIPT``). A handler already in place is left alone.
    """
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def interrupt_main_thread() -> None:
    """Ctrl-C in the main thread, wherever it is: a real SIGINT aimed at it on POSIX, so a
    blocking call (``time.sleep``, a lock, a socket read) returns with EINTR and the
    ``KeyboardInterrupt`` is raised at once; ``_thread.interrupt_main`` alone only sets a flag
    that Python looks at after the blocking call returns. Windows has no ``pthread_kill``."""
    if hasattr(signal, "pthread_kill"):
        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)
    else:
        _thread.interrupt_main()


def _step_of(message: dict[str, Any]) -> int:
    """The step a control is for (``at_step``), or 0: at the next boundary."""
    step = message.get("at_step")
    return step if isinstance(step, int) and not isinstance(step, bool) else 0


def grace_s(message: dict[str, Any], default: float) -> float:
    """The grace a ``stop`` message asks for (a number of seconds), clamped; else ``default``."""
    value = message.get("grace_s")
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return default
    low, high = GRACE_RANGE_S
    return min(high, max(low, float(value)))
