"""One watched training run: launch the runner, read its link, sample coarse figures.

The Session is Qt-free. Its threads only write into ring buffers and a log deque; the
window polls ``state``, ``steps``, ``coarse`` and ``drain_log()`` on its redraw timer, so no
object is shared across threads beyond those locked buffers.
"""

from __future__ import annotations

import contextlib
import logging
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

from gpuwatch import protocol
from gpuwatch.core.figures.rank_figures import GpuSeries, RankFigures, RankSteps, with_ranks
from gpuwatch.core.figures.segments import SegmentStats
from gpuwatch.core.model.liveness import Liveness, Transition
from gpuwatch.core.model.log_buffer import LogBuffer, LogLine
from gpuwatch.core.model.messages import (
    ACTIVE_STATES,
    DeviceInfo,
    RankInfo,
    SessionState,
    StateChanged,
)
from gpuwatch.core.model.metrics import NVML_GPU_UTIL
from gpuwatch.core.model.store import DEFAULT_STEP_CAPACITY, SeriesStore
from gpuwatch.core.run import launcher, link
from gpuwatch.core.run.rank_devices import RankDevices, RankGpu
from gpuwatch.core.run.rank_links import (
    RankListener,
    RankRun,
    RankRuns,
    change_problem,
    placed_steps,
    step_ahead,
)
from gpuwatch.core.run.run_model import ModelAccess, RunModel
from gpuwatch.core.run.samplers import (
    NvmlSampler,
    ProcessTreeSampler,
    nvml_unavailable_statuses,
)
from gpuwatch.core.run.torchrun_args import torchrun_target

log = logging.getLogger(__name__)

#: Stop escalation: polite ``stop`` message, then terminate, then kill (seconds per stage).
#: The polite stage lasts the script's grace (``stop_grace_s``: time to reach its next step
#: boundary) plus ``POLITE_STOP_S``. A polite stop normally ends in well under a second; the
#: margin is for a loaded machine, where shutting DataLoader workers down can take seconds and
#: a terminate would lose the runner's last steps and its ``bye``.
POLITE_STOP_S = 10.0
TERMINATE_S = 3.0
#: Once the runner has exited, the stop's thread needs at most this long to end what it left
#: (``launcher.LEFTOVER_GRACE_S``, then terminate and kill, ``TERMINATE_S`` each, and the scans).
STOP_TREE_WAIT_S = 30.0
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
#: How often the run clock (``--seconds``, the liveness notices) looks at the time.
CLOCK_TICK_S = 0.1
#: A stop asks a script to end at its next step boundary; it is interrupted where it is after
#: this many typical steps (at least the minimum, at most the maximum, in seconds).
STOP_GRACE_STEPS = 2.0
STOP_GRACE_MIN_S = 2.0
STOP_GRACE_MAX_S = 60.0
#: A stopped run of many ranks ends when torchrun has seen every rank exit: each rank's
#: teardown (its process group, its workers) comes on top of the polite stop's patience.
RANKS_EXIT_S = 20.0
#: The live straggler finding compares the ranks over this many of their newest steps.
RANK_FIGURES_STEPS = 1000


#: ``listener(message, t_ns)``: every valid runner message (and the GUI side's own log lines as
#: ``{"kind": "log", "source": "gpuwatch", ...}``) with its arrival time on the perf_counter axis.
Listener = Callable[[dict[str, Any], int], None]


class SessionError(RuntimeError):
    """A request the session cannot carry out now (e.g. no runner is connected)."""


