"""Device-mark bookkeeping over a SIMULATED hour with dropped steps.

``python bench/marks_memory.py``: ``CudaEventBackend`` on simcuda (``tests/simcuda``; a model,
not a GPU) driven by an injected host clock: 100 ms steps for one simulated hour, every third
step dropped before its end (a ``gw.step()`` body that raised), a 40 ms device backlog that
never drains. Reported: the Python memory held by gpuwatch's runner code (``tracemalloc``,
allocations made in ``gpuwatch/runner``) and the backend's free event sets every simulated 10
minutes, and the growth over the hour. Flat means dropped steps give their event sets back and
nothing else accumulates.
"""

from __future__ import annotations

import sys
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from simcuda import cuda_api
from simcuda.model import SimConfig, SimGpu

from gpuwatch.protocol import N_MARKS
from gpuwatch.runner.timing import CudaEventBackend

MS = 1_000_000
S = 1_000_000_000
STEP_NS = 100 * MS


class FakeClock:
    def __init__(self) -> None:
        self.now_ns = 10 * S

    def __call__(self) -> int:
        self.now_ns += 20
        return self.now_ns


def runner_bytes(snapshot: tracemalloc.Snapshot) -> int:
    runner = str(Path(__file__).resolve().parents[1] / "gpuwatch" / "runner")
    return sum(
        s.size
        for s in snapshot.filter_traces([tracemalloc.Filter(True, runner + "*")]).statistics(
            "filename"
        )
    )


def main() -> int:
    clock = FakeClock()
    sim = SimGpu(SimConfig(drift_ppm=20.0), clock=clock)
    cuda_api.set_gpu(sim)
    tracemalloc.start()
    backend = CudaEventBackend(
        event_factory=lambda: cuda_api.Event(enable_timing=True),
        clock=clock,
        synchronize=lambda: None,
        calibration_stream=cuda_api.Stream(),
        device=0,
        current_stream=cuda_api.current_stream,
        capturing=cuda_api.is_current_stream_capturing,
    )
    stream = sim.current_stream()
    sim.launch(stream, 40 * MS, "backlog")
    start = clock.now_ns
    marked = dropped = 0
    figures: list[tuple[int, int]] = []
    next_report = start
    step = 0
    print("simulated min | runner bytes (tracemalloc) | free event sets | marked | dropped")
    while clock.now_ns - start <= 3600 * S:
        if clock.now_ns >= next_report:
            size = runner_bytes(tracemalloc.take_snapshot())
            figures.append((clock.now_ns - start, size))
            print(
                f"{(clock.now_ns - start) / 60 / S:13.0f} | {size:26,d} | "
                f"{len(backend._free):15d} | {marked:6d} | {dropped:7d}"
            )
            next_report += 600 * S
        backend.begin(step)
        last = N_MARKS if step % 3 else 3  # every third step is dropped after three marks
        for index in range(last):
            if 1 <= index <= 4:
                sim.launch(stream, STEP_NS // 4 + 2_000, "phase")
                clock.now_ns += STEP_NS // 4
            backend.mark(index)
        if step % 3:
            backend.end()
        else:
            dropped += 1
        marked += len(backend.poll())
        step += 1
    marked += len(backend.poll(wait=True))
    size = runner_bytes(tracemalloc.take_snapshot())
    figures.append((clock.now_ns - start, size))
    print(
        f"{(clock.now_ns - start) / 60 / S:13.0f} | {size:26,d} | "
        f"{len(backend._free):15d} | {marked:6d} | {dropped:7d}"
    )
    first_after_warmup = figures[1][1]
    growth = figures[-1][1] - first_after_warmup
    print(
        f"growth from minute 10 to minute 60: {growth:+,d} bytes; "
        f"steps skipped for want of an event set: {backend.skipped}"
    )
    cuda_api.set_gpu(None)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
