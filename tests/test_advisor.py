"""Advisor rules on constructed segment figures: each fires or not, ranking, "nothing is
wrong", "made worse", and never a disabled knob."""

from __future__ import annotations

from typing import Any

import pytest
from fake_knob_session import KNOBS, knob

from gpuwatch.core.figures.advisor import RULE_IDS, RULES, Context, Finding, advise, share
from gpuwatch.core.figures.segments import SegmentStats
from gpuwatch.core.model.messages import Refusal
from gpuwatch.core.run.tour import Stage, judge

VALUES = {k["name"]: k["default"] for k in KNOBS}


def row(
    config_id: int = 0,
    *,
    data: float = 0.0,
    sync: float = 0.0,
    copy: float = 0.0,
    launch: float = 0.0,
    kernel: float = 10.0,
    other: float = 0.0,
    rate: float = 100.0,
    changed: dict[str, Any] | None = None,
    settings: dict[str, Any] | None = None,
    rates: tuple[float, ...] | None = None,
) -> SegmentStats:
    """A steady row whose breakdown (ms per step) is given; idle = data+sync+launch+other."""
    breakdown = {
        "kernel": kernel,
        "memcpy": copy,
        "data_loading": data,
        "cpu_launch": launch,
        "sync": sync,
        "other": other,
    }
    idle = {
        "input": data,
        "copy": 0.0,
        "sync": sync,
        "launch": launch,
        "reconfigure": 0.0,
        "other": other,
    }
    phases = {
        "data": data,
        "h2d": copy,
        "forward": kernel + launch,
        "backward": 0.0,
        "optimizer": 0.0,
        "sync": sync,
        "other": other,
    }
    return SegmentStats(
        config_id=config_id,
        label=f"config {config_id}",
        settings=settings or dict(VALUES),
        changed=changed or {},
        t_ns=0,
        steps=100,
        steady_steps=90,
        samples_per_s=rate,
        window_rates=rates or (rate, rate, rate),
        idle_causes=idle,
        breakdown=breakdown,
        host_phases=phases,
    )


CPU = Context(knobs=KNOBS, values=VALUES, device_kind="cpu", cores=2)


def rules(findings) -> list[str]:
    return [f.rule for f in findings]


def test_input_bound_suggests_workers_up_to_the_cores() -> None:
    findings = advise([row(data=62, kernel=38)], CPU)
    top = findings[0]
    assert top.rule == "input-bound" and top.kind == "fix"
    assert top.suggestion == {"num_workers": 2}
    assert (
        top.title == "62% of each step waits for input; try num_workers=2 "
        "(this machine has 2 cores)"
    )
    assert "input wait: 62%" in top.evidence and top.value == pytest.approx(0.62)


def test_input_below_threshold_does_not_fire() -> None:
    assert "input-bound" not in rules(advise([row(data=15, kernel=85)], CPU))


def test_storage_latency_and_cpu_bound_input_when_workers_fill_the_cores() -> None:
    values = {**VALUES, "num_workers": 2, "storage_latency_ms": 20.0}
    slow_disk = advise([row(data=50, kernel=50)], Context(KNOBS, values, "cpu", 2))
    assert rules(slow_disk)[0] == "storage-latency"
    assert slow_disk[0].suggestion == {"num_workers": 4}
    busy_cpu = advise(
        [row(data=50, kernel=50)], Context(KNOBS, {**VALUES, "num_workers": 2}, "cpu", 2)
    )
    assert rules(busy_cpu) == ["input-cpu-bound"] and busy_cpu[0].suggestion == {}


def test_sync_bound_suggests_batched_logging_once() -> None:
    assert advise([row(sync=20, kernel=80)], CPU)[0].suggestion == {"log_every": 50}
    batched = Context(KNOBS, {**VALUES, "log_every": 50}, "cpu", 2)
    assert "sync-bound" not in rules(advise([row(sync=20, kernel=80)], batched))


def test_copy_bound_only_with_usable_knobs() -> None:
    assert "copy-bound" not in rules(advise([row(copy=30, kernel=70)], CPU))  # disabled here
    cuda_knobs = [
        knob("pin_memory", "bool", "loader", False),
        knob("non_blocking", "bool", "copies", False, rebuilds="loop"),
    ]
    cuda = Context(cuda_knobs, {"pin_memory": False, "non_blocking": False}, "cuda", 8)
    found = advise([row(copy=30, kernel=70)], cuda)
    assert found[0].rule == "copy-bound"
    assert found[0].suggestion == {"pin_memory": True, "non_blocking": True}


