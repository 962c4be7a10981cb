"""The ranks of a torchrun job: each rank's own authenticated link and its own ``RunModel``.

A ranked run (``gpuwatch run -m torch.distributed.run ...``) starts one runner, the launcher,
which trains nothing; torchrun then starts the ranks, and each opens a link of its own to the
same listener with the same key (``LinkListener(many=True)``). Every rank's messages fold into
that rank's model, so its steps, input wait and errors are its own; rank 0's also reach the
Session (``primary``), which draws the run from them. A rank's clock is ``perf_counter_ns`` of
its own process: one clock per machine (``CLOCK_MONOTONIC``, ``QueryPerformanceCounter``), so
the ranks of one node share the time axis; a rank of another machine (it came in on TCP) is
pinged, and its steps are moved onto rank 0's clock by the round trips (``rank_clock``).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import psutil

from gpuwatch import protocol
from gpuwatch.core.figures.rank_figures import RankSteps
from gpuwatch.core.model.knob_values import KnobValueError, check_usable
from gpuwatch.core.model.messages import RankInfo
from gpuwatch.core.model.rank_clock import Pong, shift_to_rank0
from gpuwatch.core.model.store import DEFAULT_STEP_CAPACITY, StepStore
from gpuwatch.core.run import link
from gpuwatch.core.run.run_model import LogSink, RunModel

log = logging.getLogger(__name__)

#: The ranks of a run stop (or change a knob) after the same step: at least this many steps,
#: and this much training time, beyond the newest step any rank has sent. Steps arrive in
#: 50 ms batches and a loaded machine delays both them and the message, so the lead is
#: generous: a rank that gets the message after that step stops at its next one, and the
#: others then wait for it in a collective until the stop's patience runs out.
STOP_LEAD_MIN_STEPS = 2
STOP_LEAD_S = 2.0
#: The step the lead is priced in when no step's length is known yet (seconds).
UNKNOWN_STEP_S = 2.0

#: A rank of another machine is pinged ``PING_BURST`` times ``PING_BURST_S`` apart once it said
#: hello, then every ``PING_EVERY_S``; its newest ``MAX_PONGS`` answers are kept (hours of
#: them: a step's offset is read from the pongs around it). The burst goes on, up to
#: ``PING_BURST_MAX`` pings, until one round trip took at most ``PING_QUICK_NS``: the first
#: pings meet a rank that is importing and building its model, whose link thread may wait long
#: for the interpreter on a loaded machine (a link that is slow itself ends the burst there).
PING_BURST = 8
PING_BURST_MAX = 64
PING_QUICK_NS = 20_000_000
PING_BURST_S = 0.05
PING_EVERY_S = 2.0
MAX_PONGS = 8192

#: Rank 0's messages, handed to the Session as they arrive (on that rank's link thread).
Primary = Callable[[dict[str, Any]], None]
#: ``listener(rank, message, t_ns)``: every rank's hello, and every message of the ranks other
#: than rank 0 (whose messages are the Session's own), with their arrival time.
RankListener = Callable[[RankInfo, dict[str, Any], int], None]
#: Kinds of rank 0's messages that its listeners get, as they get every other rank's (the
#: recording's ``rank_events``, the Session's GPU samplers); of these, ``collective`` is not
#: the Session model's.
_RANKS_OWN = frozenset({"hello", "device", "collective", "pong"})
#: Starts a named daemon thread the Session keeps (and guards) with its others.
SpawnThread = Callable[[str, Callable[[], None]], threading.Thread]


@dataclass
class RankRun:
    """One rank: who it is, what it sent (``model``), and its process while it lives. A rank
    of another machine (``remote``: it came in on TCP) also has its clock's round trips."""

    info: RankInfo
    model: RunModel
    pid: int | None
    process: psutil.Process | None = field(default=None, repr=False)
    connected: bool = True
    remote: bool = False
    link: link.Link | None = field(default=None, repr=False)
    pongs: collections.deque[Pong] = field(
        default_factory=lambda: collections.deque(maxlen=MAX_PONGS), repr=False
    )

    def clock_pongs(self) -> list[Pong] | None:
        """The round trips to this rank's clock; None for a rank of the window's machine
        (``rank_clock.shift_to_rank0``)."""
        return list(self.pongs) if self.remote else None


