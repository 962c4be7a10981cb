"""The ``torch.cuda`` surface over the simulated device: Event, Stream, device and stream
selection, synchronize, properties, memory, ``_sleep``, sync debug mode, CUDA graphs.

Signatures and errors follow torch 2.14's ``torch/cuda/__init__.py``, ``torch/cuda/streams.py``
and the C++ they call (``c10/cuda/CUDAEvent.h``: ``query()`` is true before any record,
``record`` on another device's stream is refused, ``elapsed_time`` checks timing → recorded →
completed in that order; ``c10/cuda/CUDAFunctions.h`` for which waits the debug mode sees).
Initialization follows ``torch/cuda/__init__.py``: ``is_available()`` calls
``cudaGetDeviceCount`` (which runs ``cuInit``, where CUDA reads ``CUDA_VISIBLE_DEVICES``),
``device_count()`` asks NVML first and initializes nothing, and ``current_device``,
``set_device``, properties, streams and events run ``_lazy_init``. An event last recorded in a
capturing stream cannot be queried, synchronized or timed (``cudaErrorCapturedEvent``, CUDA
Runtime API error types).
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Iterator
from typing import Any

import torch

from simcuda.model import DEBUG_MODES, Graph, SimGpu, SimStream

#: ``cudaErrorCapturedEvent``'s description in the CUDA Runtime API.
CAPTURED_EVENT_ERROR = "operation not permitted on an event last recorded in a capturing stream"


class _Active:
    sim: SimGpu | None = None


def gpu() -> SimGpu:
    """The simulation ``install()`` set up."""
    if _Active.sim is None:
        raise RuntimeError("simcuda is not installed")
    return _Active.sim


def set_gpu(sim: SimGpu | None) -> None:
    _Active.sim = sim


def float32(value: float) -> float:
    """``cudaEventElapsedTime`` gives a C float."""
    rounded: float = struct.unpack("f", struct.pack("f", value))[0]
    return rounded


def device_index(device: Any = None, *, optional: bool = True) -> int:
    """torch's ``_get_device_index`` for CUDA: None/-1 → current; int, str or torch.device."""
    if device is None:
        return gpu().current_device()
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "cuda":
            raise ValueError(f"Expected a cuda device, but got: {device}")
        return gpu().current_device() if device.index is None else device.index
    index = int(device)
    return gpu().current_device() if index < 0 and optional else index


# --- streams ---------------------------------------------------------------------------------


class Stream:
    """``torch.cuda.Stream``: a simulated in-order stream of one device."""

    def __init__(
        self,
        device: Any = None,
        priority: int = 0,
        *,
        _sim: SimStream | None = None,
        **_kwargs: Any,
    ) -> None:
        if _sim is None:
            gpu().lazy_init("Stream")
        self.sim = _sim or gpu().new_stream(device_index(device))
        self.priority = priority
        self._saved: list[tuple[int, SimStream]] = []

    @property
    def device_index(self) -> int:
        return self.sim.device

    @property
    def device(self) -> torch.device:
        return torch.device("cuda", self.sim.device)

    @property
    def stream_id(self) -> int:
        return self.sim.stream_id

    @property
    def cuda_stream(self) -> int:
        return self.sim.stream_id

    device_type = 1  # c10::DeviceType::CUDA

    def query(self) -> bool:
        return gpu().now() >= self.sim.busy_until_ns

    def is_capturing(self) -> bool:
        return self.sim.capture is not None

    def synchronize(self) -> None:
        """``cudaStreamSynchronize`` via ``c10::cuda::stream_synchronize``: debug-visible."""
        gpu().host_wait("stream_synchronize", self.sim.busy_until_ns, debug_visible=True)

    def wait_event(self, event: Event) -> None:
        event.wait(self)

    def wait_stream(self, stream: Stream) -> None:
        self.wait_event(stream.record_event())

    def record_event(self, event: Event | None = None) -> Event:
        event = event or Event()
        event.record(self)
        return event

    def __enter__(self) -> Stream:
        sim = gpu()
        self._saved.append((sim.current_device(), sim.current_stream(self.sim.device)))
        sim.set_device(self.sim.device)
        sim.set_stream(self.sim)
        return self

    def __exit__(self, *exc: object) -> None:
        device, stream = self._saved.pop()
        gpu().set_stream(stream)
        gpu().set_device(device)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Stream) and other.sim is self.sim

    def __hash__(self) -> int:
        return hash((self.sim.device, self.sim.stream_id))

    def __repr__(self) -> str:
        return (
            f"<torch.cuda.Stream device=cuda:{self.sim.device} cuda_stream={self.sim.stream_id:#x}>"
        )


