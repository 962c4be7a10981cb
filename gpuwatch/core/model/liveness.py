"""Is the watched loop making progress? One small state machine owns the answer.

A run goes ``STARTING`` (runner launched, no ``hello`` yet) → ``WAITING`` (hello, no step yet)
→ ``RUNNING`` (steps arrive) ⇄ ``STALLED`` (no step for a while) → ``ENDED``. A script that
has not reached its first step ``notice_s`` after hello goes ``WAITING`` → ``NO_STEP_YET``
(a notice) → ``RUNNING`` when the first step arrives ("first step after N s", notice cleared).
A built-in workload gets no no-step-yet notice: its first step always comes (the dataset is
built before hello).

The window's banner and status bar, the headless progress on stderr, the recording's log and
the end-of-run outcome all read this one state, so a slow start can never hide a later hang.
Pure and clock-injected: the Session's clock thread feeds it; tests drive every transition.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

#: A stall is declared after at least ``notice_s`` without a step, and never before this many
#: typical steps have passed: a script with 20 s steps is not hung after 30 s.
STALL_TYPICAL_STEPS = 4.0


class Phase(enum.Enum):
    """Where the watched loop is in its life (the transitions are in the module docstring)."""

    STARTING = "starting"
    WAITING = "waiting"
    NO_STEP_YET = "no_step_yet"
    RUNNING = "running"
    STALLED = "stalled"
    ENDED = "ended"


@dataclass(frozen=True)
class Transition:
    """A change of phase and the one line that says so (``level`` as in the run's log)."""

    phase: Phase
    level: str  # "info" | "warning"
    text: str


#: How a stall notice begins (so it can be told apart from the no-step-yet notice).
STALL_PREFIX = "no step for"


def stall_notice(seconds: float) -> str:
    """What a run whose steps stopped arriving ``seconds`` ago is told (cleared when one
    arrives): a hung loop looks exactly like this, and Stop still ends it."""
    return (
        f"{STALL_PREFIX} {seconds:.0f} s: the training loop may be hung (a deadlock, a "
        f"stuck DataLoader worker) or one step is very slow (e.g. a compile); Stop ends "
        f"the run and keeps what was received"
    )


def no_step_notice(seconds: float) -> str:
    """What a script that has run ``seconds`` without a training step is told."""
    return (
        f"no training step yet after {seconds:.0f} s: gpuwatch detects steps from "
        f"DataLoader iteration and optimizer.step(); see 'Watch your own script' in the "
        f"README, or mark steps with gpuwatch.probe (with gw.step(): ...)"
    )


class Liveness:
    """The phase of one run and the notice it shows (None while all is well).

    ``tick`` is called by one thread (the Session's clock); ``phase``, ``notice`` and
    ``stalled_for`` are plain attribute reads, safe from any thread.
    """

    def __init__(self, *, notice_s: float, script: bool) -> None:
        self.notice_s = notice_s
        self.script = script
        self.phase = Phase.STARTING
        self.notice: str | None = None
        self._hello_at: float | None = None
        self._steps = 0
        self._last_step_at = 0.0
        self._stalled_since: float | None = None

    def tick(
        self, now: float, *, hello_at: float | None, steps: int, typical_step_s: float | None = None
    ) -> Transition | None:
        """Advance to ``now`` (monotonic seconds); the transition it caused, if any.

        ``steps`` is how many steps have arrived so far; ``typical_step_s`` a recent median
        step duration (None when unknown), which stretches the stall threshold.
        """
        if self.phase is Phase.ENDED:
            return None
        if self.phase is Phase.STARTING:
            if hello_at is None:
                return None
            self._hello_at = hello_at
            self.phase = Phase.WAITING
        if steps != self._steps:
            return self._steps_arrived(now, steps)
        if (
            self.phase is Phase.WAITING
            and self.script
            and self._hello_at is not None
            and now - self._hello_at >= self.notice_s
        ):
            return self._enter(Phase.NO_STEP_YET, "warning", no_step_notice(self.notice_s))
        if self.phase is Phase.RUNNING:
            threshold = self.stall_threshold(typical_step_s)
            if now - self._last_step_at >= threshold:
                self._stalled_since = self._last_step_at
                return self._enter(Phase.STALLED, "warning", stall_notice(threshold))
        return None

    def end(self) -> None:
        """The run is over (whatever the reason); the notice goes with it."""
        self.phase = Phase.ENDED
        self.notice = None

    def stall_threshold(self, typical_step_s: float | None) -> float:
        """No step for this long means stalled: ``notice_s``, or more for long steps."""
        if typical_step_s is None or typical_step_s <= 0:
            return self.notice_s
        return max(self.notice_s, STALL_TYPICAL_STEPS * typical_step_s)

    def stalled_for(self, now: float) -> float | None:
        """Seconds since the last step while stalled; None in any other phase."""
        if self.phase is not Phase.STALLED or self._stalled_since is None:
            return None
        return now - self._stalled_since

    def _steps_arrived(self, now: float, steps: int) -> Transition | None:
        first = self._steps == 0
        self._steps = steps
        quiet_s = now - (
            self._hello_at if first and self._hello_at is not None else self._last_step_at
        )
        self._last_step_at = now
        previous = self.phase
        if previous is Phase.RUNNING:
            return None
        self._stalled_since = None
        if previous is Phase.STALLED:
            return self._enter(
                Phase.RUNNING, "info", f"steps arrive again after {quiet_s:.0f} s without one"
            )
        cleared = " (the no-step notice is cleared)" if previous is Phase.NO_STEP_YET else ""
        return self._enter(Phase.RUNNING, "info", f"first step after {quiet_s:.1f} s{cleared}")

    def _enter(self, phase: Phase, level: str, text: str) -> Transition:
        self.phase = phase
        self.notice = text if level == "warning" else None
        return Transition(phase, level, text)
