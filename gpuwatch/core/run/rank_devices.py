"""One NVML utilization series per GPU the ranks of this machine train on.

Each rank names its CUDA device in its hello (or, for a script, in a ``device`` message at its
first step), by UUID and PCI bus id as well as its own CUDA index, so ranks with different
``CUDA_VISIBLE_DEVICES`` are still matched to the right GPU (``nvml.find_device``). The first
rank on a GPU gets an ``NvmlSampler`` writing into its model's coarse store; a later rank on the
same GPU shares that store (one series per GPU, not per rank). Rank 0's GPU is the one the
Session already samples into its own store (the utilization plot's main curve), so rank 0 is
given that store and no second sampler. A rank of another machine is not sampled: NVML only
reaches the GPUs of the machine it runs on.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from gpuwatch.core.model.messages import DeviceInfo
from gpuwatch.core.model.store import SeriesStore
from gpuwatch.core.run.rank_links import RankRun

#: Starts a sampler of ``device`` writing into ``store`` (the Session's ``_add_sampler``).
StartSampler = Callable[[SeriesStore, DeviceInfo], None]


@dataclass(frozen=True)
class RankGpu:
    """A GPU in use by the ranks: the first rank on it, the ranks sharing it, its series."""

    rank: int
    ranks: tuple[int, ...]
    device: DeviceInfo
    store: SeriesStore

    @property
    def label(self) -> str:
        who = ", ".join(str(r) for r in self.ranks)
        where = f"cuda:{self.device.index}" if self.device.index is not None else "GPU"
        return f"{where} of rank{'s' if len(self.ranks) > 1 else ''} {who}"


def device_key(device: DeviceInfo) -> str:
    """What identifies one GPU across ranks (a rank's CUDA index alone does not)."""
    return device.uuid or device.pci_bus_id or f"cuda index {device.index}"


class RankDevices:
    """Starts the samplers and hands each rank its GPU's series (see the module docstring)."""

    def __init__(self, start: StartSampler, primary: SeriesStore) -> None:
        self._start = start
        self._primary = primary
        self._lock = threading.Lock()
        self._gpus: dict[str, RankGpu] = {}

    def saw(self, run: RankRun) -> None:
        """``run`` said hello or named its device: sample its GPU, once per GPU."""
        hello = run.model.hello
        if run.remote or hello is None:
            return
        device = hello.device
        if device.kind != "cuda" or device.pending:
            return
        key, rank = device_key(device), run.info.rank
        start = False
        with self._lock:
            gpu = self._gpus.get(key)
            if gpu is None:
                store = self._primary if rank == 0 else run.model.coarse
                start = rank != 0  # the Session samples rank 0's own device
                gpu = RankGpu(rank, (rank,), device, store)
            elif rank not in gpu.ranks:
                gpu = RankGpu(gpu.rank, tuple(sorted((*gpu.ranks, rank))), gpu.device, gpu.store)
            self._gpus[key] = gpu
        run.model.coarse = gpu.store
        if start:
            self._start(gpu.store, device)

    def gpus(self) -> list[RankGpu]:
        """Every GPU in use by a rank of this machine, by its first rank."""
        with self._lock:
            return sorted(self._gpus.values(), key=lambda g: g.rank)
