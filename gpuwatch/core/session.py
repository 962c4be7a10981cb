"""One watched training run: launch the runner, read its link, sample coarse figures.

The Session is Qt-free. Its threads only write into ring buffers and a log deque; the
window polls ``state``, ``steps``, ``coarse`` and ``drain_log()`` on its redraw timer, so no
object is shared across threads beyond those locked buffers.
"""

from __future__ import annotations

import collections
import contextlib
import enum
import logging
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuwatch import protocol
from gpuwatch.core import launcher, link
from gpuwatch.core.samplers import (
    NvmlSampler,
    ProcessTreeSampler,
    nvml_unavailable_statuses,
)
from gpuwatch.core.store import DEFAULT_STEP_CAPACITY, SeriesStore, StepStore

log = logging.getLogger(__name__)

#: Stop escalation: polite ``stop`` message, then terminate, then kill (seconds per stage).
POLITE_STOP_S = 5.0
TERMINATE_S = 3.0
#: After the runner exits, how long to wait for its last buffered messages.
LINK_DRAIN_S = 5.0
LOG_LINES_KEPT = 5000


class SessionState(enum.Enum):
    IDLE = "idle"
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    FINISHED = "finished"
    FAILED = "failed"


ACTIVE_STATES = frozenset({SessionState.STARTING, SessionState.RUNNING, SessionState.STOPPING})


@dataclass(frozen=True)
class LogLine:
    t_ns: int
    level: str  # "info" | "warning" | "error"
    source: str  # "runner" | "gpuwatch"
    text: str


@dataclass(frozen=True)
class LaunchSpec:
    """What to run: a built-in workload on a device, with which Python."""

    workload: str = "vision"
    device: str = "auto"
    python: str | None = None
    max_steps: int | None = None


