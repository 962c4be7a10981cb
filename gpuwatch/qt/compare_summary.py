"""What a comparison of two recordings says in words: who each run is, and B relative to A.

Each recording has its own scoreboard and its own 1.00× baseline, so two scoreboards side by
side never state how B did against A. ``RunComparison`` does, from one row of each: the last
configuration with steady figures (where each run ended up: after a tour, the configuration it
kept), so the sentence names that row in both runs. Both recordings' tables measure their
speedups against that row of A (``shared_baseline``), so B's table shows the ratio to A rather
than a second 1.00×.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpuwatch.core.figures.segments import SegmentStats
from gpuwatch.core.files.replay import ReplaySession

#: Which scoreboard row stands for a run; said on screen next to the figures.
REFERENCE_ROW = "each run's last configuration with steady figures"


def describe(session: ReplaySession) -> str:
    """``file · workload or script · device · recorded date``: enough to tell two runs of the
    same script apart on a projected screen."""
    recording = session.recording
    parts = [recording.path.name]
    hello = recording.hello
    if hello is not None:
        if hello.script and hello.script.get("path"):
            parts.append(str(hello.script["path"]).replace("\\", "/").rsplit("/", 1)[-1])
        elif hello.workload:
            parts.append(hello.workload)
        device = hello.device.name or hello.device.kind
        if device:
            parts.append(device)
    created = recording.meta.get("created")
    if isinstance(created, str) and created:
        parts.append(created.replace("T", " ")[:16])
    return " · ".join(parts)


def reference_row(rows: Sequence[SegmentStats]) -> SegmentStats | None:
    """The last row with steady figures (``REFERENCE_ROW``), or None if none has them."""
    return next((row for row in reversed(rows) if row.steady), None)


def shared_baseline(a_rows: Sequence[SegmentStats]) -> tuple[str, SegmentStats] | None:
    """The row both tables of a comparison measure against: A's reference row, named
    ``A · workers`` in their hints (None when A has no steady row)."""
    row = reference_row(a_rows)
    return (f"A · {row.label}", row) if row is not None else None


@dataclass(frozen=True)
class RunComparison:
    """B relative to A, from one scoreboard row of each (``reference_row``)."""

    a: SegmentStats
    b: SegmentStats

    @property
    def speed_ratio(self) -> float | None:
        """B's samples/s over A's (1.42 reads "B does 1.42× A's samples/s")."""
        a, b = self.a.samples_per_s, self.b.samples_per_s
        if a is None or b is None or a <= 0:
            return None
        return b / a

    def sentence(self) -> str:
        """``B: 1.42× A's samples/s (1,600 → 2,272/s), input wait 31% → 2%, step 40 → 28 ms``."""
        ratio = self.speed_ratio
        parts = [
            f"B: {ratio:.2f}× A's samples/s ({_rate(self.a.samples_per_s)} → "
            f"{_rate(self.b.samples_per_s)}/s)"
            if ratio is not None
            else "B: samples/s not comparable"
        ]
        waits = (self.a.input_wait_share, self.b.input_wait_share)
        if waits[0] is not None and waits[1] is not None:
            parts.append(f"input wait {_pct(waits[0])} → {_pct(waits[1])}")
        steps = (self.a.step_ms_p50, self.b.step_ms_p50)
        if steps[0] is not None and steps[1] is not None:
            parts.append(f"step p50 {steps[0]:.1f} → {steps[1]:.1f} ms")
        return ", ".join(parts)


def compare_rows(
    a_rows: Sequence[SegmentStats], b_rows: Sequence[SegmentStats]
) -> RunComparison | str:
    """The comparison of the two runs' reference rows, or why there is none."""
    a, b = reference_row(a_rows), reference_row(b_rows)
    missing = [name for name, row in (("A", a), ("B", b)) if row is None]
    if a is None or b is None:
        verb = "has" if len(missing) == 1 else "have"
        return f"no comparison: {' and '.join(missing)} {verb} no configuration with steady figures"
    return RunComparison(a, b)


def _pct(share: float) -> str:
    return f"{share * 100:.0f}%"  # as the scoreboard beside it writes shares


def _rate(samples_per_s: float | None) -> str:
    if samples_per_s is None:
        return "n/a"
    return f"{samples_per_s:,.0f}" if samples_per_s >= 100 else f"{samples_per_s:.1f}"
