"""A watched script's DataLoaders, and changing their worker settings while an epoch runs.

Installed in the runner's main process before the script runs (``install``) and removed after
it. Each DataLoader is named by where the script created it (``train.py:88``: the first frame
outside torch and gpuwatch). A loader is announced (``on_first_iter``) the first time it is
iterated, with the settings it was created with.

**Watched = unwatched.** Until a change is asked for, nothing here alters a loader: its batches,
their order, its workers and the random number streams are the ones ``python train.py`` gets.
The hooks only remember, per iterator, the last few index batches it handed to its workers (a
ring as long as its prefetch) and whether it ran out.

**A change** (``reconfigure``) sets the loader's ``num_workers``, ``pin_memory``,
``persistent_workers`` and ``prefetch_factor`` and, for a map-style dataset, replaces each of
its live iterators at once: the new iterator (built with the new settings) first re-requests the
index batches the old one had dispatched but not yet yielded, then draws the rest of the epoch
from the old one's own sampler iterator. So the epoch goes on with exactly the remaining batches,
in the same order: no sample twice, none skipped. The script still holds the old iterator, whose
``__next__`` from then on answers from the new one; the old one's workers are shut down.
Building the new iterator draws its worker base seed from the generator torch uses for that;
the generator's state is restored afterwards, so the script's own random numbers (the next
epoch's shuffle) stay those of an unchanged run. Workers' per-sample random numbers depend on
which worker serves a sample, as in PyTorch itself.

An ``IterableDataset`` cannot be resumed where it is (its position lives inside its workers): a
change to such a loader takes effect at its next epoch (its next ``iter()``).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import itertools
import os
import sys
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from gpuwatch.runner.worker_start import loader_start_method

#: Per-iterator state kept in the iterator's ``__dict__`` (no lookup table to keep in step).
_DISPATCHED = "_gpuwatch_dispatched"
_EXHAUSTED = "_gpuwatch_exhausted"
_REPLACED_BY = "_gpuwatch_replaced_by"
_STALE = "_gpuwatch_stale"
_STARTING = "_gpuwatch_starting"
#: What ``remove`` restores where a patched attribute was inherited: none of the class's own.
_INHERITED = object()


class WorkersStarting(Protocol):
    """An announced start of a new iterator's workers (``worker_start.WorkerStart``)."""

    def report(self) -> None: ...


#: Frames of these directories are not where a script created its loader.
_GPUWATCH_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


@dataclass(frozen=True)
class LoaderSettings:
    """The four settings the loader knobs change (``prefetch_factor``: torch's default 2 when
    the loader has none, i.e. no workers)."""

    num_workers: int
    pin_memory: bool
    persistent_workers: bool
    prefetch_factor: int

    @classmethod
    def of(cls, loader: Any) -> LoaderSettings:
        return cls(
            int(loader.num_workers),
            bool(loader.pin_memory),
            bool(loader.persistent_workers),
            int(loader.prefetch_factor) if loader.prefetch_factor is not None else 2,
        )


@dataclass
class LoaderRecord:
    """What the hooks know of one DataLoader object."""

    site: str
    own: LoaderSettings
    iterable: bool
    announced: bool = False


