"""How a run ended, as one sentence and an exit code: the same words in the window and headless.

Built from plain facts (``RunFacts``) so every case can be tested without a runner. Headless
exit codes follow ``python SCRIPT`` in a shell: the script's own code, 1 when it raised (or
gpuwatch could not run it), 128 + N when a signal N ended it (139 for a segfault, 137 for the
OOM killer's SIGKILL), 0 when gpuwatch stopped it on request (``--seconds``, Stop) at a step
boundary. ``EXIT_HUNG`` (124, what ``timeout(1)`` returns) when gpuwatch had to end it by force:
it was hung when the stop came, or reached no step boundary in time and was interrupted or
terminated mid-step. 130 for Ctrl-C is the caller's business.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from gpuwatch.core.model.messages import ACTIVE_STATES, SessionState
from gpuwatch.core.model.store import StepStore
from gpuwatch.core.run.session import LaunchSpec
from gpuwatch.protocol import TORCH_MISSING

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2
EXIT_HUNG = 124
#: A process ended by signal N exits with this plus N in a POSIX shell.
SIGNAL_EXIT_BASE = 128

#: Where a user learns how steps are found (and how to mark them by hand).
STEP_HELP = (
    "gpuwatch detects steps from DataLoader iteration and optimizer.step(); see "
    "'Watch your own script' in the README, or mark steps with gpuwatch.probe"
)


@dataclass(frozen=True)
class RunFacts:
    """What a finished (or running) Session knows about its run, as plain data."""

    name: str  # the script's file name, the module, or the workload
    script: bool
    ended: bool
    failed: bool
    error: str | None = None  # "Type: message"
    error_type: str | None = None
    exit_code: int | None = None  # the runner process's exit status (negative: a signal)
    bye: dict[str, Any] | None = None
    steps: int = 0
    stop_requested: bool = False
    stopped_after_s: float | None = None
    device_kind: str | None = None  # from hello: cuda when torch sees a GPU
    notice: str | None = None
    #: Seconds without a step when the stop was asked for, if the run was stalled then.
    stalled_at_stop_s: float | None = None
    #: "terminated" / "killed" when the stop had to signal the runner's tree.
    stop_escalation: str | None = None
    #: Processes the runner started that did not exit with it, which gpuwatch ended.
    leftovers_ended: int = 0


@dataclass(frozen=True)
class Outcome:
    """How a run ended: one sentence, its log level and the headless exit code."""

    sentence: str
    level: str  # "info" | "warning" | "error"
    exit_code: int


class EndingRun(Protocol):
    """What ``facts_from`` reads of a run: a Session, or a replay (which launched nothing)."""

    @property
    def spec(self) -> LaunchSpec | None: ...

    @property
    def state(self) -> SessionState: ...

    @property
    def error(self) -> str | None: ...

    @property
    def error_type(self) -> str | None: ...

    @property
    def exit_code(self) -> int | None: ...

    @property
    def bye(self) -> dict[str, Any] | None: ...

    @property
    def steps(self) -> StepStore: ...

    @property
    def stop_requested(self) -> bool: ...

    @property
    def stopped_after_s(self) -> float | None: ...

    @property
    def device_kind(self) -> str | None: ...

    @property
    def notice(self) -> str | None: ...

    @property
    def stalled_at_stop_s(self) -> float | None: ...

    @property
    def stop_escalation(self) -> str | None: ...

    @property
    def leftovers_ended(self) -> int: ...


def facts_from(session: EndingRun) -> RunFacts:
    """The facts of a ``gpuwatch.core.run.session.Session`` (read once, at the end or live)."""
    spec = session.spec
    state = session.state
    return RunFacts(
        name=spec.name if spec is not None else "the run",
        script=spec is not None and spec.user_code,
        ended=state not in ACTIVE_STATES and state is not SessionState.IDLE,
        failed=state is SessionState.FAILED,
        error=session.error,
        error_type=session.error_type,
        exit_code=session.exit_code,
        bye=session.bye,
        steps=session.steps.count,
        stop_requested=session.stop_requested,
        stopped_after_s=session.stopped_after_s,
        device_kind=session.device_kind,
        notice=session.notice,
        stalled_at_stop_s=session.stalled_at_stop_s,
        stop_escalation=session.stop_escalation,
        leftovers_ended=session.leftovers_ended,
    )


def describe(facts: RunFacts) -> Outcome:
    """The one sentence for how the run ended (or None-like info while it still runs)."""
    name = facts.name
    steps = _steps(facts.steps)
    if not facts.ended:
        if facts.notice:
            return Outcome(facts.notice, "warning", EXIT_OK)
        return Outcome(f"{name} is running ({steps})", "info", EXIT_OK)
    if facts.error_type in ("ScriptNotFound", "ModuleNotFound", TORCH_MISSING):
        code = EXIT_USAGE if facts.error_type == "ScriptNotFound" else EXIT_ERROR  # as python
        return Outcome(f"{name} could not be run: {_message(facts)}", "error", code)
    if facts.error_type == "SyntaxError":
        return Outcome(f"{name} has a syntax error: {_message(facts)}", "error", EXIT_ERROR)
    if facts.error_type == "RankFailed":  # torchrun's report, with the rank and its step
        return Outcome(f"{name} failed: {_message(facts)}", "error", EXIT_ERROR)
    if facts.error_type == "MissingMainGuard":  # the runner's message says it all, with the fix
        return Outcome(_message(facts), "error", EXIT_ERROR)
    if facts.error_type is not None:
        return Outcome(
            f"{name} raised {facts.error} (after {steps}; the traceback is in the log)",
            "error",
            EXIT_ERROR,
        )
    if facts.stop_requested:
        return _stopped(facts)
    if facts.failed:
        return Outcome(
            f"{name} failed: {facts.error or 'the runner ended with an error'}",
            "error",
            _signal_code(facts.exit_code) or EXIT_ERROR,
        )
    code = _script_code(facts)
    if facts.script and facts.steps == 0:
        ended = "ended" if code == 0 else f"exited with code {code}"
        return Outcome(
            f"{name} {ended} after 0 steps: no training step was seen — {STEP_HELP}",
            "warning",
            code,
        )
    if code != 0:
        return Outcome(
            f"{name} exited with code {code} after {steps}{_device_note(facts)}", "warning", code
        )
    return Outcome(f"{name} finished after {steps}{_device_note(facts)}", "info", EXIT_OK)


def _stopped(facts: RunFacts) -> Outcome:
    """Stopped on request: fine at a step boundary; a hang or a forced end says so. Processes
    the script left running are ended as a terminal's Ctrl-C (sent to the whole foreground
    group) would end them: that is said, but is neither a hang nor a forced end."""
    when = (
        f"after {facts.stopped_after_s:g} s" if facts.stopped_after_s is not None else "on request"
    )
    steps = _steps(facts.steps)
    forced = _forced(facts)
    leftovers = _leftovers_note(facts)
    if facts.stalled_at_stop_s is not None:
        how = forced or "stopped it"
        return Outcome(
            f"{facts.name} was hung: no step for {facts.stalled_at_stop_s:.0f} s when "
            f"it was stopped {when}; gpuwatch {how} (after {steps}){leftovers}",
            "warning",
            EXIT_HUNG,
        )
    if forced:
        return Outcome(
            f"{facts.name} was stopped {when}, after {steps}, but reached no step "
            f"boundary in time: gpuwatch {forced}{leftovers}",
            "warning",
            EXIT_HUNG,
        )
    return Outcome(
        f"{facts.name} was stopped {when}, after {steps}{_device_note(facts)}{leftovers}",
        "info",
        EXIT_OK,
    )


def _leftovers_note(facts: RunFacts) -> str:
    """The processes the script started and left running, which gpuwatch ended (or "")."""
    n = facts.leftovers_ended
    if n <= 0:
        return ""
    which = "a process" if n == 1 else f"{n} processes"
    return f"; it had left {which} running, which gpuwatch ended"


def _forced(facts: RunFacts) -> str | None:
    """How gpuwatch had to end a stopped run by force, as words; None if it stopped politely."""
    if facts.stop_escalation in ("terminated", "killed"):
        return f"{facts.stop_escalation} it"
    if (facts.bye or {}).get("interrupted") is True:
        return "interrupted it mid-step (that step is not counted)"
    return None


def _signal_code(status: int | None) -> int | None:
    """The shell's exit code for a process a signal ended (negative ``Popen`` status)."""
    if status is None or status >= 0:
        return None
    return SIGNAL_EXIT_BASE - status


