"""When two configurations' samples/s count as the same: one rule for the tour and the advisor.

A row's samples/s is the median of its 1 s window rates (or of its per-step rates). Two rows
differ beyond noise when their ratio is off 1 by more than twice the combined uncertainty of
their medians, with a floor (``MIN_NOISE``: smaller moves are not worth a verdict) and a
ceiling (``MAX_NOISE``: a visible loss is a loss however scattered the rates). The tour keeps
or reverts a stage by it and the advisor says "made things worse" by it, so the two never give
one change two verdicts.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from gpuwatch.core.figures.segments import SegmentStats

#: Moves of samples/s smaller than this fraction are noise.
MIN_NOISE = 0.05
#: Moves larger than this fraction are real, however scattered the rates.
MAX_NOISE = 0.10


def median_noise(rates: Sequence[float]) -> float:
    """How far a row's samples/s (the median of its window rates) could move, as a fraction:
    the windows' interquartile range over their median, over √n (the median's uncertainty
    shrinks with the number of windows; 0 with fewer than two)."""
    if len(rates) < 2:
        return 0.0
    low, middle, high = statistics.quantiles(rates, n=4, method="inclusive")
    return (high - low) / middle / math.sqrt(len(rates)) if middle > 0 else 0.0


def noise_band(row: SegmentStats, other: SegmentStats) -> float:
    """The fraction within which two rows' samples/s count as the same: twice the combined
    uncertainty of their medians, at least ``MIN_NOISE`` and at most ``MAX_NOISE``."""
    combined = math.hypot(median_noise(row.window_rates), median_noise(other.window_rates))
    return min(MAX_NOISE, max(MIN_NOISE, 2 * combined))
