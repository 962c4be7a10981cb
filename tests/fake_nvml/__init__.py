"""A fake NVML driver library for tests, driven through the real ``pynvml`` binding.

``fake_nvml.c`` is a stand-in for ``libnvidia-ml.so.1`` written from the NVML API reference
(https://docs.nvidia.com/deploy/nvml-api/): versioned entry points (``nvmlInitWithFlags``,
``nvmlDeviceGetCount_v2``, ``nvmlDeviceGetHandleByIndex_v2``, ``nvmlDeviceGetPciInfo_v3``,
...), the structs as ``nvml.h`` lays them out, ``nvmlDeviceGetSamples``'s size-query
convention and ``lastSeenTimeStamp`` filter, MIG devices, and the documented error codes.
It is compiled with the system C compiler and installed as ``pynvml.nvmlLib``, so everything
between gpuwatch and the "driver" is the shipped binding: its ctypes struct layouts, its
``NVMLError`` subclasses, and ``NVML_ERROR_FUNCTION_NOT_FOUND`` for a symbol the library lacks
(``hide``). Each test scripts its machine through ``FakeNvml``.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SOURCE = Path(__file__).with_name("fake_nvml.c")
LIBRARY_NAME = "libnvidia-ml.so.1"

#: ``clockid_t`` values the fake driver can stamp samples with (Linux).
EPOCH_CLOCK = getattr(time, "CLOCK_REALTIME", 0)
BOOT_CLOCK = getattr(time, "CLOCK_BOOTTIME", None)


def compiler() -> str | None:
    """The C compiler to build the fake with, or None (the tests then skip, saying why)."""
    if sys.platform == "win32":
        return None  # the fake is a POSIX shared object
    return (
        os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    )


def build(cache_dir: Path) -> Path:
    """Compile the fake into ``cache_dir`` (named after the source's hash, so reused)."""
    cc = compiler()
    if cc is None:
        raise RuntimeError("no C compiler (cc, gcc or clang) to build the fake NVML library")
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    target = cache_dir / digest / LIBRARY_NAME
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        built = Path(tmp) / LIBRARY_NAME
        subprocess.run(
            [cc, "-shared", "-fPIC", "-O1", "-o", str(built), str(SOURCE)],
            check=True,
            capture_output=True,
            text=True,
            timeout=120,
        )
        os.replace(built, target)  # atomic: a concurrent build never sees half a file
    return target


class Library:
    """What pynvml sees as ``nvmlLib``: the compiled fake, minus the symbols ``hide`` removed.

    pynvml looks every entry point up with ``getattr(nvmlLib, name)`` and turns an
    AttributeError into ``NVML_ERROR_FUNCTION_NOT_FOUND``, as with a driver older than the
    binding.
    """

    def __init__(self, cdll: ctypes.CDLL) -> None:
        self._cdll = cdll
        self.hidden: set[str] = set()

    def __getattr__(self, name: str) -> Any:
        if name in self.hidden:
            raise AttributeError(name)
        return getattr(self._cdll, name)


@dataclass(frozen=True)
class FakeDevice:
    """A device of the fake machine: a GPU, or a MIG device (``parent`` is its GPU)."""

    slot: int
    name: str
    uuid: str
    pci_bus_id: str | None
    parent: FakeDevice | None = None


def _ull(value: int) -> ctypes.c_ulonglong:
    return ctypes.c_ulonglong(value)


class FakeNvml:
    """Scripts the fake library: devices, their readings, sample rings and injected errors."""

    def __init__(self, cdll: ctypes.CDLL) -> None:
        self._lib = cdll
        self.library = Library(cdll)
        cdll.fake_calls.restype = ctypes.c_longlong
        cdll.fake_total_calls.restype = ctypes.c_longlong
        cdll.fake_last_seen.restype = ctypes.c_ulonglong
        cdll.fake_reset()

    # -- devices --

    def add_gpu(
        self,
        uuid: str,
        bus: int,
        *,
        name: str = "NVIDIA A100-SXM4-40GB",
        domain: int = 0,
        device: int = 0,
        mig_capable: bool = True,
        memory_used: int = 3 * 2**30,
        sm_clock_mhz: int = 1410,
        power_mw: int = 123_456,
        utilization: int = 42,
    ) -> FakeDevice:
        """A GPU (add them in PCI order: NVML's index order). Readings get sensible defaults."""
        slot = self._lib.fake_add_gpu(
            name.encode(), uuid.encode(), domain, bus, device, int(mig_capable)
        )
        assert slot >= 0, "the fake holds at most 32 devices"
        dev = FakeDevice(slot, name, uuid, f"{domain:08X}:{bus:02X}:{device:02X}.0")
        self.set_memory(dev, 8 * 2**30, memory_used)
        self.set_clock(dev, sm_clock_mhz)
        self.set_power(dev, power_mw)
        self.set_utilization(dev, utilization)
        return dev

    def add_mig(
        self,
        parent: FakeDevice,
        index: int,
        uuid: str,
        *,
        name: str = "NVIDIA A100-SXM4-40GB MIG 1g.5gb",
        memory_used: int = 2**30,
    ) -> FakeDevice:
        """A MIG device at ``index`` under ``parent`` (which must be put in MIG mode)."""
        slot = self._lib.fake_add_mig(parent.slot, index, uuid.encode(), name.encode())
        assert slot >= 0
        dev = FakeDevice(slot, name, uuid, None, parent)
        self.set_memory(dev, 5 * 2**30, memory_used)
        return dev

    def set_mig_mode(self, gpu: FakeDevice, enabled: bool, max_devices: int = 7) -> None:
        mode = int(enabled)
        self._lib.fake_set_mig_mode(gpu.slot, mode, mode, max_devices)

    def set_memory(self, dev: FakeDevice, total: int, used: int) -> None:
        self._lib.fake_set_memory(dev.slot, _ull(total), _ull(used))

    def set_clock(self, dev: FakeDevice, mhz: int) -> None:
        self._lib.fake_set_clock(dev.slot, mhz)

    def set_power(self, dev: FakeDevice, milliwatts: int) -> None:
        """Power from now on; the energy counter (mJ) keeps counting at this rate."""
        self._lib.fake_set_power(dev.slot, milliwatts)

    def set_utilization(self, dev: FakeDevice, gpu: int, memory: int = 7) -> None:
        """What ``nvmlDeviceGetUtilizationRates`` answers."""
        self._lib.fake_set_utilization(dev.slot, gpu, memory)

    # -- the utilization sample ring --

    def push_samples(self, dev: FakeDevice, samples: Iterable[tuple[int, int]]) -> None:
        """Put ``(timeStamp µs, value %)`` samples into the driver's ring, in that order."""
        for stamp, value in samples:
            self._lib.fake_push_sample(dev.slot, _ull(stamp), ctypes.c_uint(value))

    def live_samples(
        self,
        dev: FakeDevice,
        period_us: int,
        value: int,
        clock: int = EPOCH_CLOCK,
        history: int = 0,
    ) -> int:
        """The driver stamps a sample every ``period_us`` on ``clock`` as time passes, and did
        so for ``history`` periods already. Returns the first sample's stamp (µs)."""
        first = time.clock_gettime_ns(clock) // 1000 - history * period_us
        self._lib.fake_set_live_samples(dev.slot, clock, _ull(first), _ull(period_us), value)
        return first

    def set_live_value(self, dev: FakeDevice, value: int) -> None:
        self._lib.fake_set_live_value(dev.slot, value)

    def set_driver_model(self, dev: FakeDevice, model: int) -> None:
        """Play Windows: ``nvmlDeviceGetDriverModel_v2`` answers ``model`` (-1: Linux)."""
        self._lib.fake_set_driver_model(dev.slot, model)

    def set_capability(self, dev: FakeDevice, major: int, minor: int) -> None:
        """What ``nvmlDeviceGetCudaComputeCapability`` answers for ``dev`` (default 8.0)."""
        self._lib.fake_set_capability(dev.slot, major, minor)

    def set_cuda_driver_version(self, version: int) -> None:
        """What ``nvmlSystemGetCudaDriverVersion`` answers: 12080 for CUDA 12.8 (default
        13000, the CUDA of the fake's 580 driver)."""
        self._lib.fake_set_cuda_driver_version(version)

    # -- failures --

    def fail(self, dev: FakeDevice | None, function: str, code: int) -> None:
        """``function`` (its exported name, e.g. ``nvmlDeviceGetPciInfo_v3``) answers ``code``
        for ``dev`` (None: every device, and device-less calls such as ``nvmlInitWithFlags``);
        code 0 lifts the rule."""
        self._lib.fake_fail(-1 if dev is None else dev.slot, function.encode(), code)

    def hide(self, function: str) -> None:
        """The library lacks ``function``: an older driver than the binding."""
        self.library.hidden.add(function)

    def remove_driver(self, code: int) -> None:
        """The driver goes away: every call answers ``code`` from now on."""
        self._lib.fake_remove_driver(code)

    # -- observation --

    def calls(self, function: str) -> int:
        """How often the library's ``function`` was entered."""
        return int(self._lib.fake_calls(function.encode()))

    def last_seen(self, dev: FakeDevice) -> int:
        """The ``lastSeenTimeStamp`` the latest ``nvmlDeviceGetSamples`` call passed for ``dev``."""
        return int(self._lib.fake_last_seen(dev.slot))

    def total_calls(self) -> int:
        return int(self._lib.fake_total_calls())

    @property
    def init_count(self) -> int:
        """Successful inits not yet shut down (NVML's reference count)."""
        return int(self._lib.fake_init_count())
