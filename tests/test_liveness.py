"""Every transition of the liveness state machine, on a fake clock."""

from __future__ import annotations

from gpuwatch.core.model.liveness import STALL_PREFIX, Liveness, Phase


def _script(notice_s: float = 30.0) -> Liveness:
    return Liveness(notice_s=notice_s, script=True)


def test_starting_until_hello_then_waiting_without_a_notice() -> None:
    live = _script()
    assert live.tick(5.0, hello_at=None, steps=0) is None
    assert (live.phase, live.notice) == (Phase.STARTING, None)
    assert live.tick(6.0, hello_at=5.5, steps=0) is None
    assert (live.phase, live.notice) == (Phase.WAITING, None)
    assert live.tick(35.4, hello_at=5.5, steps=0) is None, "notice_s counts from hello"


def test_a_slow_start_gets_the_notice_and_the_first_step_clears_it() -> None:
    live = _script()
    live.tick(0.0, hello_at=0.0, steps=0)
    no_step = live.tick(30.0, hello_at=0.0, steps=0)
    assert no_step is not None and no_step.phase is Phase.NO_STEP_YET
    assert no_step.level == "warning"
    assert live.notice is not None and live.notice.startswith("no training step yet after 30 s")
    assert live.tick(31.0, hello_at=0.0, steps=0) is None, "said once"
    first = live.tick(35.2, hello_at=0.0, steps=3)
    assert first is not None and first.phase is Phase.RUNNING and first.level == "info"
    assert first.text == "first step after 35.2 s (the no-step notice is cleared)"
    assert live.notice is None


def test_the_usual_start_logs_the_first_step_without_a_notice() -> None:
    live = _script()
    live.tick(0.0, hello_at=0.0, steps=0)
    first = live.tick(4.0, hello_at=0.0, steps=1)
    assert first is not None and first.text == "first step after 4.0 s"
    assert live.notice is None


def test_a_hang_after_a_slow_start_is_announced() -> None:
    """The bug this machine exists for: the no-step notice must not swallow a later stall."""
    live = _script(notice_s=2.0)
    live.tick(0.0, hello_at=0.0, steps=0)
    live.tick(2.0, hello_at=0.0, steps=0)
    assert live.phase is Phase.NO_STEP_YET
    live.tick(10.0, hello_at=0.0, steps=1)
    live.tick(11.0, hello_at=0.0, steps=6)
    assert live.tick(12.9, hello_at=0.0, steps=6) is None
    stall = live.tick(13.0, hello_at=0.0, steps=6)
    assert stall is not None and stall.phase is Phase.STALLED and stall.level == "warning"
    assert live.notice is not None and live.notice.startswith(STALL_PREFIX)
    assert live.stalled_for(14.5) == 3.5


def test_steps_again_clear_the_stall_and_a_second_stall_is_announced_again() -> None:
    live = _script(notice_s=2.0)
    live.tick(0.0, hello_at=0.0, steps=0)
    live.tick(1.0, hello_at=0.0, steps=1)
    assert live.tick(3.0, hello_at=0.0, steps=1).phase is Phase.STALLED
    again = live.tick(7.0, hello_at=0.0, steps=2)
    assert again is not None and again.phase is Phase.RUNNING
    assert again.text == "steps arrive again after 6 s without one"
    assert live.notice is None and live.stalled_for(7.0) is None
    assert live.tick(9.0, hello_at=0.0, steps=2).phase is Phase.STALLED


def test_long_steps_stretch_the_stall_threshold() -> None:
    live = _script(notice_s=30.0)
    live.tick(0.0, hello_at=0.0, steps=0)
    live.tick(20.0, hello_at=0.0, steps=1)
    assert live.tick(60.0, hello_at=0.0, steps=1, typical_step_s=20.0) is None, (
        "40 s without a step is two 20 s steps, not a hang"
    )
    stall = live.tick(100.0, hello_at=0.0, steps=1, typical_step_s=20.0)
    assert stall is not None and stall.text.startswith("no step for 80 s")


def test_a_built_in_workload_gets_no_no_step_notice_but_can_stall() -> None:
    live = Liveness(notice_s=2.0, script=False)
    live.tick(0.0, hello_at=0.0, steps=0)
    assert live.tick(60.0, hello_at=0.0, steps=0) is None
    live.tick(61.0, hello_at=0.0, steps=1)
    assert live.tick(63.0, hello_at=0.0, steps=1).phase is Phase.STALLED


def test_the_end_clears_the_notice_and_nothing_follows() -> None:
    live = _script(notice_s=2.0)
    live.tick(0.0, hello_at=0.0, steps=0)
    live.tick(1.0, hello_at=0.0, steps=1)
    live.tick(3.0, hello_at=0.0, steps=1)
    live.end()
    assert (live.phase, live.notice, live.stalled_for(4.0)) == (Phase.ENDED, None, None)
    assert live.tick(100.0, hello_at=0.0, steps=5) is None
