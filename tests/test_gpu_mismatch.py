"""One verdict, one sentence: can the training Python use the NVIDIA GPU NVML sees?

NVML's view and the survey reports are simulated (this machine has no GPU): the registry's
Windows torch (``2.14.1+cpu``) on a GPU machine, the Linux one (``+cu130``) on a driver that
supports CUDA 12.x only, an architecture the build has no kernels for, and no GPU at all.
The headless path's stderr line is checked on a Session that starts no runner.
"""

from __future__ import annotations

import io
import sys
import threading
from pathlib import Path

from gpuwatch.commands import headless
from gpuwatch.core.run import interpreters
from gpuwatch.core.run.gpu_mismatch import (
    BackgroundCheck,
    GpuMismatch,
    GpuView,
    TorchBuild,
    check_python,
    mismatch,
)
from gpuwatch.core.run.session import Session

CU130_ARCHS = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120"]
CU126_ARCHS = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]
WINDOWS_CPU = {
    "python": "3.11.9",
    "prefix": r"C:\Users\ana\gpu\.venv",
    "torch": "2.14.1+cpu",
    "torchvision": "0.29.1+cpu",
    "cuda": None,
    "cuda_available": False,
    "arch_list": [],
}
LINUX_CU130 = {
    "python": "3.12.3",
    "prefix": "/home/ana/.venv",
    "torch": "2.14.1+cu130",
    "torchvision": "0.29.1",
    "cuda": "13.0",
    "cuda_available": False,
    "cuda_error": None,
    "arch_list": CU130_ARCHS,
}
RTX_3060 = GpuView(((8, 6),), (12, 8))  # driver 570: CUDA 12.8
WIN_PYTHON = r"C:\Users\ana\gpu\.venv\Scripts\python.exe"
URL = "https://download.pytorch.org/whl/"


def verdict(report: dict, gpus: GpuView, python: str = "/v/bin/python", **kw) -> GpuMismatch:
    found = mismatch(gpus, TorchBuild.from_report(report), python, **kw)
    assert found is not None
    return found


# ---- Windows: the registry's CPU-only torch on a GPU machine -----------------------------


def test_windows_cpu_build_on_a_gpu_machine_gets_the_cuda_index_for_gpu_and_driver():
    found = verdict(WINDOWS_CPU, RTX_3060, WIN_PYTHON, windows=True)
    assert found.sentence == (
        "The training Python's torch 2.14.1+cpu is a CPU-only build: the NVIDIA GPU (sm_86) "
        "is not used and training runs on the CPU; install its cu128 build."
    )
    assert found.fix_command == (
        rf"{WIN_PYTHON} -m pip install --force-reinstall torch torchvision "
        f"--index-url {URL}cu128"
    )


def test_the_windows_command_quotes_a_path_with_spaces_as_cmd_does(monkeypatch):
    monkeypatch.setattr(sys, "platform", "win32")  # the platform, not a flag, decides
    python = r"C:\Program Files\Python311\python.exe"
    found = verdict(WINDOWS_CPU, RTX_3060, python)
    assert found.fix_command.startswith(rf'"{python}" -m pip install --force-reinstall torch')
    assert found.fix_command.endswith(f"--index-url {URL}cu128")


def test_a_newer_driver_gets_the_newest_index_and_an_older_gpu_the_one_with_its_kernels():
    assert "cu130" in verdict(WINDOWS_CPU, GpuView(((8, 6),), (13, 0))).fix_command
    pascal = verdict(WINDOWS_CPU, GpuView(((6, 1),), (13, 0)))  # cu128/cu130 start at 7.5
    assert "sm_61" in pascal.sentence and pascal.fix_command.endswith("whl/cu126")
    # Two GPUs: the index must carry kernels for both.
    mixed = verdict(WINDOWS_CPU, GpuView(((8, 6), (6, 1)), (13, 0)))
    assert mixed.fix_command.endswith("whl/cu126") and "(sm_61, sm_86)" in mixed.sentence


# ---- Linux: the registry's cu130 torch on a driver for CUDA 12.x --------------------------


def test_linux_cu130_on_a_cuda_12_driver_says_so_and_offers_the_driver_s_index():
    found = verdict(LINUX_CU130, GpuView(((8, 9),), (12, 8)), "/home/ana/.venv/bin/python")
    assert found.sentence == (
        "The training Python's torch 2.14.1+cu130 is built for CUDA 13.0 but the NVIDIA "
        "driver supports CUDA 12.8 at most, so training runs on the CPU; install its cu128 "
        "build."
    )
    assert found.fix_command == (
        "/home/ana/.venv/bin/python -m pip install --force-reinstall torch torchvision "
        f"--index-url {URL}cu128"
    )
    assert "cu126" in verdict(LINUX_CU130, GpuView(((8, 9),), (12, 6))).fix_command


