"""Where the loop's batches come from: one DataLoader and its iterator, rebuilt on a knob change.

Epochs are invisible to the loop: an exhausted iterator is replaced inside ``next_batch`` and
that cost counts as ``data``. Worker processes never outlive their loader: a rebuild shuts the
old iterator's workers down before the new loader exists, and ``close`` does at the end. The
new iterator (and its workers' start-up) is created lazily by the first ``next_batch``, so that
cost lands in the first step under the new configuration, where the session measures it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from gpuwatch.runner.workloads import Workload


def close_iterator(iterator: Iterator[Any] | None) -> None:
    """Shut a DataLoader iterator's workers down now, rather than whenever GC runs ``__del__``
    (an ``os._exit`` or a crash never runs it, and a rebuilt loader must not leave workers)."""
    shutdown = getattr(iterator, "_shutdown_workers", None)
    if callable(shutdown):
        shutdown()


class BatchSource:
    """The current loader of ``workload`` for the loader knobs in ``knobs``."""

    def __init__(self, workload: Workload, knobs: Mapping[str, Any]) -> None:
        self.workload = workload
        self.loader: Iterable[Any] = workload.build_loader(dict(knobs))
        self._persistent = bool(knobs["persistent_workers"] and knobs["num_workers"] > 0)
        self._iterator: Iterator[Any] | None = None

    def next_batch(self) -> Any:
        if self._iterator is None:
            self._iterator = iter(self.loader)
        try:
            return next(self._iterator)
        except StopIteration:
            pass
        # End of epoch: a fresh pass, timed as `data`. Persistent workers are the point of
        # keeping the iterator: the loader resets it for the next epoch instead of respawning.
        if not self._persistent:
            close_iterator(self._iterator)
        self._iterator = iter(self.loader)
        try:
            return next(self._iterator)
        except StopIteration:
            raise RuntimeError("the loader yields no batch (dataset smaller than one batch?)"
                               ) from None

    def rebuild(self, knobs: Mapping[str, Any]) -> None:
        """Shut the current workers down, then build the loader for ``knobs``."""
        self.close()
        self.loader = self.workload.build_loader(dict(knobs))
        self._persistent = bool(knobs["persistent_workers"] and knobs["num_workers"] > 0)

    def workers(self) -> list[Any]:
        """The current iterator's worker processes (empty without workers)."""
        return list(getattr(self._iterator, "_workers", []))

    def close(self) -> None:
        close_iterator(self._iterator)
        self._iterator = None
