"""The training script of ``gpuwatch doctor --gpu``: device work whose truth is known.

Run by the runner like any watched script (``gpuwatch run`` mode, arguments:
``RESULT.json STEPS KERNEL_MS GAP_MS``). It first calibrates ``torch.cuda._sleep`` (a spin
kernel that runs for a number of GPU clock cycles) against timed CUDA events, then trains
STEPS steps of a known shape: a ``data`` phase the host spends sleeping ``GAP_MS`` while the
device idles, and a ``forward`` phase that launches one sleep kernel of about ``KERNEL_MS``.
Each kernel is bracketed by its own timed events (read only after the loop), so the device time
of every step is known independently of gpuwatch's marks; the doctor compares the two. The
host time each kernel's start event was recorded is kept too: gpuwatch's stream-active span
starts at its own mark, recorded on the idle stream just before, so the host's lag between the
two (microseconds, or more on a loaded machine) is device time gpuwatch rightly calls active.

While the steps run, ``torch.cuda.set_sync_debug_mode("error")`` is on: any operation that
makes the host wait for the device (in this script or in gpuwatch's instrumentation) raises, and
the check reports it. The result JSON holds the calibration, each kernel's measured duration and
the error, if any. Nothing here runs on a CPU device: without CUDA it writes why and exits 3.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from typing import Any

#: Cycles of the calibration kernels: long enough that launch overhead does not matter.
CALIBRATION_CYCLES = (2_000_000, 4_000_000, 8_000_000)
CALIBRATION_REPEATS = 3
EXIT_NO_CUDA = 3


def _timed_ms(torch: Any, cycles: int) -> float:
    """Device milliseconds of one ``_sleep(cycles)``, from two timed events (synchronizes).

    A kernel of the same length runs first, so the device is still busy while the start
    event and the measured kernel are queued: on an idle stream the start event would
    complete at once and the host's time to launch the kernel (milliseconds on a loaded
    machine) would count as kernel time, sizing every later kernel short.
    """
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(cycles)
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    end.synchronize()
    return float(start.elapsed_time(end))


def calibrate(torch: Any) -> float:
    """GPU cycles per millisecond of ``_sleep``: the median over a few sizes and repeats."""
    _timed_ms(torch, CALIBRATION_CYCLES[0])  # first launch: module load, clocks ramp up
    rates = [
        cycles / _timed_ms(torch, cycles)
        for cycles in CALIBRATION_CYCLES
        for _ in range(CALIBRATION_REPEATS)
    ]
    return float(statistics.median(rates))


def train(
    torch: Any, gw: Any, steps: int, cycles: int, gap_s: float
) -> tuple[list[Any], list[int], str | None]:
    """The measured steps under sync-debug "error"; the kernels' event pairs, the host time
    (``perf_counter_ns``) each kernel's start event was recorded, and the error."""
    pairs: list[Any] = []
    launches: list[int] = []
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(steps):
            with gw.step(samples=1):
                with gw.phase("data"):
                    time.sleep(gap_s)
                with gw.phase("forward"):
                    start = torch.cuda.Event(enable_timing=True)
                    end = torch.cuda.Event(enable_timing=True)
                    launches.append(time.perf_counter_ns())
                    start.record()
                    torch.cuda._sleep(cycles)
                    end.record()
                    pairs.append((start, end))
    except RuntimeError as exc:  # a synchronization inside the loop, or a device failure
        return pairs, launches, f"{type(exc).__name__}: {exc}"
    finally:
        torch.cuda.set_sync_debug_mode(0)
    return pairs, launches, None


def main(argv: list[str]) -> int:
    """Calibrate, train and write the result JSON (``argv``: RESULT.json STEPS KERNEL_MS GAP_MS).

    Returns 0; 1 when training raised (a synchronization, a device failure); ``EXIT_NO_CUDA``
    without CUDA.
    """
    out, steps, kernel_ms, gap_ms = argv[0], int(argv[1]), float(argv[2]), float(argv[3])
    import torch

    import gpuwatch.probe as gw

    result: dict[str, Any] = {"steps": steps, "kernel_ms_asked": kernel_ms, "gap_ms": gap_ms}
    if not torch.cuda.is_available():
        result["error"] = "CUDA is not available to this torch"
        with open(out, "w", encoding="utf-8") as f:
            json.dump(result, f)
        return EXIT_NO_CUDA
    cycles_per_ms = calibrate(torch)
    cycles = max(1, round(kernel_ms * cycles_per_ms))
    result.update(cycles_per_ms=cycles_per_ms, cycles=cycles)
    pairs, launches, error = train(torch, gw, steps, cycles, gap_ms / 1000)
    torch.cuda.synchronize()
    result["kernel_ms"] = [float(start.elapsed_time(end)) for start, end in pairs]
    result["launch_ns"] = launches
    result["error"] = error
    with open(out, "w", encoding="utf-8") as f:
        json.dump(result, f)
    return 0 if error is None else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
