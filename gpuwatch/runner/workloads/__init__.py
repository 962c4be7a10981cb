"""Built-in training workloads, and the interface the generic loop instruments.

A workload supplies the pieces that differ between demos (data, model, loss); the loop in
``gpuwatch.runner.loop`` owns the step itself, so every workload is measured at exactly the same
boundaries (docs/design.md, "A step's marks"). The loader is built from plain knob values, so
a knob change rebuilds it live without touching the loop.

This module imports no torch at import time: ``--help`` and argument errors stay instant.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, ClassVar

from gpuwatch.runner.knobs import KNOB_NAMES

if TYPE_CHECKING:
    import torch

#: Workload name -> module under ``gpuwatch.runner.workloads`` defining ``WORKLOAD``.
WORKLOAD_MODULES: dict[str, str] = {"vision": "vision", "mlp": "mlp", "gpt": "gpt"}
WORKLOAD_NAMES: tuple[str, ...] = tuple(WORKLOAD_MODULES)

Log = Callable[[str], None]


class Workload(ABC):
    """One demo training job: data pipeline, model, optimizer and loss.

    ``config`` holds the starting settings: the fixed workload parameters (sent as
    ``hello.workload_config``) and this workload's naive value of every knob (config id 0). Once
    training runs, the loop owns the live knob values.
    """

    name: ClassVar[str]
    #: Whether inputs are 4-D images through convolutions (``channels_last`` can help).
    channels_last_applies: ClassVar[bool] = False

    def __init__(self, *, seed: int, torch_threads: int) -> None:
        self.seed = seed
        self.config: dict[str, Any] = {"torch_threads": torch_threads}

    def knob_values(self) -> dict[str, Any]:
        """The starting value of every knob."""
        return {name: self.config[name] for name in KNOB_NAMES}

    def parameters(self) -> dict[str, Any]:
        """The fixed parameters (image size, widths, learning rate...): not knobs."""
        return {key: value for key, value in self.config.items() if key not in KNOB_NAMES}

    def knob_limits(self) -> dict[str, tuple[float, float]]:
        """Workload-specific knob ranges narrower than docs/knobs.md §1's."""
        return {}

    @abstractmethod
    def prepare(self, log: Log) -> None:
        """Build the in-memory dataset once (may take a second; reports progress via ``log``)."""

    @abstractmethod
    def build_loader(self, knobs: dict[str, Any]) -> Iterable[Any]:
        """A fresh loader for the loader knobs in ``knobs``; iterating it once is one epoch.

        A loader whose ``batch_sampler`` is a ``sample_stream.StreamBatchSampler`` lets a
        rebuilt loader continue the run's sample sequence where the old one stopped."""

    @abstractmethod
    def build_model(self, device: torch.device) -> torch.nn.Module:
        """The model, already on ``device`` and in training mode."""

    @abstractmethod
    def optimizer_class(self) -> type[torch.optim.Optimizer]:
        """The optimizer's class (probed for ``fused`` support before training)."""

    @abstractmethod
    def build_optimizer(
        self, model: torch.nn.Module, *, foreach: bool | None = None, fused: bool | None = None
    ) -> torch.optim.Optimizer:
        """The optimizer over ``model``'s parameters; ``foreach`` and ``fused`` (which kernels
        its step uses; None: torch's default) are passed to its constructor."""

    @abstractmethod
    def to_device(
        self,
        batch: Any,
        device: torch.device,
        *,
        non_blocking: bool = False,
        channels_last: bool = False,
    ) -> Any:
        """Issue the host-to-device copies of one batch (the ``h2d`` phase), converting 4-D
        inputs to ``channels_last`` if asked."""

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
