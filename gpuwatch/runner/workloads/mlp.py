"""The ``mlp`` demo: the classic feed-forward net on 28×28 synthetic digits.

The digits are drawn once in memory from a stroke template per class (a tiny vector font),
each copy with its own jitter, affine warp, stroke width and noise: learnable like MNIST, with
no download, ever. The dataset is one tensor, so ``__getitem__`` is a cheap index and the
``data`` phase stays small. What remains per step is a few small matmuls, i.e. on a GPU a long
row of tiny kernels (launch-bound) and, with the naive ``log_every=1``, a ``.item()`` that
drains the queue every step (sync-bound): the gaps CUDA graphs / ``torch.compile`` and a
larger ``log_every`` close (measurement.md §5).

The dataset is a top-level picklable class, because DataLoader workers are started with
``spawn`` on every OS, as Windows has it.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset

from gpuwatch.runner.workloads import Log
from gpuwatch.runner.workloads.classifier import ClassifierWorkload

NUM_CLASSES = 10
SIDE = 28
#: Pixel statistics of the synthetic digits (measured once; exactness does not matter).
MEAN = 0.18
STD = 0.32

#: Naive baseline: per-step ``.item()``, no workers. Sized so a CPU step takes tens of ms
#: (measured on a 2-core CPU with 1 intra-op thread) while each
#: matmul stays a microsecond-scale kernel on a GPU, where the step is launch/sync-bound.
#: The other knobs start at ``knobs.NAIVE_DEFAULTS``.
DEFAULTS: dict[str, Any] = {
    "batch_size": 128,
    "hidden": 512,
    "layers": 3,
    "dataset_images": 4096,
    "epoch_samples": 65536,  # 512 steps of 128: see dataset_workload
    "optimizer": "sgd",
    "lr": 0.05,
}


def _ellipse(
    cx: float, cy: float, rx: float, ry: float, points: int = 12
) -> list[tuple[float, float]]:
    """A closed polyline around an ellipse (for 0, 6, 8, 9)."""
    return [
        (cx + rx * math.sin(2 * math.pi * i / points), cy - ry * math.cos(2 * math.pi * i / points))
        for i in range(points + 1)
    ]


#: One list of polylines per digit, in a unit box (x right, y down).
STROKES: tuple[tuple[list[tuple[float, float]], ...], ...] = (
    (_ellipse(0.5, 0.5, 0.24, 0.38),),
    ([(0.35, 0.25), (0.52, 0.1), (0.52, 0.9)],),
    ([(0.25, 0.3), (0.35, 0.13), (0.62, 0.11), (0.74, 0.28), (0.26, 0.9), (0.78, 0.9)],),
    ([(0.25, 0.15), (0.7, 0.14), (0.45, 0.45), (0.72, 0.6), (0.66, 0.85), (0.25, 0.88)],),
    ([(0.64, 0.9), (0.64, 0.1), (0.2, 0.64), (0.8, 0.64)],),
    (
        [
            (0.75, 0.1),
            (0.32, 0.1),
            (0.29, 0.45),
            (0.63, 0.43),
            (0.76, 0.66),
            (0.62, 0.88),
            (0.25, 0.85),
        ],
    ),
    ([(0.68, 0.1), (0.36, 0.34), (0.28, 0.68)], _ellipse(0.49, 0.69, 0.21, 0.2)),
    ([(0.22, 0.12), (0.78, 0.12), (0.42, 0.9)],),
    (_ellipse(0.5, 0.29, 0.18, 0.18), _ellipse(0.5, 0.7, 0.23, 0.21)),
    (_ellipse(0.5, 0.31, 0.2, 0.2), [(0.7, 0.31), (0.66, 0.62), (0.55, 0.9)]),
)


def _segments(label: int) -> torch.Tensor:
    """The digit's strokes as ``(S, 2, 2)`` segment endpoints, in pixels."""
    segments = [(a, b) for line in STROKES[label] for a, b in itertools.pairwise(line)]
    return torch.tensor(segments, dtype=torch.float32) * (SIDE - 1)


