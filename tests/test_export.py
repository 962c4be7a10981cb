"""Exports of a recording: Perfetto trace-event JSON (checked against the format's rules),
per-step CSV (documented columns), and the ``gpuwatch export`` command's exit codes.

The recording is made by the real Recorder from messages fed through Session._dispatch, so
its steps, device marks (with a deliberate overlap), configurations and samples are known.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from waiting import wait_until

from gpuwatch.core.files.export_csv import COLUMNS, write_csv
from gpuwatch.core.files.export_perfetto import TRACKS, perfetto_trace, write_perfetto
from gpuwatch.core.files.recording import Recorder
from gpuwatch.core.files.recording_reader import open_recording
from gpuwatch.core.model.store import MetricStatus
from gpuwatch.core.run.session import Session
from gpuwatch.protocol import ACTIVE_FIRST, ACTIVE_LAST

ROOT = Path(__file__).resolve().parents[1]
MS = 1_000_000
N_STEPS = 40
CHANGE_AT = 20
#: Phase boundaries within a 10 ms step (ms): data 2, h2d 1, fwd 2, bwd 3, opt 1, sync 0.5.
OFFSETS_MS = (0, 2, 3, 5, 8, 9, 9.5)
OVERLAP_STEP = 6  # its device span starts 1 ms before the previous one's ends


def step_marks(base: int, i: int) -> list[int]:
    return [base + i * 10 * MS + int(o * MS) for o in OFFSETS_MS]


def device_marks(base: int, i: int) -> list[int]:
    marks = [m + MS for m in step_marks(base, i)]  # the stream runs 1 ms behind the host
    if i == OVERLAP_STEP:
        prev_end = device_marks(base, i - 1)[ACTIVE_LAST]
        marks[ACTIVE_FIRST] = prev_end - MS
    return marks


@pytest.fixture(scope="module")
def recording_path(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("export") / "synthetic.gpuwatch"
    session = Session(sample_coarse=False)
    recorder = Recorder(path, session, spec={"workload": "vision"}, flush_s=0.05)
    recorder.start()
    session._dispatch(
        {
            "kind": "hello",
            "protocol": 1,
            "pid": 9,
            "workload": "vision",
            "device": {"kind": "cuda", "name": "Test GPU"},
            "versions": {},
            "knobs": [],
            "config": {"values": {"amp": False}, "warmup_steps": 3},
        }
    )
    base = time.perf_counter_ns() + 5 * MS
    first, second = range(CHANGE_AT), range(CHANGE_AT, N_STEPS)
    for ids in (first, second):
        if ids is second:
            session._dispatch(
                {
                    "kind": "config",
                    "id": 1,
                    "request": None,
                    "values": {"amp": True},
                    "changed": {"amp": True},
                    "t_ns": step_marks(base, CHANGE_AT)[0] - MS,
                    "apply_s": 0.001,
                    "first_step": CHANGE_AT,
                    "warmup_steps": 2,
                    "rebuilt": [],
                }
            )
        session._dispatch(
            {
                "kind": "steps",
                "step": list(ids),
                "config": [int(ids is second)] * len(ids),
                "samples": [32] * len(ids),
                "host": [step_marks(base, i) for i in ids],
            }
        )
    marked = [i for i in range(N_STEPS) if i != 3]  # step 3's device marks never came
    session._dispatch(
        {"kind": "device_marks", "step": marked, "device": [device_marks(base, i) for i in marked]}
    )
    session.coarse.set_status(MetricStatus("nvml.gpu_util", "GPU utilization", "%", True))
    session.coarse.append_many(
        "nvml.gpu_util", [base, base + 200 * MS], [base + 200 * MS, base + 400 * MS], [40.0, 80.0]
    )
    wait_until(lambda: recorder.steps_written == N_STEPS, 10, "all steps written")
    recorder.close()
    return path


# ---- Perfetto ----------------------------------------------------------------------------

PHASES_WITH_TS = {"X", "C", "i", "I", "B", "E"}


def check_trace_event_rules(trace: Any) -> None:
    """The JSON object format of the Trace Event Format, as Perfetto and chrome://tracing
    read it, plus our own promise: no two complete events on one track overlap."""
    assert isinstance(trace, dict) and isinstance(trace["traceEvents"], list)
    assert trace.get("displayTimeUnit") in ("ms", "ns")
    last_ts = None
    ends: dict[tuple[int, int], int] = {}
    named: set[tuple[int, int]] = set()
    for e in trace["traceEvents"]:
        assert isinstance(e.get("ph"), str) and isinstance(e.get("name"), str), e
        assert isinstance(e.get("pid"), int) and isinstance(e.get("tid"), int), e
        if "args" in e:
            assert isinstance(e["args"], dict), e
        if e["ph"] == "M":
            assert last_ts is None, "metadata comes before the timed events"
            assert e["name"] in ("process_name", "thread_name", "thread_sort_index"), e
            if e["name"] == "thread_name":
                named.add((e["pid"], e["tid"]))
            continue
        assert e["ph"] in PHASES_WITH_TS, e
        ts = e["ts"]
        assert isinstance(ts, int | float) and not isinstance(ts, bool) and ts >= 0, e
        assert last_ts is None or ts >= last_ts, "events are sorted by ts"
        last_ts = ts
        if e["ph"] == "X":
            assert isinstance(e["dur"], int | float) and e["dur"] >= 0, e
            assert isinstance(e["cat"], str), e
            track = (e["pid"], e["tid"])
            assert track in named, f"track {track} has no thread_name"
            start, end = round(ts * 1000), round((ts + e["dur"]) * 1000)
            assert start >= ends.get(track, start), f"overlap on track {track}: {e}"
            ends[track] = end
        elif e["ph"] == "C":
            assert e["args"] and all(isinstance(v, int | float) for v in e["args"].values())
        elif e["ph"] == "i":
            assert e["s"] in ("g", "p", "t"), e


def test_perfetto_trace_follows_the_format_rules(recording_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "trace.json"
    write_perfetto(open_recording(recording_path), out)
    trace = json.loads(out.read_text(), parse_constant=pytest.fail)
    check_trace_event_rules(trace)


def test_perfetto_trace_has_a_track_per_lane(recording_path: Path) -> None:
    recording = open_recording(recording_path)
    events = perfetto_trace(recording)["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert set(names.values()) == {label for _, label in TRACKS}
    assert {"host: data", "host: sync", "device stream (active)", "gaps"} <= set(names.values())
    process = [e for e in events if e["name"] == "process_name"]
    assert process[0]["args"]["name"] == "gpuwatch: vision on Test GPU"
    by_track = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            by_track[names[e["tid"]]].append(e)
    assert len(by_track["host: forward"]) == N_STEPS
    assert len(by_track["steps"]) == N_STEPS
    fwd = by_track["host: forward"][0]
    assert fwd["dur"] == pytest.approx(2000.0)  # 2 ms in µs
    assert fwd["args"] == {"step": 0, "config": 0}
    assert by_track["host: forward"][CHANGE_AT]["args"] == {"step": CHANGE_AT, "config": 1}
    # Step 3 had no device marks; step 6's span began before step 5's ended: cut, not dropped.
    device = {e["args"]["step"]: e for e in by_track["device stream (active)"]}
    assert 3 not in device and len(device) == N_STEPS - 1
    prev = device[OVERLAP_STEP - 1]
    assert device[OVERLAP_STEP]["ts"] == pytest.approx(prev["ts"] + prev["dur"])
    assert by_track["gaps"] and all(e["dur"] > 0 for e in by_track["gaps"])
    assert [e["name"] for e in by_track["configurations"]] == ["baseline", "amp=on"]
    instants = [e for e in events if e["ph"] == "i"]
    assert [e["name"] for e in instants] == ["config 1: amp=on"]
    counters = [e for e in events if e["ph"] == "C"]
    assert [e["args"]["value"] for e in counters] == [40.0, 80.0]
    assert counters[0]["name"] == "GPU utilization (%)"


# ---- CSV ---------------------------------------------------------------------------------


def test_csv_has_one_documented_row_per_step(recording_path: Path, tmp_path: Path) -> None:
    recording = open_recording(recording_path)
    out = tmp_path / "steps.csv"
    write_csv(recording, out)
    with out.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == list(COLUMNS)
    documented = (ROOT / "docs" / "recording-format.md").read_text()
    for column in COLUMNS:
        assert f"`{column}`" in documented, f"column {column} is not documented"
    assert [int(r["step"]) for r in rows] == list(range(N_STEPS))
    first = rows[0]
    assert first["config_label"] == "baseline" and first["samples"] == "32"
    assert [
        float(first[f"{p}_ms"])
        for p in ("data", "h2d", "forward", "backward", "optimizer", "sync", "other")
    ] == [2, 1, 2, 3, 1, 0.5, 0.5]
    assert float(first["step_ms"]) == 10
    start0 = float(first["start_ms"])
    assert float(rows[1]["start_ms"]) - start0 == pytest.approx(10)
    assert float(first["device_active_start_ms"]) == pytest.approx(start0 + 3)
    assert float(first["device_active_end_ms"]) == pytest.approx(start0 + 10)
    assert rows[3]["device_active_start_ms"] == rows[3]["device_active_end_ms"] == ""
    assert rows[-1]["other_ms"] == "0" and rows[-1]["step_ms"] == "9.5"
    assert [r["transition"] for r in rows[:4]] == ["1", "1", "1", "0"]
    change = rows[CHANGE_AT : CHANGE_AT + 3]
    assert [(r["config"], r["config_label"], r["transition"]) for r in change] == [
        ("1", "amp=on", "1"),
        ("1", "amp=on", "1"),
        ("1", "amp=on", "0"),
    ]


# ---- The command -------------------------------------------------------------------------


def gpuwatch(*args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gpuwatch", "export", *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_export_command_writes_both_formats(recording_path: Path, tmp_path: Path) -> None:
    trace, table = tmp_path / "t.json", tmp_path / "t.csv"
    done = gpuwatch(recording_path, "--perfetto", trace, "--csv", table)
    assert done.returncode == 0, done.stderr
    check_trace_event_rules(json.loads(trace.read_text()))
    assert table.read_text().splitlines()[0] == ",".join(COLUMNS)
    assert "wrote Perfetto trace" in done.stderr and "wrote CSV" in done.stderr


@pytest.mark.parametrize("args", [(), ("--perfetto",), ("--bogus", "x")])
def test_export_command_usage_errors_exit_2(recording_path: Path, args: tuple) -> None:
    done = gpuwatch(recording_path, *args)
    assert done.returncode == 2, done.stderr
    assert "usage:" in done.stderr and "Traceback" not in done.stderr


def test_export_command_bad_input_is_one_line_and_exit_1(
    tmp_path: Path, recording_path: Path
) -> None:
    text = tmp_path / "notes.gpuwatch"
    text.write_text("hello\n")
    cases = [
        (tmp_path / "missing.gpuwatch", tmp_path / "o.csv", "no such file"),
        (text, tmp_path / "o.csv", "not an SQLite file"),
        (recording_path, tmp_path / "nofolder" / "o.csv", "does not exist"),
    ]
    for source, out, expected in cases:
        done = gpuwatch(source, "--csv", out)
        assert done.returncode == 1, (source, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and expected in lines[0], done.stderr
        assert not out.exists()
