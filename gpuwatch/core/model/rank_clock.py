"""Another machine's clock against this one's, from ping round trips (for ranks on other nodes).

The ranks of one machine stamp their marks with that machine's ``perf_counter_ns``, which the
window shares; a rank on another machine has a clock of its own, with an unknown offset and a
drift of tens of microseconds a second. The window pings such a rank (``ping {t}``, our clock),
the rank's link thread answers at once (``pong {t, clock_ns}``, its clock), and each round trip
gives the offset as NTP's simplest estimate: ``clock_ns - (t + t_back) / 2``, off by at most
half the round trip. Round trips that queue behind other messages are long, so in each run of
``GROUP`` pongs the one with the shortest round trip stands for the group, and a step's offset
is interpolated between the groups' times (drift is followed; a constant offset stays
constant). A group whose every pong waited on a busy process (a rank importing torch on a
loaded machine answers late) is left out while a far better one exists: its error is half its
round trip, far more than the two clocks drift apart between groups.
Every rank is drawn on rank 0's clock (the timeline's): a rank's shift is its
offset minus rank 0's. Live and replayed runs use the same pongs (a recording keeps them) and
so place a remote rank's steps the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

#: Pongs per group: the one with the shortest round trip in each group is kept.
GROUP = 8
#: A group is left out when its best round trip is longer than this many times the shortest
#: group's, plus ``POOR_SLACK_NS`` (a network's own jitter).
POOR_FACTOR = 4
POOR_SLACK_NS = 2_000_000


@dataclass(frozen=True)
class Pong:
    """One round trip: sent at ``t_ns`` and answered at ``back_ns`` (ours), stamped
    ``clock_ns`` by the rank's clock."""

    t_ns: int
    back_ns: int
    clock_ns: int

    @property
    def rtt_ns(self) -> int:
        return self.back_ns - self.t_ns

    def to_message(self) -> dict[str, Any]:
        """The answer as it came (a recording started mid-run keeps it; ``back_ns`` is its
        arrival time)."""
        return {"kind": "pong", "t": self.t_ns, "clock_ns": self.clock_ns}

    @property
    def offset_ns(self) -> int:
        """The rank's clock minus ours (half a round trip at most off)."""
        return self.clock_ns - (self.t_ns + self.back_ns) // 2


def best_of_groups(pongs: Sequence[Pong]) -> list[Pong]:
    """The shortest round trip of each run of ``GROUP`` pongs (a shorter last run included)."""
    valid = [p for p in pongs if p.rtt_ns >= 0]
    return [min(valid[i : i + GROUP], key=lambda p: p.rtt_ns) for i in range(0, len(valid), GROUP)]


def usable_groups(pongs: Sequence[Pong]) -> list[Pong]:
    """``best_of_groups`` without the groups far worse than the best one (``POOR_FACTOR``)."""
    best = best_of_groups(pongs)
    if not best:
        return best
    limit = POOR_FACTOR * min(p.rtt_ns for p in best) + POOR_SLACK_NS
    return [p for p in best if p.rtt_ns <= limit]


def offsets_at(pongs: Sequence[Pong], times_ns: np.ndarray) -> np.ndarray | None:
    """The rank's clock minus ours at each of ``times_ns`` (the rank's clock), interpolated
    between the usable groups' best pongs and held beyond the first and last; None without a
    pong."""
    best = usable_groups(pongs)
    if not best:
        return None
    at = np.array([p.clock_ns for p in best], dtype=np.float64)
    offset = np.array([p.offset_ns for p in best], dtype=np.float64)
    return np.rint(np.interp(times_ns.astype(np.float64), at, offset)).astype(np.int64)


def worst_error_ns(pongs: Sequence[Pong]) -> int | None:
    """Half the longest round trip among the usable groups' best: how far an offset may be
    off."""
    best = usable_groups(pongs)
    return max(p.rtt_ns for p in best) // 2 if best else None


def shift_to_rank0(
    times_ns: np.ndarray, mine: Sequence[Pong] | None, rank0: Sequence[Pong] | None
) -> np.ndarray | None:
    """What to take from a rank's marks at ``times_ns`` to put them on rank 0's clock (the
    timeline's): its offset minus rank 0's. ``None`` pongs stand for the window's own machine
    (offset 0); a rank of another machine not answered yet gives None (it cannot be placed)."""
    zeros = np.zeros(len(times_ns), np.int64)
    own = zeros if mine is None else offsets_at(mine, times_ns)
    base = zeros if rank0 is None else offsets_at(rank0, times_ns)
    if own is None or base is None:
        return None
    return own - base
