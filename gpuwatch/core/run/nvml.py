"""A thin NVML wrapper that never raises out of a query (after nvitop's ``libnvml``).

NVML is optional everywhere: there may be no driver (CI, laptops, macOS), the binding may be
newer than the driver, and GeForce cards answer many calls with NotSupported. So NVML is
initialised lazily once, every call goes through ``query``/``query_with_reason``, which turn
any ``NVMLError`` into the ``NA`` sentinel plus a reason a user can read ("n/a — <reason>"),
and callers never see a 0 standing in for "unknown".

Functions are looked up on ``pynvml`` by name at call time, so tests can monkeypatch them.
``pynvml`` itself is imported on first use, not with this module: the window imports this
module at start (through the samplers) but needs NVML only once a CUDA runner says hello, and
the import is 0.05–0.4 s of the window's start-up budget (docs/performance.md §5).
``nvml.pynvml`` still names the binding (None if it is not installed).
"""

from __future__ import annotations

import logging
import math
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, NamedTuple

log = logging.getLogger(__name__)

#: Not yet imported (``_binding`` has not run).
_UNSET: Any = object()
_module: ModuleType | None = _UNSET


def _binding() -> ModuleType | None:
    """The ``pynvml`` module, imported on the first call; None if it is not installed."""
    global _module  # noqa: PLW0603 - a once-per-process import, like the library's own init
    if _module is _UNSET:
        try:
            import pynvml
        except ImportError:  # pragma: no cover - nvidia-ml-py is a dependency; a frozen app
            _module = None  # may lack it
        else:
            _module = pynvml
    return _module


def __getattr__(name: str) -> Any:
    """``nvml.pynvml``: the binding, imported when first asked for (PEP 562)."""
    if name == "pynvml":
        return _binding()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


LIBRARY_NOT_FOUND = "NVML library not found: no NVIDIA driver on this machine"
BINDING_MISSING = "nvidia-ml-py is not installed (pip install nvidia-ml-py)"
NOT_SUPPORTED = "not supported on this GPU"
FUNCTION_NOT_FOUND = (
    "not available in this NVIDIA driver (verify nvidia-ml-py is compatible with your driver)"
)
NO_PERMISSION = "insufficient permissions for this NVML query"
GPU_LOST = "the GPU is lost (fell off the bus or crashed)"
DRIVER_UNLOADED = "the NVIDIA driver is no longer loaded"
NVML_UNINITIALIZED = "NVML stopped answering (uninitialized): the driver went away or was reset"
#: Codes after which a device answers nothing more in this process: ``nvml.h`` documents
#: GPU_IS_LOST ("fallen off the bus or otherwise inaccessible"), and DRIVER_NOT_LOADED and
#: UNINITIALIZED mean the library has no driver to talk to. Keyed by ``nvmlReturn_t`` value.
DRIVER_GONE = {15: GPU_LOST, 9: DRIVER_UNLOADED, 1: NVML_UNINITIALIZED}
#: nvml.h: "On MIG-enabled GPUs, querying device utilization rates is not currently supported"
#: (nor utilization samples).
MIG_NO_UTILIZATION = "not reported for MIG devices (NVML has no utilization per MIG instance)"
#: NVML_ERROR_NOT_FOUND: e.g. ``nvmlDeviceGetSamples`` has nothing newer than the timestamp.
NO_DATA = "no data yet"


class _NAType:
    """The "not available" sentinel: falsy, prints as N/A, and converts to NaN, never to 0."""

    _instance: _NAType | None = None

    def __new__(cls) -> _NAType:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "NA"

    def __str__(self) -> str:
        return "N/A"

    def __bool__(self) -> bool:
        return False

    def __float__(self) -> float:
        return math.nan

    def __reduce__(self) -> tuple[type, tuple[()]]:
        return (_NAType, ())


NA: Any = _NAType()


class NvmlUnavailable(RuntimeError):
    """NVML cannot serve this request; ``str(exc)`` is the reason shown to the user."""

    @property
    def reason(self) -> str:
        return str(self)


