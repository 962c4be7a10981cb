"""Tour planning against hand-written schemas, and the Conductor against a fake session."""

from __future__ import annotations

import math
from typing import Any

import pytest

from gpuwatch.core.figures.segments import SegmentStats
from gpuwatch.core.figures.speed_noise import MAX_NOISE, median_noise
from gpuwatch.core.model.knob_values import KnobValueError
from gpuwatch.core.model.messages import ConfigChange, Hello, Refusal
from gpuwatch.core.run.session import SessionError, SessionState
from gpuwatch.core.run.tour import (
    BEST_LABEL,
    Conductor,
    Skipped,
    Stage,
    StageResult,
    closing_sentence,
    judge,
    plan_stages,
    plan_tour,
)

NEEDS_CUDA = "needs CUDA"


def knob(name: str, kind: str, default: Any, **extra: Any) -> dict[str, Any]:
    base = {
        "name": name,
        "type": kind,
        "default": default,
        "min": None,
        "max": None,
        "choices": None,
        "enabled": True,
        "reason": None,
        "disabled_choices": {},
        "help": f"what {name} does",
    }
    return {**base, **extra}


def schema(*, cuda: bool, **overrides: dict[str, Any]) -> list[dict[str, Any]]:
    """The knobs of docs/knobs.md §1 as a CPU or a CUDA runner would describe them."""
    off_cpu = {} if cuda else {"enabled": False, "reason": NEEDS_CUDA}
    knobs = [
        knob("num_workers", "int", 0, min=0, max=16),
        knob("pin_memory", "bool", False, **off_cpu),
        knob("persistent_workers", "bool", False),
        knob("prefetch_factor", "int", 2, min=1, max=16),
        knob("batch_size", "int", 64, min=1, max=4096),
        knob("non_blocking", "bool", False, **off_cpu),
        knob(
            "amp",
            "choice",
            "off",
            choices=["off", "fp16", "bf16"],
            disabled_choices={} if cuda else {"fp16": NEEDS_CUDA},
        ),
        knob("tf32", "bool", False, **off_cpu),
        knob("channels_last", "bool", False),
        knob("cudnn_benchmark", "bool", False, **off_cpu),
        knob(
            "compile",
            "choice",
            "off",
            choices=["off", "default", "reduce-overhead", "max-autotune"],
        ),
        knob("log_every", "int", 1, min=1, max=1000),
        knob("zero_grad_set_to_none", "bool", False),
        knob("optimizer_impl", "choice", "for-loop", choices=["for-loop", "foreach", "fused"]),
        knob("storage_latency_ms", "float", 0.0, min=0, max=200),
        knob("augment_cost", "int", 0, min=0, max=20),
    ]
    return [{**k, **overrides.get(k["name"], {})} for k in knobs]


# ---- Planning ---------------------------------------------------------------------------------


def test_cpu_tour_skips_pinned_memory_and_uses_bf16() -> None:
    stages, skipped = plan_tour(schema(cuda=False), "vision", cores=2)
    assert [s.label for s in stages] == [
        "baseline",
        "workers",
        "batched logging",
        "AMP",
        "channels_last",
        "compile",
    ]
    assert skipped == [Skipped("pinned memory", NEEDS_CUDA)]
    by_label = {s.label: s for s in stages}
    assert by_label["baseline"].values["num_workers"] == 0
    assert by_label["workers"].changes == {"num_workers": 2, "persistent_workers": True}
    assert "2 worker processes decode and augment" in by_label["workers"].caption
    amp = by_label["AMP"]
    assert amp.changes == {"amp": "bf16"}
    # Cumulative: every earlier change is still in force, everything else at its default.
    assert amp.values["num_workers"] == 2 and amp.values["log_every"] == 50
    assert amp.values["channels_last"] is False and amp.values["batch_size"] == 64
    assert by_label["compile"].values["channels_last"] is True
    assert all(s.caption for s in stages)


def test_cuda_tour_runs_every_stage() -> None:
    stages, skipped = plan_tour(schema(cuda=True), "vision", cores=32)
    assert [s.label for s in stages] == [
        "baseline",
        "workers",
        "pinned memory",
        "batched logging",
        "AMP",
        "channels_last",
        "compile",
    ]
    assert skipped == []
    assert stages[1].changes["num_workers"] == 8
    assert stages[2].changes == {"pin_memory": True, "non_blocking": True}
    assert stages[-1].values["amp"] == "bf16" and stages[-1].values["pin_memory"] is True


