"""NVTX ranges around the host phases, so Nsight Systems shows gpuwatch's phases by name.

A ``TimingBackend`` wrapper: the loop already calls ``mark(i)`` at every phase boundary, so
the range of ``PHASES[i]`` is pushed there and popped at the next mark. ``make_backend`` wraps
the CUDA backend only, once at start: on a CPU device nothing of this runs, and on CUDA each
mark costs one ``range_pop`` and one ``range_push`` (a no-op unless a tool listens).
"""

from __future__ import annotations

from collections.abc import Callable

from gpuwatch.protocol import N_MARKS, PHASES
from gpuwatch.runner.timing import DeviceMarks, TimingBackend

#: Range names: ``gpuwatch:data``, ``gpuwatch:forward``, ...
RANGE_NAMES: tuple[str, ...] = tuple(f"gpuwatch:{phase}" for phase in PHASES)
_LAST = N_MARKS - 1


class NvtxPhases(TimingBackend):
    """``inner`` with an NVTX range per phase; ``push``/``pop`` default to ``torch.cuda.nvtx``."""

    def __init__(self, inner: TimingBackend, *, push: Callable[[str], object] | None = None,
                 pop: Callable[[], object] | None = None) -> None:
        if push is None or pop is None:
            import torch

            push, pop = torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop
        self.inner = inner
        self.kind = inner.kind
        self._push = push
        self._pop = pop
        self._open = False

    @property  # type: ignore[override]
    def skipped(self) -> int:
        return self.inner.skipped

    def begin(self, step_id: int) -> None:
        self._close()  # a step dropped before its end (script mode) left its range open
        self.inner.begin(step_id)

    def mark(self, index: int) -> None:
        self.inner.mark(index)
        self._close()
        if index < _LAST:
            self._push(RANGE_NAMES[index])
            self._open = True

    def end(self) -> None:
        self.inner.end()

    def poll(self, *, wait: bool = False) -> list[DeviceMarks]:
        return self.inner.poll(wait=wait)

    def close(self) -> None:
        self._close()
        self.inner.close()

    def _close(self) -> None:
        if self._open:
            self._pop()
            self._open = False
