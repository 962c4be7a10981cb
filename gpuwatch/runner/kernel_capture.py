"""On-demand kernel capture: ``torch.profiler`` over the next N steps, read without JSON.

A ``capture {steps: N}`` arms a window; it opens at the next step boundary and covers one
warm-up step (the profiler's start-up cost lands there, notes/measurement.md §2.4) and then
N recorded steps: ``schedule(wait=0, warmup=1, active=N, repeat=1)``, one ``prof.step()`` per
boundary. Events come from ``prof.profiler.kineto_results.events()`` in ``on_trace_ready``
(raw ``_KinetoEvent``s: no trace file, no ``FunctionEvent`` trees), are matched by their
``activity_type()`` *name* (the enum's numbers move between versions) and moved from Kineto's
Unix-epoch clock to ``perf_counter_ns`` with the tightest of several
``time_ns()``/``perf_counter_ns()`` pairs. The profiler is stopped right after: CUPTI allows one
subscriber per process, so holding it would break the user's own Nsight or profiler.

What goes out is one ``kernels`` message (protocol.py): on CUDA the kernels, memcpys and
memsets with their stream, launch time (the correlated runtime call) and launch geometry from
``metadata_json()``; on a CPU the outermost CPU ops of each thread (nested ops add nothing to
busy time and would overlap on a lane). At most ``MAX_EVENTS`` events, the earliest; the rest
are counted in ``dropped``. The window is ``[t0_ns, t1_ns]``: from the first recorded step's
start to the boundary after the last one, on CUDA extended to the last device event's end (the
GPU runs behind the host). A window that cannot start or be read ends as ``status: failed``
with one sentence, and training goes on.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from gpuwatch.protocol import KERNEL_KINDS, MAX_CAPTURE_STEPS, MAX_MESSAGE_BYTES

#: Events per ``kernels`` message (~45 bytes each on a CPU, ~120 with CUDA geometry); a
#: message that would still pass ``MESSAGE_BUDGET`` bytes keeps fewer (``fit_message``).
MAX_EVENTS = 50_000
#: Bytes a ``kernels`` message may take, below ``protocol.MAX_MESSAGE_BYTES``.
MESSAGE_BUDGET = MAX_MESSAGE_BYTES * 3 // 4
#: Longer names (templated C++ kernels) are cut: the name table is sent once per window.
MAX_NAME_CHARS = 300
#: Clock pairs sampled per window; the narrowest one gives the epoch → perf_counter offset.
CLOCK_PAIRS = 7

_KIND_OF_ACTIVITY = {"kernel": KERNEL_KINDS.index("kernel"),
                     "gpu_memcpy": KERNEL_KINDS.index("memcpy"),
                     "gpu_memset": KERNEL_KINDS.index("memset"),
                     "cpu_op": KERNEL_KINDS.index("cpu_op")}
_CPU_OP = KERNEL_KINDS.index("cpu_op")
_RUNTIME = frozenset({"cuda_runtime", "cuda_driver"})


class CaptureLink(Protocol):
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


def epoch_offset(wall: Callable[[], int] = time.time_ns,
                 clock: Callable[[], int] = time.perf_counter_ns,
                 pairs: int = CLOCK_PAIRS) -> int:
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


def window_message(events: Iterable[KinetoEvent], *, device: str, offset_ns: int,
                   t0_ns: int, t1_ns: int, steps: list[int], perturbed: list[int],
                   max_events: int = MAX_EVENTS) -> dict[str, Any]:
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
        rows.append((event.start_ns() - offset_ns, event.end_ns() - offset_ns, kind,
                     event.device_resource_id(), event.name(),
                     event.metadata_json() if cuda else "",
                     event.correlation_id() if cuda else 0))
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
        "status": "ok", "device": device, "steps": steps, "perturbed": perturbed,
        "t0_ns": t0_ns, "t1_ns": t1_ns, "covered_t1_ns": covered, "dropped": dropped,
        "type": [], "name": [], "stream": [], "start": [], "end": []}
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


def fit_message(events: list[KinetoEvent], *, budget: int = MESSAGE_BUDGET,
                **fields: Any) -> dict[str, Any]:
    """``window_message`` with as many events as fit ``budget`` bytes of JSON."""
    limit = fields.pop("max_events", MAX_EVENTS)
    while True:
        message = window_message(events, max_events=limit, **fields)
        size = len(json.dumps(message, separators=(",", ":")))
        n = len(message["start"])
        if size <= budget or n == 0:
            return message
        limit = max(0, min(n - 1, int(n * budget / size * 0.95)))


def _outermost(rows: list[tuple[int, int, int, int, str, str, int]], order: list[int]
               ) -> list[int]:
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
    if (isinstance(value, list) and len(value) == 3
            and all(isinstance(v, int) and not isinstance(v, bool) for v in value)):
        return [int(v) for v in value]
    return None


def _number(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def torch_profiler(device: str, steps: int, on_ready: Callable[[Any], None]) -> Any:
    """A started-later ``torch.profiler.profile``: one warm-up step, then ``steps`` recorded.

    Shapes, stacks and memory stay off (cost, notes/measurement.md §2.4).
    """
    from torch.profiler import ProfilerActivity, profile, schedule

    activities = [ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(ProfilerActivity.CUDA)
    return profile(activities=activities,
                   schedule=schedule(wait=0, warmup=1, active=steps, repeat=1),
                   on_trace_ready=on_ready, record_shapes=False, with_stack=False,
                   profile_memory=False)


class KernelCapture:
    """One capture window at a time, driven from the training loop's step boundaries.

    ``request`` is called from ``apply_control``; ``at_boundary`` between every two steps
    (not while paused); ``close`` when the loop ends (a window still open is torn down and
    reported as failed). ``profiler_factory`` is injectable for tests.
    """

    def __init__(self, link: CaptureLink, *, device: str,
                 profiler_factory: Callable[[str, int, Callable[[Any], None]], Any]
                 = torch_profiler,
                 clock: Callable[[], int] = time.perf_counter_ns,
                 wall: Callable[[], int] = time.time_ns) -> None:
        self.link = link
        self.device = device
        self._factory = profiler_factory
        self._clock = clock
        self._wall = wall
        self._wanted: int | None = None
        self._prof: Any = None
        self._steps = 0
        self._first_step = 0  # the warm-up step's id
        self._t0_ns = 0
        self._t1_ns = 0
        self._message: dict[str, Any] | None = None
        self._error: str | None = None
        self.windows_sent = 0

    @property
    def busy(self) -> bool:
        return self._wanted is not None or self._prof is not None

    def request(self, steps: Any) -> None:
        n = parse_steps(steps)
        if n is None:
            self._report("refused", f"capture needs a whole number of steps from 1 to "
                                    f"{MAX_CAPTURE_STEPS}, not {steps!r}")
        elif self.busy:
            self._report("refused", "a kernel capture is already running: wait for its "
                                    "window")
        else:
            self._wanted = n

    def at_boundary(self, next_step: int) -> None:
        """Open an armed window, or advance the open one by one step."""
        if self._prof is not None:
            self._advance(next_step)
        elif self._wanted is not None:
            self._open(next_step)

    def close(self) -> None:
        """The loop is ending: never leave the profiler running."""
        self._wanted = None
        if self._prof is not None:
            self._teardown()
            self._report("failed", "the run ended before the capture window was complete")

    def _open(self, next_step: int) -> None:
        steps, self._wanted = self._wanted, None
        assert steps is not None
        self._message, self._error = None, None
        try:
            self._prof = self._factory(self.device, steps, self._on_ready)
            self._prof.start()
        except Exception as exc:
            self._teardown()
            self._report("failed", f"the profiler could not start ({_reason(exc)}); "
                                   f"{_cupti_hint(self.device)}")
            return
        self._steps = steps
        self._first_step = next_step

    def _advance(self, next_step: int) -> None:
        done = next_step - self._first_step  # steps finished since the window opened
        last = done >= 1 + self._steps
        if last:
            self._t1_ns = self._clock()
        try:
            self._prof.step()  # the step after the last recorded one calls _on_ready
        except Exception as exc:
            self._error = f"the profiler failed ({_reason(exc)})"
        if done == 1:
            self._t0_ns = self._clock()  # the first recorded step starts now
        if last or self._error is not None:
            self._teardown()
            self._finish(next_step, self._clock() - self._t1_ns if last else 0)

    def _on_ready(self, prof: Any) -> None:
        """``on_trace_ready``: read the raw events while the results are alive."""
        try:
            events = prof.profiler.kineto_results.events()
            active = list(range(self._first_step + 1, self._first_step + 1 + self._steps))
            self._message = fit_message(
                list(events), device=self.device, offset_ns=epoch_offset(self._wall, self._clock),
                t0_ns=self._t0_ns, t1_ns=self._t1_ns, steps=active,
                perturbed=[self._first_step, *active])
        except Exception as exc:
            self._error = f"the profiler's events could not be read ({_reason(exc)})"

    def _finish(self, next_step: int, stall_ns: int) -> None:
        message, self._message = self._message, None
        if self._error is not None or message is None:
            self._report("failed", self._error or "the profiler delivered no events")
            return
        if self.device == "cuda" and not message["type"]:
            self._report("failed", "the profiler recorded no GPU activity; "
                                   + _cupti_hint(self.device))
            return
        self.link.send("kernels", **message)
        self.windows_sent += 1
        # Reading the events runs between two steps: say what it cost (a step left out).
        self.link.log("info", f"kernel window: {len(message['start'])} events read in "
                              f"{stall_ns / 1e9:.2f} s between steps {next_step - 1} and "
                              f"{next_step}")

    def _teardown(self) -> None:
        prof, self._prof = self._prof, None
        if prof is None:
            return
        try:
            prof.stop()
        except Exception as exc:  # already stopped by its schedule, or broken: nothing held
            self.link.log("info", f"profiler stop: {_reason(exc)}")

    def _report(self, status: str, error: str) -> None:
        self.link.log("warning", f"kernel capture {status}: {error}")
        self.link.send("kernels", status=status, error=error, device=self.device, steps=[],
                       perturbed=[], names=[], type=[], name=[], stream=[], start=[], end=[])


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _cupti_hint(device: str) -> str:
    if device != "cuda":
        return "training goes on"
    return ("another CUPTI user (Nsight Systems, compute-sanitizer, another profiler) may hold "
            "CUPTI, which allows one per process; training goes on")
