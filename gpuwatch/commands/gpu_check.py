"""``gpuwatch doctor --gpu``: does gpuwatch measure this GPU right? A ground-truth check.

A known training loop (``gpuwatch.runner.ground_truth``: sleep kernels of a calibrated length,
host gaps of a known length, each kernel timed by its own events) runs through the real runner
and Session, exactly as a watched script does. The check then compares what gpuwatch drew with
what the script knows:

- **busy share**: gpuwatch's stream-active share over the measured steps against the sum of the
  kernels' own event durations over the same host time, within ``BUSY_TOLERANCE_PP``; above
  it, also the host's delay from gpuwatch's first mark of each step to the kernel's launch
  (``launch_lag_ms``), which the stream-active span counts and the kernels' events do not;
- **synchronizations**: the loop ran under ``torch.cuda.set_sync_debug_mode("error")``, so a
  single host-device synchronization (gpuwatch's or the script's) fails the run;
- **device marks**: every measured step got its CUDA-event marks (none skipped);
- **NVML**: the GUI found the training GPU in NVML by UUID or PCI bus id, and the driver's
  utilization sample period is in NVML's documented 1/6 s to 1 s;
- **kernel capture**: a capture window of ``CAPTURE_STEPS`` steps finds the sleep kernels.

Without a CUDA device the check is skipped (exit 0). The verdict goes to stdout as a table and
to a JSON report beside the app log, to attach to a bug report.
"""

from __future__ import annotations

import json
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from gpuwatch import __version__
from gpuwatch.commands import doctor
from gpuwatch.core.figures.analysis import busy_share
from gpuwatch.core.model.metrics import NVML_GPU_UTIL
from gpuwatch.core.model.store import StepsView
from gpuwatch.core.run import launcher, nvml
from gpuwatch.core.run.app_log import log_dir
from gpuwatch.core.run.session import LaunchSpec, Session, SessionError, SessionState
from gpuwatch.protocol import ACTIVE_FIRST

REPORT_NAME = "gpu-check.json"
SCRIPT_NAME = "gpuwatch_gpu_check.py"
#: The loop: STEPS steps of a GAP_MS host gap then one KERNEL_MS sleep kernel, which runs
#: during the next step's gap (≈ KERNEL_MS / GAP_MS = 67 % busy). The gap must be the longer:
#: the loop never waits for the device, so with longer kernels
#: the host would run ahead, the queue would grow and the device would be busy 100 % of the
#: time whatever the host does (the truth below is kernel time over host time).
STEPS = 240
KERNEL_MS = 8.0
GAP_MS = 12.0
#: Steps measured for the busy share: warm-up left out, and all before the capture.
MEASURED = range(20, 170)
#: The capture is asked for once this many steps arrived (after the measured ones).
CAPTURE_AFTER = 175
CAPTURE_STEPS = 5
BUSY_TOLERANCE_PP = 1.0
#: NVML's documented utilization sample periods (1/6 s to 1 s, by product), with slack for
#: the estimate from the driver's timestamps.
NVML_PERIOD_S = (1 / 6 * 0.8, 1.0 * 1.25)
TIMEOUT_S = 240.0

Status = Literal["pass", "fail", "warn", "skipped"]


@dataclass(frozen=True)
class CheckRow:
    """One line of the verdict table."""

    check: str
    status: Status
    finding: str


@dataclass
class GpuCheckReport:
    """What ``doctor --gpu`` found; written as JSON (``asdict``)."""

    ok: bool = False
    skipped: bool = False
    message: str = ""
    gpuwatch: str = __version__
    gui_python: str = field(default_factory=platform.python_version)
    python: str = ""
    device: dict[str, Any] | None = None
    versions: dict[str, Any] | None = None
    rows: list[CheckRow] = field(default_factory=list)
    busy_truth_pct: float | None = None
    #: Points of the measured busy share that are the host's delay from gpuwatch's mark to
    #: each kernel's launch (``launch_lag_ms``): allowed above the tolerance.
    busy_launch_lag_pp: float | None = None
    busy_measured_pct: float | None = None
    cycles_per_ms: float | None = None
    kernel_ms_median: float | None = None
    nvml_period_s: float | None = None
    nvml_matched_by: str | None = None
    capture_kernels: int | None = None
    steps: int = 0
    seconds: float = 0.0

    def add(self, check: str, status: Status, finding: str) -> None:
        self.rows.append(CheckRow(check, status, finding))


