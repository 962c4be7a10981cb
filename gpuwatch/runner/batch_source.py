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
  loader current, its workers already running. Spawned workers take seconds to start (a
  fresh interpreter importing torch and the dataset's modules): this keeps the loop from
  standing still meanwhile.

Either way the run's sample sequence goes on as if nothing had changed (``sample_stream``): the
source keeps the position of the next sample the run consumes, a rebuilt loader starts there,
and a prepared one, which began at the position of the ``prepare`` while training went on with
the old loader, drops at ``switch`` the batches the old loader delivered meanwhile and continues
after them. That costs those batches' worker time, and the first batch after the switch may
have to wait for them: the price of a change that leaves the data alone.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from gpuwatch.runner.workloads import Workload
from gpuwatch.runner.workloads.sample_stream import Span, StreamBatchSampler


def close_iterator(iterator: Iterator[Any] | None) -> None:
    """Shut a DataLoader iterator's workers down now, rather than whenever GC runs ``__del__``
    (an ``os._exit`` or a crash never runs it, and a rebuilt loader must not leave workers)."""
    shutdown = getattr(iterator, "_shutdown_workers", None)
    if callable(shutdown):
        shutdown()


def stream_sampler(loader: Iterable[Any]) -> StreamBatchSampler | None:
    """The loader's position-keeping batch sampler (None for a loader without one)."""
    sampler = getattr(loader, "batch_sampler", None)
    return sampler if isinstance(sampler, StreamBatchSampler) else None


class _Prepared:
    """A loader whose iterator and first batch are being made on a helper thread."""

    def __init__(
        self, loader: Iterable[Any], persistent: bool, on_ready: Callable[[], None] | None
    ) -> None:
        self.loader = loader
        self.persistent = persistent
        self.iterator: Iterator[Any] | None = None
        self.batch: Any = None
        self.span: Span | None = None
        self.error: BaseException | None = None
        self.ready = threading.Event()
        self._on_ready = on_ready
        self.thread = threading.Thread(
            target=self._fetch, name="gpuwatch-loader-prepare", daemon=True
        )
        self.thread.start()

    def _fetch(self) -> None:
        try:
            self.iterator = iter(self.loader)  # spawns the workers
            self.batch = next(self.iterator)  # waits for them to start and deliver
            sampler = stream_sampler(self.loader)
            self.span = sampler.take() if sampler is not None else None
        except StopIteration:
            self.error = RuntimeError(
                "the loader yields no batch (dataset smaller than one batch?)"
            )
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
        #: The stream position of the next sample the run consumes (``sample_stream``).
        self.position = 0
        self.loader: Iterable[Any] = workload.build_loader(dict(knobs))
        self._persistent = bool(knobs["persistent_workers"] and knobs["num_workers"] > 0)
        self._iterator: Iterator[Any] | None = None
        self._prepared: _Prepared | None = None
        #: The prepared loader's first batch, not yet handed out, and its span.
        self._first: list[tuple[Any, Span | None]] = []

    def next_batch(self) -> Any:
        if self._first:
            batch, span = self._first.pop()
        else:
            batch, span = self._pull()
        if span is not None:
            self.position = span.end
        return batch

    def _pull(self) -> tuple[Any, Span | None]:
        """The current iterator's next batch and its span; at the end of an epoch, a fresh
        pass (timed as ``data``, inside ``next_batch``)."""
        if self._iterator is None:
            self._iterator = iter(self.loader)
        try:
            return next(self._iterator), self._taken()
        except StopIteration:
            pass
        # Persistent workers are the point of keeping the iterator: the loader resets it for
        # the next epoch instead of respawning.
        if not self._persistent:
            close_iterator(self._iterator)
        self._iterator = iter(self.loader)
        try:
            return next(self._iterator), self._taken()
        except StopIteration:
            raise RuntimeError(
                "the loader yields no batch (dataset smaller than one batch?)"
            ) from None

    def _taken(self) -> Span | None:
        sampler = stream_sampler(self.loader)
        return sampler.take() if sampler is not None else None

    def rebuild(self, knobs: Mapping[str, Any]) -> None:
        """Shut the current workers down, then build the loader for ``knobs``, starting at the
        run's position."""
        self.close()
        self.loader = self._built(knobs)
        self._persistent = bool(knobs["persistent_workers"] and knobs["num_workers"] > 0)

    def prepare(self, knobs: Mapping[str, Any], on_ready: Callable[[], None] | None = None) -> None:
        """Build the loader for ``knobs`` and start fetching its first batch in the background;
        the current loader stays in use until ``switch``. ``on_ready`` is called (on the
        helper thread) once the batch or an error is there. Building raises here, at once."""
        self.discard_prepared()
        loader = self._built(knobs)
        persistent = bool(knobs["persistent_workers"] and knobs["num_workers"] > 0)
        self._prepared = _Prepared(loader, persistent, on_ready)

    def _built(self, knobs: Mapping[str, Any]) -> Iterable[Any]:
        loader = self.workload.build_loader(dict(knobs))
        sampler = stream_sampler(loader)
        if sampler is not None:
            sampler.start_at(self.position)
        return loader

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
        batch, span = prepared.batch, prepared.span
        sampler = stream_sampler(self.loader)
        if sampler is not None and span is not None:
            sampler.seek(self.position)  # what it has not pulled yet starts at our position
            while span is not None and span.start < self.position:
                batch, span = self._pull()  # the old loader trained on this one meanwhile
        self._first = [(batch, span)]

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
