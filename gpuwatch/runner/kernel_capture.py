"""On-demand kernel capture: ``torch.profiler`` over the next N steps, read without JSON.

A ``capture {steps: N}`` arms a window; it opens at the next step boundary and covers one
warm-up step (the profiler's start-up cost lands there, docs/design.md "Kernel capture") and
then N recorded steps: ``schedule(wait=0, warmup=1, active=N, repeat=1)``, one ``prof.step()``
per boundary. Events come from ``prof.profiler.kineto_results.events()`` in ``on_trace_ready``
(raw ``_KinetoEvent``s: no trace file, no ``FunctionEvent`` trees) and are matched by their
``activity_type()`` *name* (the enum's numbers move between versions).

**Clock.** Kineto's timestamps are not ``perf_counter_ns``: on Linux they are Unix-epoch ns, on
Windows and macOS torch's steady clock, converted from the TSC. So as the window starts
recording, the capture opens ``CLOCK_MARKS`` empty ``record_function`` ranges, each between two
``perf_counter_ns`` reads; every marker's Kineto start and end must lie inside its bracket,
which bounds the offset from both sides (``marker_bounds``, microseconds wide; half of it is
``offset_error_ns``). One offset serves the whole window: torch converts the approximate clock
to Unix ns with one linear map per session (c10 ``ApproximateClockToUnixTimeConverter``). No wall
clock is involved, so Windows' 15.6 ms ``time.time_ns()`` tick (before Python 3.13) does not
matter. The markers are left out of the window; if they are missing, the events are not this
window's (another session replaced it) and the window fails.

**The script's own profiler wins.** Kineto runs one session per process and the last one
prepared cancels the others (``profiler_watch.py``). A capture is refused while the script's
profiler records or warms up; if the script starts one during a window, the capture stops its
own session first (so the script's trace is whole) and reports the window as failed.

**Nothing stays attached.** ``prof.stop()`` disables Kineto's activities, but on CUDA Kineto
detaches CUPTI (``cuptiFinalize``) only when ``TEARDOWN_CUPTI=1`` (pytorch/kineto
``CuptiActivityApi::teardownContext``); without it CUPTI stays loaded and later steps can run
slower (pytorch/pytorch#144455, #146604) and another CUPTI client cannot subscribe. So on
CUDA ≥ 12.6 (where teardown no longer crashes with CUDA graphs) and unless the script set the
variable itself, the capture sets ``TEARDOWN_CUPTI=1`` for its stop and the step after it (the
teardown finishes on that step's first CUDA call, which is then marked perturbed), and restores
the environment at the next boundary or as soon as the script prepares a profiler. Otherwise
CUPTI stays attached and the runner says so once.

What goes out is one ``kernels`` message (protocol.py): on CUDA the kernels, memcpys and
memsets with their stream, launch time (the correlated runtime call) and launch geometry from
``metadata_json()``; on a CPU the outermost CPU ops of each thread (nested ops add nothing to
busy time and would overlap on a lane). At most ``MAX_EVENTS`` events, the earliest; the rest
are counted in ``dropped``. The window is ``[t0_ns, t1_ns]``: from the first recorded step's
start to the boundary after the last one, on CUDA extended to the last device event's end (the
GPU runs behind the host). A window that cannot start, is disturbed or cannot be read ends as
``status: failed`` with one sentence (a request the script's profiler forbids as ``refused``),
and training goes on.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterable, MutableMapping
from contextlib import AbstractContextManager
from typing import Any, Protocol

from gpuwatch.protocol import KERNEL_KINDS, MAX_CAPTURE_STEPS, MAX_MESSAGE_BYTES
from gpuwatch.runner.profiler_watch import ProfilerWatch

#: Events per ``kernels`` message (~45 bytes each on a CPU, ~120 with CUDA geometry); a
#: message that would still pass ``MESSAGE_BUDGET`` bytes keeps fewer (``fit_message``).
MAX_EVENTS = 50_000
#: Bytes a ``kernels`` message may take, below ``protocol.MAX_MESSAGE_BYTES``.
MESSAGE_BUDGET = MAX_MESSAGE_BYTES * 3 // 4
#: Longer names (templated C++ kernels) are cut: the name table is sent once per window.
MAX_NAME_CHARS = 300
#: Clock pairs sampled by ``epoch_offset``, the fallback when no marker could be emitted.
CLOCK_PAIRS = 7
#: Marker ranges emitted as a window starts recording; they pin Kineto's clock to the host's.
CLOCK_MARKS = 5
#: Name prefix of the marker ranges (``gpuwatch:clock#0`` ...), never shown as events.
MARKER = "gpuwatch:clock#"
#: The CUDA runtime from which Kineto's CUPTI teardown is safe with CUDA graphs
#: (pytorch/pytorch#146604).
TEARDOWN_MIN_CUDA = (12, 6)

DISTURBED = (
    "the script started its own profiler during the window; gpuwatch closed its "
    "capture first so the script's trace stays whole"
)
REPLACED = (
    "the capture's profiler session was replaced by another one (its events are not this window's)"
)

_KIND_OF_ACTIVITY = {
    "kernel": KERNEL_KINDS.index("kernel"),
    "gpu_memcpy": KERNEL_KINDS.index("memcpy"),
    "gpu_memset": KERNEL_KINDS.index("memset"),
    "cpu_op": KERNEL_KINDS.index("cpu_op"),
}
_CPU_OP = KERNEL_KINDS.index("cpu_op")
_RUNTIME = frozenset({"cuda_runtime", "cuda_driver"})


class CaptureLink(Protocol):
    """What the kernel capture needs of the runner's link: sending the captured window, logging a
    line."""

    def send(self, kind: str, **fields: Any) -> None: ...

    def log(self, level: str, text: str) -> None: ...


class KinetoEvent(Protocol):
    """The ``torch._C._autograd._KinetoEvent`` methods read here (tests use fakes)."""

    def name(self) -> str: ...

    def activity_type(self) -> str: ...

    def start_ns(self) -> int: ...

    def end_ns(self) -> int: ...

    def device_resource_id(self) -> int: ...

    def correlation_id(self) -> int: ...

    def metadata_json(self) -> str: ...


def epoch_offset(
    wall: Callable[[], int] = time.time_ns,
    clock: Callable[[], int] = time.perf_counter_ns,
    pairs: int = CLOCK_PAIRS,
) -> int:
    """``time_ns() - perf_counter_ns()`` from the narrowest of ``pairs`` brackets."""
    best: tuple[int, int] | None = None
    for _ in range(pairs):
        a = clock()
        w = wall()
        b = clock()
        if best is None or b - a < best[0]:
            best = (b - a, w - (a + b) // 2)
    assert best is not None
    return best[1]


def marker_bounds(spans: list[tuple[int, int]], brackets: list[tuple[int, int]]) -> tuple[int, int]:
    """``(low, high)``: the offsets (Kineto clock minus ``perf_counter_ns``) every marker allows.

    Marker i ran between host reads ``brackets[i] = (a, b)`` and Kineto recorded it as
    ``spans[i] = (start, end)``, so the offset lies in ``[end - b, start - a]``; this is the
    intersection over all markers, empty (``low > high``) if a clock stepped between them.
    """
    if not spans or len(spans) != len(brackets):
        raise ValueError("one bracket per marker span is needed")
    pairs = list(zip(spans, brackets, strict=True))
    low = max(end - b for (_, end), (_, b) in pairs)
    high = min(start - a for (start, _), (a, _) in pairs)
    return low, high


def marker_offset(spans: list[tuple[int, int]], brackets: list[tuple[int, int]]) -> int:
    """Kineto clock minus ``perf_counter_ns``: the middle of ``marker_bounds``, or, if the
    markers disagree (a clock stepped), the narrowest bracket's own middle."""
    low, high = marker_bounds(spans, brackets)
    if low <= high:
        return (low + high) // 2
    (start, end), (a, b) = min(zip(spans, brackets, strict=True), key=lambda p: p[1][1] - p[1][0])
    return (start + end) // 2 - (a + b) // 2


