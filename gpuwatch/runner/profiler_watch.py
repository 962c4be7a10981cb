"""Which torch profiler sessions are the script's own, so a kernel capture never cuts one.

Kineto keeps one trace session per process and the session prepared last wins: a capture that
opens while the script's own ``torch.profiler`` records (or warms up) cancels the script's trace,
which then comes back empty; a script profiler that starts during a capture cancels the
capture, and the capture's later stop would end the *script's* session. torch can say whether a
profiler is recording (``torch._C._autograd._profiler_enabled()``) but not whether one is
prepared and warming up, so the watch wraps the three functions every Python-level profiler
goes through (``torch.autograd.profiler._prepare_profiler``, ``_enable_profiler``,
``_disable_profiler``; ``torch.profiler.profile``, ``torch.autograd.profiler.profile`` and
``emit_nvtx`` all call them as module globals). Calls made inside ``own()`` are gpuwatch's;
any other call is the script's, and listeners hear about it *before* it reaches Kineto, so the
capture can close itself first. The wrappers pass every argument and result through unchanged,
and are removed when the last listener leaves.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

#: The wrapped functions of ``torch.autograd.profiler``, in the order a session uses them.
WRAPPED = ("_prepare_profiler", "_enable_profiler", "_disable_profiler")

RECORDING = (
    "the script's own torch.profiler is recording: a kernel capture now would cut "
    "its trace (one profiler session per process), so none was started; capture "
    "again after the script's profiler stops"
)


class ProfilerWatch:
    """Tells gpuwatch's profiler calls from the script's (one per process: ``shared()``)."""

    _shared: ProfilerWatch | None = None
    _shared_lock = threading.Lock()

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._listeners: list[Callable[[str], None]] = []
        self._originals: dict[str, Any] = {}
        self._module: Any = None
        self._own_thread: int | None = None
        self._own_depth = 0
        #: A session the script prepared or enabled and has not disabled yet.
        self.foreign_open = False

    @classmethod
    def shared(cls) -> ProfilerWatch:
        with cls._shared_lock:
            if cls._shared is None:
                cls._shared = cls()
            return cls._shared

    @property
    def installed(self) -> bool:
        return self._module is not None

    def subscribe(self, listener: Callable[[str], None]) -> bool:
        """Call ``listener(what)`` before each of the script's profiler calls (``what`` is
        ``prepare``, ``enable`` or ``disable``). False if torch's functions could not be
        wrapped (then only a recording profiler is seen, by ``busy_reason``)."""
        with self._lock:
            self._listeners.append(listener)
            if self._module is None:
                self._install()
            return self._module is not None

    def unsubscribe(self, listener: Callable[[str], None]) -> None:
        with self._lock:
            if listener in self._listeners:
                self._listeners.remove(listener)
            if not self._listeners:
                self._uninstall()

    @contextlib.contextmanager
    def own(self) -> Iterator[None]:
        """Profiler calls on this thread inside the block are gpuwatch's."""
        me = threading.get_ident()
        outer = self._own_thread
        self._own_thread = me
        self._own_depth += 1
        try:
            yield
        finally:
            self._own_depth -= 1
            if self._own_depth == 0:
                self._own_thread = outer

    def busy_reason(self) -> str | None:
        """Why a capture must not start now (the script's profiler is on), or None."""
        if self.foreign_open:
            return RECORDING
        try:
            import torch

            enabled = bool(torch._C._autograd._profiler_enabled())
        except Exception:  # an older or stripped torch: rely on the wrappers alone
            enabled = False
        return RECORDING if enabled else None

    def _install(self) -> None:
        try:
            import torch.autograd.profiler as module
        except Exception:
            return
        originals = {name: getattr(module, name, None) for name in WRAPPED}
        if any(fn is None for fn in originals.values()):
            return
        for name, fn in originals.items():
            setattr(module, name, self._wrapper(name, fn))
        self._originals = originals
        self._module = module

    def _uninstall(self) -> None:
        module, self._module = self._module, None
        for name, fn in self._originals.items():
            current = getattr(module, name, None)
            if getattr(current, "__wrapped__", None) is fn:  # nobody wrapped ours since
                setattr(module, name, fn)
        self._originals = {}
        self.foreign_open = False

    def _wrapper(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        what = name.split("_")[1]  # prepare | enable | disable

        def call(*args: Any, **kwargs: Any) -> Any:
            if self._own_thread != threading.get_ident():
                self._foreign(what)
            return fn(*args, **kwargs)

        call.__wrapped__ = fn  # type: ignore[attr-defined]
        call.__name__ = name
        call.__doc__ = fn.__doc__
        return call

    def _foreign(self, what: str) -> None:
        """The script is about to prepare, enable or disable a session: tell the listeners
        first (never raising into the script), then note whether its session is open."""
        for listener in list(self._listeners):
            with contextlib.suppress(Exception):  # never break the script's profiler
                listener(what)
        self.foreign_open = what != "disable"
