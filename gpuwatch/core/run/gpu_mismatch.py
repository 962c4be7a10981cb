"""Can the training Python use the NVIDIA GPU this machine has? One verdict, one sentence.

A new user's first torch is often one that cannot: the registry's Windows wheel is a CPU-only
build, the Linux one is built for a CUDA newer than many installed drivers, and an old or a
brand-new GPU may have no kernels in the build at all. Each case trains quietly on the CPU
(or fails at the first kernel), so the window, ``run --headless``, ``bench`` and ``doctor``
say it in the same sentence, with the exact command that fixes it for that Python.

What NVML sees (``GpuView``) is compared with what the training Python's survey reports
(``TorchBuild``); no NVIDIA GPU means no verdict and no survey. Qt-free.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuwatch.core.run import interpreters, launcher

#: The survey may import torch from a cold disk.
SURVEY_TIMEOUT_S = interpreters.SURVEY_TIMEOUT_S


@dataclass(frozen=True)
class GpuView:
    """What NVML sees: each GPU's compute capability and the newest CUDA the driver supports."""

    capabilities: tuple[tuple[int, int], ...] = ()
    driver_cuda: tuple[int, int] | None = None

    @classmethod
    def from_nvml(cls) -> GpuView:
        """This machine's GPUs (none without NVML or a driver)."""
        caps = tuple(interpreters.gpu_capabilities())
        return cls(caps, interpreters.driver_cuda_version() if caps else None)

    @property
    def architectures(self) -> str:
        return ", ".join(sorted({_sm(c) for c in self.capabilities}))


@dataclass(frozen=True)
class TorchBuild:
    """The training Python's torch as its survey reports it (``interpreter_survey`` or the
    runner's ``--survey``; the latter has no arch list, so no architecture verdict)."""

    torch: str | None = None
    cuda: str | None = None
    cuda_available: bool | None = None
    arch_list: tuple[str, ...] = ()
    cuda_error: str | None = None
    #: The whole report: whether pip may install into this Python depends on its prefix.
    report: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_report(cls, report: Mapping[str, Any]) -> TorchBuild:
        available = report.get("cuda_available")
        return cls(
            torch=str(report["torch"]) if report.get("torch") else None,
            cuda=str(report["cuda"]) if report.get("cuda") else None,
            cuda_available=None if available is None else bool(available),
            arch_list=tuple(str(a) for a in report.get("arch_list") or ()),
            cuda_error=str(report["cuda_error"]) if report.get("cuda_error") else None,
            report=dict(report),
        )


@dataclass(frozen=True)
class GpuMismatch:
    """Why the GPU is not used, in one sentence, and the command that fixes it (None when
    no command can: e.g. no PyTorch build has kernels for the GPU)."""

    sentence: str
    fix_command: str | None = None

    def line(self) -> str:
        """The sentence and the command on one line, as ``run --headless`` and ``bench``
        print it on stderr."""
        return self.sentence + (f" Fix: {self.fix_command}" if self.fix_command else "")


def _sm(capability: Sequence[int]) -> str:
    return f"sm_{capability[0]}{capability[1]}"


