"""Issue 8 §1, runner faults: a real training script (DataLoader workers, a plain child process)
raises, exits, is killed, segfaults or hangs; gpuwatch says what happened, keeps every step it
received, and afterwards no process of the runner's tree is alive (psutil over recorded pids).
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import psutil
import pytest
from faults import FAULT_AFTER, assert_all_gone, kill_all, recorded_pids, write_fault_script
from waiting import wait_until

from gpuwatch.core import session as session_module
from gpuwatch.core.outcome import describe, facts_from
from gpuwatch.core.session import STALL_PREFIX, LaunchSpec, Session, SessionState

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals and sleep(1)")

START_S = 120  # the runner imports torch first; the machine may be busy
#: Every process of the tree must be gone this soon after the runner ended.
TREE_GONE_S = 10


def _run(session: Session, tmp_path: Path, fault: str) -> Path:
    out = tmp_path / "out"
    out.mkdir()
    script = write_fault_script(tmp_path)
    session.start(LaunchSpec(script=str(script), script_args=(str(out), fault), device="cpu",
                             cwd=str(tmp_path)))
    return out


def _wait_for_fault(session: Session, out: Path) -> None:
    wait_until(lambda: (out / "fault").exists() or not session.state.name.endswith("ING"),
               START_S, "the script to reach its fault")
    assert (out / "fault").exists(), session.error


@pytest.mark.parametrize(("fault", "state", "says"), [
    ("raise", SessionState.FAILED, "raised RuntimeError: injected fault"),
    ("exit3", SessionState.FINISHED, "exited with code 3"),
    ("segfault", SessionState.FAILED, "killed by SIGSEGV"),
])
def test_a_script_that_raises_exits_or_segfaults_is_reported_and_leaves_nothing(
        session: Session, tmp_path: Path, fault: str, state: SessionState, says: str) -> None:
    out = _run(session, tmp_path, fault)
    try:
        _wait_for_fault(session, out)
        received = session.steps.count
        assert session.wait_ended(START_S)
        assert session.state is state, session.error
        outcome = describe(facts_from(session))
        assert says in outcome.sentence, outcome.sentence
        if fault == "exit3":
            assert outcome.exit_code == 3
        assert session.steps.count >= received, "every step received is kept"
        if fault != "segfault":  # the runner sends its last steps when the script ends
            assert session.steps.count == FAULT_AFTER
        assert session.steps.count >= 1
        if fault == "raise":
            log = "\n".join(line.text for line in session.drain_log())
            assert "Traceback" in log and "train fault.py" in log, "the script's traceback"
        assert set(recorded_pids(out)) == {"main", "worker", "helper"}
        assert_all_gone(out, TREE_GONE_S)
    finally:
        kill_all(out)


def test_a_runner_killed_with_sigkill_is_reported_and_its_tree_ends(
        session: Session, tmp_path: Path) -> None:
    """What the OOM killer does: SIGKILL to the training process only."""
    out = _run(session, tmp_path, "hang")
    try:
        _wait_for_fault(session, out)
        wait_until(lambda: session.steps.count >= 1, 10, "steps before the hang")
        received = session.steps.count  # the last <50 ms of steps may still be in the runner
        psutil.Process(session.pid).send_signal(signal.SIGKILL)
        assert session.wait_ended(30)
        assert session.state is SessionState.FAILED
        assert "killed by SIGKILL" in describe(facts_from(session)).sentence
        assert session.steps.count >= received >= 1
        assert_all_gone(out, TREE_GONE_S)
    finally:
        kill_all(out)


@pytest.mark.parametrize("fault", ["hang", "worker_hang"])
def test_a_hung_loop_gets_the_no_step_notice_and_stop_ends_it(
        tmp_path: Path, monkeypatch, fault: str) -> None:
    """No step for a while (main loop stuck, or a DataLoader worker deadlocked): the notice
    says so, the steps stay, and Stop (polite, then terminate) ends the whole tree."""
    monkeypatch.setattr(session_module, "POLITE_STOP_S", 2.0)
    session = Session(sample_coarse=False, no_step_notice_s=2.0)
    out = _run(session, tmp_path, fault)
    try:
        # The stall notice, not the one a slow start gets first ("no training step yet": the
        # script's spawned workers import torch, which can take longer than 2 s here).
        wait_until(lambda: (session.notice or "").startswith(STALL_PREFIX)
                   or not session.state.name.endswith("ING"), START_S, "the no-step notice")
        assert session.notice is not None and session.notice.startswith(STALL_PREFIX), \
            session.notice
        # The runner batches steps (a send at most every 50 ms, at a step boundary): those of
        # the last 50 ms before the hang stay in the runner; everything received is kept.
        received = session.steps.count
        assert received >= 1
        assert describe(facts_from(session)).sentence == session.notice
        started = time.monotonic()
        session.stop()
        assert session.wait_ended(30)
        assert time.monotonic() - started < 2.0 + session_module.TERMINATE_S + 5
        assert session.state is SessionState.FINISHED, session.error
        assert session.steps.count >= received
        assert_all_gone(out, TREE_GONE_S)
    finally:
        session.close()
        kill_all(out)


def test_stop_escalates_to_kill_within_a_bounded_time(session: Session, tmp_path: Path,
                                                      monkeypatch) -> None:
    """A loop that ignores both the polite stop and SIGTERM (workers too) is killed."""
    monkeypatch.setattr(session_module, "POLITE_STOP_S", 1.0)
    monkeypatch.setattr(session_module, "TERMINATE_S", 1.0)
    out = _run(session, tmp_path, "ignore_term")
    try:
        _wait_for_fault(session, out)
        started = time.monotonic()
        session.stop()
        assert session.wait_ended(30)
        took = time.monotonic() - started
        assert took < 1.0 + 1.0 + 6, f"stop took {took:.1f} s"
        assert session.exit_code == -signal.SIGKILL, "terminate was ignored: it took a kill"
        assert_all_gone(out, 3)
    finally:
        kill_all(out)
