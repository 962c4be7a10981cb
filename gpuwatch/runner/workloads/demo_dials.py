"""The demo dials: a Dataset wrapper that makes an input bottleneck vivid on any machine.

``storage_latency_ms`` sleeps per sample (a slow disk or network share: the process waits, the
CPU idles) and ``augment_cost`` burns CPU per sample (a heavy augmentation: the CPU is busy).
Workers fix the first by waiting in parallel and the second only as far as there are cores.
The wrapper is a top-level class so spawned DataLoader workers can unpickle it (``spawn`` on
every OS).
"""

from __future__ import annotations

import time
from typing import Any

import torch
from torch.utils.data import Dataset

#: Side of the square matmul one augmentation round does.
_SIDE = 128
#: Matmul+tanh rounds per ``augment_cost`` unit. Measured on the 2-core development machine
#: (AMD EPYC, one torch thread, as in the runner and in every DataLoader worker): one round takes
#: 0.128 ms, so a unit is about 0.5 ms. Faster CPUs make it cheaper: it is work, not a sleep.
_ROUNDS_PER_UNIT = 4


def burn_cpu(units: int) -> float:
    """Do ``units`` fixed portions of float work (~0.5 ms each, see ``_ROUNDS_PER_UNIT``).

    Returns a value derived from the result so the work cannot be skipped; the sample itself is
    left untouched, so the dial changes the cost of the pipeline, not what the model learns.
    """
    generator = torch.Generator().manual_seed(units)
    x = torch.rand(_SIDE, _SIDE, generator=generator)
    weight = torch.rand(_SIDE, _SIDE, generator=generator) / _SIDE
    for _ in range(units * _ROUNDS_PER_UNIT):
        x = torch.tanh(x @ weight)
    return float(x[0, 0])


class DemoDials(Dataset[Any]):
    """Wraps a map-style dataset; every item pays the dialled latency and CPU work first."""

    def __init__(
        self, dataset: Dataset[Any], *, storage_latency_ms: float, augment_cost: int
    ) -> None:
        self.dataset = dataset
        self.storage_latency_ms = storage_latency_ms
        self.augment_cost = augment_cost

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, index: int) -> Any:
        if self.storage_latency_ms > 0:
            time.sleep(self.storage_latency_ms / 1000)
        if self.augment_cost > 0:
            burn_cpu(self.augment_cost)
        return self.dataset[index]