@dataclass(frozen=True)
class LaunchSpec:
    """What to run: a built-in workload or the user's script or module, on a device, with which
    Python.

    ``script`` (a path) replaces the workload; the runner executes it as ``__main__`` with
    ``script_args`` as its argv, in ``cwd`` (like ``python SCRIPT ARGS`` started there).
    ``module`` (a dotted name) instead runs that module as ``python -m MODULE ARGS`` would.
    ``seconds`` stops the run cleanly that long after the runner's ``hello`` (the script's
    start, not the torch import before it). ``env`` adds variables to the environment the
    runner (and so the script) starts with, over the user's own.
    """

    workload: str = "vision"
    device: str = "auto"
    python: str | None = None
    max_steps: int | None = None
    script: str | None = None
    script_args: tuple[str, ...] = ()
    cwd: str | None = None
    seconds: float | None = None
    env: tuple[tuple[str, str], ...] = ()
    module: str | None = None
    #: ``(host, port)`` where ranks of other machines connect (``--listen``), with the token
    #: the Session prints as their key; None: this machine's ranks only.
    listen: tuple[str, int] | None = None

    def __post_init__(self) -> None:
        if self.script and self.module:
            raise ValueError("a run is a script or a module, not both")

    @property
    def name(self) -> str:
        """What the run is called on screen: the script's file name, the module, or the
        workload; for torchrun, the script (or module) it runs on its ranks."""
        if self.ranked:
            target = torchrun_target(self.script_args)
            return f"{target} (torchrun)" if target else "torchrun"
        if self.module:
            return self.module
        return Path(self.script).name if self.script else self.workload

    @property
    def ranked(self) -> bool:
        """Whether the run starts ranks (torchrun): each rank then opens a link of its own."""
        return self.module in protocol.TORCHRUN_MODULES

    @property
    def user_code(self) -> bool:
        """Whether the user's own code runs (a script or a module), not a built-in workload:
        its steps are found by the runner's hooks, so it may take none."""
        return bool(self.script or self.module)


def script_problem(script: str) -> str | None:
    """Why ``script`` cannot be run (one sentence), or None: checked before anything starts
    (``gpuwatch run`` and the window's "Watch a training script…" alike)."""
    path = Path(script).expanduser()
    if not path.exists():
        return f"no such script: {script}"
    if path.is_dir():
        return f"{script} is a directory, not a Python script"
    if not path.is_file():
        return f"{script} is not a regular file"
    if not os.access(path, os.R_OK):
        return f"cannot read {script}: permission denied"
    return None


def module_problem(name: str) -> str | None:
    """Why ``name`` is not a module name to give ``python -m`` (one sentence), or None. Only
    the training Python can tell whether the module is there: the runner looks it up."""
    if not name:
        return "-m needs a module name, as in -m pkg.train"
    if not all(part.isidentifier() for part in name.split(".")):
        return f"{name!r} is not a module name (dotted Python names, as in -m pkg.train)"
    return None


