"""``python -m gpuwatch.runner --survey``: what the *training* interpreter has, as one JSON object.

``gpuwatch doctor`` runs this in the interpreter that will train (it may not be the GUI's), so
it must work, and exit 0, even when torch is missing or broken: every failed import becomes a
null field plus its error text. Device identity (UUID, PCI bus id) is spelled as NVML spells
it, so the GUI can match a torch device to its NVML handle.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import platform
import re
import sys
from types import ModuleType
from typing import Any

from gpuwatch.protocol import PROTOCOL_VERSION

_BARE_UUID = re.compile(r"^[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}$")


def _import(name: str) -> tuple[ModuleType | None, str | None]:
    """Import ``name``; any failure (ImportError, a broken DLL's OSError, ...) becomes text."""
    try:
        # Some packages print on import; stdout must carry the JSON object only.
        with contextlib.redirect_stdout(sys.stderr):
            return importlib.import_module(name), None
    except Exception as exc:  # the survey reports whatever broke
        return None, f"{type(exc).__name__}: {exc}"


def nvml_uuid(props: Any) -> str | None:
    """NVML's ``GPU-…`` form of a device UUID; torch's ``_CUuuid`` prints it without the prefix."""
    raw = getattr(props, "uuid", None)
    if raw is None:
        return None
    text = str(raw).strip()
    if _BARE_UUID.match(text):
        return f"GPU-{text.lower()}"
    return text or None


def pci_bus_id(props: Any) -> str | None:
    """``DDDD:BB:DD.F`` (NVML's legacy busId spelling, upper-case hex); torch has no function
    number, so ``.0`` is assumed, as for every single-function GPU."""
    try:
        domain, bus, device = (
            int(getattr(props, f"pci_{part}_id")) for part in ("domain", "bus", "device")
        )
    except (AttributeError, TypeError, ValueError):
        return None
    return f"{domain:04X}:{bus:02X}:{device:02X}.0"


def cuda_device(torch: Any, index: int) -> dict[str, Any]:
    """Identity and size of CUDA device ``index`` (shared by the survey and ``hello``)."""
    props = torch.cuda.get_device_properties(index)
    return {
        "index": index,
        "name": props.name,
        "uuid": nvml_uuid(props),
        "pci_bus_id": pci_bus_id(props),
        "capability": [props.major, props.minor],
        "total_memory": int(props.total_memory),
    }


def collect() -> dict[str, Any]:
    """Everything ``gpuwatch doctor`` reports about this interpreter."""
    info: dict[str, Any] = {
        "protocol": PROTOCOL_VERSION,
        "python": platform.python_version(),
        "executable": sys.executable,
        "platform": platform.platform(),
        "torch": None,
        "torch_error": None,
        "torchvision": None,
        "torchvision_error": None,
        "cuda_available": None,
        "cuda": None,
        "cuda_error": None,
        "devices": [],
        "triton": False,
        "triton_version": None,
        "triton_error": None,
    }
    torch, info["torch_error"] = _import("torch")
    if torch is None:
        return info
    info["torch"] = torch.__version__
    torchvision, info["torchvision_error"] = _import("torchvision")
    if torchvision is not None:
        info["torchvision"] = torchvision.__version__
    info["cuda"] = torch.version.cuda
    try:
        info["cuda_available"] = bool(torch.cuda.is_available())
        if info["cuda_available"]:
            info["devices"] = [cuda_device(torch, i) for i in range(torch.cuda.device_count())]
    except Exception as exc:  # a broken driver must not break the survey
        info["cuda_error"] = f"{type(exc).__name__}: {exc}"
    triton, info["triton_error"] = _import("triton")
    if triton is not None:
        info["triton"] = True
        info["triton_version"] = getattr(triton, "__version__", None)
    return info


def main() -> int:
    """Print the survey as one JSON line; always exit 0 (failures are in the fields)."""
    sys.stdout.write(json.dumps(collect(), allow_nan=False, default=str) + "\n")
    sys.stdout.flush()
    return 0
