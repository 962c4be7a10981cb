"""CUDA event marks on the device a watched script is using, built when its first step begins.

A script chooses its device itself (``CUDA_VISIBLE_DEVICES`` set in the script, ``.to("cuda:1")``,
``torch.cuda.set_device``), so the runner must not start CUDA before the script's first line:
``cuInit`` reads ``CUDA_VISIBLE_DEVICES`` once. ``FollowDevice`` touches ``torch.cuda`` only when
a step begins and the script has started CUDA itself (``torch.cuda.is_initialized()``): then it
builds a ``CudaEventBackend`` for the current device, one per device the script uses, and the
marks of each step go to the device current when the step began. A step that begins before the
script has used CUDA, or inside CUDA-graph capture, gets no device marks (counted in ``skips``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpuwatch.runner.timing import CudaEventBackend, DeviceMarks, MarkSkips, TimingBackend


class FollowDevice(TimingBackend):
    """See the module docstring. ``notify`` gets one-time notices (which stream is measured,
    why steps have no device marks); ``on_device`` is called with a device's index once its
    backend exists (the runner then names that GPU to the window)."""

    kind = "cuda_events"

    def __init__(
        self,
        torch: Any,
        *,
        notify: Callable[[str], None] = lambda _text: None,
        on_device: Callable[[int], None] = lambda _index: None,
        make: Callable[[int], CudaEventBackend] | None = None,
    ) -> None:
        self._torch = torch
        self._notify = notify
        self._on_device = on_device
        self._make = make or (lambda index: CudaEventBackend(device=index))
        self.backends: dict[int, CudaEventBackend] = {}
        self._active: CudaEventBackend | None = None
        self._own = MarkSkips()
        self._failed: str | None = None
        self._told: set[str] = set()
        self._multi_stream_told: set[int] = set()

    @property
    def skips(self) -> MarkSkips:
        total = self._own
        for backend in self.backends.values():
            total = total.add(backend.skips)
        return total

    def begin(self, step_id: int) -> None:
        if self._active is not None:
            self._active.abandon()  # the previous step was dropped before its end
            self._active = None
        cuda = self._torch.cuda
        if self._failed is not None:
            self._own.failed += 1
            return
        if not cuda.is_initialized():
            self._own.no_cuda += 1
            self._tell(
                "no_cuda",
                "steps get no device marks until the script uses CUDA (their host marks are kept)",
            )
            return
        if cuda.is_current_stream_capturing():
            self._own.capturing += 1
            self._tell_capture()
            return
        index = cuda.current_device()
        backend = self.backends.get(index) or self._build(index)
        if backend is None:
            self._own.failed += 1
            return
        behind = backend.skips.pool_empty
        backend.begin(step_id)
        if backend.skips.pool_empty != behind:
            self._tell(
                "pool_empty",
                f"steps get no device marks while cuda:{index} is a whole "
                f"event pool of steps behind the host (counted; nothing waits)",
            )
            return
        self._active = backend

    def mark(self, index: int) -> None:
        active = self._active
        if active is None:
            return
        capturing, changed = active.skips.capturing, active.skips.device_changed
        active.mark(index)
        if active.skips.capturing != capturing:
            self._active = None
            self._tell_capture()
        elif active.skips.device_changed != changed:
            self._active = None
            self._tell(
                "device_changed",
                f"a step that changed the current device away from "
                f"cuda:{active.device} gets no device marks (the events of a step belong "
                f"to one device)",
            )

    def end(self) -> None:
        active, self._active = self._active, None
        if active is None:
            return
        active.end()
        if len(active.streams_seen) > 1 and active.device not in self._multi_stream_told:
            self._multi_stream_told.add(active.device)  # type: ignore[arg-type]
            self._notify(
                f"device marks on cuda:{active.device} follow the stream current at "
                f"each mark ({len(active.streams_seen)} streams so far); work on a "
                f"stream that is not current at any mark is not measured"
            )

    def poll(self, *, wait: bool = False) -> list[DeviceMarks]:
        done: list[DeviceMarks] = []
        for backend in self.backends.values():
            done.extend(backend.poll(wait=wait))
        if len(self.backends) > 1:
            done.sort(key=lambda item: item[0])
        return done

    def close(self) -> None:
        for backend in self.backends.values():
            backend.close()

    def _build(self, index: int) -> CudaEventBackend | None:
        try:
            with self._torch.cuda.device(index):
                backend = self._make(index)
        except Exception as exc:  # timing is ours: never the script's failure
            self._failed = f"{type(exc).__name__}: {exc}"
            self._notify(
                f"device marks are off: CUDA event timing could not start on "
                f"cuda:{index} ({self._failed})"
            )
            return None
        self.backends[index] = backend
        self._notify(
            f"device marks follow the current stream of cuda:{index} (CUDA events, "
            f"±{backend.bracket_ns / 1e3:.1f} µs); work on other streams is not "
            f"measured"
        )
        self._on_device(index)
        return backend

    def _tell_capture(self) -> None:
        self._tell(
            "capturing",
            "steps that run inside CUDA-graph capture get no device marks "
            "(events may not be recorded or read then); graph replays are measured "
            "as ordinary device work",
        )

    def _tell(self, key: str, text: str) -> None:
        if key not in self._told:
            self._told.add(key)
            self._notify(text)
