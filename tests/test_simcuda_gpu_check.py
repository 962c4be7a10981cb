"""``gpuwatch doctor --gpu`` end to end on the SIMULATED CUDA device (``tests/simcuda``): the
probe, the ground-truth script in a real runner, the Session, the capture window and the
verdict, exactly as on a GPU. The simulation is a model: a pass here shows that the check and
gpuwatch's CUDA path agree with a device whose truth is known, not that a GPU would pass."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from simcuda.model import SimConfig
from simcuda.runner_boot import read_waits, runner_env

from gpuwatch.commands import gpu_check

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="simcuda boots via PYTHONPATH")


def test_doctor_gpu_passes_on_the_simulated_device(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys
) -> None:
    # A device clock 100 ppm fast: the marks must still be converted right.
    config = SimConfig(drift_ppm=100.0, report_path=str(tmp_path / "waits.jsonl"))
    for name, value in runner_env(config).items():
        monkeypatch.setenv(name, value)
    path = tmp_path / "gpu-check.json"
    said: list[str] = []
    report = gpu_check.run_gpu_check(sys.executable, path, progress=said.append)

    rows = {row.check: row for row in report.rows}
    assert report.ok, [(r.check, r.status, r.finding) for r in report.rows]
    for check in (
        "device",
        "synchronizations",
        "calibration",
        "device marks",
        "busy share",
        "kernel capture",
    ):
        assert rows[check].status == "pass", (check, rows[check].finding)
    assert rows["NVML"].status == "warn", "no NVML without a driver: said, not failed"
    assert report.device is not None and report.device["name"] == "simcuda GPU 0"
    assert report.kernel_ms_median == pytest.approx(gpu_check.KERNEL_MS, rel=0.02)
    # Within the tolerance, above it by at most the host's measured mark-to-launch delay
    # (which grows on a loaded machine: stream-active rightly counts it).
    lag = report.busy_launch_lag_pp
    assert lag is not None and lag >= 0
    excess = report.busy_measured_pct - report.busy_truth_pct
    assert -1.0 <= excess <= lag + 1.0, (excess, lag)
    # Each kernel runs during the next step's host gap, longer than the kernel: partly idle.
    expected = 100 * gpu_check.KERNEL_MS / gpu_check.GAP_MS
    assert expected - 10 < report.busy_truth_pct < expected + 1
    assert report.capture_kernels is not None and report.capture_kernels >= gpu_check.CAPTURE_STEPS
    assert any("steps" in line for line in said), "progress while it runs"

    gpu_check.print_report(report, path)
    table = capsys.readouterr().out
    assert "busy share" in table and "PASS" in table and f"report: {path}" in table
    assert table.splitlines()[-2] == report.message

    saved = json.loads(path.read_text(encoding="utf-8"))
    assert saved["ok"] is True and saved["busy_truth_pct"] == report.busy_truth_pct
    # The only host waits are the calibration's and the end's, outside the measured loop.
    waits = read_waits(config)
    assert waits, "the calibration synchronizes: the counter sees waits"
    assert all(not w.debug_visible for w in waits), [w.kind for w in waits]
