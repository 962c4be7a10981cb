"""A Windows Job Object that ends the runner's whole process tree when gpuwatch ends.

Windows has no process groups that a crash cleans up: if the GUI dies (or is closed while a
stop is still escalating), the runner and its DataLoader workers would go on training. A job
with ``JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE`` ends every process in it when its last handle
closes, which the system does when the GUI exits, however it exits. Processes the runner
starts join its job by themselves (workers included), so one assignment covers the tree.

Calls, through ctypes (Microsoft's documentation):

- ``CreateJobObjectW(NULL, NULL)``: an unnamed job with default security
  (https://learn.microsoft.com/en-us/windows/win32/api/jobapi2/nf-jobapi2-createjobobjectw);
- ``SetInformationJobObject(job, JobObjectExtendedLimitInformation, &info, sizeof info)`` with
  ``info.BasicLimitInformation.LimitFlags = JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE``
  (https://learn.microsoft.com/en-us/windows/win32/api/jobapi2/nf-jobapi2-setinformationjobobject,
  https://learn.microsoft.com/en-us/windows/win32/api/winnt/ns-winnt-jobobject_extended_limit_information,
  https://learn.microsoft.com/en-us/windows/win32/api/winnt/ns-winnt-jobobject_basic_limit_information);
- ``OpenProcess(PROCESS_SET_QUOTA | PROCESS_TERMINATE, FALSE, pid)``: the access rights
  ``AssignProcessToJobObject`` requires
  (https://learn.microsoft.com/en-us/windows/win32/api/processthreadsapi/nf-processthreadsapi-openprocess,
  https://learn.microsoft.com/en-us/windows/win32/api/jobapi2/nf-jobapi2-assignprocesstojobobject);
- ``CloseHandle`` for the process handle at once and for the job when the run is over
  (https://learn.microsoft.com/en-us/windows/win32/api/handleapi/nf-handleapi-closehandle).

The launcher assigns the runner right after ``CreateProcess`` returns and before it writes the
link's key to the runner's stdin; the runner starts nothing before it has read that key, so
nothing it starts can be outside the job. This module imports on every OS; only
``load_kernel32`` needs Windows. Its call sequence is tested against a fake kernel32
(tests/test_platform_win_job.py); it has never run on Windows here (docs/platforms.md).
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

#: winnt.h values named in the documentation above.
JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE = 0x00002000
JOB_OBJECT_EXTENDED_LIMIT_INFORMATION_CLASS = 9  # JobObjectExtendedLimitInformation
PROCESS_TERMINATE = 0x0001
PROCESS_SET_QUOTA = 0x0100

_LARGE_INTEGER = ctypes.c_int64
_DWORD = ctypes.c_uint32
_SIZE_T = ctypes.c_size_t
_ULONG_PTR = ctypes.c_size_t
_ULONGLONG = ctypes.c_uint64


class IO_COUNTERS(ctypes.Structure):
    """winnt.h ``IO_COUNTERS`` (a member of the extended limits; unused here)."""

    _fields_ = [
        ("ReadOperationCount", _ULONGLONG),
        ("WriteOperationCount", _ULONGLONG),
        ("OtherOperationCount", _ULONGLONG),
        ("ReadTransferCount", _ULONGLONG),
        ("WriteTransferCount", _ULONGLONG),
        ("OtherTransferCount", _ULONGLONG),
    ]


class JOBOBJECT_BASIC_LIMIT_INFORMATION(ctypes.Structure):
    """winnt.h ``JOBOBJECT_BASIC_LIMIT_INFORMATION``: ``LimitFlags`` says which limits hold."""

    _fields_ = [
        ("PerProcessUserTimeLimit", _LARGE_INTEGER),
        ("PerJobUserTimeLimit", _LARGE_INTEGER),
        ("LimitFlags", _DWORD),
        ("MinimumWorkingSetSize", _SIZE_T),
        ("MaximumWorkingSetSize", _SIZE_T),
        ("ActiveProcessLimit", _DWORD),
        ("Affinity", _ULONG_PTR),
        ("PriorityClass", _DWORD),
        ("SchedulingClass", _DWORD),
    ]


class JOBOBJECT_EXTENDED_LIMIT_INFORMATION(ctypes.Structure):
    """winnt.h ``JOBOBJECT_EXTENDED_LIMIT_INFORMATION``: kill-on-close is only settable
    through this class of information, not the basic one."""

    _fields_ = [
        ("BasicLimitInformation", JOBOBJECT_BASIC_LIMIT_INFORMATION),
        ("IoInfo", IO_COUNTERS),
        ("ProcessMemoryLimit", _SIZE_T),
        ("JobMemoryLimit", _SIZE_T),
        ("PeakProcessMemoryUsed", _SIZE_T),
        ("PeakJobMemoryUsed", _SIZE_T),
    ]


@dataclass(frozen=True)
class JobApi:
    """The kernel32 functions a job needs, and how to read the calling thread's last error
    (``ctypes.get_last_error`` exists on Windows only); tests pass fakes."""

    kernel32: Any
    last_error: Callable[[], int]


def load_kernel32() -> JobApi:
    """kernel32 with the argument and result types of the calls used here (Windows only)."""
    from ctypes import wintypes

    kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)  # type: ignore[attr-defined]
    kernel32.CreateJobObjectW.argtypes = (ctypes.c_void_p, wintypes.LPCWSTR)
    kernel32.CreateJobObjectW.restype = wintypes.HANDLE
    kernel32.SetInformationJobObject.argtypes = (
        wintypes.HANDLE,
        ctypes.c_int,
        ctypes.c_void_p,
        wintypes.DWORD,
    )
    kernel32.SetInformationJobObject.restype = wintypes.BOOL
    kernel32.OpenProcess.argtypes = (wintypes.DWORD, wintypes.BOOL, wintypes.DWORD)
    kernel32.OpenProcess.restype = wintypes.HANDLE
    kernel32.AssignProcessToJobObject.argtypes = (wintypes.HANDLE, wintypes.HANDLE)
    kernel32.AssignProcessToJobObject.restype = wintypes.BOOL
    kernel32.CloseHandle.argtypes = (wintypes.HANDLE,)
    kernel32.CloseHandle.restype = wintypes.BOOL
    return JobApi(kernel32, ctypes.get_last_error)  # type: ignore[attr-defined]


def kill_on_close_limits() -> JOBOBJECT_EXTENDED_LIMIT_INFORMATION:
    """The limits of a job whose processes all end when its last handle closes."""
    info = JOBOBJECT_EXTENDED_LIMIT_INFORMATION()
    info.BasicLimitInformation.LimitFlags = JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE
    return info


class WinJob:
    """One kill-on-close job holding one runner's tree; ``close`` ends what is still in it."""

    def __init__(self, api: JobApi) -> None:
        self._api = api
        k = api.kernel32
        handle = k.CreateJobObjectW(None, None)
        if not handle:
            raise self._error("CreateJobObjectW")
        self.handle: int | None = handle
        info = kill_on_close_limits()
        if not k.SetInformationJobObject(
            handle,
            JOB_OBJECT_EXTENDED_LIMIT_INFORMATION_CLASS,
            ctypes.byref(info),
            ctypes.sizeof(info),
        ):
            error = self._error("SetInformationJobObject")
            self.close()
            raise error

    def assign(self, pid: int) -> None:
        """Put process ``pid`` (and so whatever it starts from now on) in the job."""
        k = self._api.kernel32
        process = k.OpenProcess(PROCESS_SET_QUOTA | PROCESS_TERMINATE, False, pid)
        if not process:
            raise self._error("OpenProcess")
        try:
            if not k.AssignProcessToJobObject(self.handle, process):
                raise self._error("AssignProcessToJobObject")
        finally:
            k.CloseHandle(process)

    def close(self) -> None:
        """Close the job's handle: every process still in it ends (kill on close)."""
        handle, self.handle = self.handle, None
        if handle:
            self._api.kernel32.CloseHandle(handle)

    def _error(self, call: str) -> OSError:
        code = self._api.last_error()
        return OSError(f"{call} failed (Windows error {code})")


def contain(pid: int, api: JobApi | None = None) -> WinJob | None:
    """A kill-on-close job holding ``pid``, or None (logged) where one cannot be made: the
    run goes on, and gpuwatch's own stop still ends the tree process by process."""
    try:
        job = WinJob(api if api is not None else load_kernel32())
    except OSError as exc:
        log.warning("no Job Object for the runner: %s", exc)
        return None
    try:
        job.assign(pid)
    except OSError as exc:
        log.warning("could not put the runner in its Job Object: %s", exc)
        job.close()
        return None
    return job
