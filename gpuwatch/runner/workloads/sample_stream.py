"""The run's samples as one numbered stream, so a rebuilt loader continues it exactly.

A loader knob (workers, pinned memory, prefetch, persistent workers, the demo dials) rebuilds
the DataLoader mid-run. With a ``RandomSampler`` the new loader would start its shuffle over and
its workers would draw other augmentations (a worker's random generator is seeded per worker, the
main process's is not), so changing *how* batches are made would change *which* samples the
model sees. Here every sample the run consumes has a **position** (0, 1, 2, ...), and what sits
at a position is a pure function of the seed and the position:

* which item: pass ``q = position // len(dataset)`` is a permutation of the dataset drawn from
  ``(seed, q)``;
* its randomness (augmentation): the CPU generator is seeded from ``(seed, position)`` for the
  item, then restored, whatever process or worker fetches it.

An epoch is ``epoch_samples`` positions; a loader pass yields whole batches of it (``drop_last``:
constant shapes) and the next pass starts at the next epoch. ``StreamBatchSampler`` remembers
the span of every batch it hands the DataLoader, in order, so the loop knows the position of each
batch it receives and a new loader can start (``start_at``) or go on (``seek``) from there.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import Dataset, Sampler

#: Seeds are ``seed × _SEED_STRIDE + k``: distinct for every position of any realistic run.
_SEED_STRIDE = 1 << 40
#: Marks pass-order seeds apart from sample seeds.
_ORDER_SALT = 1 << 39
_SEED_MASK = (1 << 63) - 1


@dataclass(frozen=True)
class SampleStream:
    """Positions → dataset items and sample seeds, for a dataset of ``size`` items."""

    seed: int
    size: int
    epoch_samples: int

    def order(self, pass_number: int) -> torch.Tensor:
        """The permutation of the dataset that pass ``pass_number`` visits."""
        generator = torch.Generator().manual_seed(self._seed(_ORDER_SALT + pass_number))
        return torch.randperm(self.size, generator=generator)

    def sample_seed(self, position: int) -> int:
        return self._seed(position)

    def epoch_end(self, position: int) -> int:
        """The first position after the epoch that ``position`` is in."""
        return (position // self.epoch_samples + 1) * self.epoch_samples

    def _seed(self, k: int) -> int:
        return (self.seed * _SEED_STRIDE + k) & _SEED_MASK


@dataclass(frozen=True)
class Span:
    """The positions ``[start, end)`` of one batch."""

    start: int
    end: int


class StreamBatchSampler(Sampler[list[int]]):
    """Batches of consecutive positions, one epoch per pass, starting at ``start``.

    The DataLoader pulls batches ahead (prefetch); ``take`` pops the span of the oldest batch
    pulled and not yet taken, i.e. of the batch the loader delivers next (in order). Pulling
    happens only on the thread that iterates the loader.
    """

    def __init__(self, stream: SampleStream, batch_size: int, start: int = 0) -> None:
        self.stream = stream
        self.batch_size = batch_size
        self._next = start
        self._end = start
        self._pulled: collections.deque[Span] = collections.deque()

    def start_at(self, position: int) -> None:
        """The next pass starts at ``position`` (before the loader is iterated)."""
        self._next = self._end = position

    def seek(self, position: int) -> None:
        """Batches not pulled yet start at ``position`` if it is ahead of them (a prepared
        loader catching up with the samples its predecessor consumed meanwhile)."""
        if position > self._next:
            self._next = position
            self._end = self.stream.epoch_end(position)

    def take(self) -> Span:
        return self._pulled.popleft()

    def __iter__(self) -> Iterator[list[int]]:
        start = self._next
        end = self.stream.epoch_end(start)
        if end - start < self.batch_size:  # the epoch's tail was dropped: the next one
            start, end = end, self.stream.epoch_end(end)
        self._next, self._end = start, end
        self._pulled.clear()  # a new pass: nothing of the previous one is still coming
        while self._next + self.batch_size <= self._end:  # ``seek`` may move both
            span = Span(self._next, self._next + self.batch_size)
            self._next = span.end
            self._pulled.append(span)
            yield list(range(span.start, span.end))
        self._next = self._end

    def __len__(self) -> int:
        return self.stream.epoch_samples // self.batch_size


class StreamDataset(Dataset[Any]):
    """Item ``position`` of the stream: the dataset's item there, with its own randomness.

    The CPU generator is seeded for the item and restored after it, so the item is the same in
    the training process and in any worker, and fetching it leaves the process's random state
    as it was.
    """

    def __init__(self, dataset: Dataset[Any], stream: SampleStream) -> None:
        self.dataset = dataset
        self.stream = stream
        self._orders: dict[int, torch.Tensor] = {}

    def __len__(self) -> int:
        return self.stream.size

    def __getitem__(self, position: int) -> Any:
        pass_number, offset = divmod(position, self.stream.size)
        order = self._orders.get(pass_number)
        if order is None:
            order = self.stream.order(pass_number)
            self._orders = {pass_number: order}  # passes are visited in turn: keep one
        index = int(order[offset])
        state = torch.get_rng_state()
        torch.default_generator.manual_seed(self.stream.sample_seed(position))
        try:
            return self.dataset[index]
        finally:
            torch.set_rng_state(state)
