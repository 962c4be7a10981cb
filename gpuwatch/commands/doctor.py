"""``gpuwatch doctor``: what this machine offers, and what to do about what is missing.

torch is surveyed in the *training* interpreter (``python -m gpuwatch.runner --survey``) because
the GUI process never imports it; NVML, the display and Qt are checked here.
"""

from __future__ import annotations

import importlib.metadata
import platform
import sys
import tempfile
from pathlib import Path
from typing import Any

from gpuwatch.core.run import interpreters, launcher, nvml
from gpuwatch.core.run.display import describe_display
from gpuwatch.core.run.gpu_mismatch import GpuView, TorchBuild, mismatch
from gpuwatch.core.run.json_survey import run_json_survey

SURVEY_TIMEOUT_S = 120.0


def survey_interpreter(python: str) -> dict[str, Any]:
    """Run the runner's survey in ``python``; returns its report or ``{"error": ...}``."""
    with tempfile.TemporaryDirectory(prefix="gpuwatch-survey-") as tmp:
        env = launcher.child_env(launcher.runner_pythonpath(python, Path(tmp)))
        return run_json_survey(
            [python, "-m", "gpuwatch.runner", "--survey"], env, SURVEY_TIMEOUT_S, python
        )


def _dist_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def report(python: str) -> tuple[list[tuple[str, str]], bool]:
    """Rows of (topic, finding) and whether training can run at all."""
    from gpuwatch import __version__

    survey = survey_interpreter(python)
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
    ok = "error" not in survey and bool(survey.get("torch"))
    if "error" in survey:
        rows.append(("torch", f"unusable: {survey['error']}"))
    else:
        rows.append(("training Python version", str(survey.get("python"))))
        rows.append(("torch", str(survey.get("torch") or f"missing: {survey.get('torch_error')}")))
        rows.append(
            (
                "torchvision",
                str(survey.get("torchvision") or f"missing: {survey.get('torchvision_error')}"),
            )
        )
        if survey.get("cuda_available"):
            rows.append(("CUDA", f"available (torch built for CUDA {survey.get('cuda')})"))
            for dev in survey.get("devices") or []:
                rows.append(
                    (
                        f"cuda:{dev.get('index')}",
                        f"{dev.get('name')} (capability {dev.get('capability')}, "
                        f"uuid {dev.get('uuid')}, PCI {dev.get('pci_bus_id')})",
                    )
                )
        else:
            built = survey.get("cuda")
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
        rows.append(("Triton", "importable" if survey.get("triton") else "not installed"))
    info = nvml.describe()
    if info.get("available"):
        cuda = info.get("cuda_driver_version")
        rows.append(
            ("NVML", f"driver {info.get('driver_version')}" + (f", CUDA {cuda}" if cuda else ""))
        )
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
    rows += gpu_rows(python, survey, GpuView.from_nvml())
    return rows, ok


def gpu_rows(python: str, survey: dict[str, Any], gpus: GpuView) -> list[tuple[str, str]]:
    """Whether the training Python can use the NVIDIA GPUs, and the one command that installs
    the torch build that fits them and the driver (nothing without an NVIDIA GPU)."""
    if not gpus.capabilities:
        return []
    rows = []
    if "error" not in survey and survey.get("torch"):
        found = mismatch(gpus, TorchBuild.from_report(survey), python)
        rows.append(("GPU use", found.sentence if found else "torch can use the NVIDIA GPU"))
    fix = interpreters.cuda_fix(python, gpus.capabilities, gpus.driver_cuda, survey)
    if fix.driver_update:
        rows.append(("NVIDIA driver", fix.driver_update))
    if fix.command and fix.index:
        rows.append((f"torch for this GPU ({fix.index.name})", fix.command))
    else:
        rows.append(("torch for this GPU", "no PyTorch CUDA build has kernels for it"))
    return rows


def run_doctor(python: str | None) -> int:
    """Print the doctor's report for the training interpreter ``python`` (default: the one gpuwatch
    would use); exit code 1 if training cannot start."""
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