def marker_error(spans: list[tuple[int, int]], brackets: list[tuple[int, int]]) -> int | None:
    """How far ``marker_offset`` can be from the true offset: half the markers' intersection
    (None when they disagree, and nothing bounds it)."""
    low, high = marker_bounds(spans, brackets)
    return (high - low + 1) // 2 if low <= high else None


def marker_spans(events: Iterable[KinetoEvent], count: int) -> list[tuple[int, int]] | None:
    """The Kineto spans of markers ``MARKER0 .. MARKER{count-1}``, or None if any is missing."""
    found: dict[str, tuple[int, int]] = {}
    for event in events:
        name = event.name()
        if name.startswith(MARKER):
            found.setdefault(name, (event.start_ns(), event.end_ns()))
    spans = [found.get(f"{MARKER}{i}") for i in range(count)]
    return None if any(span is None for span in spans) else spans  # type: ignore[return-value]


def cuda_runtime_version() -> tuple[int, int] | None:
    """``torch.version.cuda`` as (major, minor), or None on a build without CUDA."""
    try:
        import torch

        major, minor = str(torch.version.cuda).split(".")[:2]
        return int(major), int(minor)
    except Exception:
        return None


class CuptiRelease:
    """Has Kineto detach CUPTI when a CUDA window stops (module docstring, "Nothing stays
    attached"), by setting ``TEARDOWN_CUPTI=1`` around the stop; leaves a value the script
    set alone."""

    def __init__(
        self,
        environ: MutableMapping[str, str] | None = None,
        cuda_version: Callable[[], tuple[int, int] | None] = cuda_runtime_version,
    ) -> None:
        self.environ = os.environ if environ is None else environ
        self._cuda_version = cuda_version
        self._set = False

    @property
    def armed(self) -> bool:
        return self._set

    def arm(self) -> str | None:
        """Before the window's profiler stops: set the variable, or say why CUPTI stays."""
        if self._set:
            return None
        current = self.environ.get("TEARDOWN_CUPTI")
        if current is not None:
            return (
                None
                if current == "1"
                else f"CUPTI stays attached after the capture (TEARDOWN_CUPTI={current} is "
                f"set): later steps may run slower, and no other CUPTI tool can attach"
            )
        version = self._cuda_version()
        if version is None or version < TEARDOWN_MIN_CUDA:
            shown = "unknown" if version is None else f"{version[0]}.{version[1]}"
            return (
                f"CUPTI stays attached after the capture: before CUDA 12.6 Kineto's "
                f"teardown can crash CUDA graphs (this torch: CUDA {shown}); later steps "
                f"may run slower"
            )
        self.environ["TEARDOWN_CUPTI"] = "1"
        self._set = True
        return None

    def restore(self) -> None:
        """The teardown has run (or the script is about to profile): the script's environment
        again."""
        if self._set and self.environ.get("TEARDOWN_CUPTI") == "1":
            del self.environ["TEARDOWN_CUPTI"]
        self._set = False


