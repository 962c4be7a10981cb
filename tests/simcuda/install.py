"""``install()``: put the simulated device behind ``torch.cuda`` and ``torch.accelerator``.

Patched: the ``torch.cuda`` functions and classes listed in ``CUDA_NAMES`` (looked up at call
time by gpuwatch and by torch's own Python code: optimizers ask
``is_current_stream_capturing``, ``torch.manual_seed`` seeds CUDA, ...), ``torch.accelerator``
(the DataLoader's ``pin_memory`` asks ``torch.accelerator.is_available()`` and its pin thread
calls ``set_device_index``), ``Tensor.pin_memory``/``is_pinned``, ``torch.profiler.profile``
(a CUDA-activity trace gets the simulated device's work: ``simcuda.profiler``), and the two
placement modes on the installing thread. Left real on purpose: ``torch.cuda.nvtx`` (works
without a driver), ``torch.backends.cudnn``/``torch.backends.cuda`` flags (plain switches),
``torch.version.cuda``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from simcuda import cuda_api, placement, profiler
from simcuda.model import SimConfig, SimGpu

CUDA_NAMES = (
    "is_available",
    "device_count",
    "current_device",
    "set_device",
    "device",
    "get_device_properties",
    "get_device_capability",
    "get_device_name",
    "is_bf16_supported",
    "Event",
    "Stream",
    "current_stream",
    "default_stream",
    "stream",
    "set_stream",
    "synchronize",
    "is_initialized",
    "init",
    "memory_allocated",
    "max_memory_allocated",
    "memory_reserved",
    "max_memory_reserved",
    "reset_peak_memory_stats",
    "empty_cache",
    "_sleep",
    "set_sync_debug_mode",
    "get_sync_debug_mode",
    "is_current_stream_capturing",
    "graph",
    "CUDAGraph",
    "manual_seed",
    "manual_seed_all",
    "seed",
    "seed_all",
)


def _current_accelerator(check_available: bool = False) -> torch.device | None:
    """torch's answer on a CUDA build: cuda, or None if asked to check and none is visible."""
    return None if check_available and not cuda_api.is_available() else torch.device("cuda")


def _accelerator_api() -> dict[str, Any]:
    api = cuda_api
    return {
        "is_available": api.is_available,
        "device_count": api.device_count,
        "current_accelerator": _current_accelerator,
        "current_device_index": api.current_device,
        "current_device_idx": api.current_device,
        "set_device_index": api.set_device,
        "set_device_idx": api.set_device,
        "current_stream": api.current_stream,
        "set_stream": api.set_stream,
        "synchronize": api.synchronize,
        "device_index": api.device,
        "memory_allocated": api.memory_allocated,
        "max_memory_allocated": api.max_memory_allocated,
    }


@dataclass
class Installed:
    """What ``install`` changed, so ``uninstall`` can put it back."""

    sim: SimGpu
    saved: list[tuple[Any, str, Any]] = field(default_factory=list)
    modes: list[Any] = field(default_factory=list)


class _Current:
    installed: Installed | None = None


def install(config: SimConfig | None = None) -> SimGpu:
    """Patch torch for the simulation described by ``config``; returns the device model.

    The placement modes are entered on the calling thread (the one that trains)."""
    if _Current.installed is not None:
        raise RuntimeError("simcuda is already installed")
    sim = SimGpu(config or SimConfig())
    cuda_api.set_gpu(sim)
    installed = Installed(sim)

    def patch(owner: Any, name: str, value: Any) -> None:
        installed.saved.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)

    for name in CUDA_NAMES:
        patch(torch.cuda, name, getattr(cuda_api, name))
    for name, value in _accelerator_api().items():
        patch(torch.accelerator, name, value)
    patch(
        torch._C,
        "_group_tensors_by_device_and_dtype",
        placement.group_tensors_by_device_and_dtype(torch._C._group_tensors_by_device_and_dtype),
    )
    patch(torch.profiler, "profile", profiler.profile_class(sim))
    patch(torch.Tensor, "pin_memory", placement.pin_memory)
    patch(torch.Tensor, "is_pinned", placement.tensor_is_pinned)
    for mode in (placement.DeviceKernels(), placement.DevicePlacement()):
        mode.__enter__()
        installed.modes.append(mode)
    _Current.installed = installed
    return sim


def uninstall() -> None:
    """Undo ``install`` (on the thread that installed)."""
    installed, _Current.installed = _Current.installed, None
    if installed is None:
        return
    for mode in reversed(installed.modes):
        mode.__exit__(None, None, None)
    for owner, name, value in reversed(installed.saved):
        setattr(owner, name, value)
    cuda_api.set_gpu(None)