class Reply(NamedTuple):
    """One query's outcome: the value, or ``NA`` and why."""

    value: Any
    reason: str | None = None

    @property
    def ok(self) -> bool:
        return self.value is not NA


class _State:
    """Process-wide NVML state (one init per process, like the library itself)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.initialized = False
        self.failure: str | None = None
        self.logged_missing: set[str] = set()


_state = _State()


def init() -> None:
    """Initialise NVML once; raise NvmlUnavailable with the reason if it cannot be used.

    A failure is cached: a missing driver does not come back while we run, and retrying on
    every poll would only repeat the cost of the failed library load.
    """
    with _state.lock:
        if _state.initialized:
            return
        if _state.failure is None:
            pynvml = _binding()
            if pynvml is None:
                _state.failure = BINDING_MISSING
            else:
                try:
                    pynvml.nvmlInit()
                except pynvml.NVMLError as exc:
                    _state.failure = _init_failure_reason(exc)
                    log.info("NVML unavailable: %s", _state.failure)
                else:
                    _state.initialized = True
                    return
        raise NvmlUnavailable(_state.failure)


def _init_failure_reason(exc: Exception) -> str:
    pynvml: Any = _binding()
    if isinstance(exc, pynvml.NVMLError_LibraryNotFound):
        return LIBRARY_NOT_FOUND
    if isinstance(exc, pynvml.NVMLError_DriverNotLoaded):
        return "NVIDIA driver not loaded: NVML cannot start"
    if isinstance(exc, pynvml.NVMLError_NoPermission):
        return "no permission to use NVML"
    if isinstance(exc, pynvml.NVMLError_LibRmVersionMismatch):
        return "NVIDIA driver and library versions differ (reboot after a driver update)"
    return f"NVML init failed: {exc}"


def unavailable_reason() -> str | None:
    """Why NVML cannot be used here, or None if it initialised."""
    try:
        init()
    except NvmlUnavailable as exc:
        return exc.reason
    return None


def shutdown() -> None:
    """Release NVML and forget cached state, so the next query initialises afresh."""
    with _state.lock:
        pynvml = _binding() if _state.initialized else None  # never imports it just to stop
        if pynvml is not None:
            try:
                pynvml.nvmlShutdown()
            except pynvml.NVMLError as exc:
                log.debug("nvmlShutdown failed: %s", exc)
        _state.initialized = False
        _state.failure = None
        _state.logged_missing.clear()


def _log_missing_once(name: str) -> None:
    with _state.lock:
        if name in _state.logged_missing:
            return
        _state.logged_missing.add(name)
    log.warning(
        "NVML function %s not found: verify nvidia-ml-py is compatible with your driver", name
    )


def _error_reason(name: str, exc: Exception, quiet_missing: bool) -> str:
    pynvml: Any = _binding()
    if isinstance(exc, pynvml.NVMLError_NotSupported):
        return NOT_SUPPORTED
    if isinstance(exc, pynvml.NVMLError_FunctionNotFound):
        if not quiet_missing:
            _log_missing_once(name)
        return FUNCTION_NOT_FOUND
    if isinstance(exc, pynvml.NVMLError_NotFound):
        return NO_DATA
    if isinstance(exc, pynvml.NVMLError_NoPermission):
        return NO_PERMISSION
    gone = DRIVER_GONE.get(getattr(exc, "value", None))
    if gone is not None:
        return gone
    return f"NVML error: {exc}"


def query_with_reason(
    func: str | Callable[..., Any], *args: Any, quiet_missing: bool = False
) -> Reply:
    """Call an NVML function (a ``pynvml`` name or callable); never raises NVMLError.

    ``quiet_missing`` suppresses the once-per-function FunctionNotFound warning, for callers
    that fall back to an older variant of the same call.
    """
    try:
        init()
    except NvmlUnavailable as exc:
        return Reply(NA, exc.reason)
    pynvml: Any = _binding()  # init() succeeded: it is there
    if isinstance(func, str):
        name, fn = func, getattr(pynvml, func, None)
        if fn is None:
            if not quiet_missing:
                _log_missing_once(name)
            return Reply(NA, f"{name} is not in this nvidia-ml-py version")
    else:
        name, fn = getattr(func, "__name__", repr(func)), func
    try:
        return Reply(fn(*args))
    except pynvml.NVMLError as exc:
        return Reply(NA, _error_reason(name, exc, quiet_missing))


def query(func: str | Callable[..., Any], *args: Any, default: Any = NA) -> Any:
    """Value of an NVML call, or ``default`` (``NA``) if it is unavailable for any reason."""
    reply = query_with_reason(func, *args)
    return reply.value if reply.ok else default


def _text(value: Any) -> str | None:
    """NVML strings arrive as bytes or str depending on the call and binding version."""
    if value is NA or value is None:
        return None
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return str(value)


# ---- Devices ----------------------------------------------------------------------------


def normalize_uuid(uuid: str) -> str:
    """Comparable UUID: the hex without NVML's ``GPU-``/``MIG-`` prefix.

    NVML says ``GPU-8f0e...`` for a GPU and ``MIG-5c1b...`` for a MIG device; torch prints
    CUDA's UUID bare, and for a MIG device CUDA's UUID *is* the MIG UUID (``cuDeviceGetUuid_v2``:
    "If the device is in MIG mode, returns its MIG UUID"), so the runner may send it with the
    wrong prefix. The 128-bit value alone is globally unique.
    """
    u = uuid.strip().lower()
    return u[4:] if u.startswith(("gpu-", "mig-")) else u


def normalize_pci_bus_id(bus_id: str) -> str:
    """Comparable PCI bus id: NVML ``00000000:01:00.0`` equals torch-style ``0000:01:00.0``.

    Parses domain (optional), bus, device and function as hex, so case and the width of the
    domain field do not matter. Unparseable text is compared as lower-case text.
    """
    text = bus_id.strip().lower()
    parts = text.split(":")
    try:
        if len(parts) == 2:
            parts = ["0", *parts]
        if len(parts) != 3:
            return text
        dev, _, fn = parts[2].partition(".")
        domain, bus, device, function = (
            int(parts[0], 16),
            int(parts[1], 16),
            int(dev, 16),
            int(fn or "0", 16),
        )
    except ValueError:
        return text
    return f"{domain:08x}:{bus:02x}:{device:02x}.{function:x}"


@dataclass(frozen=True)
class DeviceInfo:
    """One NVML device as listed for ``gpuwatch doctor`` and the device menu."""

    index: int  # NVML's index of the GPU (of the parent GPU, for a MIG device)
    name: str | None
    uuid: str | None
    pci_bus_id: str | None
    handle: Any = field(default=None, repr=False, compare=False)
    mig_index: int | None = None  # a MIG device: its index under the GPU
    mig_enabled: bool = False  # a GPU in MIG mode: CUDA sees only its MIG devices

    def as_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "name": self.name,
            "uuid": self.uuid,
            "pci_bus_id": self.pci_bus_id,
        }


@dataclass(frozen=True)
class DeviceMatch:
    """The NVML device that is the runner's torch device, and how we know."""

    device: DeviceInfo
    matched_by: str  # "uuid" | "pci_bus_id" | "index"
    warning: str | None = None

    @property
    def handle(self) -> Any:
        return self.device.handle


