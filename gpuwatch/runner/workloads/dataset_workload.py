"""A workload fed by a map-style Dataset of ``(inputs, targets)`` pairs.

Every built-in demo is one: keeping the DataLoader construction and the batch copies here
means a loader knob (workers, pinned memory, non_blocking) behaves the same in all of them.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar

import torch
from torch.utils.data import DataLoader, Dataset

from gpuwatch.runner.workloads import Workload


class DatasetWorkload(Workload):
    """Loader, copies and sample count for batches of ``(inputs, targets)``."""

    #: The naive baseline settings (copied into ``config``).
    defaults: ClassVar[dict[str, Any]]
    #: Batch assembly for the DataLoader (None: PyTorch's default collate).
    collate_fn: ClassVar[Callable[[list[Any]], Any] | None] = None

    def __init__(self, *, seed: int, torch_threads: int) -> None:
        super().__init__(seed=seed, torch_threads=torch_threads)
        self.config.update(self.defaults)

    @abstractmethod
    def dataset(self, config: dict[str, Any]) -> Dataset[Any]:
        """The dataset for ``config`` (``prepare`` must have run)."""

    def build_loader(self, config: dict[str, Any]) -> DataLoader[Any]:
        workers = config["num_workers"]
        return DataLoader(
            self.dataset(config),
            batch_size=config["batch_size"],
            shuffle=True,
            drop_last=True,  # constant batch shapes; BatchNorm cannot train on a batch of 1
            num_workers=workers,
            collate_fn=type(self).collate_fn,
            pin_memory=config["pin_memory"],
            persistent_workers=config["persistent_workers"] and workers > 0,
            multiprocessing_context="spawn" if workers > 0 else None,
            generator=torch.Generator().manual_seed(self.seed),
        )

    def to_device(self, batch: Any, device: torch.device
                  ) -> tuple[torch.Tensor, torch.Tensor]:
        inputs, targets = batch
        non_blocking = self.config["non_blocking"]
        return (inputs.to(device, non_blocking=non_blocking),
                targets.to(device, non_blocking=non_blocking))

    def samples(self, batch: Any) -> int:
        return int(batch[0].shape[0])
