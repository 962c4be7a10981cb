"""NVTX ranges around the host phases, so Nsight Systems shows gpuwatch's phases by name.

A ``TimingBackend`` wrapper: the loop already calls ``mark(i)`` at every phase boundary, so
the range of ``PHASES[i]`` is started there and ended at the next mark. The ranges are
start/end ranges with ids (``torch.cuda.nvtx.range_start``/``range_end``, NVTX's
``nvtxRangeStartA``/``nvtxRangeEnd``), not push/pop: push/pop ranges live on the thread's
stack, where ending ours would close whatever the user's script pushed last, and the user's
pops would close ours. ``make_backend`` wraps the CUDA backend only, once at start: on a CPU
device nothing of this runs, and on CUDA each mark costs one ``range_end`` and one
``range_start`` (a no-op unless a tool listens).
"""

from __future__ import annotations

from collections.abc import Callable

from gpuwatch.protocol import N_MARKS, PHASES
from gpuwatch.runner.timing import DeviceMarks, MarkSkips, TimingBackend

#: Range names: ``gpuwatch:data``, ``gpuwatch:forward``, ...
RANGE_NAMES: tuple[str, ...] = tuple(f"gpuwatch:{phase}" for phase in PHASES)
_LAST = N_MARKS - 1


class NvtxPhases(TimingBackend):
    """``inner`` with an NVTX range per phase; ``start``/``end`` default to
    ``torch.cuda.nvtx.range_start``/``range_end``."""

    def __init__(
        self,
        inner: TimingBackend,
        *,
        start: Callable[[str], int] | None = None,
        end: Callable[[int], object] | None = None,
    ) -> None:
        if start is None or end is None:
            import torch

            start, end = torch.cuda.nvtx.range_start, torch.cuda.nvtx.range_end
        self.inner = inner
        self.kind = inner.kind
        self._start = start
        self._end = end
        self._open: int | None = None

    @property
    def skips(self) -> MarkSkips:
        return self.inner.skips

    def begin(self, step_id: int) -> None:
        self._close()  # a step dropped before its end (script mode) left its range open
        self.inner.begin(step_id)

    def mark(self, index: int) -> None:
        self.inner.mark(index)
        self._close()
        if index < _LAST:
            self._open = self._start(RANGE_NAMES[index])

    def end(self) -> None:
        self.inner.end()

    def poll(self, *, wait: bool = False) -> list[DeviceMarks]:
        return self.inner.poll(wait=wait)

    def close(self) -> None:
        self._close()
        self.inner.close()

    def _close(self) -> None:
        if self._open is not None:
            self._end(self._open)
            self._open = None
