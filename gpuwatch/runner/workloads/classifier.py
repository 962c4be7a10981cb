"""What the image-classification demos (``vision``, ``mlp``) share beyond their data: the
optimizer and the cross-entropy loss over ``(images, labels)`` batches."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from gpuwatch.runner.workloads.dataset_workload import DatasetWorkload


class ClassifierWorkload(DatasetWorkload):
    """Batches are ``(images, labels)``; the loss is cross-entropy; SGD unless configured."""

    size_parameter = "dataset_images"

    def __init__(self, *, seed: int, torch_threads: int, dataset_images: int | None = None) -> None:
        super().__init__(seed=seed, torch_threads=torch_threads)
        if dataset_images is not None:
            self.config["dataset_images"] = dataset_images

    def optimizer_class(self) -> type[torch.optim.Optimizer]:
        return torch.optim.AdamW if self.config["optimizer"] == "adamw" else torch.optim.SGD

    def build_optimizer(
        self, model: nn.Module, *, foreach: bool | None = None, fused: bool | None = None
    ) -> torch.optim.Optimizer:
        if self.config["optimizer"] == "adamw":
            return torch.optim.AdamW(
                model.parameters(), lr=self.config["lr"], foreach=foreach, fused=fused
            )
        return torch.optim.SGD(
            model.parameters(), lr=self.config["lr"], momentum=0.9, foreach=foreach, fused=fused
        )

    def loss(self, model: nn.Module, batch: Any) -> torch.Tensor:
        images, labels = batch
        return nn.functional.cross_entropy(model(images), labels)