def current_stream(device: Any = None) -> Stream:
    gpu().lazy_init("current_stream")
    return Stream(_sim=gpu().current_stream(device_index(device)))


def default_stream(device: Any = None) -> Stream:
    index = device_index(device)
    gpu().check_index(index)
    return Stream(_sim=gpu().devices[index].streams[0])


def set_stream(stream: Stream | None) -> None:
    if stream is not None:
        gpu().set_stream(stream.sim)


@contextlib.contextmanager
def stream(s: Stream | None) -> Iterator[Stream | None]:
    """``torch.cuda.stream``: a no-op for None, else the stream (and its device) current."""
    if s is None:
        yield None
        return
    with s:
        yield s


# --- events ----------------------------------------------------------------------------------


class Event:
    """``torch.cuda.Event``: created (bound to a device) at its first record."""

    def __init__(
        self,
        enable_timing: bool = False,
        blocking: bool = False,
        interprocess: bool = False,
        external: bool = False,
    ) -> None:
        self.enable_timing = enable_timing
        self.blocking = blocking
        self.event_id = 0
        self._device: int | None = None
        self._complete_ns = 0
        self._captured = False

    @property
    def device(self) -> torch.device | None:
        return None if self._device is None else torch.device("cuda", self._device)

    def record(self, stream: Stream | None = None) -> None:
        stream = stream or current_stream()
        if self._device is None:
            self._device = stream.device_index
            self.event_id = gpu().new_event_id()
        if self._device != stream.device_index:
            raise RuntimeError(
                f"Event device {self._device} does not match recording "
                f"stream's device {stream.device_index}."
            )
        self._captured = stream.sim.capture is not None
        if self._captured:  # an event inside a graph: completes at replay
            return
        self._complete_ns = gpu().record(stream.sim, self.event_id)

    def _check_not_captured(self) -> None:
        if self._captured:
            raise RuntimeError(f"CUDA error: {CAPTURED_EVENT_ERROR}")

    def query(self) -> bool:
        self._check_not_captured()
        return self._device is None or gpu().now() >= self._complete_ns

    def synchronize(self) -> None:
        """``cudaEventSynchronize``: a host wait the sync debug mode does not see."""
        self._check_not_captured()
        if self._device is not None:
            gpu().host_wait("event_synchronize", self._complete_ns, debug_visible=False)

    def wait(self, stream: Stream | None = None) -> None:
        """``cudaStreamWaitEvent``: ``stream``'s later work waits for this event."""
        if self._device is not None:
            gpu().wait_on((stream or current_stream()).sim, self._complete_ns)

    def elapsed_time(self, end_event: Event) -> float:
        if not (self.enable_timing and end_event.enable_timing):
            raise ValueError("Both events must be created with argument 'enable_timing=True'.")
        if self._device is None or end_event._device is None:
            raise ValueError("Both events must be recorded before calculating elapsed time.")
        self._check_not_captured()
        end_event._check_not_captured()
        if not (self.query() and end_event.query()):
            raise RuntimeError("Both events must be completed before calculating elapsed time.")
        clock = gpu().devices[self._device].clock
        return float32((clock.at(end_event._complete_ns) - clock.at(self._complete_ns)) / 1e6)

    def __repr__(self) -> str:
        return (
            f"<torch.cuda.Event {self.event_id}>"
            if self._device is not None
            else "<torch.cuda.Event uninitialized>"
        )


# --- devices ---------------------------------------------------------------------------------


class device:
    """``torch.cuda.device``: makes ``device`` current inside the block (-1/None: no-op)."""

    def __init__(self, device: Any) -> None:
        self.idx = device_index(device, optional=True) if device is not None else -1
        self.prev_idx = -1

    def __enter__(self) -> None:
        if self.idx >= 0:
            self.prev_idx = gpu().current_device()
            gpu().set_device(self.idx)

    def __exit__(self, *exc: object) -> None:
        if self.idx >= 0:
            gpu().set_device(self.prev_idx)


def is_available() -> bool:
    gpu().init_driver("is_available")
    return bool(gpu().devices)


def device_count() -> int:
    return gpu().visible_count()


def current_device() -> int:
    gpu().lazy_init("current_device")
    return gpu().current_device()


def set_device(device: Any) -> None:
    index = device_index(device)
    if index >= 0:
        gpu().set_device(index)


