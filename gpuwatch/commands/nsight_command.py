"""A ready Nsight Systems command for the current workload or script, for users going deeper.

gpuwatch's kernel window covers a few steps; Nsight Systems traces the whole run with CUDA API,
NVTX and OS-runtime rows. The command runs the same thing headless through gpuwatch (``bench``
for a built-in workload, ``run --headless`` for a script), so the runner's NVTX ranges name the
phases (``gpuwatch:data``, ``gpuwatch:forward``, ...). ``nsys`` follows child processes, so the
runner's CUDA work is traced. Never run both at once with a kernel capture: CUPTI allows one
subscriber per process.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from collections.abc import Sequence

from gpuwatch.core.run.launcher import is_frozen
from gpuwatch.core.run.session import LaunchSpec

#: Long enough to get past start-up and a few knob-free steady seconds.
BENCH_SECONDS = 20
NSYS_OPTIONS: tuple[str, ...] = (
    "profile",
    "--trace=cuda,nvtx,osrt",
    "--sample=none",
    "--force-overwrite=true",
)


def nsight_command(
    spec: LaunchSpec, gpuwatch: Sequence[str], *, windows: bool | None = None
) -> str:
    """The command line, quoted for the shell of this OS (``windows`` overrides the guess).

    ``gpuwatch`` is how to start gpuwatch itself (``[python, "-m", "gpuwatch"]``, or the
    frozen app's executable). A CPU device is replaced by ``cuda``: Nsight traces CUDA.
    """
    device = spec.device if spec.device.startswith("cuda") or spec.device == "auto" else "cuda"
    python = ["--python", spec.python] if spec.python else []
    if spec.user_code:
        name = f"gpuwatch-{_stem(spec.name)}"
        seconds = ["--seconds", f"{spec.seconds:g}"] if spec.seconds else []
        tail = ["run", "--headless", "--device", device, *python, *seconds]
        if spec.module:  # -m takes the rest of the line, as python's does
            tail += ["-m", spec.module, *spec.script_args]
        else:
            tail += [spec.script or "", *(["--", *spec.script_args] if spec.script_args else [])]
    else:
        name = f"gpuwatch-{spec.workload}"
        tail = [
            "bench",
            "--workload",
            spec.workload,
            "--device",
            device,
            *python,
            "--seconds",
            str(BENCH_SECONDS),
        ]
    argv = ["nsys", *NSYS_OPTIONS, f"--output={name}", *gpuwatch, *tail]
    on_windows = sys.platform == "win32" if windows is None else windows
    return subprocess.list2cmdline(argv) if on_windows else shlex.join(argv)


def gpuwatch_argv() -> list[str]:
    """How this gpuwatch is started: the frozen app itself, else ``python -m gpuwatch``."""
    return [sys.executable] if is_frozen() else [sys.executable, "-m", "gpuwatch"]


def _stem(name: str) -> str:
    stem = name.replace("\\", "/").rsplit("/", 1)[-1].rsplit(".", 1)[0]
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in stem) or "script"