def torch_marker(name: str) -> AbstractContextManager[Any]:
    """An empty profiler range (``record_function``): a ``user_annotation`` event."""
    from torch.autograd.profiler import record_function

    return record_function(name)


class SessionWatch(Protocol):
    """What ``KernelCapture`` needs of ``profiler_watch.ProfilerWatch`` (tests use fakes)."""

    def subscribe(self, listener: Callable[[str], None]) -> bool: ...

    def unsubscribe(self, listener: Callable[[str], None]) -> None: ...

    def own(self) -> AbstractContextManager[None]: ...

    def busy_reason(self) -> str | None: ...


def parse_steps(value: Any) -> int | None:
    """The step count of a ``capture`` request, or None if it is not 1..MAX_CAPTURE_STEPS."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 1 <= value <= MAX_CAPTURE_STEPS else None


def kernel_geometry(metadata: str) -> tuple[list[int] | None, list[int] | None, float | None]:
    """``grid``, ``block`` and ``blocks per SM`` from Kineto's kernel metadata, where given.

    Kineto writes the metadata as JSON members without the braces (``"grid": [1, 1, 1], ...``).
    """
    text = metadata.strip()
    if not text:
        return None, None, None
    try:
        data = json.loads(text if text.startswith("{") else "{" + text + "}")
    except ValueError:
        return None, None, None
    if not isinstance(data, dict):
        return None, None, None
    return _dim3(data.get("grid")), _dim3(data.get("block")), _number(data.get("blocks per SM"))


def window_message(
    events: Iterable[KinetoEvent],
    *,
    device: str,
    offset_ns: int,
    t0_ns: int,
    t1_ns: int,
    steps: list[int],
    perturbed: list[int],
    max_events: int = MAX_EVENTS,
) -> dict[str, Any]:
    """The fields of an ``ok`` ``kernels`` message from raw events (epoch ns → host ns)."""
    cuda = device == "cuda"
    launches: dict[int, int] = {}  # correlation id -> host ns of the runtime launch call
    rows: list[tuple[int, int, int, int, str, str, int]] = []
    for event in events:  # rows: start, end, type, stream, name, metadata, correlation id
        activity = event.activity_type()
        if cuda and activity in _RUNTIME:
            launches[event.correlation_id()] = event.start_ns() - offset_ns
            continue
        kind = _KIND_OF_ACTIVITY.get(activity)
        if kind is None or (kind == _CPU_OP) == cuda:  # CUDA: GPU activities; CPU: CPU ops
            continue
        name = event.name()
        if name.startswith(MARKER):  # the capture's own clock markers
            continue
        rows.append(
            (
                event.start_ns() - offset_ns,
                event.end_ns() - offset_ns,
                kind,
                event.device_resource_id(),
                name,
                event.metadata_json() if cuda else "",
                event.correlation_id() if cuda else 0,
            )
        )
    order = sorted(range(len(rows)), key=lambda i: (rows[i][0], -rows[i][1]))
    if not cuda:
        order = _outermost(rows, order)
    dropped = max(0, len(order) - max_events)
    first_dropped = rows[order[max_events]][0] if dropped else None
    order = order[:max_events]
    if cuda and order:  # the device runs behind the host: its last kernels end after t1
        t1_ns = max(t1_ns, *(rows[i][1] for i in order))
    covered = t1_ns if first_dropped is None else first_dropped
    names: dict[str, int] = {}
    out: dict[str, Any] = {
        "status": "ok",
        "device": device,
        "steps": steps,
        "perturbed": perturbed,
        "t0_ns": t0_ns,
        "t1_ns": t1_ns,
        "covered_t1_ns": covered,
        "dropped": dropped,
        "type": [],
        "name": [],
        "stream": [],
        "start": [],
        "end": [],
    }
    for i in order:
        start, end, kind, stream, name, _, _ = rows[i]
        out["type"].append(kind)
        out["name"].append(names.setdefault(name[:MAX_NAME_CHARS], len(names)))
        out["stream"].append(int(stream))
        out["start"].append(int(start))
        out["end"].append(int(max(end, start)))
    out["names"] = list(names)
    if cuda:
        geometry = [kernel_geometry(rows[i][5]) for i in order]
        out["launch"] = [launches.get(rows[i][6]) for i in order]
        out["grid"] = [g for g, _, _ in geometry]
        out["block"] = [b for _, b, _ in geometry]
        out["blocks_per_sm"] = [s for _, _, s in geometry]
    return out


def fit_message(
    events: list[KinetoEvent], *, budget: int = MESSAGE_BUDGET, **fields: Any
) -> dict[str, Any]:
    """``window_message`` with as many events as fit ``budget`` bytes of JSON."""
    limit = fields.pop("max_events", MAX_EVENTS)
    while True:
        message = window_message(events, max_events=limit, **fields)
        size = len(json.dumps(message, separators=(",", ":")))
        n = len(message["start"])
        if size <= budget or n == 0:
            return message
        limit = max(0, min(n - 1, int(n * budget / size * 0.95)))


def _outermost(rows: list[tuple[int, int, int, int, str, str, int]], order: list[int]) -> list[int]:
    """Rows not nested in an earlier row of the same thread (``order`` is by start)."""
    reach: dict[int, int] = {}  # thread -> latest end so far
    keep = []
    for i in order:
        start, end, thread = rows[i][0], rows[i][1], rows[i][3]
        if thread not in reach or start >= reach[thread]:
            keep.append(i)
        reach[thread] = max(reach.get(thread, end), end)
    return keep


def _dim3(value: Any) -> list[int] | None:
    if (
        isinstance(value, list)
        and len(value) == 3
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    ):
        return [int(v) for v in value]
    return None


def _number(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def torch_profiler(device: str, steps: int, on_ready: Callable[[Any], None]) -> Any:
    """A started-later ``torch.profiler.profile``: one warm-up step, then ``steps`` recorded.

    Shapes, stacks and memory stay off: each costs time per recorded op
    (https://pytorch.org/docs/stable/profiler.html).
    """
    from torch.profiler import ProfilerActivity, profile, schedule

    activities = [ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(ProfilerActivity.CUDA)
    return profile(
        activities=activities,
        schedule=schedule(wait=0, warmup=1, active=steps, repeat=1),
        on_trace_ready=on_ready,
        record_shapes=False,
        with_stack=False,
        profile_memory=False,
    )


class KernelCapture:
    """One capture window at a time, driven from the training loop's step boundaries.

    ``request`` is called from ``apply_control``; ``at_boundary`` between every two steps
    (not while paused); ``close`` when the loop ends (a window still open is torn down and
    reported as failed). The profiler, the marker ranges, the session watch and the CUPTI
    release are injectable for tests.
    """

    def __init__(
        self,
        link: CaptureLink,
        *,
        device: str,
        profiler_factory: Callable[[str, int, Callable[[Any], None]], Any] = torch_profiler,
        clock: Callable[[], int] = time.perf_counter_ns,
        wall: Callable[[], int] = time.time_ns,
        marker: Callable[[str], AbstractContextManager[Any]] = torch_marker,
        watch: SessionWatch | None = None,
        release: CuptiRelease | None = None,
    ) -> None:
        self.link = link
        self.device = device
        self._factory = profiler_factory
        self._clock = clock
        self._wall = wall
        self._marker = marker
        self._watch: SessionWatch = ProfilerWatch.shared() if watch is None else watch
        self._release = CuptiRelease() if release is None else release
        self._lock = threading.RLock()
        self._wanted: int | None = None
        self._prof: Any = None
        self._steps = 0
        self._first_step = 0  # the warm-up step's id
        self._t0_ns = 0
        self._t1_ns = 0
        self._brackets: list[tuple[int, int]] = []
        self._message: dict[str, Any] | None = None
        self._error: str | None = None
        self._disturbed = False
        self._release_at: int | None = None  # the boundary that restores TEARDOWN_CUPTI
        self._cupti_note_sent = False
        #: Kineto clock minus perf_counter_ns of the last window, and how it was found.
        self.offset_ns: int | None = None
        self.offset_source = ""
        #: How far ``offset_ns`` can be off, from the markers (None: not bounded by them).
        self.offset_error_ns: int | None = None
        self.windows_sent = 0
        self._watching = self._watch.subscribe(self._on_script_profiler)

    @property
    def busy(self) -> bool:
        return self._wanted is not None or self._prof is not None

    def request(self, steps: Any) -> None:
        n = parse_steps(steps)
        with self._lock:
            reason = self._watch.busy_reason()
            if n is None:
                self._report(
                    "refused",
                    f"capture needs a whole number of steps from 1 to "
                    f"{MAX_CAPTURE_STEPS}, not {steps!r}",
                )
            elif self.busy:
                self._report("refused", "a kernel capture is already running: wait for its window")
            elif reason is not None:
                self._report("refused", reason)
            else:
                self._wanted = n

    def at_boundary(self, next_step: int) -> bool:
        """Open an armed window, or advance the open one by one step. Returns whether a later
        boundary has work (a window open, or CUPTI's release to undo): until the next
        ``request``, a caller may skip the boundaries after one that said no."""
        if self._release_at is None and self._prof is None and self._wanted is None:
            return False  # the usual boundary: nothing to do, and no lock taken for it
        with self._lock:
            if self._release_at is not None and next_step >= self._release_at:
                self._release_at = None
                self._release.restore()
            if self._prof is not None:
                self._advance(next_step)
            elif self._wanted is not None:
                self._open(next_step)
            return self._release_at is not None or self.busy

    def close(self) -> None:
        """The loop is ending: never leave the profiler running, nor the environment set."""
        with self._lock:
            self._wanted = None
            if self._prof is not None:
                self._teardown()
                self._report("failed", "the run ended before the capture window was complete")
            self._release_at = None
            self._release.restore()
            if self._watching:
                self._watch.unsubscribe(self._on_script_profiler)
                self._watching = False

    def _open(self, next_step: int) -> None:
        steps, self._wanted = self._wanted, None
        assert steps is not None
        reason = self._watch.busy_reason()
        if reason is not None:  # the script's profiler started after the request
            self._report("refused", reason)
            return
        self._message, self._error, self._disturbed = None, None, False
        self._brackets = []
        try:
            with self._watch.own():
                self._prof = self._factory(self.device, steps, self._on_ready)
                self._prof.start()
        except Exception as exc:
            self._teardown()
            self._report(
                "failed",
                f"the profiler could not start ({_reason(exc)}); {_cupti_hint(self.device)}",
            )
            return
        self._steps = steps
        self._first_step = next_step

    def _advance(self, next_step: int) -> None:
        done = next_step - self._first_step  # steps finished since the window opened
        last = done >= 1 + self._steps
        if last:
            self._t1_ns = self._clock()
            self._arm_release(next_step)
        try:
            with self._watch.own():
                self._prof.step()  # the step after the last recorded one calls _on_ready
        except Exception as exc:
            self._error = f"the profiler failed ({_reason(exc)})"
        if done == 1:
            self._t0_ns = self._clock()  # the first recorded step starts now
            self._mark_clock()
        if last or self._error is not None:
            self._teardown()
            self._finish(next_step, self._clock() - self._t1_ns if last else 0)

    def _mark_clock(self) -> None:
        """Marker ranges between host clock reads, while the window records (``_on_ready``
        turns them into the clock offset)."""
        brackets = []
        try:
            for i in range(CLOCK_MARKS):
                a = self._clock()
                with self._marker(f"{MARKER}{i}"):
                    pass
                brackets.append((a, self._clock()))
        except Exception as exc:  # no markers: the wall-clock pairs stand in
            self.link.log("info", f"kernel capture clock markers: {_reason(exc)}")
            brackets = []
        self._brackets = brackets

    def _on_ready(self, prof: Any) -> None:
        """``on_trace_ready``: read the raw events while the results are alive."""
        if self._disturbed:
            return
        try:
            events = list(prof.profiler.kineto_results.events())
            offset = self._offset(events)
            if offset is None:
                self._error = REPLACED
                return
            active = list(range(self._first_step + 1, self._first_step + 1 + self._steps))
            self._message = fit_message(
                events,
                device=self.device,
                offset_ns=offset,
                t0_ns=self._t0_ns,
                t1_ns=self._t1_ns,
                steps=active,
                perturbed=[self._first_step, *active],
            )
        except Exception as exc:
            self._error = f"the profiler's events could not be read ({_reason(exc)})"

    def _offset(self, events: list[KinetoEvent]) -> int | None:
        """Kineto clock minus host clock from this window's markers (None: they are not in
        the events), or from wall-clock pairs when no marker could be emitted."""
        if self._brackets:
            spans = marker_spans(events, len(self._brackets))
            if spans is None:
                return None
            self.offset_ns, self.offset_source = marker_offset(spans, self._brackets), "markers"
            self.offset_error_ns = marker_error(spans, self._brackets)
        else:
            self.offset_ns = epoch_offset(self._wall, self._clock)
            self.offset_source = "wall clock pairs"
            self.offset_error_ns = None
        return self.offset_ns

    def _finish(self, next_step: int, stall_ns: int) -> None:
        message, self._message = self._message, None
        if self._error is not None or message is None:
            self._report("failed", self._error or "the profiler delivered no events")
            return
        if not message["type"]:
            self._report(
                "failed",
                ("the profiler recorded no GPU activity; " + _cupti_hint(self.device))
                if self.device == "cuda"
                else "the profiler recorded no CPU ops in the window",
            )
            return
        if self._release.armed:  # CUPTI is finalized on the next step's first CUDA call
            message["perturbed"] = [*message["perturbed"], next_step]
        self.link.send("kernels", **message)
        self.windows_sent += 1
        # Reading the events runs between two steps: say what it cost (a step left out).
        self.link.log(
            "info",
            f"kernel window: {len(message['start'])} events read in "
            f"{stall_ns / 1e9:.2f} s between steps {next_step - 1} and "
            f"{next_step}",
        )

    def _arm_release(self, next_step: int) -> None:
        """On CUDA, before the profiler stops: have Kineto detach CUPTI (``CuptiRelease``)
        until the boundary after the next step."""
        if self.device != "cuda":
            return
        note = self._release.arm()
        if self._release.armed:
            self._release_at = next_step + 1
        elif note is not None and not self._cupti_note_sent:
            self._cupti_note_sent = True
            self.link.log("warning", note)

    def _on_script_profiler(self, what: str) -> None:
        """The script is about to prepare, enable or disable a profiler session: close an
        open window first (Kineto would cancel the script's trace or the window's), and give
        the script back its environment."""
        with self._lock:
            if self._prof is not None:
                self._disturbed = True
                self._teardown(release=False)  # the script's session takes CUPTI over
                self._report("failed", DISTURBED)
            self._release_at = None
            self._release.restore()

    def _teardown(self, release: bool = True) -> None:
        prof, self._prof = self._prof, None
        if prof is None:
            return
        if release and not self._release.armed:
            self._arm_release(self._first_step + 1 + self._steps)
        try:
            with self._watch.own():
                prof.stop()
        except Exception as exc:  # already stopped by its schedule, or broken: nothing held
            self.link.log("info", f"profiler stop: {_reason(exc)}")

    def _report(self, status: str, error: str) -> None:
        self.link.log("warning", f"kernel capture {status}: {error}")
        send_no_kernels(self.link, status, error, self.device)


def send_no_kernels(link: CaptureLink, status: str, error: str, device: str) -> None:
    """Answer a capture request with no kernels and the reason, so the GUI's request ends."""
    link.send(
        "kernels",
        status=status,
        error=error,
        device=device,
        steps=[],
        perturbed=[],
        names=[],
        type=[],
        name=[],
        stream=[],
        start=[],
        end=[],
    )


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _cupti_hint(device: str) -> str:
    if device != "cuda":
        return "training goes on"
    return (
        "another CUPTI user (Nsight Systems, compute-sanitizer, another profiler) may hold "
        "CUPTI, which allows one per process; training goes on"
    )