def draw_digits(label: int, count: int, generator: torch.Generator) -> torch.Tensor:
    """``count`` float images ``(count, 28, 28)`` in [0, 1] of one digit, each jittered.

    Every copy gets its own vertex wobble, rotation, scale, shear, shift and stroke width, then
    pixel noise, so the class is a family of shapes rather than one template to memorize.
    """
    segments = _segments(label)  # (S, 2, 2)
    centre = torch.full((2,), (SIDE - 1) / 2)
    points = segments[None].expand(count, -1, -1, -1) - centre
    points = points + torch.randn(points.shape, generator=generator) * 0.6
    angle = (torch.rand(count, generator=generator) - 0.5) * math.radians(30)
    scale = 0.75 + torch.rand(count, 2, generator=generator) * 0.25
    shear = (torch.rand(count, generator=generator) - 0.5) * 0.4
    cos, sin = angle.cos(), angle.sin()
    matrix = (
        torch.stack([torch.stack([cos, -sin + shear], -1), torch.stack([sin, cos], -1)], -2)
        * scale[:, None, :]
    )
    shift = (torch.rand(count, 2, generator=generator) - 0.5) * 4
    points = torch.einsum("nij,nsej->nsei", matrix, points) + centre + shift[:, None, None]

    ys, xs = torch.meshgrid(
        torch.arange(SIDE, dtype=torch.float32),
        torch.arange(SIDE, dtype=torch.float32),
        indexing="ij",
    )
    xs, ys = xs.reshape(1, -1, 1), ys.reshape(1, -1, 1)  # (1, P, 1): P pixels
    start_x, start_y = points[:, None, :, 0, 0], points[:, None, :, 0, 1]  # (N, 1, S)
    dir_x = points[:, None, :, 1, 0] - start_x
    dir_y = points[:, None, :, 1, 1] - start_y
    off_x, off_y = xs - start_x, ys - start_y  # (N, P, S)
    along = ((off_x * dir_x + off_y * dir_y) / (dir_x**2 + dir_y**2).clamp_min(1e-6)).clamp(0, 1)
    distance = ((off_x - along * dir_x) ** 2 + (off_y - along * dir_y) ** 2).amin(-1).sqrt()
    width = 0.8 + torch.rand(count, 1, generator=generator) * 1.0
    ink = (width + 0.5 - distance).clamp(0, 1)
    ink = ink + torch.randn(ink.shape, generator=generator) * 0.08
    return ink.clamp(0, 1).view(count, SIDE, SIDE)


def build_digits(count: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``count`` normalized images ``(count, 1, 28, 28)`` float32 and their ``int64`` labels.

    Labels cycle through the classes (balanced); the same seed gives the same tensors.
    """
    generator = torch.Generator().manual_seed(seed)
    labels = torch.arange(count) % NUM_CLASSES
    images = torch.empty(count, 1, SIDE, SIDE)
    for label in range(NUM_CLASSES):
        where = (labels == label).nonzero().flatten()
        images[where, 0] = draw_digits(label, where.numel(), generator)
    return (images - MEAN) / STD, labels


class DigitDataset(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """In-memory tensors; an item is a view, so per-sample cost is tiny (unlike ``vision``)."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor) -> None:
        self.images = images
        self.labels = labels

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.images[index], self.labels[index]


class Mlp(nn.Module):
    """Flatten, ``layers`` Linear+ReLU of width ``hidden``, then a linear classifier."""

    def __init__(self, hidden: int = 256, layers: int = 3, num_classes: int = NUM_CLASSES) -> None:
        super().__init__()
        widths = [SIDE * SIDE] + [hidden] * layers
        body: list[nn.Module] = [nn.Flatten()]
        for width_in, width_out in itertools.pairwise(widths):
            body += [nn.Linear(width_in, width_out), nn.ReLU()]
        self.body = nn.Sequential(*body)
        self.head = nn.Linear(widths[-1], num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


class MlpWorkload(ClassifierWorkload):
    """Synthetic-digit classification with a small MLP; launch- and sync-bound on a GPU.

    On a CPU the step is compute; on a GPU it is the gaps between many tiny kernels.
    """

    name = "mlp"
    defaults = DEFAULTS

    def __init__(self, *, seed: int, torch_threads: int, dataset_images: int | None = None) -> None:
        super().__init__(seed=seed, torch_threads=torch_threads, dataset_images=dataset_images)
        self._data: tuple[torch.Tensor, torch.Tensor] | None = None

    def prepare(self, log: Log) -> None:
        count = self.config["dataset_images"]
        log(f"building mlp dataset: {count} synthetic {SIDE}x{SIDE} digits")
        self._data = build_digits(count, self.seed)

    def dataset(self, config: dict[str, Any]) -> DigitDataset:
        if self._data is None:
            raise RuntimeError("MlpWorkload.prepare() must run before the dataset is used")
        return DigitDataset(*self._data)

    def build_model(self, device: torch.device) -> nn.Module:
        torch.manual_seed(self.seed)
        model = Mlp(hidden=self.config["hidden"], layers=self.config["layers"])
        return model.to(device).train()


WORKLOAD = MlpWorkload
