"""Host marks of consecutive steps with jittered phases, for the timeline and frame tests."""

from __future__ import annotations

import numpy as np

from gpuwatch.protocol import N_MARKS

MS = 1_000_000
#: Where the first step starts (a perf_counter_ns far from zero, as real marks are).
ORIGIN = 10_000 * MS
#: Phase shares of a step (data, h2d, forward, backward, optimizer, sync) and the overhead.
SHARES = np.array([0.30, 0.05, 0.20, 0.30, 0.10, 0.04, 0.01])


def marks(n: int, step_ns: float, seed: int = 0) -> np.ndarray:
    """Host marks of ``n`` consecutive jittered steps from ``ORIGIN``."""
    rng = np.random.default_rng(seed)
    lengths = np.maximum((step_ns * SHARES * rng.uniform(0.5, 1.5, (n, 7))).astype(np.int64), 1)
    ends = ORIGIN + np.cumsum(lengths.sum(axis=1))
    starts = np.concatenate(([ORIGIN], ends[:-1]))
    out = np.empty((n, N_MARKS), np.int64)
    out[:, 0] = starts
    out[:, 1:] = starts[:, None] + np.cumsum(lengths[:, :-1], axis=1)
    return out
