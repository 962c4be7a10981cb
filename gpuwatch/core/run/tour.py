"""The tour: cumulative stages of well-known fixes, and the conductor that walks a run through them.

``plan_tour`` and ``plan_stages`` only look at the knob schema from ``hello`` (docs/knobs.md §4),
so a stage that cannot work here (or that the runner measured slower here) is skipped with the
runner's own reason instead of refused mid-run. The ``Conductor`` is a non-blocking state
machine: the window calls ``tick()`` from a Qt timer and ``gpuwatch bench`` from a loop, and
neither ever waits inside it. On a tour it keeps only what helps: a stage slower than the
configuration it was built on, beyond noise, is reverted, so the tour ends on the best
configuration it found and a talk never ends slower than it began.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpuwatch.core.figures.segments import BASELINE_LABEL, SegmentStats
from gpuwatch.core.figures.speed_noise import MIN_NOISE, noise_band
from gpuwatch.core.model.knob_values import (
    KnobValueError,
    check_usable,
    parse_assignments,
    schema_by_name,
    split_assignment,
)
from gpuwatch.core.model.messages import ConfigChange, Hello, Refusal, describe_change
from gpuwatch.core.run.session import SessionError, SessionState

#: How long the runner may take to answer a ``set`` (it applies at the next step boundary).
ANSWER_TIMEOUT_S = 30.0
#: Extra time allowed when a stage compiles: inductor on a CPU can take minutes.
COMPILE_ALLOWANCE_S = 600.0
#: A stage whose segment gets no new step for this long has stalled.
STALL_TIMEOUT_S = 120.0
#: Hold rule (docs/knobs.md §4): the last STABLE_WINDOWS window rates within STABLE_RATIO.
STABLE_WINDOWS = 3
STABLE_RATIO = 1.1
#: Without stable rates a stage is held at most this many times ``min_steady_s``.
MAX_STEADY_FACTOR = 3.0

BASELINE_CAPTION = "the workload's naive defaults: the reference every speedup is measured against"
#: The stage a tour adds when its last stage was reverted: the kept configuration, measured.
BEST_LABEL = "best found"
REVERTED = "reverted"
#: A stage the speaker moved on from (next or back) before it had steady figures.
SKIPPED = "skipped"

APPLYING, TRANSITION, STEADY, DONE, FAILED = "applying", "transition", "steady", "done", "failed"


@dataclass(frozen=True)
class Stage:
    """One stage: ``values`` holds every knob's value for it (defaults plus all changes so
    far), ``changes`` what it adds to the stage before, ``caption`` why that should help."""

    label: str
    values: dict[str, Any]
    caption: str
    changes: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Skipped:
    """A planned stage that cannot run here, and why (the runner's reason, or already set)."""

    label: str
    reason: str


@dataclass(frozen=True)
class StageResult:
    """A stage the tour reached, the config id of its segment and the verdict on it.

    ``ratio`` is its steady samples/s over that of the fastest kept configuration before it
    (None for the first stage, or one not measured), judged against ``noise`` (a fraction).
    ``kept``: False once reverted; None while it is measured, or when it never was.
    ``skipped``: the speaker moved on before it had steady figures (not kept, not judged).
    """

    stage: Stage
    config_id: int
    samples_per_s: float | None = None
    ratio: float | None = None
    noise: float = MIN_NOISE
    kept: bool | None = None
    skipped: bool = False

    @property
    def label(self) -> str:
        """The stage's name, saying so when it was reverted or skipped (its scoreboard row is
        named so)."""
        if self.skipped:
            return f"{self.stage.label} — {SKIPPED}"
        return f"{self.stage.label} — {REVERTED}" if self.kept is False else self.stage.label

    @property
    def helped(self) -> bool:
        """Kept, and faster than the best configuration before it beyond noise."""
        return bool(self.kept) and self.ratio is not None and self.ratio > 1 + self.noise

    @property
    def verdict(self) -> str:
        """One line for people: ``AMP: 0.28× the best so far — reverted``."""
        if self.skipped:
            return f"{self.stage.label}: {SKIPPED} before it was measured"
        if self.ratio is None:
            return f"{self.stage.label}: the reference"
        if self.stage.label == BEST_LABEL:
            return f"{BEST_LABEL}: {times(self.ratio)} the best so far, measured again"
        if self.kept is False:
            outcome = REVERTED
        elif self.helped:
            outcome = "kept"
        else:
            outcome = "kept (no change beyond noise)"
        return f"{self.stage.label}: {times(self.ratio)} the best so far — {outcome}"


@dataclass(frozen=True)
class TourProgress:
    """What ``Conductor.tick`` reports: the current stage, its state and one line for people."""

    index: int  # 0-based index of the current stage
    n_stages: int
    stage: Stage | None
    state: str  # applying | transition | steady | done | failed
    steady_s: float
    samples_per_s: float | None
    message: str  # one human line
    #: The verdict on the last stage judged (``StageResult.verdict``), "" before the first.
    note: str = ""
    #: The speaker holds the stage: it is measured but the tour does not move on by itself.
    held: bool = False
    #: How far the stage is towards its steady time, 0 to 1 (0 while it applies or warms up).
    fraction: float = 0.0
    #: While the stage applies, compiles or warms up: ``compiling… 12 s`` (else "").
    phase: str = ""


# ---- Planning ---------------------------------------------------------------------------------


def defaults_of(knobs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Each knob's default by name: the settings before any stage."""
    return {knob["name"]: knob.get("default") for knob in knobs}


def _unavailable(schema: Mapping[str, Mapping[str, Any]], changes: Mapping[str, Any]) -> str | None:
    """Why ``changes`` cannot be applied here (the runner's reason), or None if they can."""
    for name, value in changes.items():
        knob = schema.get(name)
        if knob is None:
            return f"this runner has no {name} knob"
        try:
            check_usable(knob, value)
        except KnobValueError:
            if not knob.get("enabled", True):
                return str(knob.get("reason") or "not available here")
            return str((knob.get("disabled_choices") or {}).get(value) or "not available here")
    return None


def _clamped(knob: Mapping[str, Any] | None, value: int) -> int:
    if knob is not None and isinstance(knob.get("max"), int):
        return min(value, knob["max"])
    return value


def _tour_proposals(
    schema: Mapping[str, Mapping[str, Any]], workload: str, cores: int | None
) -> list[tuple[str, dict[str, Any] | str, str]]:
    """(label, changes or the reason to skip, caption) for each stage after the baseline."""
    workers = _clamped(schema.get("num_workers"), min(8, cores or 8))
    processes = "1 worker process" if workers == 1 else f"{workers} worker processes"
    work = "decode and augment" if workload == "vision" else "prepare batches"
    log_every = _clamped(schema.get("log_every"), 50)
    proposals: list[tuple[str, dict[str, Any] | str, str]] = [
        (
            "workers",
            {"num_workers": workers, "persistent_workers": True},
            f"{processes} {work} while the model trains, instead of the training loop waiting",
        ),
        (
            "pinned memory",
            {"pin_memory": True, "non_blocking": True},
            "page-locked batches copy to the GPU asynchronously, overlapping the previous step",
        ),
        (
            "batched logging",
            {"log_every": log_every},
            f"the loss is read every {log_every} steps instead of stalling on .item() each step",
        ),
    ]
    amp_choice, amp_reason = _amp_choice(schema.get("amp"))
    amp_caption = {
        "bf16": "bf16 autocast: matmuls and convolutions in 16 bits, half the memory traffic",
        "fp16": "fp16 autocast with a GradScaler: 16-bit matmuls and convolutions on tensor cores",
    }.get(amp_choice or "", "")
    proposals.append(("AMP", {"amp": amp_choice} if amp_choice else amp_reason, amp_caption))
    proposals.append(
        (
            "channels_last",
            {"channels_last": True}
            if workload == "vision"
            else "vision only: it needs 4-D image inputs and convolutions",
            "NHWC memory layout lets convolutions pick faster kernels",
        )
    )
    proposals.append(
        (
            "compile",
            {"compile": "default"},
            "torch.compile fuses operations into fewer, larger kernels (the first steps compile)",
        )
    )
    return proposals


def _amp_choice(knob: Mapping[str, Any] | None) -> tuple[str | None, str]:
    """bf16 where it works at speed, else fp16, else why neither does: a choice the runner
    measured slower here (``slow_choices``, e.g. bf16 emulated on a CPU) is skipped too."""
    if knob is None:
        return None, "this runner has no amp knob"
    if not knob.get("enabled", True):
        return None, str(knob.get("reason") or "not available here")
    disabled = knob.get("disabled_choices") or {}
    slow = knob.get("slow_choices") or {}
    choices = knob.get("choices") or []
    reasons = []
    for choice in ("bf16", "fp16"):
        if choice in choices and choice not in disabled and choice not in slow:
            return choice, ""
        reasons.append(f"{choice}: {disabled.get(choice) or slow.get(choice) or 'not offered'}")
    return None, "; ".join(reasons)


def plan_tour(
    knobs: Sequence[Mapping[str, Any]], workload: str, cores: int | None
) -> tuple[list[Stage], list[Skipped]]:
    """The tour's stages for this schema, and the stages skipped here with their reasons."""
    schema = schema_by_name(knobs)
    current = defaults_of(knobs)
    stages = [Stage(BASELINE_LABEL, dict(current), BASELINE_CAPTION)]
    skipped: list[Skipped] = []
    for label, proposal, caption in _tour_proposals(schema, workload, cores):
        if isinstance(proposal, str):
            skipped.append(Skipped(label, proposal))
            continue
        reason = _unavailable(schema, proposal)
        if reason is not None:
            skipped.append(Skipped(label, reason))
            continue
        new = {k: v for k, v in proposal.items() if current.get(k) != v}
        if not new:
            skipped.append(Skipped(label, f"already {describe_change(proposal)}"))
            continue
        current = {**current, **new}
        stages.append(Stage(label, dict(current), caption, new))
    return stages, skipped


def plan_stages(knobs: Sequence[Mapping[str, Any]], groups: Sequence[Sequence[str]]) -> list[Stage]:
    """Stages from ``--set ... --then ...``: ``groups[0]`` (the ``--set`` settings, possibly
    empty) applied over the defaults, then one stage per later group, each cumulative.

    Raises KnobValueError (one line) for a bad name or value, or a stage that changes nothing.
    """
    schema = schema_by_name(knobs)
    current = defaults_of(knobs)
    stages: list[Stage] = []
    for number, group in enumerate(groups or [[]], start=1):
        asked = parse_assignments(knobs, [split_assignment(text) for text in group])
        new = {k: v for k, v in asked.items() if current.get(k) != v}
        if number > 1 and not new:
            raise KnobValueError(
                f"stage {number} ({' '.join(group)}) changes nothing from stage {number - 1}"
            )
        current = {**current, **new}
        label = describe_change(asked) if asked else BASELINE_LABEL
        caption = "; ".join(_knob_caption(schema[k]) for k in asked) or BASELINE_CAPTION
        stages.append(Stage(label, dict(current), caption, new if number > 1 else asked))
    return stages


def _knob_caption(knob: Mapping[str, Any]) -> str:
    """``DataLoader workers: decode and augment in worker processes, ...`` from the schema."""
    title = knob.get("label") or knob["name"]
    return f"{title}: {knob['help']}" if knob.get("help") else str(title)


# ---- Judging ----------------------------------------------------------------------------------


def times(ratio: float) -> str:
    """A speed ratio as the scoreboard's speedup column writes it (``2.38×``, ``0.28×``), so
    the caption and the row beside it show the same figure."""
    return f"{ratio:.2f}×"


def judge(stage: Stage, config_id: int, row: SegmentStats, kept_row: SegmentStats) -> StageResult:
    """The verdict on ``row`` against ``kept_row``, the fastest kept configuration so far:
    reverted when slower beyond ``noise_band``. Judging against the best rather than the last
    kept one stops small losses that are each within noise from adding up over the stages."""
    rate, before = row.samples_per_s, kept_row.samples_per_s
    if rate is None or not before:
        return StageResult(stage, config_id, rate, kept=True)
    noise = noise_band(row, kept_row)
    ratio = rate / before
    return StageResult(stage, config_id, rate, ratio, noise, kept=ratio >= 1 - noise)


def _joined(labels: Sequence[str]) -> str:
    return labels[0] if len(labels) == 1 else ", ".join(labels[:-1]) + " and " + labels[-1]


def closing_sentence(results: Sequence[StageResult], where: str) -> str | None:
    """The tour's story in one line, from its judged stages: ``2.40× from workers and compile;
    AMP and channels_last did not help on this CPU and were reverted``.

    Kept and reverted are what the tour did. Which kept stages *helped* is read from the rows
    as ``results`` carry them now (a stage faster than every kept one before it beyond its
    noise band), as is the speedup, that of the fastest kept row: so the sentence agrees with
    the scoreboard even after a row judged early settled elsewhere. When the final row measured
    slower than the fastest beyond ``MIN_NOISE``, the sentence says so rather than hide it:
    when it has the fastest row's very settings, only the machine can have changed.
    None if the baseline or the final configuration was never measured.
    """
    if len(results) < 2 or not results[0].samples_per_s:
        return None
    base, final = results[0].samples_per_s, results[-1]
    if final.kept is not True or final.samples_per_s is None:
        return None
    kept = [r for r in results if r.kept and r.samples_per_s is not None]
    best = max(kept, key=lambda r: r.samples_per_s or 0.0)
    speedup = (best.samples_per_s or 0.0) / base
    helped: list[str] = []
    neutral: list[str] = []
    reverted: list[str] = []
    fastest_before = base
    for r in results[1:]:
        if r.stage.label == BEST_LABEL or r.skipped:
            continue
        if r.kept is False:
            reverted.append(r.stage.label)
            continue
        rate = r.samples_per_s or 0.0
        (helped if rate > fastest_before * (1 + r.noise) else neutral).append(r.stage.label)
        fastest_before = max(fastest_before, rate)
    if helped:
        parts = [f"{times(speedup)} from {_joined(helped)}"]
    else:
        parts = [f"no stage beat the baseline beyond noise {where} ({times(speedup)} at best)"]
    if neutral:
        parts.append(f"{_joined(neutral)} made no difference beyond noise")
    if reverted:
        parts.append(f"{_joined(reverted)} did not help {where} and {_were(reverted)} reverted")
    if final is not best and final.samples_per_s < (best.samples_per_s or 0.0) * (1 - MIN_NOISE):
        final_speedup = times(final.samples_per_s / base)
        if final.stage.values == best.stage.values:
            parts.append(
                f"the same settings measured again at the end ran at {final_speedup}: "
                "the machine's other load changed during the tour"
            )
        else:
            parts.append(f"the final configuration measured {final_speedup}")
    return "; ".join(parts)


def _were(labels: Sequence[str]) -> str:
    return "was" if len(labels) == 1 else "were"


def where_of(hello: Hello | None) -> str:
    """``on this CPU`` / ``on this GPU``: where the tour's verdicts hold."""
    kind = hello.device.kind if hello is not None else ""
    return {"cpu": "on this CPU", "cuda": "on this GPU"}.get(kind, "here")


# ---- Conducting -------------------------------------------------------------------------------


class ConductedRun(Protocol):
    """What the conductor reads and drives of a run: a Session, or a test's stand-in."""

    baseline_id: int | None

    @property
    def state(self) -> SessionState: ...

    @property
    def hello(self) -> Hello | None: ...

    @property
    def error(self) -> str | None: ...

    @property
    def bye_reason(self) -> str | None: ...

    def config_values(self) -> Mapping[str, Any]: ...

    def config_changes(self) -> Sequence[ConfigChange]: ...

    def set_knobs(self, values: dict[str, Any], *, label: str | None = None) -> int | None: ...

    def answer(self, request: int) -> ConfigChange | Refusal | None: ...

    def label_segment(self, config_id: int, label: str) -> None: ...

    def scoreboard(self) -> Sequence[SegmentStats]: ...


class Conductor:
    """Walks a running Session through ``stages``; call ``tick()`` every 100–250 ms.

    Per stage: send only what differs from the config in force (or, if nothing does, name the
    current segment after the stage), wait for the runner's answer, then hold the stage's
    segment until it is steady and stable (docs/knobs.md §4). The first stage's segment is
    pinned as the session's baseline, so speedups are against it.

    With ``revert_slower`` (the tour), each stage builds on the last *kept* configuration: a
    stage slower than the fastest kept one beyond noise (``judge``) is reverted by the next
    stage's ``set`` and its row renamed "… — reverted"; if the last stage is reverted, a final
    ``BEST_LABEL`` stage goes back to the kept configuration and measures it, so the last row
    is the best configuration found. Without it (``bench --set … --then …``) stages are
    cumulative as given.
    """

    def __init__(
        self,
        session: ConductedRun,
        stages: Sequence[Stage],
        *,
        min_steady_s: float,
        max_stage_s: float | None = None,
        clock: Callable[[], int] = time.perf_counter_ns,
        answer_timeout_s: float = ANSWER_TIMEOUT_S,
        compile_allowance_s: float = COMPILE_ALLOWANCE_S,
        stall_timeout_s: float = STALL_TIMEOUT_S,
        revert_slower: bool = False,
    ) -> None:
        if not stages:
            raise ValueError("a tour needs at least one stage")
        if min_steady_s <= 0:
            raise ValueError("min_steady_s must be positive")
        self._session = session
        self._stages = list(stages)
        self._min_steady_s = min_steady_s
        self._max_stage_s = (
            max_stage_s if max_stage_s is not None else MAX_STEADY_FACTOR * min_steady_s
        )
        self._clock = clock
        self._answer_timeout_s = answer_timeout_s
        self._compile_allowance_s = compile_allowance_s
        self._stall_timeout_s = stall_timeout_s
        self._revert_slower = revert_slower
        #: The config id of the fastest kept configuration so far, what each stage is judged
        #: against (by its row as the scoreboard shows it at the time of the verdict).
        self._best_id: int | None = None
        self._kept_values: dict[str, Any] | None = None
        self._best_added = False
        self._finished = False
        self._index = 0
        self._state = APPLYING
        self._sent = False
        self._request: int | None = None
        self._compiling = False
        self._phase_since_ns = 0
        self._config_id: int | None = None
        self._last_steps = -1
        self._last_step_seen_ns = 0
        self._row: SegmentStats | None = None
        self._held: list[StageResult] = []
        #: The speaker's hold (no automatic advance) and a next (+1) or back (-1) waiting
        #: for the stage's configuration to be known.
        self._holding = False
        self._move = 0
        self._stage_since_ns = 0
        self._failed: str | None = None
        self.refusal: Refusal | None = None
        self.stopped = False

    # ---- Public --------------------------------------------------------------------------

    @property
    def done(self) -> bool:
        return self._state == DONE

    @property
    def failed(self) -> str | None:
        return self._failed

    @property
    def stages(self) -> list[Stage]:
        return list(self._stages)

    def stage_configs(self) -> list[tuple[Stage, int]]:
        """Each stage reached so far with the config id of its segment (the current one too)."""
        return [(result.stage, result.config_id) for result in self.results()]

    def results(self) -> list[StageResult]:
        """Each stage reached so far and its verdict (the current one, not yet judged, too)."""
        held = list(self._held)
        if self._config_id is not None:
            rate = self._row.samples_per_s if self._row is not None else None
            held.append(StageResult(self._stages[self._index], self._config_id, rate))
        return held

    @property
    def summary(self) -> str | None:
        """The closing sentence once the tour has finished (``closing_sentence``), else None.

        Its verdicts are those made during the tour; its speedup is read from the scoreboard's
        rows each time, so it stays the figure the scoreboard shows for the final configuration
        while that row goes on measuring.
        """
        if not self._finished or not self._revert_slower:
            return None
        rates = {row.config_id: row.samples_per_s for row in self._session.scoreboard()}
        results = [
            dataclasses.replace(r, samples_per_s=rates.get(r.config_id) or r.samples_per_s)
            for r in self._held
        ]
        return closing_sentence(results, where_of(self._session.hello))

    @property
    def holding(self) -> bool:
        return self._holding

    def hold(self, on: bool) -> None:
        """Hold the current stage (it goes on being measured, the tour waits) or let the
        tour move on by itself again."""
        self._holding = on

    def next(self) -> bool:
        """Move on to the next stage at the next ``tick``: the current one is judged if it
        has steady figures, else marked skipped (and not kept). False when nothing moves."""
        if self._state in (DONE, FAILED):
            return False
        self._move = 1
        return True

    def back(self) -> bool:
        """Go back to the stage before at the next ``tick`` (its settings again, measured
        anew; verdicts from it on are forgotten). False on the first stage."""
        if self._state in (DONE, FAILED) or self._index == 0:
            return False
        self._move = -1
        return True

    def stop(self) -> None:
        """End the tour where it is (the run itself goes on; its owner stops it)."""
        if self._state not in (DONE, FAILED):
            self.stopped = True
            self._state = DONE

    def tick(self) -> TourProgress:
        """Advance as far as the session allows now; never blocks."""
        if self._state not in (DONE, FAILED):
            self._advance(self._clock())
        return self._progress()

    # ---- Steps of the state machine ------------------------------------------------------

    def _advance(self, now: int) -> None:
        session = self._session
        if session.state in (SessionState.FAILED, SessionState.FINISHED):
            self._fail(
                session.error
                or f"the run ended ({session.bye_reason or 'finished'}) before the tour did"
            )
            return
        if session.hello is None:
            return  # the runner is still starting; nothing to change yet
        if not self._sent:
            self._begin_stage(now)
        if self._request is not None:
            self._poll_answer(now)
        if self._config_id is not None and self._state in (TRANSITION, STEADY):
            self._watch_segment(now)
        if self._move and self._config_id is not None and self._state in (TRANSITION, STEADY):
            move, self._move = self._move, 0
            if move > 0:
                self._next_stage(now)
            else:
                self._go_back(now)

    def _begin_stage(self, now: int) -> None:
        stage = self._on_kept(self._stages[self._index])
        self._stages[self._index] = stage
        current = self._session.config_values()
        missing = object()
        wanted = {k: v for k, v in stage.values.items() if current.get(k, missing) != v}
        self._sent = True
        self._phase_since_ns = self._stage_since_ns = now
        self._compiling = wanted.get("compile", "off") != "off"
        try:
            request = self._session.set_knobs(wanted, label=stage.label) if wanted else None
        except SessionError as exc:
            self._fail(str(exc))
            return
        if request is not None:
            self._request = request
            self._state = APPLYING
            return
        changes = self._session.config_changes()
        if not changes:
            self._fail("the runner has not reported its configuration")
            return
        config_id = changes[-1].id
        self._session.label_segment(config_id, stage.label)
        self._hold(config_id, now)

    def _poll_answer(self, now: int) -> None:
        assert self._request is not None
        answer = self._session.answer(self._request)
        if answer is None:
            limit = self._answer_timeout_s + (self._compile_allowance_s if self._compiling else 0.0)
            if (now - self._phase_since_ns) / 1e9 > limit:
                self._fail(
                    f"stage {self._stage_name()}: the runner did not apply the change "
                    f"within {limit:.0f} s"
                )
            return
        self._request = None
        if isinstance(answer, Refusal):
            self.refusal = answer
            self._fail(f"stage {self._stages[self._index].label!r} was refused: {answer.message}")
            return
        self._hold(answer.id, now)

    def _hold(self, config_id: int, now: int) -> None:
        self._config_id = config_id
        self._state = TRANSITION
        self._phase_since_ns = now
        self._last_steps = -1
        self._last_step_seen_ns = now
        self._row = None
        if self._index == 0:
            self._session.baseline_id = config_id

    def _watch_segment(self, now: int) -> None:
        if self._replaced():
            return
        row = next((r for r in self._session.scoreboard() if r.config_id == self._config_id), None)
        self._row = row
        steps = row.steps if row is not None else 0
        if steps != self._last_steps:
            self._last_steps = steps
            self._last_step_seen_ns = now
        stall_limit = self._stall_timeout_s + (
            self._compile_allowance_s if self._compiling else 0.0
        )
        if (now - self._last_step_seen_ns) / 1e9 > stall_limit:
            self._fail(f"stage {self._stage_name()}: no training step for {stall_limit:.0f} s")
            return
        if row is None or not row.steady:
            self._state = TRANSITION
            return
        self._state = STEADY
        if self._stable(row) and not self._holding and not self._move:
            self._next_stage(now)

    def _replaced(self) -> bool:
        """A newer config than the held one fails the stage: the runner reverted a change
        whose first steps failed (``request`` null), or someone else changed the knobs."""
        changes = self._session.config_changes()
        latest = changes[-1] if changes else None
        if latest is None or self._config_id is None or latest.id <= self._config_id:
            return False
        label = self._stages[self._index].label
        if latest.request is None:
            self._fail(
                f"stage {label!r} failed in its first steps and the runner went back "
                f"to the previous settings"
            )
        else:
            self._fail(
                f"stage {label!r}: the knobs were changed from elsewhere "
                f"({latest.label}) while it was measured"
            )
        return True

    def _stable(self, row: SegmentStats) -> bool:
        """docs/knobs.md §4: enough steady time and the last rates agree, or long enough."""
        if row.steady_s >= self._max_stage_s:
            return True
        if row.steady_s < self._min_steady_s:
            return False
        rates = row.window_rates[-STABLE_WINDOWS:]
        return (
            len(rates) == STABLE_WINDOWS
            and min(rates) > 0
            and max(rates) / min(rates) <= STABLE_RATIO
        )

    def _on_kept(self, stage: Stage) -> Stage:
        """``stage`` built on the last kept configuration (a tour after a revert), else as is."""
        if not self._revert_slower or self._kept_values is None:
            return stage
        values = {**self._kept_values, **stage.changes}
        return stage if values == stage.values else dataclasses.replace(stage, values=values)

    def _judged(self) -> StageResult:
        """The verdict on the stage just held; a reverted or skipped one's row is renamed to
        say so."""
        assert self._config_id is not None
        stage, row = self._stages[self._index], self._row
        if row is None or not row.steady:
            skipped = StageResult(stage, self._config_id, kept=False, skipped=True)
            self._session.label_segment(self._config_id, skipped.label)
            return skipped
        final_best = self._best_added and self._index == len(self._stages) - 1
        rows = {r.config_id: r for r in self._session.scoreboard()}
        best = rows.get(self._best_id) if self._best_id is not None else None
        if best is None:
            result = StageResult(stage, self._config_id, row.samples_per_s, kept=True)
        else:
            result = judge(stage, self._config_id, row, best)
            if final_best or not self._revert_slower:
                result = dataclasses.replace(result, kept=True)
        if result.kept:
            self._kept_values = dict(stage.values)
            if best is None or (row.samples_per_s or 0.0) > (best.samples_per_s or 0.0):
                self._best_id = self._config_id
        else:
            self._session.label_segment(self._config_id, result.label)
        return result

    def _next_stage(self, now: int) -> None:
        assert self._config_id is not None
        result = self._judged()
        self._held.append(result)
        self._config_id = None
        self._row = None
        self._sent = False
        if self._index + 1 >= len(self._stages):
            if result.kept is not False or self._best_added or self._kept_values is None:
                self._state = DONE
                self._finished = True
                return
            self._best_added = True
            self._stages.append(
                Stage(BEST_LABEL, dict(self._kept_values), "the best configuration the tour found")
            )
        self._index += 1
        self._state = APPLYING
        self._begin_stage(now)

    def _go_back(self, now: int) -> None:
        """The stage before again: its verdict and those after it are forgotten, the stage
        being left is marked skipped, and the earlier stage's settings are sent anew."""
        assert self._config_id is not None
        stage = self._stages[self._index]
        if self._row is None or not self._row.steady:
            left = StageResult(stage, self._config_id, kept=False, skipped=True)
            self._session.label_segment(self._config_id, left.label)
        if self._best_added and self._index == len(self._stages) - 1:
            self._stages.pop()
            self._best_added = False
        self._index -= 1
        self._held = self._held[: self._index]
        self._kept_values, self._best_id = None, None
        best_rate = -1.0
        for result in self._held:
            if result.kept:
                self._kept_values = dict(result.stage.values)
                if (result.samples_per_s or 0.0) > best_rate:
                    self._best_id, best_rate = result.config_id, result.samples_per_s or 0.0
        self._config_id = None
        self._row = None
        self._sent = False
        self._state = APPLYING
        self._begin_stage(now)

    def _fail(self, message: str) -> None:
        self._failed = message
        self._state = FAILED

    # ---- Progress ------------------------------------------------------------------------

    def _stage_name(self) -> str:
        return f"{self._index + 1}/{len(self._stages)} {self._stages[self._index].label}"

    def _progress(self) -> TourProgress:
        row = self._row
        steady_s = row.steady_s if row is not None else 0.0
        rate = row.samples_per_s if row is not None else None
        stage = self._stages[self._index]
        state = self._state
        fraction = min(1.0, steady_s / self._min_steady_s) if state == STEADY else 0.0
        return TourProgress(
            self._index,
            len(self._stages),
            stage,
            state,
            steady_s,
            rate,
            self._message(steady_s, rate),
            self._held[-1].verdict if len(self._held) > 1 else "",
            held=self._holding,
            fraction=1.0 if state == DONE else fraction,
            phase=self._phase_text(),
        )

    def _phase_text(self) -> str:
        """``compiling… 12 s`` from the stage's start while it applies or warms up (what a
        headline says instead of an empty samples/s), else ""."""
        if self._state not in (APPLYING, TRANSITION) or self._session.hello is None:
            return ""
        waited = max(0, self._clock() - self._stage_since_ns) / 1e9
        if self._compiling:
            what = "compiling…"
        else:
            what = "applying…" if self._state == APPLYING else "warming up…"
        return f"{what} {waited:.0f} s"

    def _message(self, steady_s: float, rate: float | None) -> str:
        state = self._state
        if state == FAILED:
            return f"failed: {self._failed}"
        if state == DONE:
            if self.stopped:
                return f"stopped at stage {self._stage_name()}"
            summary = self.summary
            return f"done: {summary}" if summary else f"done: {len(self._stages)} stage(s) measured"
        waited = max(0, self._clock() - self._phase_since_ns) / 1e9
        head = f"stage {self._stage_name()}"
        if self._session.hello is None:
            return f"{head}: waiting for the runner to start"
        if state == APPLYING:
            what = "compiling…" if self._compiling else "applying…"
            return f"{head}: {what} {waited:.0f} s"
        if state == TRANSITION:
            what = "compiling…" if self._compiling else "warming up"
            return f"{head}: {what} {waited:.0f} s"
        figure = f"{rate:,.1f} samples/s" if rate is not None else "n/a samples/s"
        if self._holding:
            return f"{head}: held, steady {steady_s:.1f} s, {figure} (next stage: Page Down)"
        return f"{head}: steady {steady_s:.1f}/{self._min_steady_s:g} s, {figure}" + (
            "" if steady_s < self._min_steady_s else " (waiting for stable rates)"
        )