def test_launch_bound_prefers_cuda_graphs_on_cuda_then_compile_then_batch() -> None:
    cuda = Context(KNOBS, VALUES, "cuda", 8)
    assert advise([row(launch=40, kernel=60)], cuda)[0].suggestion == {"compile": "reduce-overhead"}
    assert advise([row(launch=40, kernel=60)], CPU)[0].suggestion == {"compile": "default"}
    knobs = [*KNOBS, knob("batch_size", "int", "loader", 64, min=1, max=100)]
    compiled = Context(knobs, {**VALUES, "compile": "default", "batch_size": 64}, "cpu", 2)
    assert advise([row(launch=40, kernel=60)], compiled)[0].suggestion == {"batch_size": 100}


def test_precision_only_when_device_bound_on_a_capable_cuda_device() -> None:
    cuda = Context(KNOBS, VALUES, "cuda", 8)
    found = advise([row(kernel=95, other=5)], cuda)
    assert rules(found) == ["precision", "device-bound"]
    assert found[0].suggestion == {"amp": "bf16"}
    no_bf16 = [
        knob(
            "amp",
            "choice",
            "precision",
            "off",
            choices=["off", "fp16", "bf16"],
            disabled_choices={"bf16": "bf16 is not supported by this GPU"},
        )
    ]
    found = advise([row(kernel=95, other=5)], Context(no_bf16, {"amp": "off"}, "cuda", 8))
    assert found[0].suggestion == {"amp": "fp16"}
    assert "precision" not in rules(advise([row(kernel=95, other=5)], CPU))


def test_channels_last_with_amp_on() -> None:
    ctx = Context(KNOBS, {**VALUES, "amp": "bf16"}, "cpu", 2)
    found = advise([row(kernel=95, other=5)], ctx)
    assert rules(found) == ["channels-last", "device-bound"]
    assert found[0].suggestion == {"channels_last": True}


def test_nothing_is_wrong_when_idle_is_small() -> None:
    found = advise([row(kernel=95, other=3, sync=2)], CPU)
    assert rules(found) == ["device-bound"] and found[0].kind == "ok"
    assert found[0].title.startswith("Nothing is wrong: the loop is compute-bound")


def test_disabled_knob_or_choice_is_never_suggested() -> None:
    disabled = [
        knob("num_workers", "int", "loader", 0, min=0, max=16, enabled=False, reason="script mode"),
        knob("log_every", "int", "loop", 1, min=1, max=1000, enabled=False, reason="no"),
        knob(
            "compile",
            "choice",
            "kernels",
            "off",
            choices=["off", "default", "reduce-overhead"],
            disabled_choices={"default": "no C++ compiler found", "reduce-overhead": "needs CUDA"},
        ),
    ]
    values = {"num_workers": 0, "log_every": 1, "compile": "off"}
    found = advise(
        [row(data=40, sync=20, launch=20, kernel=20)], Context(disabled, values, "cpu", 2)
    )
    assert all(not f.suggestion for f in found)


def test_ranking_by_share_of_the_step() -> None:
    found = advise([row(data=25, sync=45, kernel=30)], CPU)
    assert rules(found)[:2] == ["sync-bound", "input-bound"]


def test_made_worse_suggests_the_revert_and_ranks_first() -> None:
    before = row(0, data=20, kernel=80, rate=1000)
    after = row(
        1,
        data=20,
        kernel=80,
        rate=700,
        changed={"num_workers": 2},
        settings={**VALUES, "num_workers": 2},
    )
    found = advise([before, after], Context(KNOBS, {**VALUES, "num_workers": 2}, "cpu", 2))
    assert found[0].rule == "change-worse" and found[0].kind == "worse"
    assert found[0].suggestion == {"num_workers": 0}
    assert (
        found[0].title == "This change made things worse: num_workers 0→2 cost 30% of "
        "samples/s; revert?"
    )


def test_a_loss_within_noise_is_not_worse() -> None:
    before = row(0, rate=1000, rates=(900, 1000, 1100, 1000))
    after = row(1, rate=960, changed={"log_every": 50}, rates=(850, 960, 1080, 900))
    found = advise([before, after], CPU)
    assert "change-worse" not in rules(found)
    assert found[0].rule == "change-outcome" and "within noise" in found[0].title


def test_outcome_reports_the_speedup_and_the_quantity_it_was_about() -> None:
    before = row(0, data=62, kernel=38, rate=340)
    after = row(
        1,
        data=8,
        kernel=92,
        rate=580,
        changed={"num_workers": 2},
        settings={**VALUES, "num_workers": 2},
    )
    ctx = Context(KNOBS, {**VALUES, "num_workers": 2}, "cpu", 2)
    found = advise([before, after], ctx, applied={1: "input wait"})
    assert found[0].rule == "change-outcome"
    assert found[0].title == "num_workers 0→2: 1.71× samples/s; input wait 62%→8%"
    # without knowing which finding was applied, the quantity that moved most is shown
    assert advise([before, after], ctx)[0].title.endswith("input wait 62%→8%")


