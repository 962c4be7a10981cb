"""Built-in training workloads, and the interface the generic loop instruments.

A workload supplies the pieces that differ between demos (data, model, loss); the loop in
``gpuwatch.runner.loop`` owns the step itself, so every workload is measured at exactly the same
boundaries (DESIGN.md §4). Loader and model are built from a plain ``config`` dict so that a
later knob change can rebuild them live without touching the loop.

This module imports no torch at import time: ``--help`` and argument errors stay instant.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    import torch

#: Workload name -> module under ``gpuwatch.runner.workloads`` defining ``WORKLOAD``.
WORKLOAD_MODULES: dict[str, str] = {"vision": "vision", "mlp": "mlp", "gpt": "gpt"}
WORKLOAD_NAMES: tuple[str, ...] = tuple(WORKLOAD_MODULES)

Log = Callable[[str], None]


class Workload(ABC):
    """One demo training job: data pipeline, model, optimizer and loss.

    ``config`` holds the settings actually in use; it is sent in ``hello`` as config id 0.
    """

    name: ClassVar[str]

    def __init__(self, *, seed: int, torch_threads: int) -> None:
        self.seed = seed
        self.config: dict[str, Any] = {"torch_threads": torch_threads}

    @abstractmethod
    def prepare(self, log: Log) -> None:
        """Build the in-memory dataset once (may take a second; reports progress via ``log``)."""

    @abstractmethod
    def build_loader(self, config: dict[str, Any]) -> Iterable[Any]:
        """A fresh loader for ``config``; iterating it once is one epoch."""

    @abstractmethod
    def build_model(self, device: torch.device) -> torch.nn.Module:
        """The model, already on ``device`` and in training mode."""

    @abstractmethod
    def build_optimizer(self, model: torch.nn.Module) -> torch.optim.Optimizer:
        """The optimizer over ``model``'s parameters."""

    @abstractmethod
    def to_device(self, batch: Any, device: torch.device) -> Any:
        """Issue the host-to-device copies of one batch (the ``h2d`` phase)."""

    @abstractmethod
    def loss(self, model: torch.nn.Module, batch: Any) -> torch.Tensor:
        """Forward pass and loss of one on-device batch (the ``forward`` phase)."""

    @abstractmethod
    def samples(self, batch: Any) -> int:
        """How many samples the batch holds (for samples/s)."""


def load_workload(name: str) -> type[Workload]:
    """Import a workload's module only when it is used (torchvision is slow to import)."""
    module = importlib.import_module(f"{__name__}.{WORKLOAD_MODULES[name]}")
    workload: type[Workload] = module.WORKLOAD
    return workload
