"""The outcome sentence and exit code of every way a run can end (window and headless)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from gpuwatch.core.run.outcome import STEP_HELP, RunFacts, describe, facts_from, step_definition
from gpuwatch.core.run.session import LaunchSpec, Session, SessionState


def _ended(**fields) -> RunFacts:
    base = {
        "name": "train.py",
        "script": True,
        "ended": True,
        "failed": False,
        "device_kind": "cpu",
    }
    return RunFacts(**{**base, **fields})


def _bye(code: int = 0, steps: int = 10, cuda_used: bool = False, **counts: int) -> dict:
    return {
        "kind": "bye",
        "reason": "script_exit",
        "code": code,
        "steps": steps,
        "cuda_used": cuda_used,
        **{"optimizer_steps": steps, "backward_passes": steps, **counts},
    }


def test_a_script_that_finished_on_the_cpu() -> None:
    out = describe(_ended(bye=_bye(), steps=10, exit_code=0))
    assert out.sentence == "train.py finished after 10 steps (trained on the CPU)"
    assert (out.level, out.exit_code) == ("info", 0)


@pytest.mark.parametrize(
    ("optimizer", "backward", "work"),
    [(0, 0, "evaluated"), (0, 12, "ran"), (3, 12, "trained"), (None, None, "ran")],
    ids=["evaluate-only", "backward-only", "accumulating", "runner-did-not-count"],
)
def test_what_the_script_did_on_the_cpu(optimizer, backward, work) -> None:
    bye = _bye(steps=12, optimizer_steps=optimizer, backward_passes=backward)
    if optimizer is None:
        del bye["optimizer_steps"], bye["backward_passes"]
    out = describe(_ended(bye=bye, steps=12, exit_code=0))
    assert out.sentence == f"train.py finished after 12 steps ({work} on the CPU)"


def test_the_step_definition_in_words() -> None:
    assert step_definition(None) is None
    assert step_definition({"reason": "max_steps"}) is None  # a built-in workload
    assert "one DataLoader batch" in str(step_definition({"step_definition": "loader"}))
    accumulating = step_definition({"step_definition": "accumulation", "batches_per_step": 4})
    assert accumulating is not None
    assert accumulating.startswith("a step = one optimizer.step() over 4 DataLoader batches")


def test_a_script_that_never_used_the_gpu_it_had() -> None:
    out = describe(_ended(bye=_bye(), steps=3, exit_code=0, device_kind="cuda"))
    assert "never used CUDA" in out.sentence
    used = describe(_ended(bye=_bye(cuda_used=True), steps=3, exit_code=0, device_kind="cuda"))
    assert used.sentence == "train.py finished after 3 steps"


def test_sys_exit_code_is_the_exit_code() -> None:
    out = describe(_ended(bye=_bye(code=3), steps=4, exit_code=3))
    assert out.exit_code == 3
    assert out.sentence.startswith("train.py exited with code 3 after 4 steps")


def test_no_step_seen_says_how_steps_are_found() -> None:
    out = describe(_ended(bye=_bye(steps=0), steps=0, exit_code=0))
    assert out.sentence == f"train.py ended after 0 steps: no training step was seen — {STEP_HELP}"
    assert (out.level, out.exit_code) == ("warning", 0)


def test_a_raising_script_names_its_exception() -> None:
    out = describe(
        _ended(
            failed=True, error="ValueError: bad lr", error_type="ValueError", exit_code=1, steps=2
        )
    )
    assert out.sentence == (
        "train.py raised ValueError: bad lr (after 2 steps; the traceback is in the log)"
    )
    assert (out.level, out.exit_code) == ("error", 1)


def test_syntax_error_and_missing_script() -> None:
    syntax = describe(
        _ended(
            failed=True,
            error_type="SyntaxError",
            exit_code=1,
            error="SyntaxError: invalid syntax (train.py, line 3)",
        )
    )
    assert syntax.sentence == "train.py has a syntax error: invalid syntax (train.py, line 3)"
    assert syntax.exit_code == 1
    missing = describe(
        _ended(
            failed=True,
            error_type="ScriptNotFound",
            exit_code=2,
            error="ScriptNotFound: no such file: train.py",
        )
    )
    assert missing.sentence == "train.py could not be run: no such file: train.py"
    assert missing.exit_code == 2


def test_stopped_after_seconds_is_a_clean_end() -> None:
    out = describe(
        _ended(
            bye={"kind": "bye", "reason": "stopped", "optimizer_steps": 120},
            steps=120,
            exit_code=0,
            stop_requested=True,
            stopped_after_s=5.0,
        )
    )
    assert out.sentence == "train.py was stopped after 5 s, after 120 steps (trained on the CPU)"
    assert out.exit_code == 0
    by_hand = describe(_ended(steps=1, exit_code=-15, stop_requested=True))
    assert by_hand.sentence.startswith("train.py was stopped on request, after 1 step")


def test_killed_from_outside_exits_as_a_shell_would() -> None:
    """128 + the signal, like ``python train.py`` in a shell (137 for the OOM killer)."""
    killed = describe(
        _ended(failed=True, error="the runner was killed by SIGKILL", exit_code=-9, steps=7)
    )
    assert killed.sentence == "train.py failed: the runner was killed by SIGKILL"
    assert killed.exit_code == 137
    segfault = describe(
        _ended(failed=True, error="the runner was killed by SIGSEGV", exit_code=-11, steps=4)
    )
    assert segfault.exit_code == 139


def test_a_run_hung_when_stopped_says_so_and_fails() -> None:
    """--seconds (or Stop) on a hung loop is no clean end: the sentence and the code say so."""
    hung = describe(
        _ended(
            bye={"kind": "bye", "reason": "stopped", "interrupted": True},
            steps=19,
            exit_code=0,
            stop_requested=True,
            stopped_after_s=15.0,
            stalled_at_stop_s=12.4,
        )
    )
    assert hung.sentence == (
        "train.py was hung: no step for 12 s when it was stopped after "
        "15 s; gpuwatch interrupted it mid-step (that step is not "
        "counted) (after 19 steps)"
    )
    assert (hung.level, hung.exit_code) == ("warning", 124)
    terminated = describe(
        _ended(
            steps=19,
            exit_code=-15,
            stop_requested=True,
            stalled_at_stop_s=40.0,
            stop_escalation="terminated",
        )
    )
    assert "gpuwatch terminated it" in terminated.sentence
    assert terminated.exit_code == 124


def test_a_stop_that_had_to_cut_a_step_is_not_a_clean_end() -> None:
    out = describe(
        _ended(
            bye={"kind": "bye", "reason": "stopped", "interrupted": True},
            steps=3,
            exit_code=0,
            stop_requested=True,
            stopped_after_s=20.0,
        )
    )
    assert out.sentence.startswith(
        "train.py was stopped after 20 s, after 3 steps, but "
        "reached no step boundary in time: gpuwatch interrupted"
    )
    assert out.exit_code == 124
    killed = describe(_ended(steps=3, exit_code=-9, stop_requested=True, stop_escalation="killed"))
    assert killed.sentence.endswith("gpuwatch killed it")


def test_workloads_get_no_script_notes() -> None:
    out = describe(
        _ended(name="vision", script=False, bye={"reason": "max_steps"}, steps=3, exit_code=0)
    )
    assert out.sentence == "vision finished after 3 steps"


def test_while_running_the_notice_is_the_sentence() -> None:
    out = describe(_ended(ended=False, notice="no training step yet after 30 s: ..."))
    assert out.sentence.startswith("no training step yet")
    assert out.level == "warning"


def test_facts_from_a_session() -> None:
    session = Session(sample_coarse=False)
    session.spec = LaunchSpec(script="/tmp/x/train.py", script_args=("--lr", "1"))
    session._state = SessionState.FINISHED
    session.exit_code = 0
    session.bye = _bye(steps=0)
    facts = facts_from(session)
    assert (facts.name, facts.script, facts.ended, facts.steps) == ("train.py", True, True, 0)
    assert "no training step was seen" in describe(facts).sentence
    assert (
        facts_from(
            SimpleNamespace(
                **{
                    **vars(session),
                    "spec": None,
                    "state": session.state,
                    "stop_requested": False,
                    "error": None,
                    "error_type": None,
                    "bye": session.bye,
                    "device_kind": None,
                    "notice": None,
                    "stalled_at_stop_s": None,
                    "stop_escalation": None,
                    "steps": session.steps,
                }
            )
        ).name
        == "the run"
    )
