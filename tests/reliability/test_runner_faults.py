"""Runner faults: a real training script (DataLoader workers, a plain child process)
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
from temp_dirs import private_dirs
from waiting import wait_until

from gpuwatch.commands.headless import HeadlessOptions, run_headless
from gpuwatch.core.model.liveness import STALL_PREFIX
from gpuwatch.core.run import session as session_module
from gpuwatch.core.run.outcome import EXIT_HUNG, describe, facts_from
from gpuwatch.core.run.session import LaunchSpec, Session, SessionState

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals and sleep(1)")

START_S = 120  # the runner imports torch first; the machine may be busy
#: Every process of the tree must be gone this soon after the runner ended.
TREE_GONE_S = 10
#: The no-step and stall notices of the hang tests come this soon (seconds).
NOTICE_S = 2.0
#: Steps a hung script completed: ``hang``/``slow_hang`` stop in step FAULT_AFTER; a worker
#: that deadlocks on item 64 leaves the loop waiting for batch 8 (batch size 8).
COMPLETED = {"hang": FAULT_AFTER, "slow_hang": FAULT_AFTER, "worker_hang": 8}


def _run(session: Session, tmp_path: Path, fault: str, *extra: str) -> Path:
    out = tmp_path / "out"
    out.mkdir()
    script = write_fault_script(tmp_path)
    session.start(
        LaunchSpec(
            script=str(script),
            script_args=(str(out), fault, *extra),
            device="cpu",
            cwd=str(tmp_path),
        )
    )
    return out


def _log(session: Session) -> list[str]:
    return [line.text for line in session.drain_log()]


def _wait_for_fault(session: Session, out: Path) -> None:
    wait_until(
        lambda: (out / "fault").exists() or not session.state.name.endswith("ING"),
        START_S,
        "the script to reach its fault",
    )
    assert (out / "fault").exists(), session.error


@pytest.mark.parametrize(
    ("fault", "state", "says"),
    [
        ("raise", SessionState.FAILED, "raised RuntimeError: injected fault"),
        ("exit3", SessionState.FINISHED, "exited with code 3"),
        ("segfault", SessionState.FAILED, "killed by SIGSEGV"),
    ],
)
def test_a_script_that_raises_exits_or_segfaults_is_reported_and_leaves_nothing(
    session: Session, tmp_path: Path, fault: str, state: SessionState, says: str
) -> None:
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
        if fault == "segfault":
            assert outcome.exit_code == 139, "128 + SIGSEGV, as a shell reports it"
        assert session.steps.count >= received, "every step received is kept"
        # Sent when the script ends, or (segfault, a second after the last step) by the flush
        # timer before the crash: no step is lost.
        assert session.steps.count == FAULT_AFTER
        if fault == "raise":
            log = "\n".join(line.text for line in session.drain_log())
            assert "Traceback" in log and "train fault.py" in log, "the script's traceback"
        assert set(recorded_pids(out)) == {"main", "worker", "helper"}
        assert_all_gone(out, TREE_GONE_S)
        assert not private_dirs(session.pid), "the runner's own folder is in the run's"
    finally:
        kill_all(out)


def test_a_runner_killed_with_sigkill_is_reported_and_its_tree_ends(
    session: Session, tmp_path: Path
) -> None:
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
        assert not private_dirs(session.pid), "the runner's own folder is in the run's"
    finally:
        kill_all(out)


@pytest.mark.parametrize("fault", ["slow_hang", "worker_hang"])
def test_a_hung_loop_gets_the_stall_notice_and_stop_ends_it(
    tmp_path: Path, monkeypatch, fault: str
) -> None:
    """No step for a while (main loop stuck after a slow start, or a DataLoader worker
    deadlocked): the stall notice says so even after the no-step notice of a slow start, every
    completed step is sent although no boundary comes, and Stop ends the whole tree."""
    monkeypatch.setattr(session_module, "POLITE_STOP_S", 2.0)
    session = Session(sample_coarse=False, no_step_notice_s=NOTICE_S)
    out = _run(session, tmp_path, fault, str(2 * NOTICE_S) if fault == "slow_hang" else "0")
    try:
        wait_until(
            lambda: (
                (session.notice or "").startswith(STALL_PREFIX)
                or not session.state.name.endswith("ING")
            ),
            START_S,
            "the stall notice",
        )
        assert session.notice is not None and session.notice.startswith(STALL_PREFIX), (
            session.notice
        )
        assert describe(facts_from(session)).sentence == session.notice
        # The runner's flush timer sends the steps finished before the hang.
        wait_until(
            lambda: session.steps.count == COMPLETED[fault],
            30,
            f"all {COMPLETED[fault]} completed steps (got {session.steps.count})",
        )
        log = _log(session)
        if fault == "slow_hang":  # the slow start's notice came first, and was cleared
            no_step = next(
                i for i, text in enumerate(log) if text.startswith("no training step yet")
            )
            first = next(i for i, text in enumerate(log) if text.startswith("first step after"))
            stall = next(i for i, text in enumerate(log) if text.startswith(STALL_PREFIX))
            assert no_step < first < stall, log
            assert "notice is cleared" in log[first]
        started = time.monotonic()
        session.stop()
        assert session.wait_ended(30)
        assert (
            time.monotonic() - started
            < session_module.stop_grace_s(None) + 2.0 + session_module.TERMINATE_S + 5
        )
        assert session.state is SessionState.FINISHED, session.error
        outcome = describe(facts_from(session))
        assert outcome.sentence.startswith("train fault.py was hung: no step for "), (
            outcome.sentence
        )
        assert outcome.exit_code == EXIT_HUNG
        assert session.steps.count == COMPLETED[fault], "the step the stop cut is not counted"
        assert_all_gone(out, TREE_GONE_S)
    finally:
        session.close()
        kill_all(out)


def test_headless_shows_the_stall_after_a_slow_start_and_exits_non_zero(
    tmp_path: Path, capsys
) -> None:
    """``gpuwatch run --headless --seconds N`` on a script that starts slowly, trains, then
    hangs: stderr has the no-step notice, its clearing, then the stall notice while the run
    goes on; the end says it was hung, with exit code 124."""
    out = tmp_path / "out"
    out.mkdir()
    script = write_fault_script(tmp_path)
    session = Session(sample_coarse=False, no_step_notice_s=NOTICE_S)
    options = HeadlessOptions(
        script=str(script),
        script_args=(str(out), "slow_hang", str(2 * NOTICE_S)),
        device="cpu",
        cwd=str(tmp_path),
        seconds=20.0,
    )
    try:
        code = run_headless(options, session=session)
    finally:
        kill_all(out)
    captured = capsys.readouterr()
    err = captured.err.splitlines()
    notices = [line for line in err if line.startswith("gpuwatch: ")]
    kinds = [text.split(":")[1].strip().split(" ")[:3] for text in notices]
    assert (
        ["no", "training", "step"] in kinds
        and ["first", "step", "after"] in kinds
        and ["no", "step", "for"] in kinds
    ), notices
    assert (
        kinds.index(["no", "training", "step"])
        < kinds.index(["first", "step", "after"])
        < kinds.index(["no", "step", "for"])
    ), notices
    assert code == EXIT_HUNG, captured.out
    assert captured.out.startswith("train fault.py was hung: no step for "), captured.out
    assert_all_gone(out, TREE_GONE_S)


def test_stop_escalates_to_kill_within_a_bounded_time(
    session: Session, tmp_path: Path, monkeypatch
) -> None:
    """A loop deaf to the polite stop, to its SIGINT and to SIGTERM (workers too) is killed."""
    monkeypatch.setattr(session_module, "POLITE_STOP_S", 1.0)
    monkeypatch.setattr(session_module, "TERMINATE_S", 1.0)
    out = _run(session, tmp_path, "ignore_term")
    try:
        _wait_for_fault(session, out)
        started = time.monotonic()
        session.stop()
        assert session.wait_ended(30)
        took = time.monotonic() - started
        bound = session_module.stop_grace_s(None) + 1.0 + 1.0 + 6
        assert took < bound, f"stop took {took:.1f} s (bound {bound:.1f} s)"
        assert session.exit_code == -signal.SIGKILL, "terminate was ignored: it took a kill"
        assert_all_gone(out, 3)
    finally:
        kill_all(out)