class RankRuns:
    """Accepts the ranks' links and keeps a ``RankRun`` per rank (thread-safe reads)."""

    def __init__(
        self,
        listener: link.LinkListener,
        *,
        primary: Primary,
        log_line: LogSink,
        spawn_thread: SpawnThread,
        step_capacity: int = DEFAULT_STEP_CAPACITY,
        primary_steps: StepStore | None = None,
    ) -> None:
        self._listener = listener
        #: Rank 0's steps live once, in the store ``primary`` fills (the Session's): rank 0's
        #: model reads that store and does not fold its steps a second time.
        self._primary_steps = primary_steps
        self._primary = primary
        self._log_line = log_line
        self._spawn_thread = spawn_thread
        self._step_capacity = step_capacity
        self._lock = threading.Lock()
        self._runs: dict[int, RankRun] = {}
        self._links: list[link.Link] = []
        self._listeners: list[RankListener] = []
        self._closed = threading.Event()

    def add_listener(self, listener: RankListener) -> None:
        with self._lock:
            self._listeners = [*self._listeners, listener]

    def remove_listener(self, listener: RankListener) -> None:
        with self._lock:
            self._listeners = [f for f in self._listeners if f is not listener]

    def start(self, *more: link.LinkListener) -> None:
        """Accept ranks until the listener closes, and on ``more`` listeners (ranks of other
        machines on TCP, ``--listen``) until they close."""
        self._spawn_thread("gpuwatch-ranks", functools.partial(self._accept, self._listener))
        for listener in more:
            self._spawn_thread(
                "gpuwatch-ranks", functools.partial(self._accept, listener, remote=True)
            )
        if more:
            self._spawn_thread("gpuwatch-rank-clocks", self._ping)

    def runs(self) -> list[RankRun]:
        """Every rank heard from so far, by rank."""
        with self._lock:
            return [self._runs[r] for r in sorted(self._runs)]

    def get(self, rank: int) -> RankRun | None:
        with self._lock:
            return self._runs.get(rank)

    def send_all(self, kind: str, **fields: Any) -> int:
        """Send one message to every connected rank; how many took it."""
        with self._lock:
            links = list(self._links)
        return sum(1 for lnk in links if lnk.send(kind, **fields))

    def close(self) -> None:
        """Close every rank's link: a rank whose link closes ends itself (its runner's
        watchdog), so none outlives the run, even one torchrun no longer knows."""
        self._closed.set()
        with self._lock:
            links, self._links = self._links, []
        for lnk in links:
            lnk.close()

    def end_survivors(self) -> int:
        """Kill the rank processes still alive (each checked against the process that said
        hello, so a reused pid is never touched); how many there were."""
        ended = 0
        for run in self.runs():
            proc = run.process
            if proc is None:
                continue
            with contextlib.suppress(psutil.Error):
                if proc.is_running():
                    for p in [*proc.children(recursive=True), proc]:
                        with contextlib.suppress(psutil.Error):
                            p.kill()
                    ended += 1
        return ended

    def _accept(self, listener: link.LinkListener, *, remote: bool = False) -> None:
        while (conn := listener.accept()) is not None:
            lnk = link.Link(conn)
            with self._lock:
                self._links.append(lnk)
            self._spawn_thread("gpuwatch-rank", functools.partial(self._read, lnk, remote))

    def _ping(self) -> None:
        """Round trips to the ranks of other machines (``rank_clock``), until closed."""
        # rank -> (pings sent, counted as PING_BURST_MAX once a burst ping came back quickly;
        # when the last went)
        sent: dict[int, tuple[int, float]] = {}
        while not self._closed.wait(PING_BURST_S):
            now = time.monotonic()
            for run in self.runs():
                if not run.remote or not run.connected or run.link is None:
                    continue
                count, last = sent.get(run.info.rank, (0, 0.0))
                if PING_BURST <= count < PING_BURST_MAX and _answered_quickly(run):
                    count = PING_BURST_MAX  # the burst is over: its pongs are not read again
                if count < PING_BURST_MAX or now - last >= PING_EVERY_S:
                    run.link.send("ping", t=time.perf_counter_ns())
                    count, last = count + 1, now
                sent[run.info.rank] = (count, last)

    def _read(self, lnk: link.Link, remote: bool = False) -> None:
        run: RankRun | None = None
        while True:
            try:
                message = lnk.recv()
            except protocol.ProtocolError as exc:
                self._log_line(
                    "warning", "gpuwatch", f"dropped a message from a rank: {exc}", False
                )
                continue
            except EOFError:  # OversizedMessage included: that rank's link is broken
                break
            if run is None:
                run = self._register(message, lnk, remote)
                if run is None:
                    break
            shared = run.info.rank == 0 and self._primary_steps is not None
            if shared and message["kind"] in ("steps", "device_marks"):
                self._primary(message)  # into the one store rank 0's model reads
                continue
            if message["kind"] == "pong":  # the clock's, not the model's
                back_ns = time.perf_counter_ns()
                run.pongs.append(Pong(message["t"], back_ns, message["clock_ns"]))
                self._notify(run.info, message, back_ns)
                continue
            try:
                run.model.fold(message)
            except Exception as exc:
                run.model.unusable(message["kind"], exc)
                continue
            if run.info.rank == 0 and message["kind"] != "collective":
                self._primary(message)
            if run.info.rank != 0 or message["kind"] in _RANKS_OWN:
                self._notify(run.info, message)
        if run is not None:
            run.connected = False
        lnk.close()

    def _notify(self, info: RankInfo, message: dict[str, Any], t_ns: int | None = None) -> None:
        t_ns = time.perf_counter_ns() if t_ns is None else t_ns
        for listener in self._listeners:
            try:
                listener(info, message, t_ns)
            except Exception:  # a listener's bug must not cost the rank its link
                log.exception("rank listener %r failed", listener)
                self.remove_listener(listener)

    def _register(self, message: dict[str, Any], lnk: link.Link, remote: bool) -> RankRun | None:
        """A rank's first message must be a hello that says which rank it is."""
        info = RankInfo.from_message(message.get("rank")) if message["kind"] == "hello" else None
        if info is None:
            self._log_line(
                "warning",
                "gpuwatch",
                f"a peer of the ranked run sent {message['kind']!r} before a rank's hello: "
                "closed its link",
                False,
            )
            return None
        pid = message.get("pid") if isinstance(message.get("pid"), int) else None
        process = None
        if pid is not None:
            with contextlib.suppress(psutil.Error):
                process = psutil.Process(pid)
        prefix = f"rank {info.rank}: "
        quiet = info.rank == 0  # rank 0 speaks through the Session's own model

        def rank_log(level: str, source: str, text: str, notice: bool) -> None:
            if not quiet:
                self._log_line(level, source, prefix + text, notice)

        model = RunModel(step_capacity=self._step_capacity, log_line=rank_log)
        if info.rank == 0 and self._primary_steps is not None:
            model.steps = self._primary_steps
        run = RankRun(
            info=info,
            model=model,
            pid=pid,
            process=process,
            remote=remote,
            link=lnk,
        )
        with self._lock:
            if info.rank in self._runs and self._runs[info.rank].connected:
                self._log_line(
                    "warning",
                    "gpuwatch",
                    f"two processes say they are rank {info.rank}: kept the first",
                    False,
                )
                return None
            self._runs[info.rank] = run
        node = f" on {info.node}" if info.node else ""
        self._log_line(
            "info",
            "gpuwatch",
            f"rank {info.rank} of {info.world_size} connected (local rank {info.local_rank}"
            f"{node}, pid {pid})",
            False,
        )
        return run