def default_report_path() -> Path:
    """Beside the app log, where self-test's result lives too."""
    return log_dir() / REPORT_NAME


def script_source() -> Path:
    """The ground-truth script as shipped with the runner's source."""
    return launcher.runner_source_root() / "gpuwatch" / "runner" / "ground_truth.py"


Progress = Callable[[str], None]


def run_gpu_check(
    python: str, report_path: Path, *, progress: Progress | None = None, timeout: float = TIMEOUT_S
) -> GpuCheckReport:
    """Run the check in ``python`` and write the report; see the module docstring."""
    say = progress or (lambda _text: None)
    started = time.monotonic()
    report = GpuCheckReport(python=python)
    say(f"checking the training Python {python}")
    survey = doctor.survey_interpreter(python)
    if "error" in survey:
        report.message = f"failed: {survey['error']}"
        report.add("training Python", "fail", str(survey["error"]))
    elif not survey.get("cuda_available"):
        report.ok = report.skipped = True
        why = (
            "torch is a CPU-only build"
            if not survey.get("cuda")
            else f"torch {survey.get('torch')} finds no CUDA device"
        )
        report.message = f"no NVIDIA GPU: skipped ({why})"
        report.add("GPU", "skipped", report.message)
    else:
        with tempfile.TemporaryDirectory(prefix="gpuwatch-gpu-check-") as tmp:
            _check_run(report, Path(tmp), say, started + timeout)
        failed = [row.check for row in report.rows if row.status == "fail"]
        report.ok = not failed
        report.message = (
            "passed: gpuwatch's CUDA timings match the ground truth"
            if report.ok
            else f"failed: {', '.join(failed)}"
        )
    report.seconds = round(time.monotonic() - started, 2)
    write_report(report, report_path)
    return report


def _check_run(report: GpuCheckReport, tmp: Path, say: Progress, deadline: float) -> None:
    script = tmp / SCRIPT_NAME
    shutil.copyfile(script_source(), script)
    result_file = tmp / "result.json"
    session = Session()
    try:
        session.start(
            LaunchSpec(
                script=str(script),
                device="cuda",
                python=report.python,
                cwd=str(tmp),
                script_args=(str(result_file), str(STEPS), str(KERNEL_MS), str(GAP_MS)),
            )
        )
        _watch(session, say, deadline)
        report.steps = session.steps.count
        hello = session.hello
        if hello is not None:
            report.device, report.versions = hello.device.to_message(), dict(hello.versions)
        result = _read_result(result_file)
        _judge_run(report, session, result)
        if result is not None:
            _judge_busy(report, session.steps.snapshot(), result)
        _judge_nvml(report, session)
        _judge_capture(report, session)
    finally:
        session.close()


def _watch(session: Session, say: Progress, deadline: float) -> None:
    """Until the script ends by itself; asks for the capture once the measured steps are in."""
    asked = False
    last_said = 0.0
    while session.state not in (SessionState.FINISHED, SessionState.FAILED):
        now = time.monotonic()
        if now > deadline:
            session.stop()
            session.wait_ended(30)
            break
        count = session.steps.count
        if not asked and count >= CAPTURE_AFTER and session.state is SessionState.RUNNING:
            asked = True
            try:
                session.request_capture(CAPTURE_STEPS)
            except SessionError as exc:
                session.capture_error = str(exc)
        if now - last_said >= 2.0:
            last_said = now
            say(f"{count} of {STEPS} steps" if count else "starting the runner")
        time.sleep(0.05)
    session.wait_ended(30)


