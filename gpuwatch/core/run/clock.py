"""Place foreign timestamps on the one time axis, ``perf_counter_ns``.

Kineto events carry Unix-epoch nanoseconds, NVML samples microseconds on a clock NVML leaves
unspecified (epoch per the notes, ``CLOCK_BOOTTIME`` on some Linux drivers), while every
step mark is ``perf_counter_ns`` (docs/design.md, "A step's marks"). A clock is related to
perf_counter by an
offset measured as a tight (perf, clock, perf) bracket. The system clock can be stepped by
NTP, so callers re-measure the offset for every batch instead of caching it for the session.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import overload

import numpy as np


def clock_offset_ns(clock: Callable[[], int], tries: int = 5) -> tuple[int, int]:
    """Return ``(clock() - perf_counter_ns(), bracket width ns)`` from the tightest try.

    Each try reads perf, clock, perf; the clock reading is paired with the midpoint of the two
    perf readings, so the offset's error is at most half the width. A preemption inside one
    try only widens that try, which is why the narrowest one wins.
    """
    best_offset, best_width = 0, -1
    for _ in range(max(1, tries)):
        p0 = time.perf_counter_ns()
        reading = clock()
        p1 = time.perf_counter_ns()
        width = p1 - p0
        if best_width < 0 or width < best_width:
            best_offset, best_width = reading - (p0 + p1) // 2, width
    return best_offset, best_width


def epoch_offset_ns(tries: int = 5) -> tuple[int, int]:
    """Return ``(time_ns - perf_counter_ns, bracket width ns)`` from the tightest of ``tries``."""
    return clock_offset_ns(time.time_ns, tries)


def candidate_clocks() -> dict[str, Callable[[], int]]:
    """The host clocks (ns) a foreign timestamp may be counted on, by name."""
    clocks: dict[str, Callable[[], int]] = {
        "epoch": time.time_ns,
        "perf_counter": time.perf_counter_ns,
        "monotonic": time.monotonic_ns,
    }
    boottime = getattr(time, "CLOCK_BOOTTIME", None)
    if boottime is not None:
        clocks["boottime"] = functools.partial(time.clock_gettime_ns, boottime)
    return clocks


def guess_clock(
    stamp_ns: int,
    clocks: dict[str, Callable[[], int]] | None = None,
) -> tuple[str, int]:
    """The clock whose current reading is nearest to a *recent* stamp, and that distance (ns).

    Epoch time (~1.7e18 ns) and time since boot (days: ~1e14 ns) are orders of magnitude
    apart, so a stamp from the last minutes identifies its clock unambiguously.
    """
    readings = {name: clock() for name, clock in (clocks or candidate_clocks()).items()}
    name = min(readings, key=lambda n: abs(readings[n] - stamp_ns))
    return name, abs(readings[name] - stamp_ns)


@overload
def epoch_us_to_perf_ns(us: int, offset: int) -> int: ...
@overload
def epoch_us_to_perf_ns(us: np.ndarray, offset: int) -> np.ndarray: ...


def epoch_us_to_perf_ns(us: int | np.ndarray, offset: int) -> int | np.ndarray:
    """Epoch microseconds (NVML) → ``perf_counter_ns``, with ``offset`` from epoch_offset_ns."""
    if isinstance(us, np.ndarray):
        return us.astype(np.int64) * 1000 - offset
    return int(us) * 1000 - offset


@overload
def epoch_ns_to_perf_ns(ns: int, offset: int) -> int: ...
@overload
def epoch_ns_to_perf_ns(ns: np.ndarray, offset: int) -> np.ndarray: ...


def epoch_ns_to_perf_ns(ns: int | np.ndarray, offset: int) -> int | np.ndarray:
    """Epoch nanoseconds (Kineto) → ``perf_counter_ns``, with ``offset`` from epoch_offset_ns."""
    if isinstance(ns, np.ndarray):
        return ns.astype(np.int64) - offset
    return int(ns) - offset
