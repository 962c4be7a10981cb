"""The runner's Job Object on Windows (gpuwatch/core/run/win_job.py), against a fake kernel32.

The real calls cannot run here (no Windows): these tests check the call sequence and the
argument values and structure fields Microsoft's documentation asks for, and what happens
when a call fails. What this cannot show: that Windows accepts them (docs/platforms.md).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Any

import pytest

from gpuwatch.core.run import win_job
from gpuwatch.core.run.win_job import (
    JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE,
    JOBOBJECT_EXTENDED_LIMIT_INFORMATION,
    JobApi,
    WinJob,
    contain,
)

JOB, PROCESS = 0x1F4, 0x2A8


@dataclass
class FakeKernel32:
    """Records each call; ``fail`` names calls that return 0 (FALSE / NULL)."""

    fail: set[str] = field(default_factory=set)
    calls: list[tuple[str, tuple[Any, ...]]] = field(default_factory=list)
    limits: JOBOBJECT_EXTENDED_LIMIT_INFORMATION | None = None

    def _call(self, name: str, args: tuple[Any, ...], result: int) -> int:
        self.calls.append((name, args))
        return 0 if name in self.fail else result

    def CreateJobObjectW(self, *args: Any) -> int:
        return self._call("CreateJobObjectW", args, JOB)

    def SetInformationJobObject(self, *args: Any) -> int:
        # What the pointer points at, copied now (as the kernel reads it during the call).
        self.limits = JOBOBJECT_EXTENDED_LIMIT_INFORMATION.from_buffer_copy(args[2]._obj)
        return self._call("SetInformationJobObject", args, 1)

    def OpenProcess(self, *args: Any) -> int:
        return self._call("OpenProcess", args, PROCESS)

    def AssignProcessToJobObject(self, *args: Any) -> int:
        return self._call("AssignProcessToJobObject", args, 1)

    def CloseHandle(self, *args: Any) -> int:
        return self._call("CloseHandle", args, 1)

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]


def _api(kernel32: FakeKernel32) -> JobApi:
    return JobApi(kernel32, lambda: 5)  # ERROR_ACCESS_DENIED


def test_a_kill_on_close_job_is_made_and_the_runner_put_in_it() -> None:
    k = FakeKernel32()
    job = contain(4321, _api(k))
    assert job is not None
    assert k.names() == [
        "CreateJobObjectW",
        "SetInformationJobObject",
        "OpenProcess",
        "AssignProcessToJobObject",
        "CloseHandle",  # the process handle, at once; the job's stays open
    ]
    calls = dict(k.calls)
    assert calls["CreateJobObjectW"] == (None, None)  # default security, unnamed
    handle, info_class, _pointer, size = calls["SetInformationJobObject"]
    assert handle == JOB
    assert info_class == 9  # JobObjectExtendedLimitInformation
    assert size == ctypes.sizeof(JOBOBJECT_EXTENDED_LIMIT_INFORMATION)
    assert k.limits is not None
    assert k.limits.BasicLimitInformation.LimitFlags == JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE
    assert JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE == 0x2000
    # PROCESS_SET_QUOTA | PROCESS_TERMINATE, as AssignProcessToJobObject requires; no inherit.
    assert calls["OpenProcess"] == (0x0100 | 0x0001, False, 4321)
    assert calls["AssignProcessToJobObject"] == (JOB, PROCESS)
    assert calls["CloseHandle"] == (PROCESS,)

    job.close()  # the run is over: closing the last handle ends what is still in the job
    assert k.calls[-1] == ("CloseHandle", (JOB,))
    job.close()
    assert k.names().count("CloseHandle") == 2, "closed once"


@pytest.mark.skipif(ctypes.sizeof(ctypes.c_void_p) != 8, reason="64-bit layout")
def test_the_limit_structures_have_the_64_bit_windows_layout() -> None:
    """winnt.h on x64: JOBOBJECT_BASIC_LIMIT_INFORMATION is 64 bytes with LimitFlags at 16;
    the extended one 144 bytes (the basic limits, IO_COUNTERS' 48 bytes, four SIZE_Ts)."""
    basic = win_job.JOBOBJECT_BASIC_LIMIT_INFORMATION
    assert ctypes.sizeof(basic) == 64
    assert basic.LimitFlags.offset == 16
    assert basic.Affinity.offset == 48
    assert ctypes.sizeof(win_job.IO_COUNTERS) == 48
    assert ctypes.sizeof(JOBOBJECT_EXTENDED_LIMIT_INFORMATION) == 144


@pytest.mark.parametrize(
    ("failing", "calls"),
    [
        ("CreateJobObjectW", ["CreateJobObjectW"]),
        (
            "SetInformationJobObject",
            ["CreateJobObjectW", "SetInformationJobObject", "CloseHandle"],
        ),
        (
            "OpenProcess",
            ["CreateJobObjectW", "SetInformationJobObject", "OpenProcess", "CloseHandle"],
        ),
        (
            "AssignProcessToJobObject",
            [
                "CreateJobObjectW",
                "SetInformationJobObject",
                "OpenProcess",
                "AssignProcessToJobObject",
                "CloseHandle",
                "CloseHandle",
            ],
        ),
    ],
)
def test_a_failed_call_leaves_no_handle_open_and_the_run_goes_on(
    failing: str, calls: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    k = FakeKernel32(fail={failing})
    assert contain(4321, _api(k)) is None
    assert k.names() == calls
    opened = sum(1 for n in calls if n in ("CreateJobObjectW", "OpenProcess") and n != failing)
    assert k.names().count("CloseHandle") == opened, "every handle opened is closed"
    assert f"{failing} failed (Windows error 5)" in caplog.text


def test_a_job_object_error_names_the_call() -> None:
    with pytest.raises(OSError, match=r"CreateJobObjectW failed \(Windows error 5\)"):
        WinJob(_api(FakeKernel32(fail={"CreateJobObjectW"})))