def _answered_quickly(run: RankRun) -> bool:
    """Whether a round trip to ``run`` took at most ``PING_QUICK_NS`` (its reader thread adds
    pongs meanwhile: ``list`` copies the deque in one step under the interpreter lock)."""
    return any(pong.rtt_ns <= PING_QUICK_NS for pong in list(run.pongs))


def step_ahead(runs: Sequence[RankRun], typical_s: float | None) -> tuple[int, float]:
    """A step every rank has yet to start (the newest any has sent, plus a lead: steps arrive
    in batches, so a rank may be further on than it said), and the lead's time in seconds."""
    typical = typical_s or UNKNOWN_STEP_S
    lead = max(STOP_LEAD_MIN_STEPS, math.ceil(STOP_LEAD_S / typical))
    newest = max((run.model.steps.count for run in runs), default=0)
    return newest + lead, lead * typical


def change_problem(runs: Sequence[RankRun], wanted: dict[str, Any]) -> str | None:
    """Why a knob change cannot go to every rank (one sentence), or None: a rank has ended,
    has no such knob yet (a DataLoader's knobs appear when the script first iterates it), or
    cannot use the value."""
    for run in runs:
        rank = run.info.rank
        if not run.connected:
            return f"rank {rank} has ended: the change is not sent"
        schema = {k["name"]: k for k in run.model.knobs}
        for name, value in wanted.items():
            knob = schema.get(name)
            if knob is None:
                return (
                    f"rank {rank} has no knob {name} yet (a DataLoader's knobs appear when "
                    "the script first iterates it): the change is not sent"
                )
            try:
                check_usable(knob, value)
            except KnobValueError as exc:
                return f"rank {rank}: {exc}"
    return None


def placed_steps(runs: Sequence[RankRun], since_ns: int) -> list[RankSteps]:
    """Each rank's steps that end at or after ``since_ns`` (rank 0's clock), moved onto rank
    0's clock (``rank_clock.shift_to_rank0``); a rank of another machine whose clock is not
    known yet is left out."""
    rank0 = next((r.clock_pongs() for r in runs if r.info.rank == 0), None)
    found = []
    for run in runs:
        mine = run.clock_pongs()
        if mine is None and rank0 is None:  # the window's machine, as rank 0: nothing to move
            found.append(RankSteps(run.info, run.model.steps.snapshot(since_ns)))
            continue
        near = shift_to_rank0(np.array([since_ns]), mine, rank0)
        if near is None:
            continue
        view = run.model.steps.snapshot(since_ns + int(near[0]))
        shift = shift_to_rank0(view.host[:, 0], mine, rank0)
        if shift is not None:
            found.append(RankSteps(run.info, view.shifted(shift)))
    return found
