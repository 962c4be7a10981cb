"""The headless summary counts steps as the scoreboard does, and says which figures are which.

A Session is fed a run's messages (no runner): three slow, input-bound warm-up steps, then
fast steady ones, which is how a DataLoader that starts its workers looks. Over all steps
the warm-up makes input wait look large; the scoreboard leaves it out, and so must the summary.
"""

from __future__ import annotations

import re
import time

import pytest

from gpuwatch.commands.headless import summary_lines
from gpuwatch.core.figures.segments import SegmentStats
from gpuwatch.core.run.session import Session

MS = 1_000_000


def _t0() -> int:
    """A first step's start after the hello the test folds next (a configuration starts when
    its hello arrives, on this clock): taken when the test runs, not when it was collected."""
    return time.perf_counter_ns() + 60_000 * MS


def _hello(warmup: int = 3) -> dict:
    return {
        "kind": "hello",
        "protocol": 1,
        "pid": 1,
        "workload": "train.py",
        "device": {"kind": "cpu", "cores": 2},
        "versions": {},
        "knobs": [],
        "config": {"id": 0, "values": {}, "warmup_steps": warmup},
    }


def _steps(first: int, durations_ms: list[float], data_ms: list[float], t0: int, config: int = 0):
    """A ``steps`` message of back-to-back steps; returns it and the time the last one ended."""
    host, t = [], t0
    for total_ms, wait_ms in zip(durations_ms, data_ms, strict=True):
        total, data = int(total_ms * MS), int(wait_ms * MS)
        rest = total - data
        host.append([t, t + data, *(t + data + rest * k // 5 for k in range(1, 5)), t + total])
        t += total
    n = len(durations_ms)
    message = {
        "kind": "steps",
        "step": list(range(first, first + n)),
        "config": [config] * n,
        "samples": [32] * n,
        "host": host,
    }
    return message, t


def _session(*messages: dict) -> Session:
    session = Session(sample_coarse=False)
    for message in messages:
        session.model.fold(message)
    return session


def _numbers(line: str) -> dict[str, str]:
    found = re.search(
        r"samples/s: ([\d,.]+) · step p50/p95: ([\d.]+)/([\d.]+) ms · busy: (\d+) % · "
        r"input wait: (\d+) %",
        line,
    )
    assert found, line
    keys = ("samples/s", "p50", "p95", "busy", "input wait")
    return dict(zip(keys, found.groups(), strict=True))


def _scoreboard_numbers(row: SegmentStats) -> dict[str, str]:
    assert row.samples_per_s is not None and row.step_ms_p50 is not None
    assert row.step_ms_p95 is not None and row.busy_share is not None
    assert row.input_wait_share is not None
    return {
        "samples/s": f"{row.samples_per_s:,.1f}",
        "p50": f"{row.step_ms_p50:.1f}",
        "p95": f"{row.step_ms_p95:.1f}",
        "busy": f"{100 * row.busy_share:.0f}",
        "input wait": f"{100 * row.input_wait_share:.0f}",
    }


def _line(lines: list[str], start: str) -> str:
    (line,) = [line for line in lines if line.startswith(start)]
    return line


def test_the_summary_figures_are_the_scoreboards_and_all_steps_are_labelled() -> None:
    warm, end = _steps(0, [2000] * 3, [1800] * 3, _t0())  # workers starting: input-bound
    steady, _ = _steps(3, [50] * 200, [1] * 200, end)
    session = _session(_hello(), warm, steady)
    lines = summary_lines(session, "train.py finished after 203 steps (trained on the CPU)")

    (row,) = session.scoreboard()
    summary = _line(lines, "steady steps (200 of 203, warm-up left out as on the scoreboard): ")
    assert _numbers(summary) == _scoreboard_numbers(row)
    assert _numbers(summary)["input wait"] == "2" and _numbers(summary)["samples/s"] == "640.0"
    everything = _numbers(_line(lines, "all steps (warm-up included): "))
    assert everything["input wait"] == "35"  # (3 × 1.8 s + 200 × 1 ms) / 16 s
    assert float(everything["samples/s"]) == pytest.approx(203 * 32 / 16, rel=1e-3)
    assert lines.index(summary) < lines.index(_line(lines, "all steps"))
    assert _line(lines, "steps: ") == "steps: 203"  # no step definition from the runner


def test_several_configurations_go_to_the_table_and_the_all_steps_line_says_so() -> None:
    base, end = _steps(0, [2000] * 3 + [50] * 100, [1800] * 3 + [20] * 100, _t0())
    config = {
        "kind": "config",
        "id": 1,
        "values": {"num_workers": 2},
        "changed": {"num_workers": 2},
        "t_ns": end,
        "first_step": 103,
        "warmup_steps": 3,
    }
    workers, _ = _steps(103, [50] * 100, [1] * 100, end, config=1)
    session = _session(_hello(), base, config, workers)
    lines = summary_lines(session, "done")
    assert "steady steps: per configuration, in the table below" in lines
    assert _line(lines, "all steps (every configuration, warm-up included): ")
    rows = session.scoreboard()
    table = [line for line in lines if line.startswith("| ")][1:]  # after the header
    for row, line in zip(rows, table, strict=True):
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[2] == f"{row.samples_per_s:,.1f}"
        assert cells[6] == f"{100 * row.input_wait_share:.0f}"


def test_too_few_steady_steps_say_how_many_and_the_step_definition_is_named() -> None:
    warm, end = _steps(0, [6000] * 3, [500] * 3, _t0())
    steady, _ = _steps(3, [6000] * 2, [500] * 2, end)
    bye = {
        "kind": "bye",
        "reason": "script_exit",
        "code": 0,
        "step_definition": "accumulation",
        "batches_per_step": 4,
    }
    session = _session(_hello(), warm, steady, bye)
    lines = summary_lines(session, "done")
    assert _line(lines, "steady steps (2 of 5").endswith(": n/a (only 2 of 3 steady steps)")
    assert _line(lines, "steps: 5 · a step = one optimizer.step() over 4 DataLoader batches")


def test_the_instrumentation_share_is_printed_when_the_runner_timed_its_hooks() -> None:
    steps, _ = _steps(0, [50] * 20, [1] * 20, _t0())
    session = _session(_hello(), steps)
    assert not [line for line in summary_lines(session, "done") if "instrumentation" in line]
    timed, _ = _steps(0, [50] * 20, [1] * 20, _t0())
    timed["instrument_ns"] = [100_000] * 20  # 0.1 ms of each 50 ms step
    session = _session(_hello(), timed)
    line = _line(summary_lines(session, "done"), "gpuwatch's instrumentation: ")
    assert line.startswith("gpuwatch's instrumentation: 0.20 % of step time")
