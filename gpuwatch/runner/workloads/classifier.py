"""What every image-classification demo shares: loader, optimizer, copies, loss.

``vision`` and ``mlp`` differ in their data and model only; keeping the loader and the step
pieces here means a knob (workers, pinned memory, non_blocking) behaves the same in both.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from gpuwatch.runner.workloads import Workload


class ClassifierWorkload(Workload):
    """A workload whose batches are ``(inputs, labels)`` and whose loss is cross-entropy."""

    #: The naive baseline settings (copied into ``config``).
    defaults: ClassVar[dict[str, Any]]
    #: Batch assembly for the DataLoader (None: PyTorch's default collate).
    collate_fn: ClassVar[Callable[[list[Any]], Any] | None] = None

    def __init__(self, *, seed: int, torch_threads: int,
                 dataset_images: int | None = None) -> None:
        super().__init__(seed=seed, torch_threads=torch_threads)
        self.config.update(self.defaults)
        if dataset_images is not None:
            self.config["dataset_images"] = dataset_images

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

    def build_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        if self.config["optimizer"] == "adamw":
            return torch.optim.AdamW(model.parameters(), lr=self.config["lr"])
        return torch.optim.SGD(model.parameters(), lr=self.config["lr"], momentum=0.9)

    def to_device(self, batch: Any, device: torch.device
                  ) -> tuple[torch.Tensor, torch.Tensor]:
        inputs, labels = batch
        non_blocking = self.config["non_blocking"]
        return (inputs.to(device, non_blocking=non_blocking),
                labels.to(device, non_blocking=non_blocking))

    def loss(self, model: nn.Module, batch: Any) -> torch.Tensor:
        inputs, labels = batch
        return nn.functional.cross_entropy(model(inputs), labels)

    def samples(self, batch: Any) -> int:
        return int(batch[0].shape[0])
