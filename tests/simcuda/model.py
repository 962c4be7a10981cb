"""The simulated device: clocks, in-order streams, timed events, syncs, capture.

Pure Python (no torch), so its semantics can be read and tested on their own. Time is the
host's real ``time.perf_counter_ns`` axis: a host wait really sleeps until the simulated device
reaches the point waited for, so a real runner process sees real stalls. Each device also has
its own clock (what ``elapsed_time`` reads): the host axis scaled by ``drift_ppm`` plus
``offset_ns``, as a GPU's clock drifts against the host's.

Stream semantics (CUDA Runtime API, "Stream synchronization behavior" and ``cudaEventRecord``):
work on one stream runs in order; an item starts at ``max(previous end, enqueue + launch
latency)``; an event marker completes when the stream reaches it (markers take no time).

Which host waits torch reports to ``set_sync_debug_mode`` follows torch's sources
(``c10/cuda/CUDAFunctions.h``: ``stream_synchronize`` and ``memcpy_and_sync`` call
``warn_or_error_on_sync``; ``c10/cuda/CUDAFunctions.cpp``: ``device_synchronize`` does not;
``c10/cuda/CUDAEvent.h``: ``synchronize`` does not). Every host wait is logged either way,
with ``debug_visible`` telling which kind it was.
"""

from __future__ import annotations

import os
import threading
import time
import warnings
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

SYNC_ERROR = "called a synchronizing CUDA operation"
CAPTURE_ERROR = "operation not permitted when stream is capturing"
#: ``torch.cuda.set_sync_debug_mode`` levels (``torch/cuda/__init__.py``).
DEBUG_MODES = {"default": 0, "warn": 1, "error": 2}
#: Ground-truth records kept per device (a long runner run must not grow without bound).
HISTORY = 200_000


@dataclass(frozen=True)
class DeviceSpec:
    """What ``get_device_properties`` reports for one simulated device."""

    name: str = "simcuda GPU"
    total_memory: int = 16 * 2**30
    major: int = 8
    minor: int = 0
    multi_processor_count: int = 108
    uuid: str = "00000000-0000-4000-8000-000000000000"
    pci_domain_id: int = 0
    pci_bus_id: int = 1
    pci_device_id: int = 0
    is_integrated: int = 0


@dataclass(frozen=True)
class SimConfig:
    """Knobs of the simulation (JSON-able: the boot hook reads it from the environment).

    ``kernel_factor``: a device kernel lasts the op's measured CPU time times this (> 1 makes
    the device the bottleneck, so the host runs ahead). ``sleep_clock_hz`` converts
    ``torch.cuda._sleep(cycles)`` into time. Copies move ``copy_bytes_per_s``.
    """

    devices: int = 1
    drift_ppm: float = 0.0
    offset_ns: int = 0
    launch_latency_ns: int = 5_000
    kernel_factor: float = 2.0
    min_kernel_ns: int = 2_000
    sleep_clock_hz: float = 1.41e9
    copy_bytes_per_s: float = 12e9
    capability: tuple[int, int] = (8, 0)
    sync_debug_mode: int = 0
    #: Check that an op's device tensors share one device (and meet no CPU tensor of dim > 0).
    strict_devices: bool = True
    #: Where the boot hook appends one JSON line per host wait (None: nowhere).
    report_path: str | None = None

    def spec(self, index: int) -> DeviceSpec:
        major, minor = self.capability
        return DeviceSpec(
            name=f"simcuda GPU {index}",
            major=major,
            minor=minor,
            uuid=f"00000000-0000-4000-8000-{index:012d}",
            pci_bus_id=index + 1,
        )


@dataclass(frozen=True)
class Kernel:
    """Ground truth: one work item as the stream ran it (host ``perf_counter_ns`` axis)."""

    name: str
    device: int
    stream: int
    enqueue_ns: int
    start_ns: int
    end_ns: int


@dataclass(frozen=True)
class Marker:
    """Ground truth: one event record, and when the stream reached it (host axis)."""

    event_id: int
    device: int
    stream: int
    record_ns: int
    complete_ns: int


@dataclass(frozen=True)
class HostWait:
    """One host wait for the device: ``kind`` (item, stream_synchronize, h2d, ...), whether
    ``set_sync_debug_mode`` sees it, when it began and until when it waited."""

    kind: str
    debug_visible: bool
    thread: str
    t_ns: int
    until_ns: int