class LoaderHooks:
    """See the module docstring. ``on_created(loader, record)`` may change a new loader's
    settings (a change made earlier to loaders created at the same place);
    ``on_first_iter(loader, record)`` is called before a loader's first iterator is built."""

    def __init__(
        self,
        torch: Any,
        *,
        on_created: Callable[[Any, LoaderRecord], None],
        on_first_iter: Callable[[Any, LoaderRecord], None],
        on_error: Callable[[Exception], None] = lambda exc: None,
        on_workers_start: Callable[[int, str], WorkersStarting | None] = lambda n, how: None,
    ) -> None:
        self.torch = torch
        self.on_created = on_created
        self.on_first_iter = on_first_iter
        self.on_error = on_error
        #: A change starts ``n`` workers (``how``: their start method); the start it returns
        #: hears when their first batch is in.
        self.on_workers_start = on_workers_start
        #: True once a failure of ours switched the loader knobs off (the script goes on).
        self.off = False
        self.loaders: weakref.WeakKeyDictionary[Any, LoaderRecord] = weakref.WeakKeyDictionary()
        self._iterators: weakref.WeakKeyDictionary[Any, weakref.WeakSet[Any]] = (
            weakref.WeakKeyDictionary()
        )
        self._pid = os.getpid()
        self._restore: list[tuple[Any, str, Any]] = []

    # --- install / remove -------------------------------------------------------------------

    def install(self) -> None:
        from torch.utils.data import dataloader

        loader_class, iterator_class = dataloader.DataLoader, dataloader._BaseDataLoaderIter
        self._patch(loader_class, "__init__", self._wrap_init(loader_class.__init__))
        self._patch(loader_class, "__iter__", self._wrap_iter(loader_class.__iter__))
        self._patch(iterator_class, "__next__", _wrap_next(iterator_class.__next__))
        # only an iterator with workers has batches in flight to carry over (``_undelivered``):
        # a single-process one fetches each batch's indices without this wrapper in the way
        workers_class = dataloader._MultiProcessingDataLoaderIter
        self._patch(workers_class, "_next_index", _wrap_next_index(workers_class._next_index))
        self._patch(iterator_class, "_reset", _wrap_reset(iterator_class._reset))

    def remove(self) -> None:
        """Undo ``install`` (iterators already replaced keep answering from their new one)."""
        for owner, name, original in reversed(self._restore):
            with contextlib.suppress(Exception):
                if original is _INHERITED:
                    delattr(owner, name)
                else:
                    setattr(owner, name, original)
        self._restore = []

    def _patch(self, owner: Any, name: str, replacement: Any) -> None:
        self._restore.append((owner, name, owner.__dict__.get(name, _INHERITED)))
        setattr(owner, name, replacement)

    def _ours(self) -> bool:
        """Only the runner's own process (a forked worker inherits the patched classes), and
        only while nothing of ours has failed."""
        return not self.off and os.getpid() == self._pid

    def _call(self, callback: Callable[[Any, LoaderRecord], None], *args: Any) -> None:
        """A failure of ours never reaches the script's line: the knobs switch off instead."""
        try:
            callback(*args)
        except Exception as exc:
            self.off = True
            self.on_error(exc)

    def _wrap_init(self, original: Any) -> Any:
        @functools.wraps(original)
        def __init__(loader: Any, *args: Any, **kwargs: Any) -> None:
            original(loader, *args, **kwargs)
            if not self._ours() or loader in self.loaders:
                return  # a subclass's __init__ calling ours: recorded by the outer call
            try:
                iterable = loader._dataset_kind == self._iterable_kind()
                record = LoaderRecord(self._site(loader), LoaderSettings.of(loader), iterable)
                self.loaders[loader] = record
            except Exception as exc:
                self.off = True
                self.on_error(exc)
                return
            self._call(self.on_created, loader, record)

        return __init__

    def _wrap_iter(self, original: Any) -> Any:
        @functools.wraps(original)
        def __iter__(loader: Any) -> Any:
            record = self.loaders.get(loader) if self._ours() else None
            if record is None:
                return original(loader)
            if not record.announced:
                record.announced = True
                self._call(self.on_first_iter, loader, record)
            cached = loader.__dict__.get("_iterator")
            if cached is not None and cached.__dict__.get(_STALE):
                _shut_down(cached)  # built with settings changed since: rebuild
                loader._iterator = None
            iterator = original(loader)
            self._iterators.setdefault(loader, weakref.WeakSet()).add(iterator)
            return iterator

        return __iter__

    def _iterable_kind(self) -> Any:
        from torch.utils.data.dataloader import _DatasetKind

        return _DatasetKind.Iterable

    def _site(self, loader: Any) -> str:
        """``file.py:LINE`` of the script's line that created ``loader``."""
        return script_site(self.torch, sys._getframe(2), skip=loader)

    def end_workers(self) -> None:
        """The script is over: shut the workers of its loaders' iterators down now (a
        persistent loader's, one it left part-way, a replacement a change made), as torch does
        when an iterator goes. Left to a garbage collection, an iterator caught in a reference
        cycle (a loader in the script's globals) has its index queues closed before its
        ``__del__`` asks the workers to leave: torch then waits ``MP_STATUS_CHECK_INTERVAL``
        for each worker before it terminates them."""
        for loader, iterators in list(self._iterators.items()):
            for iterator in [*iterators, loader.__dict__.get("_iterator")]:
                if iterator is None:
                    continue
                for each in (iterator.__dict__.get(_REPLACED_BY), iterator):
                    if each is not None:
                        with contextlib.suppress(Exception):  # never the script's outcome
                            _shut_down(each)

    # --- a change ---------------------------------------------------------------------------

    def live_iterators(self, loader: Any) -> list[Any]:
        """The iterators of ``loader`` the script may still ask for a batch."""
        return [
            it for it in list(self._iterators.get(loader, ())) if not it.__dict__.get(_EXHAUSTED)
        ]

    def reconfigure(self, loader: Any, settings: LoaderSettings) -> bool:
        """Give ``loader`` ``settings``; True if its live iterators were replaced now, False if
        the change waits for its next epoch (an iterable dataset) or nothing was live. Raises
        (and leaves the loader as it was) if the new iterators cannot be built."""
        before = LoaderSettings.of(loader)
        record = self.loaders.get(loader)
        live = self.live_iterators(loader)
        cached = loader.__dict__.get("_iterator")
        _set(loader, settings)
        if record is not None and record.iterable:
            for iterator in [*live, cached]:
                if iterator is not None:
                    iterator.__dict__[_STALE] = True
            return False
        # The iterators the script holds, by the one that answers for them (a persistent
        # loader's next epoch hands out the replacement itself, so two may share one).
        holders: dict[int, tuple[Any, list[Any]]] = {}
        for iterator in live:
            current = iterator.__dict__.get(_REPLACED_BY) or iterator
            holders.setdefault(id(current), (current, []))[1].append(iterator)
        built: list[tuple[list[Any], Any, Any]] = []  # (script's iterators, current, new)
        starting = self._announce(loader, settings.num_workers) if holders else None
        try:
            for current, held in holders.values():
                built.append((held, current, self._resumed(loader, current)))
        except BaseException:
            for _, _, new in built:
                _shut_down(new)
            _set(loader, before)
            raise
        if starting is not None:
            for _, _, new in built:
                new.__dict__[_STARTING] = starting  # its first batch reports the start
        persistent = settings.persistent_workers and settings.num_workers > 0
        replaced = {id(current) for _, current, _ in built}
        if cached is not None and id(cached) not in replaced:
            _shut_down(cached)  # idle persistent workers with the old settings
        loader._iterator = None
        for held, current, new in built:
            for iterator in held:
                iterator.__dict__[_REPLACED_BY] = new  # a replacement is live only through it
            _shut_down(current)
            if persistent and loader._iterator is None:
                loader._iterator = new  # the next epoch reuses its workers
        return bool(built)

    def _announce(self, loader: Any, workers: int) -> WorkersStarting | None:
        """Say that new iterators' ``workers`` are about to start (none: nothing to say); the
        first batch one of them yields reports how long it took (spawned workers import torch
        before it: seconds)."""
        if workers <= 0:
            return None
        try:
            return self.on_workers_start(workers, loader_start_method(loader))
        except Exception as exc:  # a notice of ours: never the change's failure
            self.on_error(exc)
            return None

    def _resumed(self, loader: Any, current: Any) -> Any:
        """A new iterator of ``loader`` (its settings as set now) yielding exactly the batches
        ``current`` has not yielded yet, in the same order."""
        source = itertools.chain(_undelivered(current), current._sampler_iter)
        attribute = "batch_sampler" if loader._auto_collation else "sampler"
        real = loader.__dict__[attribute]
        object.__setattr__(loader, attribute, _Resume(source))  # DataLoader forbids setattr
        try:
            with _rng_kept(self.torch, loader.generator):
                new = loader._get_iterator()
        finally:
            object.__setattr__(loader, attribute, real)
        new._index_sampler = loader._index_sampler  # its len() and next epochs: the real one
        new._num_yielded = current._num_yielded
        return new


