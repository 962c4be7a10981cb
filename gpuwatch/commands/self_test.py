"""``gpuwatch --self-test``: does this build work end to end on this machine?

It is the check an installer's CI (and a user filing a bug) runs: the window is built
offscreen, the runner starts in the training interpreter with a short CPU workload, and
the test passes once steps arrive over the link. The outcome goes to a JSON file as well
as one line, because a windowed Windows build has no stdout. Qt stays out of this module:
the caller passes ``open_window`` (the CLI gives the real main window).
"""

from __future__ import annotations

import json
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpuwatch import __version__
from gpuwatch.core.run import interpreters, launcher
from gpuwatch.core.run.app_log import log_dir
from gpuwatch.core.run.session import LaunchSpec, Session, SessionState

#: Enough steps to show the link and the step batches work (the mlp on a CPU makes tens/s).
MIN_STEPS = 20
#: The whole test's limit: a first ``import torch`` on a busy machine takes tens of seconds.
TIMEOUT_S = 180.0
WORKLOAD, DEVICE = "mlp", "cpu"
RESULT_NAME = "self-test.json"

#: ``open_window(session)`` builds the GUI around the session and returns (pump, close).
WindowOpener = Callable[[Session], tuple[Callable[[], None], Callable[[], None]]]


@dataclass
class SelfTestResult:
    """What the self-test found, also written as JSON (a windowed build has no stdout): the
    training interpreter, its verdict and how soon steps arrived."""

    ok: bool = False
    message: str = ""
    gpuwatch: str = __version__
    frozen: bool = field(default_factory=launcher.is_frozen)
    gui_python: str = field(default_factory=platform.python_version)
    python: str | None = None
    python_from: str | None = None
    verdict: dict[str, Any] | None = None
    runner: dict[str, Any] | None = None
    workload: str = WORKLOAD
    device: str = DEVICE
    steps: int = 0
    seconds_to_first_step: float | None = None
    seconds: float = 0.0


def default_result_path() -> Path:
    """Beside the app log, where a user can find it without a terminal."""
    return log_dir() / RESULT_NAME


def choose_python(
    explicit: str | None, remembered: str | None, result: SelfTestResult
) -> str | None:
    """``--python``, else the interpreter chosen in the window, else ours (not frozen),
    else the best one discovery finds; None (with the reason in ``result``) if none."""
    if explicit:
        result.python_from = "--python"
        return explicit
    if remembered:
        result.python_from = "chosen in the window (settings)"
        return remembered
    if not launcher.is_frozen():
        result.python_from = "gpuwatch's own Python"
        return sys.executable
    found = interpreters.best(interpreters.check_all(interpreters.discover()))
    if found is None:
        result.message = f"failed: {interpreters.NO_TORCH_HELP}"
        return None
    result.python_from = f"discovered ({found.candidate.origin})"
    result.verdict = asdict(found.verdict)
    return found.candidate.path


def run_self_test(
    python: str | None,
    remembered: str | None,
    result_path: Path,
    open_window: WindowOpener,
    *,
    timeout: float = TIMEOUT_S,
    min_steps: int = MIN_STEPS,
) -> SelfTestResult:
    """Run the check; the result is also written to ``result_path`` (JSON)."""
    started = time.monotonic()
    result = SelfTestResult()
    result.python = choose_python(python, remembered, result)
    if result.python is not None:
        _watch_run(result, open_window, started, timeout, min_steps)
    result.seconds = round(time.monotonic() - started, 2)
    write_result(result, result_path)
    return result


def _watch_run(
    result: SelfTestResult,
    open_window: WindowOpener,
    started: float,
    timeout: float,
    min_steps: int,
) -> None:
    session = Session()
    pump, close = open_window(session)
    try:
        session.start(LaunchSpec(workload=WORKLOAD, device=DEVICE, python=result.python))
        deadline = started + timeout
        while time.monotonic() < deadline and session.state not in (
            SessionState.FAILED,
            SessionState.FINISHED,
        ):
            pump()  # the window redraws from the session, as it would on a desk
            count = session.steps.count
            if count and result.seconds_to_first_step is None:
                result.seconds_to_first_step = round(time.monotonic() - started, 2)
            if count >= min_steps:
                break
            time.sleep(0.05)
        result.steps = session.steps.count
        hello = session.hello
        result.runner = {
            "versions": dict(hello.versions) if hello else None,
            "device": hello.device.to_message() if hello else None,
        }
        if result.steps >= min_steps:
            result.ok = True
            result.message = (
                f"passed: {result.steps} steps of {WORKLOAD} on {DEVICE} "
                f"arrived from {result.python}"
            )
        else:
            why = session.error or (f"{result.steps} of {min_steps} steps within {timeout:g} s")
            result.message = f"failed: {why}"
    finally:
        session.close()
        close()
    if not result.ok and result.python:
        verdict = interpreters.check(interpreters.Candidate(result.python, "self-test")).verdict
        result.verdict = asdict(verdict)
        if not verdict.usable:
            result.message += f" ({verdict.summary}: {verdict.fix})"


def write_result(result: SelfTestResult, path: Path) -> None:
    """The JSON result; an unwritable path only adds a note to the message."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(result), indent=2, default=str) + "\n", encoding="utf-8")
    except OSError as exc:
        result.message += f" (result file not written: {exc.strerror or exc})"
