"""Where the loop's batches come from: one DataLoader and its iterator, rebuilt on a knob change.

Epochs are invisible to the loop: an exhausted iterator is replaced inside ``next_batch`` and
that cost counts as ``data``. Worker processes never outlive their loader: a rebuild shuts the
old iterator's workers down, and ``close`` does at the end.

Two ways to change the loader:

* ``rebuild``: at once. The new iterator (and its workers' start-up) is created lazily by the
  first ``next_batch``, so that cost lands in the first step under the new configuration.
* ``prepare`` then ``switch``: the new loader's workers are started and its first batch is
  fetched on a helper thread *while training goes on with the current loader*; ``switch`` (at
  a later step boundary, once ``prepared_ready``) retires the old workers and makes the new
  loader current, its first batch already there. Spawned workers take seconds to start (a
  fresh interpreter importing torch and the dataset's modules): this keeps the loop from
  standing still meanwhile.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from gpuwatch.runner.workloads import Workload


def close_iterator(iterator: Iterator[Any] | None) -> None:
    """Shut a DataLoader iterator's workers down now, rather than whenever GC runs ``__del__``
    (an ``os._exit`` or a crash never runs it, and a rebuilt loader must not leave workers)."""
    shutdown = getattr(iterator, "_shutdown_workers", None)
    if callable(shutdown):
        shutdown()


class _Prepared:
    """A loader whose iterator and first batch are being made on a helper thread."""

    def __init__(self, loader: Iterable[Any], persistent: bool,
                 on_ready: Callable[[], None] | None) -> None:
        self.loader = loader
        self.persistent = persistent
        self.iterator: Iterator[Any] | None = None
        self.batch: Any = None
        self.error: BaseException | None = None
        self.ready = threading.Event()
        self._on_ready = on_ready
        self.thread = threading.Thread(target=self._fetch, name="gpuwatch-loader-prepare",
                                       daemon=True)
        self.thread.start()

    def _fetch(self) -> None:
        try:
            self.iterator = iter(self.loader)  # spawns the workers
            self.batch = next(self.iterator)  # waits for them to start and deliver
        except StopIteration:
            self.error = RuntimeError("the loader yields no batch (dataset smaller than one "
                                      "batch?)")
        except Exception as exc:  # reported when the loop switches to this loader
            self.error = exc
        finally:
            self.ready.set()
            if self._on_ready is not None:
                self._on_ready()

    def discard(self) -> None:
        self.thread.join()
        close_iterator(self.iterator)


class BatchSource:
    """The current loader of ``workload`` for the loader knobs in ``knobs``."""

    def __init__(self, workload: Workload, knobs: Mapping[str, Any]) -> None:
        self.workload = workload
        self.loader: Iterable[Any] = workload.build_loader(dict(knobs))
        self._persistent = bool(knobs["persistent_workers"] and knobs["num_workers"] > 0)
        self._iterator: Iterator[Any] | None = None
        self._prepared: _Prepared | None = None
        self._first: list[Any] = []  # the prepared loader's first batch, not yet handed out

    def next_batch(self) -> Any:
        if self._first:
            return self._first.pop()
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

    def prepare(self, knobs: Mapping[str, Any], on_ready: Callable[[], None] | None = None
                ) -> None:
        """Build the loader for ``knobs`` and start fetching its first batch in the background;
        the current loader stays in use until ``switch``. ``on_ready`` is called (on the
        helper thread) once the batch or an error is there. Building raises here, at once."""
        self.discard_prepared()
        loader = self.workload.build_loader(dict(knobs))
        persistent = bool(knobs["persistent_workers"] and knobs["num_workers"] > 0)
        self._prepared = _Prepared(loader, persistent, on_ready)

    @property
    def preparing(self) -> bool:
        return self._prepared is not None

    def prepared_ready(self) -> bool:
        return self._prepared is not None and self._prepared.ready.is_set()

    def switch(self) -> None:
        """Make the prepared loader current (waiting for it if it is not ready) and retire
        the old one's workers. If preparing failed, the old loader stays and the error is
        raised."""
        prepared, self._prepared = self._prepared, None
        if prepared is None:
            raise RuntimeError("no loader is being prepared")
        prepared.thread.join()
        if prepared.error is not None:
            close_iterator(prepared.iterator)
            raise prepared.error
        self._close_current()
        self.loader, self._persistent = prepared.loader, prepared.persistent
        self._iterator = prepared.iterator
        self._first = [prepared.batch]

    def discard_prepared(self) -> None:
        """Stop a preparation that will not be switched to (its workers shut down)."""
        prepared, self._prepared = self._prepared, None
        if prepared is not None:
            prepared.discard()

    def workers(self) -> list[Any]:
        """The current iterator's worker processes (empty without workers)."""
        return list(getattr(self._iterator, "_workers", []))

    def close(self) -> None:
        """Shut every worker of this source down: the current iterator's and a preparation's."""
        self.discard_prepared()
        self._close_current()

    def _close_current(self) -> None:
        close_iterator(self._iterator)
        self._iterator = None
        self._first = []