def test_no_findings_until_the_newest_segment_is_steady() -> None:
    not_steady = SegmentStats(
        config_id=1, label="x", settings=VALUES, changed={"a": 1}, t_ns=0, steps=3, steady_steps=0
    )
    assert advise([row(data=62, kernel=38), not_steady], CPU) == []
    assert advise([], CPU) == []


def test_every_rule_is_documented_in_docs_advisor_md() -> None:
    from pathlib import Path

    text = (Path(__file__).parents[1] / "docs" / "advisor.md").read_text(encoding="utf-8")
    for rule in RULES:
        assert f"`{rule.id}`" in text
    assert len(set(RULE_IDS)) == len(RULE_IDS)


def test_bench_report_prints_the_breakdowns_then_the_findings() -> None:
    import csv
    import io
    import json

    from gpuwatch.commands.bench_report import BenchReport, render

    naive = row(0, data=62, kernel=38)
    findings = advise([naive], CPU)
    segment = {**naive.to_json(), "label": "baseline"}
    report = BenchReport(
        machine={"device_kind": "cpu", "cores": 2},
        workload="vision",
        seconds_per_stage=4,
        segments=[segment],
        findings=[f.to_json() for f in findings],
    )
    data = json.loads(render(report, "json"))
    assert data["segments"][0]["idle_causes"]["input"] == 62
    assert data["segments"][0]["breakdown"]["kernel"] == 38
    assert data["findings"][0]["rule"] == "input-bound"
    assert data["findings"][0]["suggestion"] == {"num_workers": 2}
    text = render(report, "md")
    assert (
        "- baseline: of 100.0 ms per step: 62.0 data loading, 38.0 compute; "
        "of 62.0 ms idle per step: 62.0 input" in text
    )
    advisor = text[text.index("## Advisor") :]
    assert (
        "1. 62% of each step waits for input; try num_workers=2 (this machine has 2 cores)"
        in advisor
        and "→ set num_workers=2" in advisor
    )
    table = list(
        csv.reader(
            io.StringIO(
                "\n".join(
                    line for line in render(report, "csv").splitlines() if not line.startswith("#")
                )
            )
        )
    )
    assert table[1][table[0].index("idle input ms")] == "62.000"
    unmeasured = {**segment, "breakdown": None, "idle_causes": {"input": float("nan")}}
    data = json.loads(render(BenchReport({}, "vision", 4, [unmeasured]), "json"))
    assert data["segments"][0]["breakdown"] is None
    assert data["segments"][0]["idle_causes"] is None and data["findings"] == []


@pytest.mark.timeout(600)
def test_naive_vision_on_a_cpu_waits_for_input_and_the_applied_fix_is_measured() -> None:
    """End to end: a real CPU runner; the advice is applied through Session.set_knobs."""
    from waiting import wait_until

    from gpuwatch.core.figures.advisor import context_of
    from gpuwatch.core.run.session import LaunchSpec, Session, SessionState

    session = Session(sample_coarse=False)
    try:
        session.start(LaunchSpec(workload="vision", device="cpu"))
        wait_until(
            lambda: session.state is not SessionState.STARTING,  # RUNNING: hello stored first
            240,
            "the runner's hello",
        )
        assert session.hello is not None, session.error

        def advice() -> list:
            return advise(session.scoreboard(), context_of(session))

        def baseline_measured() -> bool:
            rows = session.scoreboard()
            return bool(rows) and len(rows[-1].window_rates) >= 2 and bool(advice())

        wait_until(baseline_measured, 300, "two steady seconds of the naive loop")
        top = advice()[0]
        cores = session.hello.device.cores
        assert top.rule == "input-bound", [f.title for f in advice()]
        assert top.suggestion == {"num_workers": min(cores, 16)}
        assert f"this machine has {cores} core" in top.title

        request = session.set_knobs(top.suggestion)
        assert request is not None
        applied: dict[int, str] = {}

        def outcome() -> Finding | None:
            answer = session.answer(request)
            if answer is None:
                return None
            assert not isinstance(answer, Refusal), answer
            applied[answer.id] = top.quantity
            found = advise(session.scoreboard(), context_of(session), applied)
            return next((f for f in found if f.rule in ("change-outcome", "change-worse")), None)

        wait_until(outcome, 300, "the new configuration's steady figures")
        rows = session.scoreboard()  # one snapshot for the finding and the figures
        result = next(
            f
            for f in advise(rows, context_of(session), applied)
            if f.rule in ("change-outcome", "change-worse")
        )
        before, after = share(rows[0], "input wait"), share(rows[-1], "input wait")
        assert before is not None and after is not None
        move = f"num_workers 0→{min(cores, 16)}"
        if result.rule == "change-outcome":  # the expected case: it helped (or was noise)
            assert result.title.startswith(f"{move}: ")
            assert f"input wait {100 * before:.0f}%→{100 * after:.0f}%" in result.title
        else:  # a machine loaded by others can make two workers cost more than they save
            assert f"made things worse: {move} cost " in result.title
        assert "samples/s" in result.evidence
        assert after < before  # workers take the decode off the training loop
    finally:
        session.close()