@dataclass
class Graph:
    """Work captured from one stream (``torch.cuda.graph``); replay re-enqueues it."""

    kernels: list[tuple[str, int]] = field(default_factory=list)


@dataclass
class SimStream:
    device: int
    stream_id: int
    busy_until_ns: int = 0
    capture: Graph | None = None


class DeviceClock:
    """A device's clock: ``host + (host - epoch) * drift_ppm / 1e6 + offset``."""

    def __init__(self, drift_ppm: float, offset_ns: int, epoch_ns: int) -> None:
        self.drift = drift_ppm * 1e-6
        self.offset_ns = offset_ns
        self.epoch_ns = epoch_ns

    def at(self, host_ns: int) -> int:
        return host_ns + round((host_ns - self.epoch_ns) * self.drift) + self.offset_ns


class SimDevice:
    """One device: its clock, streams (0 is the default stream), ground truth, memory."""

    def __init__(self, index: int, spec: DeviceSpec, config: SimConfig, epoch_ns: int) -> None:
        self.index = index
        self.spec = spec
        self.clock = DeviceClock(config.drift_ppm, config.offset_ns, epoch_ns)
        self.streams: dict[int, SimStream] = {0: SimStream(index, 0)}
        self.kernels: deque[Kernel] = deque(maxlen=HISTORY)
        self.markers: deque[Marker] = deque(maxlen=HISTORY)
        self.allocated = 0
        self.peak = 0
        self.reserved = 0

    def busy_until_ns(self) -> int:
        return max(s.busy_until_ns for s in self.streams.values())