def test_a_driver_too_old_for_every_index_names_the_driver_version_to_update_to():
    old = verdict(LINUX_CU130, GpuView(((8, 9),), (12, 2)), windows=False)  # driver 535
    assert "update the NVIDIA driver to 560.28.03 or newer (it supports CUDA 12.2" in (old.sentence)
    assert old.sentence.endswith("then install its cu126 build.")
    assert old.fix_command.endswith("whl/cu126")  # to run once the driver is updated
    on_windows = verdict(WINDOWS_CPU, GpuView(((8, 9),), (12, 2)), WIN_PYTHON, windows=True)
    assert "update the NVIDIA driver to 560.76 or newer" in on_windows.sentence


def test_a_cuda_build_that_cannot_reach_a_recent_enough_driver_says_why_without_a_command():
    report = dict(LINUX_CU130, cuda_error="RuntimeError: CUDA driver initialization failed")
    found = verdict(report, GpuView(((8, 9),), (13, 0)))
    assert "cannot use the NVIDIA GPU (sm_89) (RuntimeError: CUDA driver" in found.sentence
    assert found.fix_command is None and found.line() == found.sentence


# ---- No kernels for the GPU's architecture -----------------------------------------------


def test_a_gpu_older_than_the_build_s_arch_list_gets_the_index_that_has_its_kernels():
    report = dict(LINUX_CU130, cuda_available=True)
    found = verdict(report, GpuView(((5, 0),), (13, 0)))  # a Maxwell card, driver 580
    assert found.sentence == (
        "The training Python's torch 2.14.1+cu130 has no kernels for the NVIDIA GPU's "
        "architecture sm_50 (it was built for sm_75, sm_80, sm_86, sm_90, sm_100, sm_120), "
        "so its CUDA operations fail; install its cu126 build."
    )
    assert found.fix_command.endswith("whl/cu126")


def test_a_gpu_newer_than_the_build_gets_a_blackwell_index():
    report = dict(LINUX_CU130, torch="2.14.1+cu126", cuda="12.6", cuda_available=True)
    found = verdict(dict(report, arch_list=CU126_ARCHS), GpuView(((12, 0),), (12, 8)))
    assert "sm_120" in found.sentence and found.fix_command.endswith("whl/cu128")


def test_an_architecture_no_build_supports_has_no_command():
    report = dict(LINUX_CU130, torch="2.14.1+cu126", cuda="12.6", cuda_available=True)
    found = verdict(dict(report, arch_list=CU126_ARCHS), GpuView(((3, 5),), (12, 8)))
    assert found.sentence.endswith("; no PyTorch CUDA build has kernels for sm_35.")
    assert found.fix_command is None


# ---- Fine, or nothing to say ---------------------------------------------------------------


def test_no_verdict_for_a_usable_build_no_gpu_or_no_torch():
    usable = dict(LINUX_CU130, cuda_available=True)
    assert mismatch(GpuView(((8, 6),), (13, 0)), TorchBuild.from_report(usable), "p") is None
    for report in (WINDOWS_CPU, LINUX_CU130, usable):  # no NVIDIA GPU: the CPU is right
        assert mismatch(GpuView(), TorchBuild.from_report(report), "p") is None
    no_torch = {"python": "3.12.3", "torch": None, "torch_error": "ModuleNotFoundError: x"}
    assert mismatch(RTX_3060, TorchBuild.from_report(no_torch), "p") is None
    # The runner's survey (doctor) has no arch list: no architecture verdict from it.
    runner_survey = {k: v for k, v in usable.items() if k != "arch_list"}
    assert mismatch(GpuView(((5, 0),), (13, 0)), TorchBuild.from_report(runner_survey), "p") is None


def test_without_a_gpu_the_python_is_never_surveyed():
    def survey(python: str, timeout: float) -> dict:
        raise AssertionError("surveyed although NVML sees no GPU")

    assert check_python("/v/bin/python", gpus=GpuView(), survey=survey) is None


def test_check_python_surveys_once_and_a_broken_python_is_not_a_gpu_verdict():
    asked: list[str] = []

    def survey(python: str, timeout: float) -> dict:
        asked.append(python)
        return WINDOWS_CPU

    found = check_python("/v/bin/python", gpus=RTX_3060, survey=survey)
    assert asked == ["/v/bin/python"] and found is not None and "CPU-only" in found.sentence
    broken = check_python(
        "/v/bin/python", gpus=RTX_3060, survey=lambda p, t: {"error": f"{p} did not answer"}
    )
    assert broken is None