def script_site(torch: Any, frame: Any, *, skip: Any = None) -> str:
    """``file.py:LINE`` of the first frame from ``frame`` outward that is the script's: not in
    torch or gpuwatch, and not a method of ``skip`` (a DataLoader subclass's ``__init__``)."""
    torch_dir = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith((torch_dir, _GPUWATCH_DIR)) and (
            skip is None or frame.f_locals.get("self") is not skip
        ):
            return f"{os.path.basename(name)}:{frame.f_lineno}"
        frame = frame.f_back
    return "unknown"


class _Resume:
    """Stands in for the sampler while the new iterator is built: iterating it (torch does so
    twice while building a multi-process iterator) gives the one remaining sequence."""

    def __init__(self, source: Iterator[Any]) -> None:
        self._source = source

    def __iter__(self) -> Iterator[Any]:
        return self._source


def _undelivered(iterator: Any) -> list[Any]:
    """The index batches ``iterator`` dispatched to its workers and has not yielded, in
    dispatch order (none for a single-process iterator, which fetches on demand)."""
    tasks = getattr(iterator, "_task_info", None)
    if iterator._num_workers == 0 or not tasks:
        return []
    ring = iterator.__dict__.get(_DISPATCHED) or ()
    sent = iterator._send_idx
    order = sorted(tasks)
    if sent - order[0] > len(ring):
        raise RuntimeError("the loader's dispatched batches were not recorded")
    return [ring[len(ring) - (sent - task)] for task in order]