def _pci_of(handle: Any) -> str | None:
    info = query("nvmlDeviceGetPciInfo", handle)
    if info is NA:
        return None
    return _text(getattr(info, "busId", None)) or _text(getattr(info, "busIdLegacy", None))


def _mig_enabled(handle: Any) -> bool:
    """Whether the GPU is in MIG mode (Ampere and newer; NOT_SUPPORTED before: not in it)."""
    reply = query_with_reason("nvmlDeviceGetMigMode", handle, quiet_missing=True)
    if not reply.ok:
        return False
    enable = getattr(_binding(), "NVML_DEVICE_MIG_ENABLE", 1)
    return int(reply.value[0]) == enable


def list_devices() -> list[DeviceInfo]:
    """All GPUs NVML can open (empty if NVML is unavailable); MIG devices: ``mig_devices``."""
    count = query("nvmlDeviceGetCount")
    if count is NA:
        return []
    devices = []
    for index in range(int(count)):
        handle = query("nvmlDeviceGetHandleByIndex", index)
        if handle is NA:  # e.g. no permission on one GPU: list the others
            continue
        devices.append(
            DeviceInfo(
                index=index,
                name=_text(query("nvmlDeviceGetName", handle)),
                uuid=_text(query("nvmlDeviceGetUUID", handle)),
                pci_bus_id=_pci_of(handle),
                handle=handle,
                mig_enabled=_mig_enabled(handle),
            )
        )
    return devices