class Session(ModelAccess):
    """Launches and watches one runner at a time; restartable after it ends.

    It keeps the runner process, the link, its threads and the samplers; what the runner's
    messages say lives in ``model`` (a ``RunModel``), which the names views read delegate to.
    """

    def __init__(
        self,
        *,
        step_capacity: int = DEFAULT_STEP_CAPACITY,
        sample_coarse: bool = True,
        no_step_notice_s: float = NO_STEP_NOTICE_S,
        keep_all_output: bool = False,
    ) -> None:
        #: What views read of the run, and where they listen for its rare changes.
        self.model = RunModel(step_capacity=step_capacity, log_line=self._model_log_line)
        self.exit_code: int | None = None
        #: Whether the loop makes progress (starting, no step yet, running, stalled, ended).
        self.liveness = Liveness(notice_s=no_step_notice_s, script=False)
        #: Seconds the run had been without a step when its stop was asked for, if it was
        #: stalled then: it was hung, and the outcome says so.
        self.stalled_at_stop_s: float | None = None
        #: "terminated" or "killed" when a stop had to signal the runner's tree (else None).
        self.stop_escalation: str | None = None
        #: Processes the runner started that outlived it by ``launcher.LEFTOVER_GRACE_S``
        #: after it exited, which gpuwatch then ended (a subprocess, a lingering worker).
        self.leftovers_ended = 0
        self.stopped_after_s: float | None = None  # set when ``LaunchSpec.seconds`` ran out
        self.spec: LaunchSpec | None = None
        self._sample_coarse = sample_coarse
        self._no_step_notice_s = no_step_notice_s
        self._hello_at: float | None = None  # time.monotonic() of the hello
        self._listeners: list[Listener] = []
        self._state = SessionState.IDLE
        self._lock = threading.Lock()
        #: The script's output must reach the consumer whole (headless): when the log is full,
        #: reading it waits for a drain (the script's print blocks) instead of dropping lines.
        self.keep_all_output = keep_all_output
        self._log = LogBuffer(LOG_LINES_KEPT)
        self._proc = None
        self._listener: link.LinkListener | None = None
        self._remote: link.LinkListener | None = None
        #: ``HOST:PORT`` and token that ranks of other machines use (``LaunchSpec.listen``).
        self.listen_address: str | None = None
        self.listen_token: str | None = None
        self._link: link.Link | None = None
        self._step_capacity = step_capacity
        #: The ranks of a run of user code (torchrun's, or those a script spawns); None
        #: before a run of user code.
        self._ranks: RankRuns | None = None
        self._rank_devices: RankDevices | None = None
        self._rank_listeners: list[RankListener] = []
        #: Whether a hello reached the listeners: rank 0's is the run's only when the runner
        #: itself said none (torchrun's launcher); a script that spawns its ranks said its own.
        self._hello_told = False
        self._private_dir: Path | None = None
        self._threads: list[threading.Thread] = []
        self._link_thread: threading.Thread | None = None
        self._output_thread: threading.Thread | None = None
        self._samplers: list[Any] = []
        self._stop_requested = threading.Event()
        #: Set once a stop's thread has ended the runner's whole tree.
        self._stop_done = threading.Event()
        self._ended = threading.Event()
        self._ended.set()

    # ---- Public API ------------------------------------------------------------------

    @property
    def state(self) -> SessionState:
        return self._state

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
        ranks = self.ranks()
        if ranks:
            return self._set_on_ranks(ranks, wanted, label)
        request = self.model.next_request(label)
        if not lnk.send("set", values=wanted, request=request):
            raise SessionError("the link to the runner is closed")
        return request

    def _set_on_ranks(self, ranks: list[RankRun], wanted: dict[str, Any], label: str | None) -> int:
        """One change for every rank, applied by each at the same step (announced ahead as
        the stop is, ``rank_links.step_ahead``), so their collectives stay in lockstep. Refused
        as a whole before anything is sent when any rank does not have a knob yet (its
        DataLoader has not started) or cannot use the value; each rank still validates."""
        problem = change_problem(ranks, wanted)
        if problem is not None:
            raise SessionError(problem)
        links = self._ranks
        if links is None:
            raise SessionError("this run has no ranks")
        at_step, _ = step_ahead(ranks, self.typical_step_s())
        request = self.model.next_request(label)
        sent = links.send_all("set", values=wanted, request=request, at_step=at_step)
        if sent < len(ranks):
            raise SessionError(f"only {sent} of {len(ranks)} ranks took the change")
        self._info(f"every rank applies {_describe(wanted)} at step {at_step:,}")
        return request

    @property
    def capturing(self) -> bool:
        """A kernel capture was asked for and its window has not come back yet."""
        return self.model.capture_pending is not None and self._state is SessionState.RUNNING

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
        self.model.capture_pending = steps
        self.model.capture_error = None
        if not lnk.send("capture", steps=steps):
            self.model.capture_pending = None
            raise SessionError("the link to the runner is closed")
        self._info(f"capturing kernels over the next {steps} step(s) (plus one warm-up step)")

    def scoreboard(self) -> list[SegmentStats]:
        """One row per configuration (docs/knobs.md §3), speedups against ``baseline_id``;
        for a run of many ranks, with every rank's figures of each configuration."""
        running = self._state in ACTIVE_STATES
        cores = os.cpu_count() or 1
        rows = self.model.scoreboard(running=running, default_cores=cores)
        ranks = self.ranks()
        if not ranks:
            return rows
        return with_ranks(
            rows, [r.model.scoreboard(running=running, default_cores=cores) for r in ranks]
        )

    def start(self, spec: LaunchSpec) -> None:
        """Launch the runner (non-blocking). Errors become state FAILED with a message."""
        with self._lock:
            if self._state in ACTIVE_STATES:
                raise RuntimeError("a run is already in progress; stop it first")
            self._reset()
            self.spec = spec
            self.liveness = Liveness(notice_s=self._no_step_notice_s, script=spec.user_code)
            self._state = SessionState.STARTING
        self._state_changed()
        what = f"workload {spec.workload!r}"
        if spec.user_code:
            what = f"{'module' if spec.module else 'script'} {spec.name!r}"
        self._info(
            f"starting {what} on {spec.device}: the runner imports "
            f"torch first, which can take several seconds"
        )
        try:
            self._launch(spec)
        except Exception as exc:
            self._fail(f"could not start the runner: {exc}")
            self._close_listeners()
            self._cleanup_files()
            self._ended.set()
        except BaseException:  # Ctrl-C part-way through the launch
            self._abandon_launch()
            raise

    def _close_listeners(self) -> None:
        for listener in (self._listener, self._remote):
            if listener is not None:
                listener.close()

    def _abandon_launch(self) -> None:
        """End what an interrupted launch started. Once the watch thread runs, it owns the end
        (the caller's stop goes the usual way); before that nobody would reap the runner or
        set the run ended, and a stop would wait for an end that never comes."""
        # A watch thread that started owns the end; one the interrupt caught between being
        # listed and being started never will.
        if any(t.name == "gpuwatch-watch" and t.ident is not None for t in self._threads):
            return
        self._stop_requested.set()
        proc = self._proc
        if proc is not None:
            launcher.end_tree(proc, terminate_after=0.0, kill_after=TERMINATE_S)
        self._stop_done.set()  # the tree is gone: nothing waits for a stop's thread
        self._close_listeners()
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
            # A thread an interrupted launch listed but never started has nothing to join.
            if t is not threading.current_thread() and t.ident is not None:
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
        self.model.reset()
        self.exit_code = None
        self.liveness = Liveness(notice_s=self._no_step_notice_s, script=False)
        self.stalled_at_stop_s = None
        self.stop_escalation = None
        self.leftovers_ended = 0
        self.stopped_after_s = None
        self._hello_at = None
        self._link = None
        self._ranks = None
        self._rank_devices = None
        self._remote = None
        self.listen_address = self.listen_token = None
        self._hello_told = False
        self._stop_requested.clear()
        self._stop_done.clear()
        self._ended.clear()
        self._threads = [t for t in self._threads if t.is_alive()]

    def _launch(self, spec: LaunchSpec) -> None:
        python = spec.python or launcher.default_python()
        self._private_dir = link.private_dir()
        authkey = link.new_authkey()
        # User code may start ranks (torchrun, or torch.multiprocessing.spawn in the script):
        # each connects with the same key.
        self._listener = link.LinkListener(self._private_dir, authkey, many=spec.user_code)
        if spec.user_code:
            self._ranks = RankRuns(
                self._listener,
                primary=self._from_rank0,
                log_line=self._model_log_line,
                spawn_thread=self._spawn_thread,
                step_capacity=self._step_capacity,
                primary_steps=self.model.steps,
            )
            for listener in self._rank_listeners:
                self._ranks.add_listener(listener)
            if self._sample_coarse:
                self._rank_devices = RankDevices(self._sample_rank_device, self.coarse)
                self._ranks.add_listener(self._rank_named_device)
            if spec.listen is not None:
                self._listen_remote(spec.listen)
        extra = ["--max-steps", str(spec.max_steps)] if spec.max_steps else []
        extra += ["--private-dir", str(self._private_dir)]
        root = launcher.runner_pythonpath(python, self._private_dir)
        if spec.module or spec.script:
            target = ("--module", spec.module) if spec.module else ("--script", spec.script or "")
            cmd = launcher.user_code_command(
                python,
                self._listener.address,
                target,
                spec.script_args,
                device=spec.device,
                root=root,
                extra=extra,
            )
        else:
            cmd = launcher.runner_command(
                python, self._listener.address, spec.workload, spec.device, extra, root=root
            )
        env = {**launcher.runner_env(), **dict(spec.env)}
        self._proc = launcher.spawn(cmd, env, cwd=spec.cwd, authkey=authkey)
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
        if self._ranks is not None:  # ranks the runner starts connect after it
            self._ranks.start(*([self._remote] if self._remote is not None else []))
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
                self.model.dropped_messages += 1
                n = self.model.dropped_messages
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
            self.model.unusable(message["kind"], exc)
            return
        if message["kind"] == "hello":
            role = message.get("role")
            if role == protocol.ROLE_LAUNCHER or (role == protocol.ROLE_RANK and self._hello_told):
                return  # one hello per run reaches a recording: the runner's, else rank 0's
            self._hello_told = True
        self._notify(message)

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
        """Fold the message into the model, and do what it asks of the process side: check a
        hello's protocol first, then start sampling the device it names."""
        kind = message["kind"]
        if kind == "hello" and message["protocol"] != protocol.PROTOCOL_VERSION:
            self.stop()  # first: stop() leaves a FAILED run alone, and this one must end
            self._fail(
                f"the runner speaks protocol {message['protocol']}, this gpuwatch "
                f"speaks {protocol.PROTOCOL_VERSION}: install the same gpuwatch version "
                f"in the training environment"
            )
            return
        if kind == "error" and message.get("type") == "RankFailed":
            message = {**message, "message": self._rank_failure(message)}
        hello = self.model.hello
        device_pending = hello is not None and hello.device.pending
        self.model.fold(message)
        if kind == "hello":
            self._on_hello()
        elif kind == "device" and device_pending:
            self._sample_device()

    def _on_hello(self) -> None:
        """The runner is connected: the run clock starts and the device is sampled.

        The hello is stored before the state says RUNNING: whoever sees RUNNING finds the
        hello, while whoever sees the hello may still read STARTING for a moment (wait for
        the state, not for the hello)."""
        self._hello_at = time.monotonic()
        with self._lock:
            connected = self._state is SessionState.STARTING
            if connected:
                self._state = SessionState.RUNNING
        if connected:
            self._state_changed()
        hello = self.model.hello
        if not self._sample_coarse or hello is None or hello.role == protocol.ROLE_LAUNCHER:
            return  # torchrun trains nothing: its ranks' hellos name the devices
        if hello.device.kind != "cuda":
            nvml_unavailable_statuses(self.coarse, "the runner trains on the CPU")
        elif not hello.device.pending:  # a script's device is named at its first step
            self._sample_device()

    def add_rank_listener(self, listener: RankListener) -> None:
        """Hear every rank's hello and the other ranks' messages (a recorder); kept across
        runs, as ``add_listener``'s are."""
        with self._lock:
            self._rank_listeners = [*self._rank_listeners, listener]
            ranks = self._ranks
        if ranks is not None:
            ranks.add_listener(listener)

    def remove_rank_listener(self, listener: RankListener) -> None:
        with self._lock:
            self._rank_listeners = [f for f in self._rank_listeners if f is not listener]
            ranks = self._ranks
        if ranks is not None:
            ranks.remove_listener(listener)

    def ranks(self) -> list[RankRun]:
        """The ranks of a torchrun run heard from so far, by rank (none for one process)."""
        return [] if self._ranks is None else self._ranks.runs()

    def rank_figures(self, last: int | None = RANK_FIGURES_STEPS) -> list[RankFigures]:
        """Each rank's figures over its ``last`` newest steps (all with None), by rank."""
        figures = []
        for r in self.ranks():
            view = r.model.steps.snapshot(last=last)
            since = int(view.host[0, 0]) if len(view) else None  # its GPU's samples since then
            figures.append(
                RankFigures.of(
                    r.info.rank,
                    r.info.local_rank,
                    r.info.node,
                    view,
                    world_size=r.info.world_size,
                    node_rank=r.info.node_rank,
                    collective=r.model.collective(),
                    gpu_util=r.model.coarse.snapshot(NVML_GPU_UTIL, since),
                )
            )
        return figures

    def _listen_remote(self, where: tuple[str, int]) -> None:
        """Listen on TCP for ranks of other machines, keyed by a fresh token (printed once:
        ``gpuwatch run --connect HOST:PORT --token T`` on each other node). Fails the launch
        with one sentence when the address cannot be bound."""
        token = link.new_authkey()
        try:
            self._remote = link.LinkListener(Path(), token, many=True, tcp=where)
        except OSError as exc:
            raise SessionError(f"--listen {where[0]}:{where[1]}: {exc.strerror or exc}") from None
        self.listen_address, self.listen_token = self._remote.address, token.hex()
        self._log_line(  # a notice: headless prints it, as the other nodes need it
            "info",
            "gpuwatch",
            f"listening for ranks of other machines on {self.listen_address}: run there "
            f"gpuwatch run --connect {self.listen_address} --token {self.listen_token} "
            "-m torch.distributed.run …",
            notice=True,
        )

    def rank_steps(self, since_ns: int) -> list[RankSteps]:
        """Each rank's steps that end at or after ``since_ns`` (the rank lanes), by rank, on
        rank 0's clock (``rank_links.placed_steps``)."""
        return placed_steps(self.ranks(), since_ns)

    def _from_rank0(self, message: dict[str, Any]) -> None:
        """Rank 0's messages draw the run, its knobs included (every rank runs the same script;
        a change goes to all, ``_set_on_ranks``). Its error and bye stay its own: how the run
        ended is the launcher's (or the script's) to say."""
        if message["kind"] in ("error", "bye"):
            return
        self._dispatch(message)

    def _stop_ranks(self, grace: float) -> float:
        """Ask every rank to stop after the same step, a little ahead of the newest any has
        sent (steps arrive in batches, so a rank may be further on than it said): a rank
        that stopped alone would leave the others waiting for it in a collective. Returns the
        grace that includes the lead, for torchrun and the stop's own patience."""
        ranks = self._ranks
        if ranks is None:
            return grace
        at_step, lead_s = step_ahead(ranks.runs(), self.typical_step_s())
        grace += lead_s
        ranks.send_all("stop", grace_s=grace, at_step=at_step)
        return grace

    def _rank_failure(self, message: dict[str, Any]) -> str:
        """torchrun's failed rank, with the step it had reached (its own model knows)."""
        text = str(message.get("message") or "a rank failed")
        rank = message.get("rank")
        run = self._ranks.get(rank) if self._ranks is not None and isinstance(rank, int) else None
        if run is not None:
            first, sep, rest = text.partition(" (")
            text = f"{first} after {_count(run.model.steps.count, 'step')}{sep}{rest}"
        return f"{text}; torchrun stopped the other ranks"

    def _end_ranks(self) -> None:
        """Close the ranks' links and end any rank process still alive (one torchrun lost
        track of): nothing of a rank's tree outlives the run."""
        ranks = self._ranks
        if ranks is None:
            return
        ranks.close()
        survivors = ranks.end_survivors()
        if survivors:
            self._log_line(
                "info",
                "gpuwatch",
                f"{survivors} rank process(es) outlived torchrun: gpuwatch ended them",
            )

    def _rank_named_device(self, info: RankInfo, message: dict[str, Any], t_ns: int) -> None:
        """A rank said hello or named its device: its GPU gets its NVML series."""
        ranks, devices = self._ranks, self._rank_devices
        if message["kind"] not in ("hello", "device") or ranks is None or devices is None:
            return
        run = ranks.get(info.rank)
        if run is not None:
            devices.saw(run)

    def _sample_rank_device(self, store: SeriesStore, device: DeviceInfo) -> None:
        self._add_sampler(
            NvmlSampler.for_device(
                store, uuid=device.uuid, pci_bus_id=device.pci_bus_id, index=device.index
            )
        )

    def rank_gpus(self) -> list[RankGpu]:
        """The GPUs the ranks of this machine train on, each with its NVML series (none for
        a run of one process, on a CPU, or with coarse sampling off)."""
        devices = self._rank_devices
        return [] if devices is None else devices.gpus()

    def rank_gpu_series(self, since_ns: int) -> list[GpuSeries]:
        """The NVML utilization of each GPU other ranks train on (rank 0's GPU is the run's own
        coarse series), samples ending at or after ``since_ns``."""
        return [
            GpuSeries(gpu.rank, gpu.label, gpu.store.snapshot(NVML_GPU_UTIL, since_ns))
            for gpu in self.rank_gpus()
            if gpu.store is not self.coarse
        ]

    def _sample_device(self) -> None:
        """Sample NVML for the CUDA device hello names (matched by UUID or PCI bus id)."""
        hello = self.model.hello
        if not self._sample_coarse or hello is None:
            return
        device = hello.device
        self._add_sampler(
            NvmlSampler.for_device(
                self.coarse, uuid=device.uuid, pci_bus_id=device.pci_bus_id, index=device.index
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
                # Recorded too (a replay's log shows what the script printed).
                self._notify({"kind": "log", "level": "info", "text": text, "source": "output"})

    def _watch_process(self) -> None:
        proc = self._proc
        if proc is None:
            return
        code = proc.wait()
        self.exit_code = code
        self._close_listeners()  # wakes the link thread if the runner never connected
        # No worker or child of the script may outlive the runner. First, because forked
        # workers and a script's children hold the link and the output pipe open: the drain
        # below would wait for them (what the runner sent is already buffered here).
        if not self._stop_requested.is_set():  # it ended by itself: end what it left
            self._ended_leftovers(
                launcher.end_tree(proc, terminate_after=0.0, kill_after=TERMINATE_S)
            )
        elif not self._stop_done.wait(STOP_TREE_WAIT_S):  # the stop's thread ends the tree
            log.warning("the stop did not end the runner's tree in %.0f s", STOP_TREE_WAIT_S)
        # Read what the runner sent before it left (last steps, its error, bye).
        for t in (self._link_thread, self._output_thread):
            if t is not None:
                t.join(LINK_DRAIN_S)
        if self._ranks is not None:
            self._end_ranks()
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

    def _escalate_stop(self) -> None:
        """Ask the runner to stop, then end its tree; the watch thread waits for this before
        it calls the run ended, so what the stop did is known by then."""
        try:
            proc = self._proc
            if proc is None:
                return
            grace = stop_grace_s(self.typical_step_s())
            patience = POLITE_STOP_S
            if self._ranks is not None and self._ranks.runs():
                grace = self._stop_ranks(grace)
                patience += RANKS_EXIT_S
            asked = self._link is not None and self._link.send("stop", grace_s=grace)
            polite = grace + patience if asked else 0.0  # no link: nobody to ask
            self._ended_leftovers(
                launcher.end_tree(
                    proc,
                    terminate_after=polite,
                    kill_after=TERMINATE_S,
                    on_escalate=self._escalated,
                )
            )
        finally:
            self._stop_done.set()

    def _ended_leftovers(self, end: launcher.TreeEnd) -> None:
        """Say (and keep for the outcome) that processes the runner left behind were ended."""
        if end.leftovers == 0:
            return
        self.leftovers_ended = end.leftovers
        which, them = ("process", "it") if end.leftovers == 1 else ("processes", "them")
        self._log_line(
            "info",
            "gpuwatch",
            f"the runner exited, but {end.leftovers} {which} it started did not exit with it "
            f"(a subprocess, a lingering worker): gpuwatch ended {them}",
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
        # A runner that said why before it exited (bye) has been heard: its exit code is a
        # fact of the log, not a second error.
        announced = (self.bye or {}).get("code") == code
        level = "info" if self._state is SessionState.FINISHED or announced else "error"
        self._log_line(level, "gpuwatch", f"runner {how}")
        self._cleanup_files()
        self._ended.set()
        self._state_changed()

    def _script_exit_code(self) -> int | None:
        """The code a user's script ended with by itself (its bye), if it did."""
        bye = self.model.bye or {}
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

    def _model_log_line(self, level: str, source: str, text: str, notice: bool) -> None:
        self._log_line(level, source, text, notice=notice)

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


def _describe(values: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in values.items())


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def is_profiler_noise(line: str) -> bool:
    """A runner output line from the profiler's start/stop that is harmless (not shown)."""
    return _PROFILER_NOISE.match(line) is not None


def stop_grace_s(typical_step_s: float | None) -> float:
    """How long a stopped script may take to reach its next step boundary: about two typical
    steps, so a long step finishes instead of being cut (bounded: a hang must still end)."""
    if typical_step_s is None:
        return STOP_GRACE_MIN_S
    return min(STOP_GRACE_MAX_S, max(STOP_GRACE_MIN_S, STOP_GRACE_STEPS * typical_step_s))


def _same_value(a: Any, b: Any) -> bool:
    """Equal as knob values: 2 == 2.0 (the runner accepts both), but True is not 1."""
    return a == b and isinstance(a, bool) == isinstance(b, bool)