class DeviceProperties:
    """``torch.cuda.get_device_properties`` (the fields gpuwatch and training code read)."""

    def __init__(self, index: int) -> None:
        spec = gpu().devices[index].spec
        for name, value in vars(spec).items():
            setattr(self, name, value)

    def __repr__(self) -> str:
        return (
            f"_CudaDeviceProperties(name='{self.name}', major={self.major}, "  # type: ignore[attr-defined]
            f"minor={self.minor}, total_memory={self.total_memory // 2**20}MB)"
        )  # type: ignore[attr-defined]


def get_device_properties(device: Any = None) -> DeviceProperties:
    gpu().lazy_init("get_device_properties")
    index = device_index(device)
    gpu().check_index(index)
    return DeviceProperties(index)


def get_device_capability(device: Any = None) -> tuple[int, int]:
    props = get_device_properties(device)
    return props.major, props.minor  # type: ignore[attr-defined]


def get_device_name(device: Any = None) -> str:
    return str(get_device_properties(device).name)  # type: ignore[attr-defined]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return get_device_capability() >= (8, 0)


def synchronize(device: Any = None) -> None:
    """``cudaDeviceSynchronize`` (``c10::cuda::device_synchronize``): every stream of the
    device drained; not reported to the sync debug mode."""
    sim = gpu()
    sim.lazy_init("synchronize")
    index = device_index(device)
    sim.host_wait("device_synchronize", sim.devices[index].busy_until_ns(), debug_visible=False)


def is_initialized() -> bool:
    return gpu().initialized


def init() -> None:
    gpu().lazy_init("init")


def is_current_stream_capturing() -> bool:
    return gpu().capturing()


def set_sync_debug_mode(debug_mode: int | str) -> None:
    if isinstance(debug_mode, str):
        if debug_mode not in DEBUG_MODES:
            raise RuntimeError(
                "invalid value of debug_mode, expected one of `default`, `warn`, `error`"
            )
        debug_mode = DEBUG_MODES[debug_mode]
    gpu().debug_mode = int(debug_mode)


def get_sync_debug_mode() -> int:
    return gpu().debug_mode


def _sleep(cycles: int) -> None:
    """``torch.cuda._sleep``: a kernel spinning ``cycles`` clock ticks of the device."""
    sim = gpu()
    sim.launch(sim.current_stream(), round(cycles / sim.config.sleep_clock_hz * 1e9), "spin_kernel")


def memory_allocated(device: Any = None) -> int:
    return gpu().devices[device_index(device)].allocated


def max_memory_allocated(device: Any = None) -> int:
    return gpu().devices[device_index(device)].peak


def memory_reserved(device: Any = None) -> int:
    return gpu().devices[device_index(device)].peak


max_memory_reserved = memory_reserved


def reset_peak_memory_stats(device: Any = None) -> None:
    dev = gpu().devices[device_index(device)]
    dev.peak = dev.allocated


def empty_cache() -> None:
    pass


def manual_seed(seed: int) -> None:
    """Numerics run on the CPU generator; there is no device generator to seed."""


def manual_seed_all(seed: int) -> None:
    pass


def seed() -> None:
    pass


seed_all = seed


# --- CUDA graphs ---------------------------------------------------------------------------


class CUDAGraph:
    """``torch.cuda.CUDAGraph``: kernels issued on the capturing stream are recorded, not run;
    ``replay`` enqueues them again on the current stream (one launch for the whole graph)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.graph = Graph()
        self._stream: SimStream | None = None

    def capture_begin(self, *args: Any, **kwargs: Any) -> None:
        stream = gpu().current_stream()
        if stream.stream_id == 0:
            raise RuntimeError(
                "CUDA graphs must be captured on a non-default stream. (However, "
                "after capture, it's ok to replay them on the default stream.)"
            )
        stream.capture = self.graph
        self._stream = stream

    def capture_end(self) -> None:
        if self._stream is not None:
            self._stream.capture = None
            self._stream = None

    def replay(self) -> None:
        sim = gpu()
        stream = sim.current_stream()
        enqueue = sim.now()
        for name, duration in self.graph.kernels:
            sim.launch(stream, duration, name, enqueue_ns=enqueue)


class graph:
    """``torch.cuda.graph``: capture on a side stream (as torch does) inside the block."""

    def __init__(
        self, cuda_graph: CUDAGraph, pool: Any = None, stream: Stream | None = None, **_kwargs: Any
    ) -> None:
        self.cuda_graph = cuda_graph
        self.stream = stream or Stream()

    def __enter__(self) -> None:
        synchronize()
        self.stream.__enter__()
        self.cuda_graph.capture_begin()

    def __exit__(self, *exc: object) -> None:
        self.cuda_graph.capture_end()
        self.stream.__exit__(*exc)
