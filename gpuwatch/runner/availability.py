"""Which knobs can work on this device: probed once at start-up, never assumed.

Each check is cheap (well under a second in total on a CPU): bf16 and the fused optimizer are
tried on a tiny tensor, compile only looks for its toolchain (compiling to find out would take
tens of seconds). A knob or choice that cannot work gets the reason the window shows verbatim.

A choice can also *work but slowly*: bf16 autocast on a CPU without bf16 instructions runs
emulated, many times slower than float32. Its check times a small matmul both ways (a few ms)
and offers the choice with the reason "emulated here: slower (N× a float32 matmul)", which the
tour reads as a reason to skip it. Other knobs were considered for the same treatment and left
alone: compile's warm-up cannot be measured without compiling (tens of seconds), and
channels_last or a fused optimizer differ too little on a tiny probe to predict a training step.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuwatch.runner.knobs import Availability, KnobSchema
from gpuwatch.runner.workloads import Workload

NEEDS_CUDA = "needs CUDA"
#: channels_last helps convolutions over NCHW images only.
NEEDS_IMAGES = "needs a workload with 4-D image inputs and convolutions"
#: bf16 counts as slow here when its matmul takes at least this many times float32's.
SLOW_RATIO = 1.2
#: The probe's matmul: big enough that arithmetic, not autocast's per-call overhead, dominates
#: (at 128×128 the overhead alone doubles the time), small enough for a few ms in total.
PROBE_SIZE = 256
PROBE_REPS = 5


@dataclass(frozen=True)
class Bf16Check:
    """What the bf16 probe found: whether bf16 autocast works here and whether it is fast.

    ``native``: the CPU has bf16 instructions (AVX512-BF16 or AMX), None when torch cannot
    tell (another architecture) or on a GPU. ``slowdown``: median time of a bf16-autocast
    matmul over a float32 one, None when not measured.
    """

    problem: str | None = None
    native: bool | None = None
    capability: str | None = None
    slowdown: float | None = None
    slow: str | None = None

    @property
    def works(self) -> bool:
        return self.problem is None


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
    bf16 = check_bf16(torch, device)
    if bf16.problem is not None:
        amp["bf16"] = bf16.problem
    if amp:
        choices["amp"] = amp
    slow = {"amp": {"bf16": bf16.slow}} if bf16.slow is not None else {}
    compile_problem = compile_toolchain_problem(torch, device)
    if compile_problem is not None:
        disabled["compile"] = compile_problem
    elif not cuda:
        choices["compile"] = {"reduce-overhead": "needs CUDA (it records CUDA graphs)"}
    fused = fused_problem(torch, device, optimizer_cls)
    if fused is not None:
        choices["optimizer_impl"] = {"fused": fused}
    return Availability(disabled, choices, slow)


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


def check_bf16(torch: Any, device: Any) -> Bf16Check:
    """Does bf16 autocast work here, and is it fast? On a GPU the compute capability answers
    (bf16 tensor cores need 8.0); on a CPU the instructions and a timed matmul do."""
    problem = bf16_problem(torch, device)
    if problem is not None:
        return Bf16Check(problem=problem)
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        if (major, minor) < (8, 0):
            return Bf16Check(
                native=False,
                slow=f"emulated on this GPU (compute capability {major}.{minor}): slower",
            )
        return Bf16Check(native=True)
    if device.type != "cpu":
        return Bf16Check()
    fp32, bf16 = time_matmuls(torch, device)
    return bf16_cpu_verdict(cpu_has_bf16(torch), cpu_capability(torch), fp32, bf16)


def bf16_cpu_verdict(
    native: bool | None, capability: str | None, fp32_s: Sequence[float], bf16_s: Sequence[float]
) -> Bf16Check:
    """The verdict from the CPU's instructions and the timed matmuls: slow when the CPU lacks
    (or cannot be shown to have) bf16 instructions and bf16 took ``SLOW_RATIO``× float32 or more.
    A CPU with them is never called slow: its probe can only be disturbed by other load."""
    slowdown = None
    if fp32_s and bf16_s and min(fp32_s) > 0:
        slowdown = statistics.median(bf16_s) / statistics.median(fp32_s)
    slow = None
    if native is not True and slowdown is not None and slowdown >= SLOW_RATIO:
        slow = f"emulated here: slower ({slowdown:.1f}× a float32 matmul)"
    return Bf16Check(native=native, capability=capability, slowdown=slowdown, slow=slow)


def cpu_has_bf16(torch: Any) -> bool | None:
    """True if the CPU has AVX512-BF16 or AMX tiles; None where torch cannot tell (its
    ``torch.cpu._is_*_supported`` probes are x86-only and private, so absent ones are unknown)."""
    probes = [getattr(torch.cpu, name, None) for name in _NATIVE_BF16_PROBES]
    found = [probe for probe in probes if callable(probe)]
    if not found:
        return None
    try:
        return any(bool(probe()) for probe in found)
    except Exception:  # a probe that cannot run on this build or CPU
        return None


_NATIVE_BF16_PROBES = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")


def cpu_capability(torch: Any) -> str | None:
    """``torch.backends.cpu.get_cpu_capability()`` (e.g. "AVX2", "AVX512"), None if absent."""
    try:
        return str(torch.backends.cpu.get_cpu_capability())
    except Exception:  # an older torch or a build without it
        return None


def time_matmuls(
    torch: Any,
    device: Any,
    *,
    size: int = PROBE_SIZE,
    reps: int = PROBE_REPS,
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[list[float], list[float]]:
    """Seconds per float32 and per bf16-autocast ``size``×``size`` matmul, ``reps`` of each,
    interleaved so a burst of other load hits both alike; one untimed warm-up each."""
    a = torch.randn(size, size, device=device)
    b = torch.randn(size, size, device=device)

    def fp32() -> None:
        a @ b

    def bf16() -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16):
            a @ b

    fp32()
    bf16()
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(reps):
        for run, out in ((fp32, times[0]), (bf16, times[1])):
            start = clock()
            run()
            out.append(clock() - start)
    return times


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


def cpp_compiler(platform: str = sys.platform, environ: Mapping[str, str] = os.environ) -> str:
    """The compiler inductor uses for CPU code on ``platform``; read without importing
    inductor (~2 s)."""
    if environ.get("CXX"):
        return environ["CXX"]
    if platform == "win32":
        return "cl"
    return "clang++" if platform == "darwin" else "g++"


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