def _dotted(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


def _version(text: str | None) -> tuple[int, int] | None:
    numbers = interpreters.version_numbers(text)
    return (numbers[0], numbers[1]) if len(numbers) >= 2 else None


def mismatch(
    gpus: GpuView, build: TorchBuild, python: str, *, windows: bool | None = None
) -> GpuMismatch | None:
    """None when the build can use every GPU NVML sees (or there is none, or no torch at
    all: the interpreter picker's verdicts cover that); else the one sentence and its fix."""
    if not gpus.capabilities or not build.torch:
        return None
    fix = interpreters.cuda_fix(
        python, gpus.capabilities, gpus.driver_cuda, dict(build.report), windows
    )
    command = fix.command
    if fix.index is None:
        then = f"no PyTorch CUDA build has kernels for {gpus.architectures}"
    elif fix.driver_update:
        then = f"{fix.driver_update}, then install its {fix.index.name} build"
    else:
        then = f"install its {fix.index.name} build"
    head = f"The training Python's torch {build.torch}"
    gpu = f"the NVIDIA GPU ({gpus.architectures})"
    if not build.cuda:
        return GpuMismatch(
            f"{head} is a CPU-only build: {gpu} is not used and training runs on the CPU; {then}.",
            command,
        )
    built = _version(build.cuda)
    if build.cuda_available is not True:
        driver = gpus.driver_cuda
        if built is not None and driver is not None and built > driver:
            return GpuMismatch(
                f"{head} is built for CUDA {build.cuda} but the NVIDIA driver supports CUDA "
                f"{_dotted(driver)} at most, so training runs on the CPU; {then}.",
                command,
            )
        why = build.cuda_error or "torch.cuda.is_available() is False"
        return GpuMismatch(
            f"{head} (CUDA {build.cuda}) cannot use {gpu} ({why}), so training runs on the "
            f"CPU; check the NVIDIA driver, or choose another Python.",
            None,
        )
    missing = [c for c in gpus.capabilities if build.arch_list and not _covered(build, c)]
    if not missing:
        return None
    built_for = ", ".join(a for a in build.arch_list if a.startswith("sm_"))
    return GpuMismatch(
        f"{head} has no kernels for the NVIDIA GPU's architecture {_sm(missing[0])} (it "
        f"was built for {built_for}), so its CUDA operations fail; {then}.",
        command,
    )


def _covered(build: TorchBuild, capability: tuple[int, int]) -> bool:
    return interpreters.arch_supports(build.arch_list, capability)


def training_python(python: str | None) -> str | None:
    """The interpreter a run would use: the chosen one, else gpuwatch's own (None: a frozen
    app with none chosen, which has nothing to check yet)."""
    if python:
        return python
    try:
        return launcher.default_python()
    except launcher.NoInterpreterError:
        return None


def check_python(
    python: str | None,
    *,
    gpus: GpuView | None = None,
    survey: Callable[[str, float], dict[str, Any]] = interpreters.survey,
    timeout: float = SURVEY_TIMEOUT_S,
) -> GpuMismatch | None:
    """NVML first: without an NVIDIA GPU nothing is surveyed. Otherwise the training Python
    is surveyed once (it imports torch: seconds, so call this off the GUI thread)."""
    gpus = GpuView.from_nvml() if gpus is None else gpus
    python = training_python(python)
    if not gpus.capabilities or python is None:
        return None
    report = survey(python, timeout)
    if "error" in report:
        return None  # not a GPU question: the run itself will say what is wrong
    return mismatch(gpus, TorchBuild.from_report(report), python)


class BackgroundCheck:
    """``check_python`` in a daemon thread, for the headless commands: the run starts at
    once, and the sentence is printed when it is known, once."""

    def __init__(self, python: str | None, check: Callable[[], GpuMismatch | None] | None = None):
        self._result: GpuMismatch | None = None
        self._taken = False
        self._done = threading.Event()
        work = check or (lambda: check_python(python))
        self._thread = threading.Thread(
            target=self._run, args=(work,), name="gpuwatch-gpu-check", daemon=True
        )
        self._thread.start()

    def _run(self, work: Callable[[], GpuMismatch | None]) -> None:
        try:
            self._result = work()
        except Exception:  # a failed check must never break the run it only advises on
            self._result = None
        finally:
            self._done.set()

    def take(self, timeout: float = 0.0) -> GpuMismatch | None:
        """The mismatch, the first time it is asked for once known; None before, after, or
        when the GPU is usable. ``timeout``: how long to wait for the check to finish."""
        if self._taken or not self._done.wait(timeout):
            return None
        self._taken = True
        return self._result

    def say(self, write: Callable[[str], None], timeout: float = 0.0) -> None:
        """``write`` the mismatch as one ``gpuwatch:`` line, once, if there is one by then."""
        found = self.take(timeout)
        if found is not None:
            write(f"gpuwatch: {found.line()}")
