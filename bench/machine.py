"""The header every bench script prints first: when, on what, and how busy the machine was.

Figures from a shared 2-core box are only comparable with their load beside them, so each
script starts (and may end) with this line block; and ``spread`` puts the same statistics
(median and range) under every repeated figure.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Sequence


def cpu_model() -> str:
    """The CPU's model name (``platform.processor()`` is empty on Linux)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def load_average() -> str:
    """1/5/15-minute load averages, or "n/a" where the OS has none (Windows)."""
    try:
        return "{:.2f} {:.2f} {:.2f}".format(*os.getloadavg())
    except (AttributeError, OSError):
        return "n/a"


def isolate_user_dirs() -> None:
    """Point gpuwatch's settings and log folders at a temporary folder (unless set), so a
    bench run never reads or changes the user's window layout or remembered choices; the
    folder is removed when the bench exits."""
    import atexit
    import shutil
    import tempfile

    base = tempfile.mkdtemp(prefix="gpuwatch-bench-user-")
    atexit.register(shutil.rmtree, base, ignore_errors=True)
    os.environ.setdefault("GPUWATCH_SETTINGS_DIR", os.path.join(base, "settings"))
    os.environ.setdefault("GPUWATCH_LOG_DIR", os.path.join(base, "logs"))


def loop_ns() -> float:
    """One core's speed as a pure-Python reference: ns per iteration of ``s += i`` (best of
    three runs of 2 million). Two machines of the same "2 cores" differ by 1.5x and more
    here, and every figure of a benchmark moves with it; the header prints it so figures from
    different sessions can be compared."""
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        total = 0
        for i in range(2_000_000):
            total += i
        best = min(best, time.perf_counter() - started)
    return best / 2_000_000 * 1e9


def header(title: str, extra: Sequence[str] = ()) -> str:
    """Title, UTC time, machine and its reference speed, Python (and torch if it is already
    imported), load."""
    now = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"# {title}",
        f"# {now} | {cpu_model()} | {os.cpu_count()} logical CPUs | "
        f"{platform.system()} {platform.release()} | reference loop {loop_ns():.0f} ns/iteration",
        f"# Python {platform.python_version()}"
        + (f", torch {sys.modules['torch'].__version__}" if "torch" in sys.modules else "")
        + f" | load average {load_average()} | NO GPU figures: CPU only",
        *(f"# {line}" for line in extra),
    ]
    return "\n".join(lines)


def spread(values: Sequence[float], fmt: str = "{:.2f}") -> str:
    """``median, IQR q1..q3, range [min..max] (n=...)`` of repeated measurements."""
    if not values:
        return "n/a"
    lo, hi = min(values), max(values)
    iqr = ""
    if len(values) >= 4:
        q1, _, q3 = statistics.quantiles(values, n=4)
        iqr = f" IQR {fmt.format(q1)}..{fmt.format(q3)}"
    return (
        f"{fmt.format(statistics.median(values))}{iqr} "
        f"[{fmt.format(lo)}..{fmt.format(hi)}] (n={len(values)})"
    )


def step_spread(ns: Sequence[int]) -> str:
    """Median and interquartile range of step times given in ns, printed in µs."""
    q1, q2, q3 = statistics.quantiles(ns, n=4)
    return f"median {q2 / 1e3:8.1f} us, IQR {(q3 - q1) / 1e3:7.1f} us"


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (nearest rank) of ``values``; NaN when empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


def median_interval(
    values: Sequence[float], *, level: float = 0.9, draws: int = 4000, seed: int = 0
) -> tuple[float, float]:
    """A percentile-bootstrap interval of the median of ``values`` (resampled with replacement,
    a fixed seed so a report reads the same twice): where the median of another set of as
    many pairs on the same machine would likely fall. Each process lays its memory out its own
    way, so pairs of whole runs scatter by a few percent, and a budget of 2 % needs this beside
    the median to say whether the pairs decide it."""
    if not values:
        return (float("nan"), float("nan"))
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(draws))
    tail = (1.0 - level) / 2
    return medians[int(tail * draws)], medians[min(draws - 1, int((1.0 - tail) * draws))]