def test_tour_skips_with_the_schemas_reasons() -> None:
    knobs = schema(
        cuda=True,
        amp={"disabled_choices": {"bf16": "bf16 is not supported by this GPU"}},
        compile={"enabled": False, "reason": "Triton is not installed"},
        log_every={"default": 50},
    )
    stages, skipped = plan_tour(knobs, "gpt", cores=4)
    labels = [s.label for s in stages]
    assert labels == ["baseline", "workers", "pinned memory", "AMP"]
    assert stages[-1].changes == {"amp": "fp16"}
    assert {s.label: s.reason for s in skipped} == {
        "batched logging": "already log_every=50",
        "channels_last": "vision only: it needs 4-D image inputs and convolutions",
        "compile": "Triton is not installed",
    }


def test_tour_skips_amp_when_no_precision_works_here() -> None:
    knobs = schema(
        cuda=False, amp={"disabled_choices": {"fp16": NEEDS_CUDA, "bf16": "bf16 is not supported"}}
    )
    _, skipped = plan_tour(knobs, "mlp", cores=1)
    reasons = {s.label: s.reason for s in skipped}
    assert reasons["AMP"] == "bf16: bf16 is not supported; fp16: needs CUDA"


def test_tour_skips_bf16_measured_slower_here_with_the_runners_reason() -> None:
    slow = "emulated here: slower (3.4× a float32 matmul)"
    knobs = schema(cuda=False, amp={"slow_choices": {"bf16": slow}})
    stages, skipped = plan_tour(knobs, "vision", cores=2)
    assert "AMP" not in [s.label for s in stages]
    assert Skipped("AMP", f"bf16: {slow}; fp16: needs CUDA") in skipped
    # On a GPU whose bf16 is emulated, fp16 is the tour's AMP instead.
    gpu = schema(cuda=True, amp={"slow_choices": {"bf16": "emulated on this GPU: slower"}})
    stages, _ = plan_tour(gpu, "vision", cores=8)
    assert next(s for s in stages if s.label == "AMP").changes == {"amp": "fp16"}


def test_plan_stages_from_set_and_then_groups() -> None:
    stages = plan_stages(
        schema(cuda=False), [["num_workers=0"], ["num_workers=2"], ["log_every=50", "amp=bf16"]]
    )
    assert [s.label for s in stages] == ["num_workers=0", "num_workers=2", "log_every=50, amp=bf16"]
    assert stages[1].changes == {"num_workers": 2}
    assert stages[2].values["num_workers"] == 2 and stages[2].values["amp"] == "bf16"
    assert stages[2].caption == "log_every: what log_every does; amp: what amp does"


def test_plan_stages_without_set_starts_from_the_baseline() -> None:
    stages = plan_stages(schema(cuda=False), [[], ["num_workers=2"]])
    assert [s.label for s in stages] == ["baseline", "num_workers=2"]
    assert stages[0].values["num_workers"] == 0
    assert [s.label for s in plan_stages(schema(cuda=False), [])] == ["baseline"]


def test_plan_stages_refuses_bad_input_and_empty_stages() -> None:
    with pytest.raises(KnobValueError, match="unknown knob 'nonsense'"):
        plan_stages(schema(cuda=False), [["nonsense=1"]])
    with pytest.raises(KnobValueError, match="pin_memory cannot be changed here: needs CUDA"):
        plan_stages(schema(cuda=False), [[], ["pin_memory=true"]])
    with pytest.raises(KnobValueError, match=r"stage 2 \(num_workers=0\) changes nothing"):
        plan_stages(schema(cuda=False), [[], ["num_workers=0"]])


# ---- The Conductor ----------------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.ns = 1_000_000_000

    def __call__(self) -> int:
        return self.ns

    def advance(self, seconds: float) -> None:
        self.ns += int(seconds * 1e9)