def mig_devices(gpu: DeviceInfo) -> list[DeviceInfo]:
    """The MIG devices of a GPU in MIG mode (empty otherwise).

    MIG device indices may have holes (a destroyed instance leaves NOT_FOUND at its index), so
    every index below ``nvmlDeviceGetMaxMigDeviceCount`` is tried.
    """
    if not gpu.mig_enabled:
        return []
    count = query("nvmlDeviceGetMaxMigDeviceCount", gpu.handle)
    if count is NA:
        return []
    found = []
    for mig_index in range(int(count)):
        handle = query("nvmlDeviceGetMigDeviceHandleByIndex", gpu.handle, mig_index)
        if handle is NA:
            continue
        found.append(
            DeviceInfo(
                index=gpu.index,
                name=_text(query("nvmlDeviceGetName", handle)),
                uuid=_text(query("nvmlDeviceGetUUID", handle)),
                pci_bus_id=gpu.pci_bus_id,
                handle=handle,
                mig_index=mig_index,
            )
        )
    return found


def find_device(
    uuid: str | None = None, pci_bus_id: str | None = None, index: int | None = None
) -> DeviceMatch:
    """Find the NVML device of the runner's torch device: UUID, then PCI bus id, then index.

    The UUID may name a GPU or a MIG device. The index is used only when the runner sent no
    identity: CUDA orders devices fastest-first and renumbers them after CUDA_VISIBLE_DEVICES,
    NVML orders them by PCI bus, so the same index may name another GPU, and an identity that
    matches nothing (NVML sees other GPUs than the runner) must not be papered over by it.
    Raises NvmlUnavailable if NVML is unusable or nothing matches.
    """
    init()
    count = query_with_reason("nvmlDeviceGetCount")
    if not count.ok:  # e.g. the driver went away since NVML was initialised
        raise NvmlUnavailable(count.reason or "NVML cannot count devices")
    devices = list_devices()
    if not devices:
        raise NvmlUnavailable("NVML lists no devices")
    if uuid:
        want = normalize_uuid(uuid)
        for dev in devices:
            if dev.uuid and normalize_uuid(dev.uuid) == want:
                return DeviceMatch(dev, "uuid")
        for gpu in devices:
            for mig in mig_devices(gpu):
                if mig.uuid and normalize_uuid(mig.uuid) == want:
                    return DeviceMatch(mig, "uuid")
    if pci_bus_id:
        want = normalize_pci_bus_id(pci_bus_id)
        for dev in devices:
            if dev.pci_bus_id and normalize_pci_bus_id(dev.pci_bus_id) == want:
                warning = None
                if dev.mig_enabled:
                    warning = (
                        f"GPU {dev.index} is in MIG mode and the training device's MIG "
                        "instance was not identified: memory is the whole GPU's"
                    )
                return DeviceMatch(dev, "pci_bus_id", warning)
    if index is not None and not (uuid or pci_bus_id):
        for dev in devices:
            if dev.index == index:
                return DeviceMatch(dev, "index", _index_warning(index, len(devices)))
    raise NvmlUnavailable(
        f"no NVML device matches the training device (uuid={uuid!r}, "
        f"pci_bus_id={pci_bus_id!r}, index={index!r})"
    )


