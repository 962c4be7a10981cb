"""``gpuwatch doctor``: what this machine offers, and what to do about what is missing.

torch is probed in the *training* interpreter (``python -m gpuwatch.runner --probe``) because
the GUI process never imports it; NVML, the display and Qt are checked here.
"""

from __future__ import annotations

import importlib.metadata
import platform
import sys
import tempfile
from pathlib import Path
from typing import Any

from gpuwatch.core.run import launcher, nvml
from gpuwatch.core.run.display import describe_display
from gpuwatch.core.run.json_probe import run_json_probe

PROBE_TIMEOUT_S = 120.0


def probe_interpreter(python: str) -> dict[str, Any]:
    """Run the runner's probe in ``python``; returns its report or ``{"error": ...}``."""
    with tempfile.TemporaryDirectory(prefix="gpuwatch-probe-") as tmp:
        env = launcher.child_env(launcher.runner_pythonpath(python, Path(tmp)))
        return run_json_probe(
            [python, "-m", "gpuwatch.runner", "--probe"], env, PROBE_TIMEOUT_S, python
        )


def _dist_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def report(python: str) -> tuple[list[tuple[str, str]], bool]:
    """Rows of (topic, finding) and whether training can run at all."""
    from gpuwatch import __version__

    probe = probe_interpreter(python)
    rows = [
        ("gpuwatch", __version__),
        ("GUI Python", f"{platform.python_version()} ({sys.executable})"),
        ("OS", platform.platform()),
        (
            "PySide6",
            _dist_version("PySide6-Essentials")
            if _dist_version("PySide6-Essentials") != "not installed"
            else _dist_version("PySide6"),
        ),
        ("pyqtgraph", _dist_version("pyqtgraph")),
        ("display", describe_display()),
        ("training Python", python),
    ]
    ok = "error" not in probe and bool(probe.get("torch"))
    if "error" in probe:
        rows.append(("torch", f"unusable: {probe['error']}"))
    else:
        rows.append(("training Python version", str(probe.get("python"))))
        rows.append(("torch", str(probe.get("torch") or f"missing: {probe.get('torch_error')}")))
        rows.append(
            (
                "torchvision",
                str(probe.get("torchvision") or f"missing: {probe.get('torchvision_error')}"),
            )
        )
        if probe.get("cuda_available"):
            rows.append(("CUDA", f"available (torch built for CUDA {probe.get('cuda')})"))
            for dev in probe.get("devices") or []:
                rows.append(
                    (
                        f"cuda:{dev.get('index')}",
                        f"{dev.get('name')} (capability {dev.get('capability')}, "
                        f"uuid {dev.get('uuid')}, PCI {dev.get('pci_bus_id')})",
                    )
                )
        else:
            built = probe.get("cuda")
            rows.append(
                (
                    "CUDA",
                    "not available: training runs on the CPU"
                    + (
                        f" (torch is built for CUDA {built} but finds no GPU)"
                        if built
                        else " (CPU-only torch build)"
                    ),
                )
            )
        rows.append(("Triton", "importable" if probe.get("triton") else "not installed"))
    info = nvml.describe()
    if info.get("available"):
        rows.append(("NVML", f"driver {info.get('driver_version')}"))
        for dev in info.get("devices", []):
            rows.append(
                (
                    f"NVML GPU {dev.get('index')}",
                    f"{dev.get('name')} ({dev.get('uuid')}, PCI {dev.get('pci_bus_id')}, "
                    f"driver model {dev.get('driver_model', 'n/a')})",
                )
            )
    else:
        rows.append(
            (
                "NVML",
                f"n/a — {info.get('reason')}; the window shows the CPU analog "
                "(process CPU %) instead of GPU utilization",
            )
        )
    return rows, ok


def run_doctor(python: str | None) -> int:
    try:
        python = python or launcher.default_python()
    except launcher.NoInterpreterError as exc:  # the installed app has no Python of its own
        print(f"gpuwatch doctor: {exc}")  # noqa: T201 - the command's output
        return 1
    rows, ok = report(python)
    width = max(len(topic) for topic, _ in rows)
    for topic, finding in rows:
        print(f"{topic.ljust(width)}  {finding}")  # noqa: T201 - the command's output
    if not ok:
        print(  # noqa: T201 - the command's output
            "\nTraining cannot start: install torch and torchvision in the training "
            "Python (pip install torch torchvision) or pick another with --python."
        )
        return 1
    return 0
