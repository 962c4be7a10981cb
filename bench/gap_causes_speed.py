"""Cost of the gap-cause and step-breakdown maths (``python bench/gap_causes_speed.py``).

The window recomputes the visible window's causes on every redraw (~30/s) and the live
segment's breakdown with the scoreboard (~2/s), over up to 10^5 steps (the step ring). Prints
the best of 5 runs in ms for 10^3, 10^4 and 10^5 steps, for CPU marks (device = host) and
SIMULATED CUDA marks (a made-up device lag: this measures numpy, never a GPU).
"""

import time

import numpy as np

from gpuwatch.core.figures.gap_causes import caused_idle
from gpuwatch.core.figures.step_breakdown import step_breakdown
from gpuwatch.core.model.store import StepsView

PHASE_MS = np.array([10, 1, 5, 5, 2, 3, 4])


def steps(n: int, cuda: bool) -> StepsView:
    rng = np.random.default_rng(0)
    durations = (PHASE_MS * 1_000_000 * rng.uniform(0.5, 1.5, (n, 7))).astype(np.int64)
    starts = np.cumsum(np.r_[0, durations.sum(axis=1)[:-1]])
    host = np.empty((n, 7), np.int64)
    host[:, 0] = starts
    host[:, 1:] = starts[:, None] + np.cumsum(durations[:, :6], axis=1)
    device = host.copy()
    if cuda:  # SIMULATED: the stream trails the host by up to 2 ms, marks stay in order
        lag = rng.integers(0, 2_000_000, (n, 1))
        device = np.maximum.accumulate((host + lag).reshape(-1)).reshape(n, 7)
    return StepsView(
        np.arange(n), np.zeros(n, np.int32), np.ones(n, np.int32), host, device, np.ones(n, bool)
    )


def best_ms(body, runs: int = 5) -> float:
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        body()
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def main() -> None:
    print(f"{'steps':>8} {'marks':>14} {'caused_idle ms':>15} {'step_breakdown ms':>18}")
    for n in (1_000, 10_000, 100_000):
        for cuda in (False, True):
            view = steps(n, cuda)
            idle = best_ms(lambda v=view: caused_idle(v).totals_ns())
            split = best_ms(lambda v=view: step_breakdown(v))
            kind = "simulated CUDA" if cuda else "CPU"
            print(f"{n:>8,} {kind:>14} {idle:>15.2f} {split:>18.2f}")


if __name__ == "__main__":
    main()