class FakeSession:
    """The subset of the Session API the Conductor uses; the test plays the runner."""

    def __init__(self, knobs: list[dict[str, Any]]) -> None:
        self.state = SessionState.RUNNING
        self.hello: Hello | None = Hello.from_message({"workload": "vision", "knobs": knobs})
        self._knobs = knobs
        self.error: str | None = None
        self.bye_reason: str | None = None
        self.baseline_id: int | None = None
        self.changes = [
            ConfigChange(0, {k["name"]: k["default"] for k in knobs}, {}, 0, 0, 3, label="baseline")
        ]
        self.sent: list[tuple[int, dict[str, Any], str | None]] = []
        self.answers: dict[int, ConfigChange | Refusal] = {}
        self.rows: dict[int, SegmentStats] = {}
        self.connected = True

    @property
    def knobs(self) -> list[dict[str, Any]]:
        return self._knobs

    def config_values(self) -> dict[str, Any]:
        return dict(self.changes[-1].values)

    def config_changes(self) -> list[ConfigChange]:
        return list(self.changes)

    def set_knobs(self, values: dict[str, Any], *, label: str | None = None) -> int | None:
        if not self.connected:
            raise SessionError("no training run is connected: start one first")
        request = len(self.sent) + 1
        self.sent.append((request, dict(values), label))
        return request

    def answer(self, request: int) -> ConfigChange | Refusal | None:
        return self.answers.get(request)

    def label_segment(self, config_id: int, label: str) -> None:
        self.changes = [
            ConfigChange(
                c.id, c.values, c.changed, c.t_ns, c.first_step, c.warmup_steps, label=label
            )
            if c.id == config_id
            else c
            for c in self.changes
        ]

    def scoreboard(self) -> list[SegmentStats]:
        return [self.rows[c.id] for c in self.changes if c.id in self.rows]

    # The runner's side, played by the tests.
    def apply(self, request: int) -> int:
        _, values, label = self.sent[request - 1]
        change = ConfigChange(
            len(self.changes),
            {**self.config_values(), **values},
            values,
            0,
            100,
            3,
            request=request,
            label=label or "",
        )
        self.changes.append(change)
        self.answers[request] = change
        return change.id

    def refuse(self, request: int, message: str) -> None:
        self.answers[request] = Refusal(request, self.sent[request - 1][1], message, 0)

    def measure(
        self, config_id: int, *, steps: int, steady_s: float = 0.0, rates: tuple[float, ...] = ()
    ) -> None:
        steady = bool(rates)
        self.rows[config_id] = SegmentStats(
            config_id=config_id,
            label="",
            settings={},
            changed={},
            t_ns=0,
            steps=steps,
            steady_steps=steps if steady else 0,
            samples_per_s=sorted(rates)[len(rates) // 2] if steady else None,
            window_rates=rates,
            steady_since_ns=0 if steady else None,
            steady_until_ns=int(steady_s * 1e9) if steady else None,
            live=True,
        )


def conductor_for(
    session: FakeSession, groups: list[list[str]], clock: FakeClock, **kwargs: Any
) -> Conductor:
    stages = plan_stages(session.knobs, groups)
    return Conductor(session, stages, min_steady_s=4.0, clock=clock, **kwargs)


def test_conductor_relabels_the_baseline_and_moves_on_only_when_steady_and_stable() -> None:
    session, clock = FakeSession(schema(cuda=False)), FakeClock()
    conductor = conductor_for(session, [[], ["num_workers=2"]], clock)

    progress = conductor.tick()
    assert session.sent == []  # the baseline is what runs already: nothing to send
    assert session.changes[0].label == "baseline" and session.baseline_id == 0
    assert progress.state == "transition" and progress.index == 0 and progress.n_stages == 2

    session.measure(0, steps=3)
    assert conductor.tick().state == "transition"
    session.measure(0, steps=20, steady_s=2.0, rates=(100.0, 101.0))
    progress = conductor.tick()
    assert progress.state == "steady" and progress.steady_s == 2.0
    assert progress.samples_per_s == 101.0 and "steady 2.0/4 s" in progress.message
    session.measure(0, steps=40, steady_s=5.0, rates=(100.0, 130.0, 100.0, 125.0))
    assert conductor.tick().state == "steady"  # long enough, but the rates disagree
    assert session.sent == []
    session.measure(0, steps=50, steady_s=6.0, rates=(100.0, 130.0, 100.0, 104.0, 102.0))
    progress = conductor.tick()
    assert progress.state == "applying" and progress.index == 1
    assert session.sent == [(1, {"num_workers": 2}, "num_workers=2")]

    assert conductor.tick().state == "applying"  # no answer yet
    config_id = session.apply(1)
    assert conductor.tick().state == "transition"
    session.measure(config_id, steps=30, steady_s=4.5, rates=(200.0, 205.0, 199.0))
    progress = conductor.tick()
    assert conductor.done and progress.state == "done" and conductor.failed is None
    assert [(s.label, c) for s, c in conductor.stage_configs()] == [
        ("baseline", 0),
        ("num_workers=2", 1),
    ]
    assert session.baseline_id == 0


def test_unstable_rates_are_held_at_most_three_times_the_seconds() -> None:
    session, clock = FakeSession(schema(cuda=False)), FakeClock()
    conductor = conductor_for(session, [[]], clock)
    conductor.tick()
    session.measure(0, steps=90, steady_s=11.9, rates=(100.0, 150.0, 100.0))
    assert conductor.tick().state == "steady"
    session.measure(0, steps=91, steady_s=12.0, rates=(100.0, 150.0, 100.0))
    assert conductor.tick().state == "done"


def test_only_the_difference_from_the_config_in_force_is_sent() -> None:
    session, clock = FakeSession(schema(cuda=False)), FakeClock()
    session.set_knobs({"num_workers": 2})
    session.apply(1)  # the user had already raised the workers by hand
    stages, _ = plan_tour(session.knobs, "vision", cores=2)
    conductor = Conductor(session, stages, min_steady_s=1.0, clock=clock)
    conductor.tick()
    # The baseline puts the workers back to the defaults, under the stage's name.
    assert session.sent[-1] == (2, {"num_workers": 0}, "baseline")
    config_id = session.apply(2)
    session.measure(config_id, steps=30, steady_s=1.5, rates=(50.0, 50.0, 50.0))
    conductor.tick()
    assert session.sent[-1] == (3, {"num_workers": 2, "persistent_workers": True}, "workers")
    assert session.baseline_id == config_id


def test_a_refusal_fails_the_tour_with_the_runners_message() -> None:
    session, clock = FakeSession(schema(cuda=False)), FakeClock()
    conductor = conductor_for(session, [["num_workers=3"]], clock)
    conductor.tick()
    session.refuse(1, "num_workers=3 would need 3 cores")
    progress = conductor.tick()
    assert progress.state == "failed"
    assert conductor.refusal is not None
    assert conductor.failed == "stage 'num_workers=3' was refused: num_workers=3 would need 3 cores"


def test_no_answer_times_out_and_compile_gets_a_generous_allowance() -> None:
    session, clock = FakeSession(schema(cuda=False)), FakeClock()
    conductor = conductor_for(session, [["num_workers=2"]], clock)
    conductor.tick()
    clock.advance(29)
    assert conductor.tick().state == "applying"
    clock.advance(2)
    assert conductor.tick().state == "failed"
    assert "did not apply the change within 30 s" in (conductor.failed or "")

    session, clock = FakeSession(schema(cuda=False)), FakeClock()
    conductor = conductor_for(session, [["compile=default"]], clock)
    conductor.tick()
    clock.advance(300)
    progress = conductor.tick()
    assert progress.state == "applying" and "compiling…" in progress.message
    clock.advance(331)
    assert conductor.tick().state == "failed"
    assert "within 630 s" in (conductor.failed or "")


@pytest.mark.parametrize(
    ("request_id", "needle"),
    [
        (None, "failed in its first steps and the runner went back to the previous settings"),
        (99, "the knobs were changed from elsewhere (batch_size=32) while it was measured"),
    ],
)
def test_a_newer_config_during_a_stage_fails_it(request_id: int | None, needle: str) -> None:
    session, clock = FakeSession(schema(cuda=False)), FakeClock()
    conductor = conductor_for(session, [[], ["compile=default"]], clock)
    conductor.tick()
    session.measure(0, steps=30, steady_s=4.0, rates=(10.0, 10.0, 10.0))
    conductor.tick()
    config_id = session.apply(1)
    assert conductor.tick().state == "transition"
    session.changes.append(
        ConfigChange(
            config_id + 1,
            session.changes[0].values,
            {"batch_size": 32},
            0,
            130,
            1,
            request=request_id,
            label="batch_size=32",
        )
    )
    assert conductor.tick().state == "failed"
    assert needle in (conductor.failed or "")
    assert conductor.refusal is None


def test_a_stage_without_new_steps_stalls() -> None:
    session, clock = FakeSession(schema(cuda=False)), FakeClock()
    conductor = conductor_for(session, [[]], clock)
    conductor.tick()
    session.measure(0, steps=3)
    conductor.tick()
    clock.advance(119)
    assert conductor.tick().state == "transition"
    clock.advance(2)
    assert conductor.tick().state == "failed"
    assert "no training step for 120 s" in (conductor.failed or "")


@pytest.mark.parametrize("end", [SessionState.FAILED, SessionState.FINISHED])
def test_the_runner_dying_fails_the_tour(end: SessionState) -> None:
    session, clock = FakeSession(schema(cuda=False)), FakeClock()
    conductor = conductor_for(session, [[], ["num_workers=2"]], clock)
    conductor.tick()
    session.state = end
    session.error = "RuntimeError: out of memory" if end is SessionState.FAILED else None
    progress = conductor.tick()
    assert progress.state == "failed"
    if end is SessionState.FAILED:
        assert conductor.failed == "RuntimeError: out of memory"
    else:
        assert "before the tour did" in (conductor.failed or "")


def test_no_runner_connected_fails_clearly() -> None:
    session, clock = FakeSession(schema(cuda=False)), FakeClock()
    session.connected = False
    conductor = conductor_for(session, [["num_workers=2"]], clock)
    assert conductor.tick().state == "failed"
    assert conductor.failed == "no training run is connected: start one first"


def test_waits_for_hello_and_stops_on_request() -> None:
    session, clock = FakeSession(schema(cuda=False)), FakeClock()
    conductor = conductor_for(session, [[], ["num_workers=2"]], clock)
    session.hello = None
    progress = conductor.tick()
    assert progress.state == "applying" and "waiting for the runner" in progress.message
    session.hello = Hello.from_message({"workload": "vision", "knobs": schema(cuda=False)})
    conductor.tick()
    session.measure(0, steps=20, steady_s=1.0, rates=(10.0,))
    conductor.stop()
    progress = conductor.tick()
    assert conductor.done and conductor.stopped and progress.state == "done"
    assert "stopped at stage 1/2" in progress.message
    assert [s.label for s, _ in conductor.stage_configs()] == ["baseline"]
    assert session.sent == []


def test_stage_configs_include_the_stage_in_progress() -> None:
    session, clock = FakeSession(schema(cuda=False)), FakeClock()
    conductor = conductor_for(session, [[]], clock)
    conductor.tick()
    session.measure(0, steps=20, steady_s=1.0, rates=(10.0, 10.0, 10.0))
    conductor.tick()
    conductor.stop()
    assert [(s.label, c) for s, c in conductor.stage_configs()] == [("baseline", 0)]
    assert isinstance(conductor.stages[0], Stage)


# ---- Keeping only what helps ------------------------------------------------------------------


def steady_row(config_id: int, rates: tuple[float, ...]) -> SegmentStats:
    return SegmentStats(
        config_id=config_id,
        label="",
        settings={},
        changed={},
        t_ns=0,
        steps=30,
        steady_steps=30,
        samples_per_s=sorted(rates)[len(rates) // 2],
        window_rates=rates,
        steady_since_ns=0,
        steady_until_ns=2_000_000_000,
    )


def test_median_noise_and_the_noise_rule() -> None:
    assert median_noise(()) == 0.0 and median_noise((100.0,)) == 0.0
    assert median_noise((90.0, 100.0, 110.0, 100.0)) == pytest.approx((102.5 - 97.5) / 100 / 2)
    stage = Stage("AMP", {}, "")
    kept = steady_row(1, (200.0, 201.0, 199.0))
    # Quiet rows: 5 % is the band; 6 % slower is reverted, 4 % slower is kept (no change).
    assert judge(stage, 2, steady_row(2, (188.0,) * 3), kept).kept is False
    kept_within = judge(stage, 2, steady_row(2, (192.0,) * 3), kept)
    assert kept_within.kept is True and not kept_within.helped
    assert kept_within.verdict == "AMP: 0.96× the best so far — kept (no change beyond noise)"
    # Scattered rates widen the band: 8 % slower, within twice the medians' uncertainty, is
    # noise and kept; over 20 windows a similar scatter pins the median down: reverted.
    noisy = judge(stage, 2, steady_row(2, (170.0, 184.0, 198.0)), kept)
    expected = 2 * math.hypot((191 - 177) / 184 / math.sqrt(3), 1 / 200 / math.sqrt(3))
    assert noisy.noise == pytest.approx(expected) and noisy.kept is True
    # However scattered, more than 10 % slower is reverted.
    scattered = judge(stage, 2, steady_row(2, (120.0, 178.0, 240.0)), kept)
    assert scattered.noise == MAX_NOISE and scattered.ratio == pytest.approx(0.89)
    assert scattered.kept is False
    many = (170.0, 178.0, 184.0, 190.0, 198.0) * 4  # 20 windows, median 184
    assert judge(stage, 2, steady_row(2, many), kept).kept is False
    slower = judge(stage, 2, steady_row(2, (56.0, 56.0, 56.0)), kept)
    assert slower.kept is False and slower.label == "AMP — reverted"
    assert slower.verdict == "AMP: 0.28× the best so far — reverted"
    assert judge(stage, 2, steady_row(2, (480.0,) * 3), kept).verdict == (
        "AMP: 2.40× the best so far — kept"
    )


#: Steady samples/s of each tour stage, by label (the "runner" of the scripted tours below).
SPEEDS = {
    "baseline": 100.0,
    "workers": 190.0,
    "batched logging": 192.0,
    "AMP": 55.0,
    "channels_last": 180.0,
    "compile": 240.0,
}


def tour_through(
    speeds: dict[str, float], *, revert_slower: bool = True, stages: list[Stage] | None = None
) -> tuple[Conductor, FakeSession]:
    """Drive a tour to its end: every set applied at once, every stage steady at its speed."""
    session, clock = FakeSession(schema(cuda=False)), FakeClock()
    if stages is None:
        stages, _ = plan_tour(session.knobs, "vision", cores=2)
    conductor = Conductor(
        session, stages, min_steady_s=1.0, clock=clock, revert_slower=revert_slower
    )
    for _ in range(100):
        conductor.tick()
        if conductor.done or conductor.failed:
            break
        for request, _, _ in session.sent:
            if request not in session.answers:
                session.apply(request)
        current = conductor.results()[-1]
        if current.kept is None:
            rate = speeds[current.stage.label]
            session.measure(current.config_id, steps=30, steady_s=1.5, rates=(rate,) * 3)
    assert conductor.done and conductor.failed is None
    return conductor, session


def test_the_tour_reverts_slower_stages_and_builds_on_the_kept_configuration() -> None:
    conductor, session = tour_through(SPEEDS)
    results = conductor.results()
    assert [(r.label, r.kept) for r in results] == [
        ("baseline", True),
        ("workers", True),
        ("batched logging", True),
        ("AMP — reverted", False),
        ("channels_last — reverted", False),
        ("compile", True),
    ]
    sent = {label: values for _, values, label in session.sent}
    # The stage after a reverted one takes it back in the same set.
    assert sent["channels_last"] == {"amp": "off", "channels_last": True}
    assert sent["compile"] == {"channels_last": False, "compile": "default"}
    final = session.config_values()
    assert final["amp"] == "off" and final["channels_last"] is False
    assert final["num_workers"] == 2 and final["compile"] == "default"
    # The scoreboard rows of the reverted stages say so.
    assert [c.label for c in session.changes][3:5] == ["AMP — reverted", "channels_last — reverted"]
    assert results[3].ratio == pytest.approx(55 / 192)
    assert conductor.summary == (
        "2.40× from workers and compile; batched logging made no difference beyond noise; "
        "AMP and channels_last did not help on this CPU and were reverted"
    )
    assert conductor.tick().message == f"done: {conductor.summary}"
    # The final row goes on measuring: the sentence's speedup is the scoreboard's, its
    # verdicts stay those of the tour.
    final = conductor.results()[-1].config_id
    session.measure(final, steps=90, steady_s=6.0, rates=(250.0,) * 3)
    assert (conductor.summary or "").startswith("2.50× from workers and compile; ")
    # A row judged early that settled lower: kept (the tour did keep it), no longer "helped".
    session.measure(final, steps=200, steady_s=20.0, rates=(195.0,) * 3)
    assert (conductor.summary or "").startswith(
        "1.95× from workers; batched logging and compile made no difference beyond noise; "
    )


def test_a_reverted_last_stage_ends_the_tour_on_the_best_configuration() -> None:
    speeds = {**SPEEDS, "AMP": 200.0, "compile": 150.0, BEST_LABEL: 203.0}
    conductor, session = tour_through(speeds)
    results = conductor.results()
    assert [(r.label, r.kept) for r in results][-3:] == [
        ("channels_last — reverted", False),
        ("compile — reverted", False),
        (BEST_LABEL, True),
    ]
    assert session.sent[-1][1:] == ({"compile": "off"}, BEST_LABEL)
    best = results[-1].stage
    assert best.values["amp"] == "bf16" and best.values["compile"] == "off"
    assert best.values == session.config_values()
    progress = conductor.tick()
    assert progress.n_stages == 7 and progress.note.startswith("best found: ")
    assert conductor.summary == (
        "2.03× from workers; batched logging and AMP made no difference beyond noise; "
        "channels_last and compile did not help on this CPU and were reverted"
    )


def test_stages_from_set_and_then_are_never_reverted() -> None:
    session = FakeSession(schema(cuda=False))
    stages = plan_stages(session.knobs, [[], ["num_workers=2"], ["amp=bf16"]])
    speeds = {"baseline": 100.0, "num_workers=2": 190.0, "amp=bf16": 50.0}
    conductor, session = tour_through(speeds, revert_slower=False, stages=stages)
    assert [(r.label, r.kept) for r in conductor.results()] == [
        ("baseline", True),
        ("num_workers=2", True),
        ("amp=bf16", True),
    ]
    assert session.config_values()["amp"] == "bf16"
    assert conductor.summary is None


def test_closing_sentence_when_nothing_helped_and_when_not_measured() -> None:
    base = Stage("baseline", {}, "")
    results = [
        StageResult(base, 0, 100.0, kept=True),
        StageResult(Stage("workers", {}, ""), 1, 60.0, 0.6, kept=False),
        StageResult(Stage(BEST_LABEL, {}, ""), 2, 101.0, 1.01, kept=True),
    ]
    assert closing_sentence(results, "on this CPU") == (
        "no stage beat the baseline beyond noise on this CPU (1.01× at best); "
        "workers did not help on this CPU and was reverted"
    )
    # The best configuration measured again at the end, slower (the machine's other load):
    # the speedup is the best row's, and the sentence says what the final row measured.
    remeasured = [
        StageResult(base, 0, 100.0, kept=True),
        StageResult(Stage("workers", {}, ""), 1, 140.0, 1.4, kept=True),
        StageResult(Stage("compile", {}, ""), 2, 90.0, 0.64, kept=False),
        StageResult(Stage(BEST_LABEL, {}, ""), 3, 101.0, 0.72, kept=True),
    ]
    assert closing_sentence(remeasured, "on this CPU") == (
        "1.40× from workers; compile did not help on this CPU and was reverted; the same "
        "settings measured again at the end ran at 1.01×: the machine's other load changed "
        "during the tour"
    )
    assert remeasured[-1].verdict == "best found: 0.72× the best so far, measured again"
    # Other settings than the fastest row's: no claim about the machine.
    remeasured[-1] = StageResult(Stage(BEST_LABEL, {"log_every": 50}, ""), 3, 101.0, kept=True)
    assert (closing_sentence(remeasured, "on this CPU") or "").endswith(
        "; the final configuration measured 1.01×"
    )
    assert closing_sentence(results[:1], "here") is None
    assert closing_sentence([*results[:2], StageResult(base, 2, None)], "here") is None


def test_losses_within_noise_do_not_add_up_over_the_stages() -> None:
    """Each stage 4 % slower than the one before is within noise of it, but the third is 8 %
    below the best so far: judged against the best, it is reverted, so the tour ends within
    noise of its fastest configuration."""
    speeds = {
        "baseline": 100.0,
        "workers": 200.0,
        "batched logging": 192.0,
        "AMP": 184.0,
        "channels_last": 195.0,
        "compile": 196.0,
    }
    conductor, _ = tour_through(speeds)
    assert [(r.label, r.kept) for r in conductor.results()] == [
        ("baseline", True),
        ("workers", True),
        ("batched logging", True),
        ("AMP — reverted", False),
        ("channels_last", True),
        ("compile", True),
    ]
    assert conductor.results()[3].ratio == pytest.approx(184 / 200)


# ---- The speaker drives: next, back, hold -----------------------------------------------------


def test_hold_keeps_a_stable_stage_until_released() -> None:
    session, clock = FakeSession(schema(cuda=False)), FakeClock()
    conductor = conductor_for(session, [[], ["num_workers=2"]], clock)
    conductor.tick()
    conductor.hold(True)
    session.measure(0, steps=50, steady_s=6.0, rates=(100.0, 101.0, 100.0))
    progress = conductor.tick()
    assert progress.held and progress.state == "steady" and session.sent == []
    assert progress.fraction == 1.0 and "held" in progress.message
    clock.advance(60.0)
    assert conductor.tick().index == 0  # held however long it has been steady
    conductor.hold(False)
    progress = conductor.tick()
    assert not progress.held and progress.index == 1
    assert session.sent == [(1, {"num_workers": 2}, "num_workers=2")]


def test_next_moves_on_at_once_judging_or_skipping_the_stage() -> None:
    session, clock = FakeSession(schema(cuda=False)), FakeClock()
    stages = plan_stages(session.knobs, [[], ["num_workers=2"], ["log_every=50"]])
    conductor = Conductor(session, stages, min_steady_s=100.0, clock=clock, revert_slower=True)
    conductor.tick()
    session.measure(0, steps=50, steady_s=6.0, rates=(100.0, 101.0, 100.0))
    progress = conductor.tick()
    assert progress.state == "steady" and progress.fraction == pytest.approx(0.06)
    assert conductor.next()
    assert conductor.tick().index == 1  # steady figures: judged, then the next stage
    assert [(r.label, r.kept) for r in conductor.results()][:1] == [("baseline", True)]
    # Next while the stage's change is still applying: it moves on once the answer is in.
    assert conductor.next()
    assert conductor.tick().state == "applying"
    config_id = session.apply(1)
    progress = conductor.tick()
    assert progress.index == 2 and progress.state == "applying"
    assert session.changes[config_id].label == "num_workers=2 — skipped"
    workers = conductor.results()[1]
    assert workers.skipped and workers.kept is False
    assert workers.verdict == "num_workers=2: skipped before it was measured"
    # The skipped stage is not kept: the next one is built on the baseline's settings.
    assert session.sent[-1] == (2, {"num_workers": 0, "log_every": 50}, "log_every=50")


def test_back_measures_the_stage_before_again() -> None:
    session, clock = FakeSession(schema(cuda=False)), FakeClock()
    conductor = conductor_for(session, [[], ["num_workers=2"]], clock, revert_slower=True)
    assert not conductor.back()  # nothing before the first stage
    conductor.tick()
    session.measure(0, steps=50, steady_s=6.0, rates=(100.0, 101.0, 100.0))
    assert conductor.tick().index == 1
    config_id = session.apply(1)
    conductor.tick()
    assert conductor.back()
    progress = conductor.tick()
    assert progress.index == 0 and progress.state == "applying"
    assert session.changes[config_id].label == "num_workers=2 — skipped"
    assert session.sent[-1] == (2, {"num_workers": 0}, "baseline")
    assert conductor.results() == []  # the baseline's verdict is made again
    again = session.apply(2)
    session.measure(again, steps=50, steady_s=6.0, rates=(102.0, 101.0, 102.0))
    conductor.tick()
    assert conductor.tick().index == 1
    assert [(r.label, r.config_id) for r in conductor.results()][:1] == [("baseline", again)]


def test_a_compiling_stage_says_so_with_its_elapsed_time() -> None:
    session, clock = FakeSession(schema(cuda=False)), FakeClock()
    conductor = conductor_for(session, [[], ["compile=default"]], clock)
    conductor.tick()
    assert conductor.tick().phase == "warming up… 0 s"
    session.measure(0, steps=50, steady_s=6.0, rates=(100.0, 101.0, 100.0))
    progress = conductor.tick()
    assert progress.index == 1 and progress.phase == "compiling… 0 s"
    clock.advance(12.0)
    assert conductor.tick().phase == "compiling… 12 s"
    config_id = session.apply(1)
    clock.advance(8.0)
    progress = conductor.tick()
    assert progress.state == "transition" and progress.phase == "compiling… 20 s"
    session.measure(config_id, steps=30, steady_s=1.0, rates=(150.0, 151.0, 150.0))
    assert conductor.tick().phase == ""
