"""Real Kineto trace files read back as ``KinetoEvent``s, so the runner's own code converts them.

A trace written by ``torch.profiler`` (``export_chrome_trace``, ``tensorboard_trace_handler``)
holds the activities the runner reads from ``prof.profiler.kineto_results.events()``: ``cat``
is Kineto's activity type name (``kernel``, ``gpu_memcpy``, ``cuda_runtime``, ``cuda_driver``,
``cuda_sync``...), ``ts``/``dur`` are µs (integers in older traces; newer ones have ns digits
after the point and count from ``baseTimeNanoseconds``), GPU events carry ``args.stream`` and
``args.correlation``, and a kernel's ``args`` are what ``_KinetoEvent.metadata_json()`` returns
(a memcpy's too) as JSON members without the braces (Kineto's ``GpuActivity::metadataJson``;
the trace writer adds ``External id`` itself). Chrome trace format:
https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).parent / "fixtures" / "gpu_traces"
#: Kineto activity types that run on the GPU (what the runner's CUDA window keeps).
GPU_ACTIVITIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
#: Members of a kernel's ``args`` that Kineto's metadata JSON does not hold.
_NOT_METADATA = frozenset({"External id"})


@dataclass(frozen=True)
class TraceEvent:
    """One complete (``ph: X``) trace event with the ``_KinetoEvent`` methods the runner calls."""

    _name: str
    _activity: str
    _start_ns: int  # Unix epoch ns, as Kineto reports them
    _end_ns: int
    _resource: int  # CUDA stream of a GPU activity or sync record (-1: none), else thread id
    _correlation: int
    _metadata: str

    def name(self) -> str:
        return self._name

    def activity_type(self) -> str:
        return self._activity

    def start_ns(self) -> int:
        return self._start_ns

    def end_ns(self) -> int:
        return self._end_ns

    def device_resource_id(self) -> int:
        return self._resource

    def correlation_id(self) -> int:
        return self._correlation

    def metadata_json(self) -> str:
        return self._metadata


@dataclass(frozen=True)
class GpuTrace:
    """A trace file's events and the device it says it ran on."""

    path: Path
    events: tuple[TraceEvent, ...]
    device_name: str
    num_sms: int

    def gpu_events(self) -> list[TraceEvent]:
        return [e for e in self.events if e.activity_type() in GPU_ACTIVITIES]

    def device_span_ns(self) -> tuple[int, int]:
        """From the first GPU activity's start to the last one's end (HTA's window)."""
        gpu = self.gpu_events()
        return min(e.start_ns() for e in gpu), max(e.end_ns() for e in gpu)

    def profiler_span_ns(self) -> tuple[int, int]:
        """The span Kineto recorded (its ``Trace`` event): a gpuwatch window's host bounds."""
        [span] = [e for e in self.events if e.activity_type() == "Trace"]
        return span.start_ns(), span.end_ns()

    def of_activity(self, *activities: str) -> list[TraceEvent]:
        return [e for e in self.events if e.activity_type() in activities]


def fixture_path(name: str) -> Path:
    """The one trace file in ``tests/fixtures/gpu_traces/<name>/``."""
    [path] = sorted((FIXTURES / name).glob("*.json*"))
    return path


def load_trace(path: Path) -> GpuTrace:
    """Read a ``.json`` or ``.json.gz`` Kineto trace (µs decimals kept exact)."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        data = json.load(f, parse_float=Decimal)
    base = int(data.get("baseTimeNanoseconds", 0))
    events = tuple(
        _event(e, base)
        for e in data["traceEvents"]
        if e.get("ph") == "X" and isinstance(e.get("cat"), str) and "dur" in e
    )
    device = _device_of(events)
    props = {int(p["id"]): p for p in data.get("deviceProperties", [])}
    prop = props.get(device, {})
    return GpuTrace(
        path=path,
        events=events,
        device_name=str(prop.get("name", "unknown")),
        num_sms=int(prop.get("numSms", 0)),
    )


def _event(raw: dict[str, Any], base_ns: int) -> TraceEvent:
    args = raw.get("args") or {}
    start = base_ns + _us_to_ns(raw["ts"])
    activity = raw["cat"]
    gpu = activity in GPU_ACTIVITIES
    tid = raw.get("tid")
    on_stream = (gpu or activity == "cuda_sync") and "stream" in args
    # The profiler's own span (``cat: Trace``) has a text tid.
    resource = int(args["stream"]) if on_stream else (tid if isinstance(tid, int) else 0)
    metadata = ""
    if gpu:
        members = {k: v for k, v in args.items() if k not in _NOT_METADATA}
        metadata = json.dumps(members, default=float)[1:-1]
    return TraceEvent(
        _name=str(raw["name"]),
        _activity=activity,
        _start_ns=start,
        _end_ns=start + _us_to_ns(raw["dur"]),
        _resource=resource,
        _correlation=int(args.get("correlation", 0)),
        _metadata=metadata,
    )


def _us_to_ns(value: int | Decimal) -> int:
    return int((Decimal(value) * 1000).to_integral_value())


def _device_of(events: tuple[TraceEvent, ...]) -> int:
    for e in events:
        if e.activity_type() == "kernel":
            device = json.loads("{" + e.metadata_json() + "}").get("device")
            if device is not None:
                return int(device)
    return 0