def _index_warning(index: int, n_devices: int) -> str | None:
    if n_devices == 1:
        return None  # one GPU: the index cannot name another one
    text = (
        f"matched the GPU by index {index}: CUDA and NVML indices may differ unless "
        "CUDA_DEVICE_ORDER=PCI_BUS_ID"
    )
    if os.environ.get("CUDA_VISIBLE_DEVICES"):
        text += "; CUDA_VISIBLE_DEVICES is set, which renumbers CUDA devices"
    return text


def driver_version() -> Any:
    """Driver version text, or NA."""
    value = query("nvmlSystemGetDriverVersion")
    return NA if value is NA else _text(value)


def cuda_driver_version() -> tuple[int, int] | None:
    """The newest CUDA version the driver supports, e.g. (12, 8); None if NVML cannot say.

    ``nvmlSystemGetCudaDriverVersion`` answers ``major * 1000 + minor * 10`` (12080 for 12.8:
    nvml.h's ``NVML_CUDA_DRIVER_VERSION_MAJOR(v) = v / 1000`` and ``..._MINOR(v) = v % 1000 /
    10``, https://docs.nvidia.com/deploy/nvml-api/group__nvmlSystemQueries.html). It is what
    ``nvidia-smi`` prints as "CUDA Version" and decides which PyTorch CUDA build can run.
    """
    value = query("nvmlSystemGetCudaDriverVersion")
    if value is NA or int(value) <= 0:
        return None
    return int(value) // 1000, int(value) % 1000 // 10


def compute_capability(handle: Any) -> tuple[int, int] | None:
    """A GPU's CUDA compute capability, e.g. (8, 6) for sm_86; None if NVML cannot say."""
    value = query("nvmlDeviceGetCudaComputeCapability", handle)
    if value is NA:
        return None
    return int(value[0]), int(value[1])


def _driver_models(pynvml: Any) -> dict[int, str]:
    return {
        getattr(pynvml, "NVML_DRIVER_WDDM", 0): "WDDM",
        getattr(pynvml, "NVML_DRIVER_WDM", 1): "TCC",  # NVML calls TCC "WDM"
        getattr(pynvml, "NVML_DRIVER_MCDM", 2): "MCDM",
    }


def driver_model(handle: Any) -> Any:
    """ "WDDM", "TCC" or "MCDM" (Windows only: WDDM batches launches), or NA elsewhere."""
    pynvml = _binding()
    for name in (
        "nvmlDeviceGetDriverModel_v2",
        "nvmlDeviceGetDriverModel_v1",
        "nvmlDeviceGetDriverModel",
    ):
        if pynvml is None or not hasattr(pynvml, name):
            continue
        reply = query_with_reason(name, handle, quiet_missing=True)
        if reply.ok:
            current = reply.value[0] if isinstance(reply.value, (list, tuple)) else reply.value
            return _driver_models(pynvml).get(int(current), f"unknown ({current})")
        if reply.reason != FUNCTION_NOT_FOUND:
            return NA
    return NA


def _binding_version() -> str | None:
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:  # pragma: no cover
        return None
    try:
        return version("nvidia-ml-py")
    except PackageNotFoundError:
        return None


def describe() -> dict[str, Any]:
    """What NVML offers here, as plain data for ``gpuwatch doctor`` (NA becomes None)."""
    reason = unavailable_reason()
    info: dict[str, Any] = {
        "available": reason is None,
        "reason": reason,
        "binding_version": _binding_version(),
        "driver_version": None,
        "cuda_driver_version": None,
        "devices": [],
    }
    if reason is not None:
        return info
    version = driver_version()
    info["driver_version"] = None if version is NA else version
    cuda = cuda_driver_version()
    info["cuda_driver_version"] = None if cuda is None else f"{cuda[0]}.{cuda[1]}"
    for dev in list_devices():
        model = driver_model(dev.handle)
        info["devices"].append({**dev.as_dict(), "driver_model": None if model is NA else model})
    return info