def _steps(n: int) -> str:
    return f"{n:,} step" + ("" if n == 1 else "s")


def _message(facts: RunFacts) -> str:
    error = facts.error or ""
    prefix = f"{facts.error_type}: "
    return error[len(prefix) :] if error.startswith(prefix) else error


def _script_code(facts: RunFacts) -> int:
    """The script's exit code: the bye's when it has one, else the runner's status."""
    bye = facts.bye or {}
    code = bye.get("code")
    if isinstance(code, int) and not isinstance(code, bool):
        return code
    status = facts.exit_code
    if status is None:
        return EXIT_ERROR
    return _signal_code(status) or status


def _device_note(facts: RunFacts) -> str:
    """Whether the script used the GPU it had: a note only scripts get."""
    if not facts.script:
        return ""
    cuda_used = (facts.bye or {}).get("cuda_used")
    if facts.device_kind == "cuda" and cuda_used is False:
        return " — the script never used CUDA although a GPU is available"
    if facts.device_kind == "cpu" or cuda_used is False:
        return f" ({_work(facts.bye or {})} on the CPU)"
    return ""


def _work(bye: dict[str, Any]) -> str:
    """What the script did, from the runner's counts: "trained" (optimizer steps),
    "evaluated" (not even a backward pass: ``--evaluate``, inference), else "ran" (backward
    passes without an optimizer step gpuwatch saw, or a runner that did not count)."""
    optimizer, backward = bye.get("optimizer_steps"), bye.get("backward_passes")
    if isinstance(optimizer, int) and optimizer > 0:
        return "trained"
    if optimizer == 0 and backward == 0:
        return "evaluated"
    return "ran"


#: What a step of a watched script was, by ``bye.step_definition``.
_STEP_DEFINITIONS = {
    "loader": "a step = one DataLoader batch, from one next() to the next",
    "optimizer": "a step = from one optimizer.step() to the next (no DataLoader seen)",
    "probe": "a step = one gpuwatch.probe.step() block, as the script marks it",
}


def step_definition(bye: dict[str, Any] | None) -> str | None:
    """How the run's steps were delimited, as one line; None when the runner did not say
    (a built-in workload, an older recording)."""
    kind = (bye or {}).get("step_definition")
    if kind == "accumulation":
        batches = (bye or {}).get("batches_per_step")
        over = f"{batches} DataLoader batches" if isinstance(batches, int) else "its batches"
        return (
            f"a step = one optimizer.step() over {over} (the script accumulates gradients; "
            "samples/s counts every batch)"
        )
    return _STEP_DEFINITIONS.get(kind) if isinstance(kind, str) else None