class Session:
    """Launches and watches one runner at a time; restartable after it ends."""

    def __init__(self, *, step_capacity: int = DEFAULT_STEP_CAPACITY,
                 sample_coarse: bool = True) -> None:
        self.steps = StepStore(step_capacity)
        self.coarse = SeriesStore()
        self.t0_ns = time.perf_counter_ns()
        self.hello: dict[str, Any] | None = None
        self.error: str | None = None
        self.exit_code: int | None = None
        self.bye_reason: str | None = None
        self.dropped_messages = 0
        self._sample_coarse = sample_coarse
        self._state = SessionState.IDLE
        self._lock = threading.Lock()
        self._log: collections.deque[LogLine] = collections.deque(maxlen=LOG_LINES_KEPT)
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

    def start(self, spec: LaunchSpec) -> None:
        """Launch the runner (non-blocking). Errors become state FAILED with a message."""
        with self._lock:
            if self._state in ACTIVE_STATES:
                raise RuntimeError("a run is already in progress; stop it first")
            self._reset()
            self._state = SessionState.STARTING
        self._info(f"starting workload {spec.workload!r} on {spec.device}: the runner imports "
                   f"torch first, which can take several seconds")
        try:
            self._launch(spec)
        except Exception as exc:
            self._fail(f"could not start the runner: {exc}")
            if self._listener is not None:
                self._listener.close()
            self._cleanup_files()
            self._ended.set()

    def stop(self) -> None:
        """Ask the run to end (non-blocking): polite, then terminate, then kill the tree."""
        with self._lock:
            if self._state not in ACTIVE_STATES or self._stop_requested.is_set():
                return
            self._stop_requested.set()
            if self._state is not SessionState.FAILED:
                self._state = SessionState.STOPPING
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
        lines = []
        while True:
            try:
                lines.append(self._log.popleft())
            except IndexError:
                return lines

    # ---- Launch and threads ----------------------------------------------------------

    def _reset(self) -> None:
        self.steps.clear()
        self.coarse = SeriesStore()
        self.t0_ns = time.perf_counter_ns()
        self.hello = None
        self.error = None
        self.exit_code = None
        self.bye_reason = None
        self.dropped_messages = 0
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
        cmd = launcher.runner_command(python, self._listener.address, spec.workload,
                                      spec.device, extra)
        env = launcher.runner_env(authkey, launcher.runner_pythonpath(python,
                                                                       self._private_dir))
        self._proc = launcher.spawn(cmd, env)
        if self._sample_coarse:
            self._add_sampler(ProcessTreeSampler(self.coarse, self._proc.pid))
        self._link_thread = self._spawn_thread("gpuwatch-link", self._read_link)
        self._output_thread = self._spawn_thread("gpuwatch-output", self._read_output)
        self._spawn_thread("gpuwatch-watch", self._watch_process)

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
                self._log_line("error", "gpuwatch",
                               f"internal error in {threading.current_thread().name}: "
                               f"{traceback.format_exc(limit=3)}")
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
            except EOFError:
                break
            except protocol.ProtocolError as exc:
                self.dropped_messages += 1
                self._log_line("warning", "gpuwatch", f"dropped a message from the runner: "
                                                      f"{exc}")
                continue
            self._dispatch(message)
        lnk.close()

    def _dispatch(self, message: dict[str, Any]) -> None:
        kind = message["kind"]
        if kind == "steps":
            self.steps.append(message["step"], message["config"], message["samples"],
                              message["host"])
        elif kind == "device_marks":
            self.steps.set_device_marks(message["step"], message["device"])
        elif kind == "hello":
            self._on_hello(message)
        elif kind == "log":
            level = message["level"] if message["level"] in ("info", "warning", "error") \
                else "info"
            self._log_line(level, "runner", message["text"])
        elif kind == "error":
            self.error = f"{message['type']}: {message['message']}"
            self._log_line("error", "runner", self.error)
            if message.get("traceback"):
                self._log_line("error", "runner", str(message["traceback"]).rstrip())
        elif kind == "bye":
            self.bye_reason = message["reason"]
            self._info(f"runner said goodbye ({message['reason']})")
        else:  # config / kernels: produced by later runner versions
            self._info(f"runner sent {kind!r}")

    def _on_hello(self, hello: dict[str, Any]) -> None:
        if hello["protocol"] != protocol.PROTOCOL_VERSION:
            self._fail(f"the runner speaks protocol {hello['protocol']}, this gpuwatch "
                       f"speaks {protocol.PROTOCOL_VERSION}: install the same gpuwatch version "
                       f"in the training environment")
            self.stop()
            return
        self.hello = hello
        device = hello["device"]
        on_cpu = device.get("kind") != "cuda"
        self.steps.set_device_is_host(on_cpu)
        with self._lock:
            if self._state is SessionState.STARTING:
                self._state = SessionState.RUNNING
        versions = hello.get("versions", {})
        self._info(f"runner pid {hello['pid']}: {hello['workload']} on {device.get('name')} "
                   f"(python {versions.get('python')}, torch {versions.get('torch')}, "
                   f"timing: {hello.get('timing', 'host')})")
        if not self._sample_coarse:
            return
        if on_cpu:
            nvml_unavailable_statuses(self.coarse, "the runner trains on the CPU")
        else:
            self._add_sampler(NvmlSampler.for_device(
                self.coarse, uuid=device.get("uuid"), pci_bus_id=device.get("pci_bus_id"),
                index=device.get("index")))

    def _read_output(self) -> None:
        proc = self._proc
        if proc is None or proc.stdout is None:
            return
        for raw in proc.stdout:
            text = raw.decode("utf-8", "replace").rstrip()
            if text:
                self._log_line("info", "runner", text)

    def _watch_process(self) -> None:
        proc = self._proc
        if proc is None:
            return
        code = proc.wait()
        self.exit_code = code
        if self._listener is not None:
            self._listener.close()  # wakes the link thread if the runner never connected
        # Read what the runner sent before it left (last steps, its error, bye).
        for t in (self._link_thread, self._output_thread):
            if t is not None:
                t.join(LINK_DRAIN_S)
        if not self._stop_requested.is_set():
            # It ended by itself: make sure no worker outlives it.
            launcher.end_tree(proc, terminate_after=1.0, kill_after=TERMINATE_S)
        self._finish(code)

    def _escalate_stop(self) -> None:
        proc = self._proc
        if proc is None:
            return
        asked = self._link is not None and self._link.send("stop")
        polite = POLITE_STOP_S if asked else 0.0  # no link: nobody to ask
        launcher.end_tree(proc, terminate_after=polite, kill_after=TERMINATE_S)

    def _finish(self, code: int) -> None:
        self._stop_samplers()
        how = launcher.describe_exit(code)
        with self._lock:
            requested = self._stop_requested.is_set()
            if self._state is SessionState.FAILED:
                pass
            elif self.error is not None:
                self._state = SessionState.FAILED
            elif code == 0 or requested:
                self._state = SessionState.FINISHED
            else:
                self._state = SessionState.FAILED
                self.error = (f"the runner {how} before sending anything"
                              if self.hello is None else f"the runner {how}")
        level = "info" if self._state is SessionState.FINISHED else "error"
        self._log_line(level, "gpuwatch", f"runner {how}")
        self._cleanup_files()
        self._ended.set()

    def _fail(self, message: str) -> None:
        with self._lock:
            self._state = SessionState.FAILED
            self.error = message
        self._log_line("error", "gpuwatch", message)

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

    def _log_line(self, level: str, source: str, text: str) -> None:
        self._log.append(LogLine(time.perf_counter_ns(), level, source, text))
        if source == "gpuwatch":
            log.log(logging.ERROR if level == "error" else logging.INFO, "%s", text)
