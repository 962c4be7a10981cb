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
  median, and longer by at least ``MIN_SHARE`` of a step (a slower or busier device, or a
  larger share of the data);
- *all-reduce*: whatever the cause, the straggler arrives last at every all-reduce, so its
  ``backward`` is the shortest: the others' median ``backward`` p50 exceeds its own by at least
  ``MIN_SHARE`` of a step; the phase where its extra time goes is named (its largest excess
  over the others' median, ``other`` being its own code between steps);
- *step*: one rank's step p50 is at least ``STEP_RATIO`` (1.15×) the others' median (ranks
  that are not in lockstep, e.g. no collective every step).

The evidence is the time the others wait in the all-reduce for it. DDP measures it itself
(``CollectiveSample``: on its first ten iterations and one in a hundred after, the backward's
first bucket launched to its last one done, the wait for the other ranks included): when every
rank has at least ``MIN_ALLREDUCE_SAMPLES`` of those, the *all-reduce* rule and the evidence
use their p50 (the rank that arrives last has the shortest); otherwise the others' ``backward``
p50 against the straggler's. Steps are taken from every rank's own store; a rank with fewer than
``MIN_STEPS`` steps is listed but never judged.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from gpuwatch.core.figures.analysis import busy_share
from gpuwatch.core.figures.segments import SegmentStats
from gpuwatch.core.model.messages import CollectiveSample, RankInfo
from gpuwatch.core.model.store import SeriesView, StepsView
from gpuwatch.protocol import PHASES

#: Points of input wait (0..1) the straggler's must exceed the others' median by.
INPUT_GAP = 0.15
COMPUTE_RATIO = 1.25
STEP_RATIO = 1.15
#: A time difference that decides a rule must be at least this share of the step.
MIN_SHARE = 0.10
MIN_STEPS = 5
#: DDP's newest all-reduce samples a rank's p50 is taken over, and how many every rank needs
#: before the all-reduce rule uses them instead of backward times.
ALLREDUCE_SAMPLES = 20
MIN_ALLREDUCE_SAMPLES = 3


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
    #: p50 of each phase (``protocol.ALL_PHASES``; ``other``: to the next step's start), ms.
    phase_ms_p50: dict[str, float] = field(default_factory=dict)
    #: The job's size and this rank's node (torchrun's ``GROUP_RANK``): 0 when not known.
    world_size: int = 0
    node_rank: int = 0
    #: p50 of DDP's own all-reduce samples (``CollectiveSample``), and how many there were.
    allreduce_ms_p50: float | None = None
    allreduce_samples: int = 0
    #: NVML utilization of the rank's GPU (%), averaged over the same steps' time.
    gpu_util: float | None = None
    #: Share of its steps' device time the device was busy (0..1; the headline's busy).
    busy: float | None = None

    @property
    def forward_ms_p50(self) -> float | None:
        return self.phase_ms_p50.get("forward")

    @property
    def backward_ms_p50(self) -> float | None:
        return self.phase_ms_p50.get("backward")

    @classmethod
    def of(
        cls,
        rank: int,
        local_rank: int,
        node: str,
        view: StepsView,
        *,
        world_size: int = 0,
        node_rank: int = 0,
        collective: Sequence[CollectiveSample] = (),
        gpu_util: SeriesView | None = None,
    ) -> RankFigures:
        """A rank's figures from its steps; a step is its start to the next step's start
        (the scoreboard's step time), the last one to its own end. The all-reduce p50 is over
        the newest ``ALLREDUCE_SAMPLES`` of DDP's samples."""
        judged = [c.comm_ns for c in collective[-ALLREDUCE_SAMPLES:]]
        allreduce_ms = float(np.median(judged)) / 1e6 if judged else None
        n = len(view)
        if n == 0:
            return cls(
                rank,
                local_rank,
                node,
                0,
                None,
                None,
                None,
                world_size=world_size,
                node_rank=node_rank,
                allreduce_ms_p50=allreduce_ms,
                allreduce_samples=len(judged),
            )
        host = view.host.astype(np.float64)
        starts = host[:, 0]
        ends = np.append(starts[1:], host[-1, -1])
        step_ns = ends - starts
        total_ns = float(step_ns.sum())
        phase_ns = np.diff(host, axis=1)
        other_ns = ends - host[:, -1]
        phases = {name: float(np.median(phase_ns[:, i])) / 1e6 for i, name in enumerate(PHASES)}
        if n > 1:
            phases["other"] = float(np.median(other_ns[:-1])) / 1e6
        wall_ns = float(host[-1, -1] - host[0, 0])
        data = PHASES.index("data")
        return cls(
            rank=rank,
            local_rank=local_rank,
            node=node,
            steps=n,
            samples_per_s=float(view.samples.sum()) / wall_ns * 1e9 if wall_ns > 0 else None,
            step_ms_p50=float(np.median(step_ns)) / 1e6,
            input_wait=float(phase_ns[:, data].sum()) / total_ns if total_ns > 0 else None,
            phase_ms_p50=phases,
            world_size=world_size,
            node_rank=node_rank,
            allreduce_ms_p50=allreduce_ms,
            allreduce_samples=len(judged),
            gpu_util=None if gpu_util is None else mean_over(gpu_util, host[0, 0], host[-1, -1]),
            busy=busy_share(view, np.ones(n, bool)),
        )


@dataclass(frozen=True)
class RankSteps:
    """One rank's steps in a time range (what the rank lanes draw)."""

    info: RankInfo
    steps: StepsView


@dataclass(frozen=True)
class GpuSeries:
    """NVML utilization of a GPU another rank trains on (rank 0's is the plot's own curve)."""

    rank: int
    label: str
    util: SeriesView


#: The rules, in the order they are tried (the module docstring), and the measured quantity
#: each compares (the advisor's card names it).
StragglerRule = Literal["input", "compute", "allreduce", "step"]
RULE_QUANTITY: dict[StragglerRule, str] = {
    "input": "input wait",
    "compute": "forward",
    "allreduce": "all-reduce wait",
    "step": "step time",
}


@dataclass(frozen=True)
class Straggler:
    """The rank that holds the others back, why (``rule``), and the sentence that says so."""

    rank: int
    rule: StragglerRule
    sentence: str


def mean_over(series: SeriesView, lo_ns: float, hi_ns: float) -> float | None:
    """A coarse series' mean over ``[lo_ns, hi_ns]``, each sample weighted by how much of its
    period lies inside; None when no sample overlaps."""
    inside = np.clip(np.minimum(series.t1, hi_ns) - np.maximum(series.t0, lo_ns), 0, None)
    total = float(inside.sum())
    return float((series.value * inside).sum()) / total if total > 0 else None


def find_straggler(ranks: Sequence[RankFigures]) -> Straggler | None:
    """The straggler among ``ranks`` by the module's rules (input first), or None."""
    judged = [r for r in ranks if r.steps >= MIN_STEPS]
    if len(judged) < 2:
        return None
    for rule in (_input_straggler, _compute_straggler, _allreduce_straggler, _step_straggler):
        found = rule(judged)
        if found is not None:
            return found
    return None


def _others(ranks: Sequence[RankFigures], one: RankFigures) -> list[RankFigures]:
    return [r for r in ranks if r.rank != one.rank]


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _measured(ranks: Sequence[RankFigures]) -> bool:
    """Every rank has enough of DDP's own all-reduce samples to be compared by them."""
    return all(
        r.allreduce_ms_p50 is not None and r.allreduce_samples >= MIN_ALLREDUCE_SAMPLES
        for r in ranks
    )


def _waiting(ranks: Sequence[RankFigures], one: RankFigures) -> str:
    """The others' wait in the all-reduce against the straggler's: DDP's own timing when
    every rank has it, else their backward (where DDP's all-reduce runs)."""
    if _measured(ranks):
        theirs = _median([r.allreduce_ms_p50 for r in _others(ranks, one)])
        mine = one.allreduce_ms_p50
        if theirs is None or mine is None or theirs <= mine:
            return ""
        return (
            f"; the others wait for it in the all-reduce (DDP's own timing: p50 {theirs:.1f} ms "
            f"against its {mine:.1f} ms)"
        )
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
    step = worst.step_ms_p50 or 0.0
    if not others or mine < COMPUTE_RATIO * others or mine - others < MIN_SHARE * step:
        return None
    return Straggler(
        worst.rank,
        "compute",
        f"rank {worst.rank} computes slower: its forward takes {mine:.1f} ms, the others' "
        f"{others:.1f} ms ({(mine / others - 1) * 100:.0f} % longer){_waiting(ranks, worst)}",
    )


def _allreduce_straggler(ranks: Sequence[RankFigures]) -> Straggler | None:
    measured = _measured(ranks)

    def waited(r: RankFigures) -> float | None:
        return r.allreduce_ms_p50 if measured else r.backward_ms_p50

    known = [r for r in ranks if waited(r) is not None and r.step_ms_p50]
    if len(known) < 2:
        return None
    last = min(known, key=lambda r: waited(r) or 0.0)
    others = _others(known, last)
    theirs = _median([waited(r) for r in others])
    mine = waited(last) or 0.0
    if theirs is None or theirs - mine < MIN_SHARE * (last.step_ms_p50 or 0.0):
        return None
    excess = {
        name: ms - (_median([r.phase_ms_p50.get(name) for r in others]) or 0.0)
        for name, ms in last.phase_ms_p50.items()
        if name != "backward"
    }
    name, extra = max(excess.items(), key=lambda item: item[1], default=("", 0.0))
    where = (
        f"; its extra time is in {_PHASE_WORDS.get(name, name)} ({extra:.1f} ms a step more "
        "than the others')"
        if extra > 0
        else ""
    )
    evidence = (
        f"in the all-reduce (DDP's own timing: p50 {theirs:.1f} ms against its {mine:.1f} ms)"
        if measured
        else f"in backward (p50 {theirs:.1f} ms against its {mine:.1f} ms)"
    )
    return Straggler(
        last.rank,
        "allreduce",
        f"rank {last.rank} arrives last at every all-reduce: the others wait for it "
        f"{evidence}{where}",
    )


#: How a phase is named in a straggler's sentence.
_PHASE_WORDS = {
    "data": "waiting for input",
    "h2d": "copies to the device",
    "forward": "forward",
    "optimizer": "the optimizer step",
    "sync": "syncs (.item(), logging)",
    "other": "its own code between steps",
}


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
    if r.busy is not None:
        parts.append(f"busy: {r.busy * 100:.0f} %")
    if r.input_wait is not None:
        parts.append(f"input wait: {r.input_wait * 100:.0f} %")
    if r.forward_ms_p50 is not None and r.backward_ms_p50 is not None:
        parts.append(f"forward/backward p50: {r.forward_ms_p50:.1f}/{r.backward_ms_p50:.1f} ms")
    if r.gpu_util is not None:
        parts.append(f"GPU util: {r.gpu_util:.0f} % (NVML)")
    if r.allreduce_ms_p50 is not None:
        parts.append(
            f"all-reduce p50: {r.allreduce_ms_p50:.1f} ms (DDP's timing, "
            f"{r.allreduce_samples} samples)"
        )
    return f"rank {r.rank} ({where}): " + " · ".join(parts)


def with_ranks(
    rows: Sequence[SegmentStats], per_rank: Sequence[Sequence[SegmentStats]]
) -> list[SegmentStats]:
    """The run's scoreboard rows (rank 0's) with every rank's figures of the same
    configuration: samples/s summed over the ranks whose steady steps are measured, and the
    spread of their step p50s. Each rank's rows follow the scoreboard's own rules (its
    transition steps left out), so a rank still in its transition is not counted yet."""
    by_config: dict[int, list[SegmentStats]] = {}
    for rank_rows in per_rank:
        for row in rank_rows:
            if row.steady:
                by_config.setdefault(row.config_id, []).append(row)
    enriched = []
    for row in rows:
        ranks = by_config.get(row.config_id, [])
        steps = [r.step_ms_p50 for r in ranks if r.step_ms_p50 is not None]
        enriched.append(
            dataclasses.replace(
                row,
                ranks_samples_per_s=sum(r.samples_per_s or 0.0 for r in ranks) if ranks else None,
                ranks_counted=len(ranks),
                rank_step_ms=(min(steps), max(steps)) if steps else None,
            )
        )
    return enriched
