"""A stop (``--seconds``, the Stop button) waits for the step in flight, within reason.

A script's step ends at its next ``next(loader)``; a stop raises there. Steps longer than the
old fixed 2 s grace were cut in half and the half step (its data phase only) was counted. Now
the grace is about two typical steps, and a step the stop does cut is never counted.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from waiting import wait_until

from gpuwatch.core.run.outcome import EXIT_HUNG, describe, facts_from
from gpuwatch.core.run.session import LaunchSpec, Session, SessionState, stop_grace_s

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX timing of sleep()")

START_S = 120  # the runner imports torch first; the machine may be busy

SCRIPT = textwrap.dedent("""
    import os, sys, time
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    OUT = sys.argv[1]
    STEP_S = [float(s) for s in sys.argv[2].split(",")]
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.ones(64, 4)), batch_size=4)
    for step, (x,) in enumerate(loader):
        loss = model(x).pow(2).mean()
        loss.backward()
        time.sleep(STEP_S[min(step, len(STEP_S) - 1)])  # the long part of this step
        opt.step()
        opt.zero_grad()
        open(os.path.join(OUT, f"done-{step}"), "w").close()
""")


def _start(session: Session, tmp_path: Path, step_s: str) -> Path:
    out = tmp_path / "out"
    out.mkdir()
    script = tmp_path / "long_steps.py"
    script.write_text(SCRIPT)
    session.start(
        LaunchSpec(
            script=str(script), script_args=(str(out), step_s), device="cpu", cwd=str(tmp_path)
        )
    )
    return out


def test_the_grace_is_about_two_typical_steps_and_bounded() -> None:
    assert stop_grace_s(None) == 2.0
    assert stop_grace_s(0.01) == 2.0
    assert stop_grace_s(3.0) == 6.0
    assert stop_grace_s(1e6) == 60.0


def test_a_stop_waits_for_a_step_longer_than_two_seconds(session: Session, tmp_path: Path) -> None:
    out = _start(session, tmp_path, "3.0")
    wait_until(
        lambda: session.steps.count >= 1 or session.wait_ended(0), START_S, "the first 3 s step"
    )
    session.stop()  # early in the second step: ~3 s of it still to run
    assert session.wait_ended(60)
    assert session.state is SessionState.FINISHED, session.error
    outcome = describe(facts_from(session))
    assert outcome.exit_code == 0, outcome.sentence
    assert outcome.sentence.startswith("long_steps.py was stopped on request, after 2 steps")
    assert not (session.bye or {}).get("interrupted")
    done = len(list(out.glob("done-*")))
    assert session.steps.count == done == 2, "the step in flight finished and was counted"


def test_a_step_the_stop_has_to_cut_is_not_counted(session: Session, tmp_path: Path) -> None:
    """Two quick steps, then one that would take 10 minutes: the stop interrupts it after the
    grace; it was past its data phase (backward done) but is not counted, and the outcome
    says the stop was forced."""
    out = _start(session, tmp_path, "0.05,0.05,600")
    wait_until(
        lambda: len(list(out.glob("done-*"))) >= 2 or session.wait_ended(0),
        START_S,
        "two quick steps",
    )
    wait_until(lambda: session.steps.count >= 2, 30, "both quick steps received")
    session.stop()
    assert session.wait_ended(60)
    assert session.state is SessionState.FINISHED, session.error
    assert (session.bye or {}).get("interrupted") is True
    assert session.steps.count == 2, "the cut step is not counted"
    outcome = describe(facts_from(session))
    assert outcome.exit_code == EXIT_HUNG, outcome.sentence
    assert "interrupted it mid-step" in outcome.sentence
