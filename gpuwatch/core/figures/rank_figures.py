"""Each rank's figures side by side, and the rank that holds the others back (the straggler).

DistributedDataParallel keeps the ranks in lockstep: every backward all-reduces the
gradients, so every rank's step takes as long as the slowest rank's. A slow rank therefore
does not show as a longer step; it shows in *where* the steps' time goes. The straggler spends
its extra time in its own phases (``data``, when its input pipeline is slow; ``forward``, when
its device is), and every other rank spends the same time waiting for it, inside ``backward``
(DDP's all-reduce runs there). So the rules compare the ranks' phase times:

- *input*: one rank's input wait (``data`` share of its steps) is at least
  ``INPUT_GAP`` (15 points) above the others' median and at least twice it;
- *compute*: one rank's ``forward`` p50 is at least ``COMPUTE_RATIO`` (1.25×) the others'
  median (a slower or busier device, or a larger share of the data);
- *step*: one rank's step p50 is at least ``STEP_RATIO`` (1.15×) the others' median (ranks
  that are not in lockstep, e.g. no collective every step).

The evidence is the others' ``backward`` p50 against the straggler's: the time they wait in
the all-reduce for it. Steps are taken from every rank's own store, all of them (warm-up
included); a rank with fewer than ``MIN_STEPS`` steps is listed but never judged.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpuwatch.core.model.store import StepsView
from gpuwatch.protocol import PHASES

#: Points of input wait (0..1) the straggler's must exceed the others' median by.
INPUT_GAP = 0.15
COMPUTE_RATIO = 1.25
STEP_RATIO = 1.15
MIN_STEPS = 5


@dataclass(frozen=True)
class RankFigures:
    """One rank's steps in a few numbers (None where it has no steps)."""

    rank: int
    local_rank: int
    node: str
    steps: int
    samples_per_s: float | None
    step_ms_p50: float | None
    input_wait: float | None  # share of step time in next(loader), 0..1
    forward_ms_p50: float | None
    backward_ms_p50: float | None

    @classmethod
    def of(cls, rank: int, local_rank: int, node: str, view: StepsView) -> RankFigures:
        n = len(view)
        if n == 0:
            return cls(rank, local_rank, node, 0, None, None, None, None, None)
        host = view.host.astype(np.float64)
        step_ns = host[:, -1] - host[:, 0]
        total_ns = float(step_ns.sum())
        phase_ns = np.diff(host, axis=1)
        data = PHASES.index("data")
        wall_ns = float(host[-1, -1] - host[0, 0])
        return cls(
            rank=rank,
            local_rank=local_rank,
            node=node,
            steps=n,
            samples_per_s=float(view.samples.sum()) / wall_ns * 1e9 if wall_ns > 0 else None,
            step_ms_p50=float(np.median(step_ns)) / 1e6,
            input_wait=float(phase_ns[:, data].sum()) / total_ns if total_ns > 0 else None,
            forward_ms_p50=float(np.median(phase_ns[:, PHASES.index("forward")])) / 1e6,
            backward_ms_p50=float(np.median(phase_ns[:, PHASES.index("backward")])) / 1e6,
        )


@dataclass(frozen=True)
class Straggler:
    """The rank that holds the others back, why (``rule``), and the sentence that says so."""

    rank: int
    rule: str  # "input" | "compute" | "step"
    sentence: str


def find_straggler(ranks: Sequence[RankFigures]) -> Straggler | None:
    """The straggler among ``ranks`` by the module's rules (input first), or None."""
    judged = [r for r in ranks if r.steps >= MIN_STEPS]
    if len(judged) < 2:
        return None
    for rule in (_input_straggler, _compute_straggler, _step_straggler):
        found = rule(judged)
        if found is not None:
            return found
    return None


def _others(ranks: Sequence[RankFigures], one: RankFigures) -> list[RankFigures]:
    return [r for r in ranks if r.rank != one.rank]


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _waiting(ranks: Sequence[RankFigures], one: RankFigures) -> str:
    """The others' backward against the straggler's: their wait in the all-reduce."""
    theirs = _median([r.backward_ms_p50 for r in _others(ranks, one)])
    if theirs is None or one.backward_ms_p50 is None or theirs <= one.backward_ms_p50:
        return ""
    return (
        f"; the others wait for it in backward (p50 {theirs:.1f} ms against its "
        f"{one.backward_ms_p50:.1f} ms: DDP's all-reduce runs there)"
    )


def _input_straggler(ranks: Sequence[RankFigures]) -> Straggler | None:
    known = [r for r in ranks if r.input_wait is not None]
    if len(known) < 2:
        return None
    worst = max(known, key=lambda r: r.input_wait or 0.0)
    others = _median([r.input_wait for r in _others(known, worst)])
    mine = worst.input_wait or 0.0
    if others is None or mine - others < INPUT_GAP or mine < 2 * others:
        return None
    return Straggler(
        worst.rank,
        "input",
        f"rank {worst.rank} holds the others back: its input wait is {mine * 100:.0f} %, "
        f"the others' {others * 100:.0f} %{_waiting(ranks, worst)}",
    )


def _compute_straggler(ranks: Sequence[RankFigures]) -> Straggler | None:
    known = [r for r in ranks if r.forward_ms_p50]
    if len(known) < 2:
        return None
    worst = max(known, key=lambda r: r.forward_ms_p50 or 0.0)
    others = _median([r.forward_ms_p50 for r in _others(known, worst)])
    mine = worst.forward_ms_p50 or 0.0
    if not others or mine < COMPUTE_RATIO * others:
        return None
    return Straggler(
        worst.rank,
        "compute",
        f"rank {worst.rank} computes slower: its forward takes {mine:.1f} ms, the others' "
        f"{others:.1f} ms ({(mine / others - 1) * 100:.0f} % longer){_waiting(ranks, worst)}",
    )


def _step_straggler(ranks: Sequence[RankFigures]) -> Straggler | None:
    known = [r for r in ranks if r.step_ms_p50]
    if len(known) < 2:
        return None
    worst = max(known, key=lambda r: r.step_ms_p50 or 0.0)
    others = _median([r.step_ms_p50 for r in _others(known, worst)])
    mine = worst.step_ms_p50 or 0.0
    if not others or mine < STEP_RATIO * others:
        return None
    return Straggler(
        worst.rank,
        "step",
        f"rank {worst.rank}'s steps take {(mine / others - 1) * 100:.0f} % longer "
        f"({mine:.1f} ms against the others' {others:.1f} ms)",
    )


def rank_line(r: RankFigures) -> str:
    """One rank's figures as the headless summary prints them."""
    where = f"{r.node}, local {r.local_rank}" if r.node else f"local {r.local_rank}"
    if r.steps == 0:
        return f"rank {r.rank} ({where}): no steps"
    parts = [f"{r.steps:,} steps"]
    if r.samples_per_s is not None:
        parts.append(f"samples/s: {r.samples_per_s:,.1f}")
    if r.step_ms_p50 is not None:
        parts.append(f"step p50: {r.step_ms_p50:.1f} ms")
    if r.input_wait is not None:
        parts.append(f"input wait: {r.input_wait * 100:.0f} %")
    if r.forward_ms_p50 is not None and r.backward_ms_p50 is not None:
        parts.append(f"forward/backward p50: {r.forward_ms_p50:.1f}/{r.backward_ms_p50:.1f} ms")
    return f"rank {r.rank} ({where}): " + " · ".join(parts)
