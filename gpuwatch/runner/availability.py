"""Which knobs can work on this device: probed once at start-up, never assumed.

Each check is cheap (well under a second in total on a CPU): bf16 and the fused optimizer are
tried on a tiny tensor, compile only looks for its toolchain (compiling to find out would take
tens of seconds). A knob or choice that cannot work gets the reason the window shows verbatim.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from typing import Any

from gpuwatch.runner.knobs import Availability, KnobSchema
from gpuwatch.runner.workloads import Workload

NEEDS_CUDA = "needs CUDA"
#: channels_last helps convolutions over NCHW images only.
NEEDS_IMAGES = "needs a workload with 4-D image inputs and convolutions"


def check_availability(
    torch: Any, device: Any, *, optimizer_cls: type[Any], channels_last: bool
) -> Availability:
    """Probe every knob on ``device``; ``optimizer_cls`` is the workload's optimizer (for
    ``fused``) and ``channels_last`` whether the workload has 4-D image inputs."""
    cuda = device.type == "cuda"
    disabled: dict[str, str] = {}
    choices: dict[str, dict[str, str]] = {}
    if not cuda:
        disabled.update(
            pin_memory=NEEDS_CUDA,
            non_blocking=NEEDS_CUDA,
            tf32=NEEDS_CUDA,
            cudnn_benchmark=NEEDS_CUDA,
        )
    else:
        capability = torch.cuda.get_device_capability(device)
        if capability < (8, 0):
            disabled["tf32"] = (
                f"needs compute capability 8.0 or newer "
                f"(this GPU has {capability[0]}.{capability[1]})"
            )
        if not torch.backends.cudnn.is_available():
            disabled["cudnn_benchmark"] = "cuDNN is not available to this torch"
    if not channels_last:
        disabled["channels_last"] = NEEDS_IMAGES
    amp = {"fp16": NEEDS_CUDA} if not cuda else {}
    bf16 = bf16_problem(torch, device)
    if bf16 is not None:
        amp["bf16"] = bf16
    if amp:
        choices["amp"] = amp
    compile_problem = compile_toolchain_problem(torch, device)
    if compile_problem is not None:
        disabled["compile"] = compile_problem
    elif not cuda:
        choices["compile"] = {"reduce-overhead": "needs CUDA (it records CUDA graphs)"}
    fused = fused_problem(torch, device, optimizer_cls)
    if fused is not None:
        choices["optimizer_impl"] = {"fused": fused}
    return Availability(disabled, choices)


def bf16_problem(torch: Any, device: Any) -> str | None:
    """None if bf16 autocast works here: asked of CUDA, tried with a tiny matmul on a CPU."""
    if device.type == "cuda":
        return None if torch.cuda.is_bf16_supported() else "bf16 is not supported by this GPU"
    try:
        with torch.autocast(device.type, dtype=torch.bfloat16):
            out = torch.ones(4, 4, device=device) @ torch.ones(4, 4, device=device)
    except Exception as exc:  # an autocast or kernel that is missing on this build
        return f"bf16 autocast fails here: {exc}"
    if out.dtype != torch.bfloat16:
        return "bf16 autocast is not supported on this device"
    return None


def compile_toolchain_problem(torch: Any, device: Any) -> str | None:
    """None if inductor's toolchain is here: Triton on a GPU of capability 7.0+, else a C++
    compiler (the one inductor would call: ``$CXX``, else g++, clang++ on macOS, cl on Windows).
    """
    if device.type == "cuda":
        if importlib.util.find_spec("triton") is None:
            return "Triton is not installed"
        capability = torch.cuda.get_device_capability(device)
        if capability < (7, 0):
            return (
                f"Triton needs compute capability 7.0 or newer "
                f"(this GPU has {capability[0]}.{capability[1]})"
            )
        return None
    compiler = cpp_compiler()
    if shutil.which(compiler) is None:
        return f"no C++ compiler found (inductor needs {compiler}; set CXX)"
    return None


def cpp_compiler() -> str:
    """The compiler inductor uses for CPU code; read without importing inductor (~2 s)."""
    if os.environ.get("CXX"):
        return os.environ["CXX"]
    if sys.platform == "win32":
        return "cl"
    return "clang++" if sys.platform == "darwin" else "g++"


def fused_problem(torch: Any, device: Any, optimizer_cls: type[Any]) -> str | None:
    """None if a fused ``optimizer_cls`` builds and steps on ``device`` (a one-element probe)."""
    try:
        param = torch.nn.Parameter(torch.zeros(1, device=device))
        param.grad = torch.zeros(1, device=device)
        optimizer_cls([param], lr=0.1, fused=True).step()
    except Exception as exc:  # e.g. "fused=True requires all the params to be ..."
        return f"a fused {optimizer_cls.__name__} does not work here: {_first_line(exc)}"
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def knob_schema(torch: Any, workload: Workload, device: Any) -> KnobSchema:
    """The knobs of ``workload`` on ``device``: its naive values and limits, probed here."""
    availability = check_availability(
        torch,
        device,
        optimizer_cls=workload.optimizer_class(),
        channels_last=workload.channels_last_applies,
    )
    return KnobSchema(workload.knob_values(), availability, workload.knob_limits())