def test_a_system_python_pip_refuses_gets_a_venv_with_the_cuda_build(tmp_path: Path):
    stdlib = tmp_path / "usr" / "lib" / "python3.12"
    stdlib.mkdir(parents=True)
    (stdlib / "EXTERNALLY-MANAGED").write_text("[externally-managed]\n")
    report = dict(LINUX_CU130, prefix=str(tmp_path / "usr"))
    found = verdict(report, GpuView(((8, 9),), (12, 8)), "/usr/bin/python3", windows=False)
    assert found.fix_command == (
        "/usr/bin/python3 -m venv ~/.venv && ~/.venv/bin/python -m pip install torch "
        f"torchvision --index-url {URL}cu128"
    )


# ---- The picker's verdicts choose the same index ------------------------------------------


def test_the_interpreter_verdict_uses_the_driver_s_cuda_too():
    v = interpreters.judge(WINDOWS_CPU, "/v/bin/python", gpus=[(8, 6)], driver_cuda=(12, 8))
    assert v.level == interpreters.WARN and v.fix.endswith("whl/cu128`")
    old = interpreters.judge(LINUX_CU130, "/v/bin/python", gpus=[(8, 6)], driver_cuda=(12, 2))
    assert "the driver supports CUDA 12.2 at most" in old.summary
    assert "update the NVIDIA driver to" in old.fix and old.fix.endswith("whl/cu126`")


# ---- Headless: the same sentence on stderr, once -------------------------------------------


def test_background_check_gives_its_verdict_once():
    release = threading.Event()
    found = GpuMismatch("The GPU is not used.", "p -m pip install torch")

    def slow() -> GpuMismatch:
        release.wait(10.0)
        return found

    check = BackgroundCheck(None, check=slow)
    assert check.take() is None  # not finished yet
    release.set()
    assert check.take(timeout=10.0) is found
    assert check.take(timeout=1.0) is None  # said once
    failing = BackgroundCheck(None, check=lambda: 1 / 0)  # a broken check says nothing
    assert failing.take(timeout=10.0) is None


def test_run_headless_prints_the_sentence_on_stderr_once(tmp_path: Path, monkeypatch):
    """A Session that starts no runner: the run "ends" at once, and the check's sentence is
    still printed once on stderr, never on stdout (the summary's stream)."""
    session = Session(sample_coarse=False)
    monkeypatch.setattr(session, "start", lambda spec: None)
    monkeypatch.setattr(session, "wait_ended", lambda timeout=None: True)
    found = GpuMismatch(
        "The training Python's torch 2.14.1+cpu is a CPU-only build: the NVIDIA GPU (sm_86) "
        "is not used and training runs on the CPU; install its cu128 build.",
        f"/v/bin/python -m pip install --force-reinstall torch torchvision --index-url {URL}cu128",
    )
    out, err = io.StringIO(), io.StringIO()
    headless.run_headless(
        headless.HeadlessOptions(script=str(tmp_path / "train.py"), cwd=str(tmp_path)),
        out=out,
        err=err,
        session=session,
        gpu_check=BackgroundCheck(None, check=lambda: found),
    )
    line = f"gpuwatch: {found.sentence} Fix: {found.fix_command}"
    assert err.getvalue().count(line) == 1
    assert "CPU-only" not in out.getvalue()


def test_bench_prints_the_sentence_on_stderr_once(monkeypatch):
    from test_bench import ScriptedSession, bench

    from gpuwatch.core.run import gpu_mismatch

    found = GpuMismatch("The training Python's torch 2.14.1+cpu is a CPU-only build.", "p -m x")
    monkeypatch.setattr(gpu_mismatch, "check_python", lambda python: found)
    outcome, progress = bench(ScriptedSession(), groups=[["num_workers=0"], ["num_workers=2"]])
    assert outcome.exit_code == 0
    assert progress.count(f"gpuwatch: {found.sentence} Fix: p -m x") == 1


def test_doctor_prints_the_one_command_that_fits_this_machine():
    from gpuwatch.commands.doctor import gpu_rows

    runner_survey = {k: v for k, v in LINUX_CU130.items() if k != "arch_list"}
    rows = dict(gpu_rows("/home/ana/.venv/bin/python", runner_survey, GpuView(((8, 9),), (12, 8))))
    assert rows["GPU use"].startswith("The training Python's torch 2.14.1+cu130 is built for")
    assert rows["torch for this GPU (cu128)"] == (
        "/home/ana/.venv/bin/python -m pip install --force-reinstall torch torchvision "
        f"--index-url {URL}cu128"
    )
    old = dict(gpu_rows("/p", runner_survey, GpuView(((8, 9),), (12, 2))))
    assert old["NVIDIA driver"].startswith("update the NVIDIA driver to ")
    assert "torch for this GPU (cu126)" in old
    fine = dict(
        gpu_rows("/p", dict(runner_survey, cuda_available=True), GpuView(((8, 9),), (13, 0)))
    )
    assert fine["GPU use"] == "torch can use the NVIDIA GPU"
    assert gpu_rows("/p", runner_survey, GpuView()) == []  # no NVIDIA GPU: nothing to say