def _read_result(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _judge_run(report: GpuCheckReport, session: Session, result: dict[str, Any] | None) -> None:
    hello = session.hello
    timing = hello.timing if hello else None
    if hello is not None and timing == "cuda_events":
        report.add(
            "device",
            "pass",
            f"{hello.device.name} (cuda:{hello.device.index}), timed with CUDA events",
        )
    else:
        report.add(
            "device",
            "fail",
            f"the runner did not time a CUDA device (timing: {timing}; {session.error or ''})",
        )
    if result is None:
        report.add(
            "run",
            "fail",
            f"the ground-truth script left no result ({session.error or 'it did not finish'})",
        )
        return
    report.cycles_per_ms = result.get("cycles_per_ms")
    kernels = result.get("kernel_ms") or []
    if kernels:
        report.kernel_ms_median = float(np.median(kernels))
    error = result.get("error")
    if error:
        report.add("synchronizations", "fail", f"the measured loop stopped: {error}")
    else:
        report.add(
            "synchronizations",
            "pass",
            f"none in {len(kernels)} instrumented steps "
            "(torch.cuda.set_sync_debug_mode('error') was on)",
        )
    if report.cycles_per_ms and report.kernel_ms_median is not None:
        report.add(
            "calibration",
            "pass",
            f"torch.cuda._sleep: {report.cycles_per_ms:,.0f} cycles/ms; kernels "
            f"{report.kernel_ms_median:.2f} ms (asked {KERNEL_MS:g} ms)",
        )


def _judge_busy(report: GpuCheckReport, view: StepsView, result: dict[str, Any]) -> None:
    kernels = result.get("kernel_ms") or []
    ids = np.asarray(view.step)
    wanted = (ids >= MEASURED.start) & (ids < MEASURED.stop)
    marked = wanted & np.asarray(view.has_device, bool)
    n_wanted = int(wanted.sum())
    if n_wanted < len(MEASURED) or len(kernels) < MEASURED.stop + 1:
        report.add(
            "busy share", "fail", f"only {n_wanted} of the {len(MEASURED)} measured steps arrived"
        )
        return
    if int(marked.sum()) < n_wanted:
        report.add(
            "device marks",
            "fail",
            f"{n_wanted - int(marked.sum())} of {n_wanted} measured steps have no CUDA-event marks",
        )
        return
    report.add("device marks", "pass", f"all {n_wanted} measured steps have CUDA-event marks")
    rows = np.flatnonzero(wanted)
    first, last = int(rows[0]), int(rows[-1])
    if last + 1 >= len(ids) or ids[last + 1] != ids[last] + 1:
        report.add("busy share", "fail", "the step after the measured ones did not arrive")
        return
    # The truth: the kernels' own event durations over the host time the steps covered.
    span_ms = (int(view.host[last + 1, 0]) - int(view.host[first, 0])) / 1e6
    truth = 100.0 * sum(kernels[int(i)] for i in ids[wanted]) / span_ms
    lag = 100.0 * launch_lag_ms(view, wanted, result.get("launch_ns") or []) / span_ms
    measured_share = busy_share(view, wanted)
    if measured_share is None:
        report.add("busy share", "fail", "gpuwatch computed no busy share")
        return
    measured = 100.0 * measured_share
    report.busy_truth_pct, report.busy_measured_pct = round(truth, 3), round(measured, 3)
    report.busy_launch_lag_pp = round(lag, 3)
    diff = measured - truth
    ok = -BUSY_TOLERANCE_PP <= diff <= lag + BUSY_TOLERANCE_PP
    status: Status = "pass" if ok else "fail"
    report.add(
        "busy share",
        status,
        f"gpuwatch {measured:.2f} % vs truth {truth:.2f} % ({diff:+.2f} pp; "
        f"tolerance ±{BUSY_TOLERANCE_PP:g} pp, plus {lag:.2f} pp the host took from "
        f"gpuwatch's mark to the kernel's launch, which stream-active counts; "
        f"{n_wanted} steps)",
    )


def launch_lag_ms(view: StepsView, wanted: np.ndarray, launch_ns: list[int]) -> float:
    """Host time from gpuwatch's first device mark of each wanted step (recorded on an idle
    stream, so it completes at once) to the script's own start event before its kernel: time
    the stream-active span covers and the kernels' events do not. 0 when not recorded."""
    ids = np.asarray(view.step)[wanted]
    if not len(ids) or len(launch_ns) <= int(ids.max()):
        return 0.0
    marks = view.host[wanted, ACTIVE_FIRST].astype(np.int64)
    launched = np.asarray(launch_ns, np.int64)[ids.astype(np.int64)]
    return float(np.clip(launched - marks, 0, None).sum()) / 1e6


def _judge_nvml(report: GpuCheckReport, session: Session) -> None:
    device = report.device or {}
    try:
        match = nvml.find_device(
            uuid=device.get("uuid"), pci_bus_id=device.get("pci_bus_id"), index=device.get("index")
        )
    except nvml.NvmlUnavailable as exc:
        report.add("NVML", "warn", f"n/a — {exc.reason}: the window shows no GPU utilization")
        return
    report.nvml_matched_by = match.matched_by
    if match.matched_by == "index":
        report.add("NVML device", "warn", match.warning or "matched by index only")
    else:
        note = f" ({match.warning})" if match.warning else ""
        report.add(
            "NVML device",
            "warn" if match.warning else "pass",
            f"{match.device.name} found by {match.matched_by}{note}",
        )
    status = session.coarse.statuses().get(NVML_GPU_UTIL)
    if status is None or not status.available:
        reason = status.reason if status is not None else "never sampled"
        report.add("NVML samples", "warn", f"utilization n/a — {reason}")
    elif status.period_s is None:
        report.add(
            "NVML samples",
            "warn",
            "no sample buffer: utilization from nvmlDeviceGetUtilizationRates, period unknown",
        )
    else:
        report.nvml_period_s = round(status.period_s, 4)
        low, high = NVML_PERIOD_S
        ok = low <= status.period_s <= high
        report.add(
            "NVML samples",
            "pass" if ok else "fail",
            f"sample period {status.period_s * 1000:.0f} ms "
            f"({'within' if ok else 'outside'} NVML's documented 1/6 s to 1 s)",
        )


def _judge_capture(report: GpuCheckReport, session: Session) -> None:
    windows = session.kernel_windows()
    if not windows:
        report.add("kernel capture", "fail", session.capture_error or "no capture window came")
        return
    window = windows[-1]
    names = [window.names[int(i)] for i in window.name]
    sleeps = sum(1 for name in names if "sleep" in name.lower() or "spin" in name.lower())
    report.capture_kernels = sleeps
    status: Status = "pass" if window.device == "cuda" and sleeps >= CAPTURE_STEPS else "fail"
    report.add(
        "kernel capture",
        status,
        f"{sleeps} sleep kernels among {len(window)} device "
        f"events in {len(window.steps)} captured steps",
    )


def write_report(report: GpuCheckReport, path: Path) -> None:
    """The JSON report; an unwritable path only adds a note to the message."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(report), indent=2, default=str) + "\n", encoding="utf-8")
    except OSError as exc:
        report.message += f" (report not written: {exc.strerror or exc})"


def print_report(report: GpuCheckReport, path: Path) -> None:
    """The verdict table and where the JSON went."""
    width = max((len(row.check) for row in report.rows), default=5)
    for row in report.rows:
        print(f"{row.check.ljust(width)}  {row.status.upper():7}  {row.finding}")  # noqa: T201
    print(f"\n{report.message}")  # noqa: T201 - the command's output
    print(f"report: {path}")  # noqa: T201 - the command's output
    sys.stdout.flush()