def _capture(kernel_wait_ms: float = 0.0, underfilled_share: float | None = None):
    """A SIMULATED kernel capture summary (hand-made numbers, not a GPU measurement)."""
    from gpuwatch.core.figures.kernel_window import IdleBreakdown, WindowSummary

    return WindowSummary(
        window_ns=100_000_000,
        busy_ns=60_000_000,
        busy_fraction=0.6,
        kernels=500,
        copies=2,
        launch_gaps=499,
        launch_gap_median_ns=20.0,
        launch_gap_total_ns=40_000_000,
        underfilled=300 if underfilled_share else 0,
        underfilled_busy_share=underfilled_share,
        geometry_known=500,
        idle=IdleBreakdown(0, int(kernel_wait_ms * 1e6), 0),
        stream_busy_ns={7: 60_000_000},
        dropped=0,
    )


def test_capture_rules_use_hta_kernel_wait_and_launch_geometry_on_cuda() -> None:
    knobs = [*KNOBS, knob("batch_size", "int", "loader", 64, min=1, max=4096)]
    values = {**VALUES, "batch_size": 64}
    busy = row(kernel=95, other=5)
    cuda = Context(knobs, values, "cuda", 8, capture=_capture(kernel_wait_ms=25))
    found = advise([busy], cuda)
    wait = next(f for f in found if f.rule == "capture-kernel-wait")
    assert wait.suggestion == {"compile": "reduce-overhead"} and wait.value == 0.25
    assert "kernel wait: 25.00 ms of a 100.0 ms capture window" in wait.evidence
    full = Context(knobs, values, "cuda", 8, capture=_capture(underfilled_share=0.8))
    under = next(f for f in advise([busy], full) if f.rule == "capture-underfilled")
    assert under.suggestion == {"batch_size": 128}
    quiet = Context(knobs, values, "cuda", 8, capture=_capture(kernel_wait_ms=1))
    assert not {"capture-kernel-wait", "capture-underfilled"} & set(rules(advise([busy], quiet)))
    on_cpu = Context(knobs, values, "cpu", 2, capture=_capture(kernel_wait_ms=25))
    assert "capture-kernel-wait" not in rules(advise([busy], on_cpu))


def test_a_watched_script_without_the_knobs_gets_the_advice_for_its_code() -> None:
    script = Context(knobs=[], values={}, device_kind="cpu", cores=4)
    found = advise([row(data=40, sync=20, kernel=40)], script)
    assert rules(found) == ["input-bound", "sync-bound"]
    assert (
        found[0].title == "40% of each step waits for input: give your DataLoader "
        "num_workers=4 (this machine has 4 cores)"
    )
    assert found[1].title.endswith("read the loss every 50 steps instead of every step")
    assert all(f.suggestion == {} for f in found)  # nothing to Apply: the fix is in the code


@pytest.mark.parametrize(
    "after_rates",
    [
        (188.0, 188.0, 188.0),  # 6 % slower, quiet: both say worse
        (192.0, 192.0, 192.0),  # 4 % slower: both say noise
        (170.0, 184.0, 198.0),  # 8 % slower but scattered: both say noise
        (120.0, 178.0, 240.0),  # 11 % slower, however scattered: both say worse
    ],
)
def test_the_advisor_calls_a_change_worse_exactly_when_the_tour_reverts_it(after_rates) -> None:
    before = row(0, rates=(200.0, 201.0, 199.0), rate=200.0)
    after = row(1, rates=after_rates, rate=sorted(after_rates)[1], changed={"log_every": 50})
    tour_reverts = not judge(Stage("batched logging", {}, ""), 1, after, before).kept
    advisor_says_worse = "change-worse" in rules(advise([before, after], CPU))
    assert advisor_says_worse == tour_reverts
