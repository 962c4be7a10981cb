"""A workload fed by a map-style Dataset of ``(inputs, targets)`` pairs.

Every built-in demo is one: keeping the DataLoader construction and the batch copies here
means a loader knob (workers, pinned memory, prefetch, the demo dials) behaves the same in all
of them.

An epoch is ``epoch_samples`` samples, reshuffled passes over the in-memory dataset, rather than
one pass: the datasets are kept small so they build in a second, but a real epoch lasts minutes.
With one pass per epoch, non-persistent workers would be restarted every second or so (under
``spawn``, Windows: a fresh interpreter importing torch, seconds each), and ``num_workers`` alone
would look harmful. Workers start with ``worker_start.start_method()``.

The samples come as one numbered stream (``sample_stream``): which item and which augmentation a
position gets depends only on the seed and the position, so a loader rebuilt by a knob change
continues the run's sample sequence exactly, with or without workers.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar

import torch
from torch.utils.data import DataLoader, Dataset

from gpuwatch.runner.knobs import NAIVE_DEFAULTS, SPECS
from gpuwatch.runner.worker_start import start_method
from gpuwatch.runner.workloads import Workload
from gpuwatch.runner.workloads.demo_dials import DemoDials
from gpuwatch.runner.workloads.sample_stream import (
    SampleStream,
    StreamBatchSampler,
    StreamDataset,
)


class DatasetWorkload(Workload):
    """Loader, copies and sample count for batches of ``(inputs, targets)``."""

    #: This workload's fixed parameters (including ``epoch_samples``) and its naive
    #: ``batch_size``, copied into ``config`` over ``knobs.NAIVE_DEFAULTS``.
    defaults: ClassVar[dict[str, Any]]
    #: The ``config`` key holding the dataset's length (the largest usable batch).
    size_parameter: ClassVar[str]
    #: Batch assembly for the DataLoader (None: PyTorch's default collate).
    collate_fn: ClassVar[Callable[[list[Any]], Any] | None] = None

    def __init__(self, *, seed: int, torch_threads: int) -> None:
        super().__init__(seed=seed, torch_threads=torch_threads)
        self.config.update(NAIVE_DEFAULTS)
        self.config.update(self.defaults)

    @abstractmethod
    def dataset(self, config: dict[str, Any]) -> Dataset[Any]:
        """The dataset for ``config`` (``prepare`` must have run)."""

    def knob_limits(self) -> dict[str, tuple[float, float]]:
        """``drop_last`` keeps batch shapes constant, so a batch cannot exceed the dataset."""
        largest = SPECS["batch_size"].max
        assert largest is not None
        return {"batch_size": (1, min(largest, self.config[self.size_parameter]))}

    def build_loader(self, knobs: dict[str, Any]) -> DataLoader[Any]:
        workers = knobs["num_workers"]
        dataset: Dataset[Any] = self.dataset(self.config)
        if knobs["storage_latency_ms"] > 0 or knobs["augment_cost"] > 0:
            dataset = DemoDials(
                dataset,
                storage_latency_ms=knobs["storage_latency_ms"],
                augment_cost=knobs["augment_cost"],
            )
        # These options only exist with workers (DataLoader refuses them without).
        worker_options: dict[str, Any] = {}
        if workers > 0:
            worker_options = {
                "prefetch_factor": knobs["prefetch_factor"],
                "persistent_workers": knobs["persistent_workers"],
                "multiprocessing_context": start_method(),
            }
        stream = SampleStream(
            self.seed,
            len(dataset),  # type: ignore[arg-type]
            self.config["epoch_samples"],
        )
        return DataLoader(
            StreamDataset(dataset, stream),
            # whole batches only: constant shapes; BatchNorm cannot train on a batch of 1
            batch_sampler=StreamBatchSampler(stream, knobs["batch_size"]),
            num_workers=workers,
            collate_fn=type(self).collate_fn,
            pin_memory=knobs["pin_memory"],
            generator=torch.Generator().manual_seed(self.seed),  # the workers' base seed
            **worker_options,
        )

    def to_device(
        self,
        batch: Any,
        device: torch.device,
        *,
        non_blocking: bool = False,
        channels_last: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        inputs, targets = batch
        layout = (
            torch.channels_last if channels_last and inputs.dim() == 4 else torch.preserve_format
        )
        return (
            inputs.to(device, non_blocking=non_blocking, memory_format=layout),
            targets.to(device, non_blocking=non_blocking),
        )

    def samples(self, batch: Any) -> int:
        return int(batch[0].shape[0])