class SimGpu:
    """All simulated devices of the process, the host-wait log and the sync debug mode."""

    def __init__(self, config: SimConfig, clock: Callable[[], int] = time.perf_counter_ns) -> None:
        self.config = config
        self.now = clock
        self.epoch_ns = clock()
        self._devices: list[SimDevice] | None = None
        #: The first call that initialized the driver (``cuInit``: ``CUDA_VISIBLE_DEVICES``
        #: is read then, and later changes of it are ignored), for test diagnostics.
        self.initialized_by: str | None = None
        self.waits: deque[HostWait] = deque(maxlen=HISTORY)
        self.on_wait: Callable[[HostWait], None] | None = None
        self.debug_mode = config.sync_debug_mode
        #: torch's ``_initialized`` (``torch.cuda.is_initialized()``): set by the calls that run
        #: torch's ``_lazy_init``, not by ``is_available()`` (which only initializes the driver).
        self.initialized = False
        self._next_stream = 1
        self._next_event = 1
        self._lock = threading.RLock()
        self._local = threading.local()

    # --- driver initialization (CUDA reads CUDA_VISIBLE_DEVICES once, at cuInit) ----------

    @property
    def devices(self) -> list[SimDevice]:
        """The visible devices; the first access is the driver's initialization."""
        if self._devices is None:
            self.init_driver("runtime call")
        assert self._devices is not None
        return self._devices

    @property
    def driver_initialized(self) -> bool:
        return self._devices is not None

    def init_driver(self, by: str) -> None:
        """``cuInit``: the visible devices are fixed from ``CUDA_VISIBLE_DEVICES`` as it is now."""
        if self._devices is not None:
            return
        self.initialized_by = by
        self._devices = [
            SimDevice(i, self.config.spec(physical), self.config, self.epoch_ns)
            for i, physical in enumerate(visible_devices(self.config.devices))
        ]

    def lazy_init(self, by: str) -> None:
        """torch's ``_lazy_init`` (``current_device``, ``set_device``, properties, streams,
        events, kernels): the driver, then torch's CUDA state."""
        self.init_driver(by)
        self.initialized = True

    def visible_count(self) -> int:
        """``torch.cuda.device_count()``: before initialization torch asks NVML and parses
        ``CUDA_VISIBLE_DEVICES`` itself (``_device_count_nvml``), initializing nothing."""
        if self._devices is None:
            return len(visible_devices(self.config.devices))
        return len(self._devices)

    # --- per-thread current device and streams (both thread-local in CUDA/c10) ------------

    def current_device(self) -> int:
        return getattr(self._local, "device", 0)

    def set_device(self, index: int) -> None:
        self.lazy_init("set_device")
        self.check_index(index)
        self._local.device = index

    def check_index(self, index: int) -> None:
        if not 0 <= index < len(self.devices):
            raise RuntimeError(
                f"CUDA error: invalid device ordinal (device {index}, "
                f"{len(self.devices)} simulated)"
            )

    def current_stream(self, device: int | None = None) -> SimStream:
        index = self.current_device() if device is None else device
        self.check_index(index)
        streams: dict[int, SimStream] = getattr(self._local, "streams", {})
        return streams.get(index) or self.devices[index].streams[0]

    def set_stream(self, stream: SimStream) -> None:
        if not hasattr(self._local, "streams"):
            self._local.streams = {}
        self._local.streams[stream.device] = stream

    def new_stream(self, device: int) -> SimStream:
        self.check_index(device)
        with self._lock:
            stream = SimStream(device, self._next_stream)
            self._next_stream += 1
            self.devices[device].streams[stream.stream_id] = stream
        return stream

    def new_event_id(self) -> int:
        with self._lock:
            self._next_event += 1
            return self._next_event - 1

    # --- work and markers --------------------------------------------------------------

    def launch(
        self, stream: SimStream, duration_ns: int, name: str, enqueue_ns: int | None = None
    ) -> Kernel | None:
        """Enqueue a kernel (or copy); during capture it goes into the graph instead."""
        self.lazy_init("launch")
        with self._lock:
            if stream.capture is not None:
                stream.capture.kernels.append((name, duration_ns))
                return None
            enqueue = self.now() if enqueue_ns is None else enqueue_ns
            start = max(stream.busy_until_ns, enqueue + self.config.launch_latency_ns)
            kernel = Kernel(
                name, stream.device, stream.stream_id, enqueue, start, start + max(0, duration_ns)
            )
            stream.busy_until_ns = kernel.end_ns
            self.devices[stream.device].kernels.append(kernel)
            return kernel

    def record(self, stream: SimStream, event_id: int) -> int:
        """An event marker on ``stream``: the host time at which the stream reaches it."""
        with self._lock:
            now = self.now()
            complete = max(stream.busy_until_ns, now + self.config.launch_latency_ns)
            stream.busy_until_ns = complete
            self.devices[stream.device].markers.append(
                Marker(event_id, stream.device, stream.stream_id, now, complete)
            )
            return complete

    def wait_on(self, stream: SimStream, until_ns: int) -> None:
        """``cudaStreamWaitEvent``: later work on ``stream`` starts after ``until_ns``."""
        with self._lock:
            stream.busy_until_ns = max(stream.busy_until_ns, until_ns)

    # --- host waits -----------------------------------------------------------------------

    def capturing(self, stream: SimStream | None = None) -> bool:
        return (stream or self.current_stream()).capture is not None

    def host_wait(self, kind: str, until_ns: int, *, debug_visible: bool) -> None:
        """The host blocks until ``until_ns``; first what torch does before such a wait:
        refuse it during capture, then warn or raise under the sync debug mode."""
        if any(s.capture is not None for d in self.devices for s in d.streams.values()):
            raise RuntimeError(f"CUDA error: {CAPTURE_ERROR} ({kind})")
        if debug_visible and self.debug_mode == 2:
            raise RuntimeError(SYNC_ERROR)
        if debug_visible and self.debug_mode == 1:
            warnings.warn(SYNC_ERROR, UserWarning, stacklevel=3)
        wait = HostWait(kind, debug_visible, threading.current_thread().name, self.now(), until_ns)
        self.waits.append(wait)
        if self.on_wait is not None:
            self.on_wait(wait)
        sleep_until(self.now, until_ns)


def visible_devices(count: int, environ: Mapping[str, str] = os.environ) -> list[int]:
    """The physical devices ``CUDA_VISIBLE_DEVICES`` leaves visible, in its order (CUDA reads
    it at initialization; the list ends at the first entry that names no device)."""
    value = environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return list(range(count))
    visible: list[int] = []
    for entry in value.split(","):
        part = entry.strip()
        if not part.isdigit() or int(part) >= count or int(part) in visible:
            break
        visible.append(int(part))
    return visible


def sleep_until(clock: Callable[[], int], until_ns: int) -> None:
    """Really wait until the host clock passes ``until_ns`` (sleep, then a short spin)."""
    while True:
        left = until_ns - clock()
        if left <= 0:
            return
        if left > 200_000:
            time.sleep((left - 100_000) / 1e9)
