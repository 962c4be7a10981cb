"""``gpuwatch doctor --gpu`` without a GPU: skipped with the reason, exit 0, a JSON report; and
its verdict logic on hand-made steps (the run on a simulated CUDA device is in
test_simcuda_gpu_check.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gpuwatch.commands import gpu_check
from gpuwatch.core.model.store import StepsView
from gpuwatch.protocol import N_MARKS


def run_doctor_gpu(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = dict(
        os.environ,
        GPUWATCH_SETTINGS_DIR=str(tmp_path / "settings"),
        GPUWATCH_LOG_DIR=str(tmp_path / "logs"),
        CUDA_VISIBLE_DEVICES="",
    )
    return subprocess.run(
        [sys.executable, "-m", "gpuwatch", "doctor", "--gpu", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def test_without_a_gpu_the_check_is_skipped_with_exit_0_and_a_report(tmp_path: Path) -> None:
    done = run_doctor_gpu(tmp_path=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no NVIDIA GPU: skipped" in done.stdout
    path = tmp_path / "logs" / gpu_check.REPORT_NAME
    assert f"report: {path}" in done.stdout, "the default report lies beside the app log"
    report = json.loads(path.read_text(encoding="utf-8"))
    assert report["ok"] is True and report["skipped"] is True
    assert report["rows"] == [{"check": "GPU", "status": "skipped", "finding": report["message"]}]


def test_report_goes_with_gpu_and_a_missing_folder_is_refused(tmp_path: Path) -> None:
    alone = subprocess.run(
        [sys.executable, "-m", "gpuwatch", "doctor", "--report", str(tmp_path / "r.json")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert alone.returncode == 2 and "--report goes with --gpu" in alone.stderr
    missing = run_doctor_gpu("--report", str(tmp_path / "nope" / "r.json"), tmp_path=tmp_path)
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    assert "Traceback" not in missing.stderr


def _steps(kernel_ns: int, gap_ns: int, n: int, *, shift_ns: int = 0) -> StepsView:
    """n steps of a host gap then one kernel; every device mark after the step's start is
    ``shift_ns`` late (converted with a wrong offset), which stretches the stream-active spans
    over the step boundaries."""
    host = np.zeros((n, N_MARKS), np.int64)
    period = gap_ns + kernel_ns
    for i in range(n):
        t0 = 1_000_000_000 + i * period
        host[i] = [t0, t0 + gap_ns] + [t0 + gap_ns + 10_000] * (N_MARKS - 2)
    device = host.copy()
    device[:, 2:] = host[:, 1:2] + kernel_ns  # the kernel ends kernel_ns after its launch
    device[:, 1:] += shift_ns
    return StepsView(
        np.arange(n), np.zeros(n, np.int32), np.ones(n, np.int32), host, device, np.ones(n, bool)
    )


@pytest.mark.parametrize(("shift_ns", "status"), [(0, "pass"), (4_000_000, "fail")])
def test_busy_share_is_judged_against_the_kernels_own_durations(shift_ns: int, status: str) -> None:
    kernel_ns, gap_ns = 12_000_000, 8_000_000
    n = gpu_check.MEASURED.stop + 5
    view = _steps(kernel_ns, gap_ns, n, shift_ns=shift_ns)
    report = gpu_check.GpuCheckReport()
    gpu_check._judge_busy(report, view, {"kernel_ms": [kernel_ns / 1e6] * n})
    busy = next(row for row in report.rows if row.check == "busy share")
    assert busy.status == status, busy.finding
    assert report.busy_truth_pct == pytest.approx(60.0, abs=0.01)
    if status == "pass":
        assert report.busy_measured_pct == pytest.approx(report.busy_truth_pct, abs=0.01)


def test_steps_without_device_marks_fail_the_check() -> None:
    n = gpu_check.MEASURED.stop + 5
    view = _steps(12_000_000, 8_000_000, n)
    view.has_device[gpu_check.MEASURED.start + 3] = False
    report = gpu_check.GpuCheckReport()
    gpu_check._judge_busy(report, view, {"kernel_ms": [12.0] * n})
    assert [(row.check, row.status) for row in report.rows] == [("device marks", "fail")]


def test_the_hosts_lag_from_gpuwatchs_mark_to_the_launch_counts_as_active() -> None:
    """On a loaded host the kernel is launched a while after gpuwatch's first mark of the step;
    the idle stream completes that mark at once, so stream-active rightly includes the lag. The
    check knows the lag from the script's launch times and allows it, and only it."""
    slot_ns, gap_ns, lag_ns = 8_000_000, 12_000_000, 600_000
    n = gpu_check.MEASURED.stop + 5
    view = _steps(slot_ns, gap_ns, n)  # stream active: the mark, then the kernel, to its end
    launched = (view.host[:, 1] + lag_ns).tolist()  # the kernel came lag_ns after the mark
    result = {"kernel_ms": [(slot_ns - lag_ns) / 1e6] * n, "launch_ns": launched}
    report = gpu_check.GpuCheckReport()
    gpu_check._judge_busy(report, view, result)
    busy = next(row for row in report.rows if row.check == "busy share")
    assert busy.status == "pass", busy.finding
    assert report.busy_measured_pct - report.busy_truth_pct == pytest.approx(3.0, abs=0.05)
    assert "plus 3.00 pp the host took" in busy.finding
    for told in ({"kernel_ms": result["kernel_ms"]}, {**result, "launch_ns": [0] * n}):
        report = gpu_check.GpuCheckReport()  # unknown or no lag: the 3 pp are an error
        gpu_check._judge_busy(report, view, told)
        busy = next(row for row in report.rows if row.check == "busy share")
        assert busy.status == "fail", busy.finding