def _set(loader: Any, settings: LoaderSettings) -> None:
    workers = settings.num_workers
    object.__setattr__(loader, "num_workers", workers)
    object.__setattr__(loader, "prefetch_factor", settings.prefetch_factor if workers else None)
    object.__setattr__(loader, "pin_memory", settings.pin_memory)
    object.__setattr__(loader, "persistent_workers", settings.persistent_workers and workers > 0)


def _shut_down(iterator: Any) -> None:
    shut = getattr(iterator, "_shutdown_workers", None)
    if shut is not None:
        shut()


@contextlib.contextmanager
def _rng_kept(torch: Any, generator: Any) -> Iterator[None]:
    """Building an iterator draws its base seed; the script's random streams stay as they were."""
    state = torch.random.get_rng_state()
    own = generator.get_state() if generator is not None else None
    try:
        yield
    finally:
        torch.random.set_rng_state(state)
        if generator is not None:
            generator.set_state(own)


def _wrap_next(original: Any) -> Any:
    @functools.wraps(original)
    def __next__(iterator: Any) -> Any:
        target = iterator.__dict__.get(_REPLACED_BY) or iterator
        try:
            batch = original(target)
        except StopIteration:
            iterator.__dict__[_EXHAUSTED] = True
            raise
        if _STARTING in target.__dict__:
            _report_start(target.__dict__.pop(_STARTING))
        return batch

    return __next__


def _report_start(start: WorkersStarting) -> None:
    with contextlib.suppress(Exception):  # a notice of ours never raises into the script
        start.report()


def _wrap_next_index(original: Any) -> Any:
    @functools.wraps(original)
    def _next_index(iterator: Any) -> Any:
        index = original(iterator)
        ring = iterator.__dict__.get(_DISPATCHED)
        if ring is None:
            prefetch = getattr(iterator, "_prefetch_factor", None) or 1
            ring = collections.deque(maxlen=prefetch * max(1, iterator._num_workers) + 1)
            iterator.__dict__[_DISPATCHED] = ring
        ring.append(index)
        return index

    return _next_index


def _wrap_reset(original: Any) -> Any:
    @functools.wraps(original)
    def _reset(iterator: Any, *args: Any, **kwargs: Any) -> Any:
        iterator.__dict__.pop(_DISPATCHED, None)
        iterator.__dict__.pop(_EXHAUSTED, None)
        return original(iterator, *args, **kwargs)

    return _reset
