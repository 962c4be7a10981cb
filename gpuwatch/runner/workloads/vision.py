"""The ``vision`` demo: JPEG decode + augmentation per sample feeding a small ResNet.

The images are synthetic and made once in memory (no downloads, ever), then stored as JPEG
bytes so that every ``__getitem__`` pays a real decode and a real augmentation (random resized
crop, flip, colour jitter), like a folder of photos. With the naive baseline
(``num_workers=0``) that CPU work runs inside ``next(loader)``, so the ``data`` phase dominates
the step: the loop is input-bound, which the ``num_workers``/``pin_memory`` knobs visibly fix.

What a DataLoader worker unpickles and runs (dataset, augmentation, collate) lives in
``vision_data``, top-level and picklable because workers are started with ``spawn`` on every OS,
and importing neither torchvision nor this module: a worker then starts in the
time of ``import torch`` rather than that plus torchvision's (docs/performance.md §5).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from gpuwatch.runner.workloads import Log
from gpuwatch.runner.workloads.classifier import ClassifierWorkload
from gpuwatch.runner.workloads.vision_data import Augment, JpegDataset, collate, encode_jpeg

NUM_CLASSES = 10
#: Side of the stored JPEGs; the augmentation crops and resizes them to ``image_size``.
STORED_SIZE = 96
JPEG_QUALITY = 90

#: Naive baseline. Tuned on a 2-core CPU so a step takes ~100 ms with ``data`` the largest
#: phase; see ``VisionWorkload`` for the measured split.
#: The other knobs start at ``knobs.NAIVE_DEFAULTS``.
DEFAULTS: dict[str, Any] = {
    "batch_size": 32,
    "image_size": 64,
    "model_width": 8,
    "dataset_images": 512,
    "epoch_samples": 16384,  # 512 steps of 32: see dataset_workload
    "optimizer": "sgd",
    "lr": 0.05,
}


def synth_image(label: int, size: int, generator: torch.Generator) -> torch.Tensor:
    """One ``uint8`` CHW image: a smooth random background with a class-specific shape.

    ``label % 5`` picks the shape (disk, square, ring, stripes, cross) and ``label // 5`` a warm
    or cool colour, so the classes are learnable and a loss curve means something.
    """
    coarse = torch.rand(1, 3, 4, 4, generator=generator)
    background = (
        nn.functional.interpolate(coarse, size=(size, size), mode="bicubic", align_corners=False)[0]
        * 0.5
        + 0.1
    )
    ys, xs = torch.meshgrid(
        torch.arange(size, dtype=torch.float32),
        torch.arange(size, dtype=torch.float32),
        indexing="ij",
    )
    cy, cx = (torch.rand(2, generator=generator) * 0.5 + 0.25) * size
    radius = float(torch.rand(1, generator=generator)) * size * 0.2 + size * 0.15
    dy, dx = ys - cy, xs - cx
    inside = (dy.abs() < radius) & (dx.abs() < radius)
    shape = label % 5
    if shape == 0:
        mask = dy**2 + dx**2 < radius**2
    elif shape == 1:
        mask = inside
    elif shape == 2:
        dist = (dy**2 + dx**2).sqrt()
        mask = (dist < radius) & (dist > radius * 0.6)
    elif shape == 3:
        mask = inside & (torch.sin(ys * (2 * math.pi / 8)) > 0)
    else:
        mask = inside & ((dy.abs() < radius / 4) | (dx.abs() < radius / 4))
    warm = label // 5 == 0
    tint = torch.rand(3, generator=generator) * 0.3
    colour = (torch.tensor([0.9, 0.5, 0.1]) if warm else torch.tensor([0.1, 0.5, 0.9])) + tint
    image = torch.where(mask, colour.clamp(0, 1)[:, None, None], background)
    image = image + torch.randn(3, size, size, generator=generator) * 0.04
    return (image.clamp(0, 1) * 255).round().to(torch.uint8)


def build_jpegs(
    count: int, seed: int, size: int = STORED_SIZE
) -> tuple[torch.Tensor, list[int], list[int]]:
    """Encode ``count`` synthetic images; returns one byte blob, the offsets and the labels.

    One ``uint8`` tensor rather than a list or ``bytes``: a spawned worker then receives one
    shared-memory segment (see ``JpegDataset``).
    """
    generator = torch.Generator().manual_seed(seed)
    chunks: list[bytes] = []
    offsets = [0]
    labels: list[int] = []
    for index in range(count):
        label = index % NUM_CLASSES
        chunks.append(encode_jpeg(synth_image(label, size, generator), quality=JPEG_QUALITY))
        offsets.append(offsets[-1] + len(chunks[-1]))
        labels.append(label)
    return torch.frombuffer(bytearray(b"".join(chunks)), dtype=torch.uint8), offsets, labels


def build_transform(image_size: int) -> Augment:
    """The per-sample augmentation: the CPU work that makes the naive loop input-bound."""
    return Augment(
        image_size, scale=(0.35, 1.0), brightness=0.4, contrast=0.4, saturation=0.4, hue=0.1
    )


class ResidualBlock(nn.Module):
    """Two 3×3 conv-BN layers plus a (projected when the shape changes) shortcut."""

    def __init__(self, channels_in: int, channels_out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels_in, channels_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels_out)
        self.conv2 = nn.Conv2d(channels_out, channels_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels_out)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or channels_in != channels_out:
            self.shortcut = nn.Sequential(
                nn.Conv2d(channels_in, channels_out, 1, stride, bias=False),
                nn.BatchNorm2d(channels_out),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + self.shortcut(x))


class SmallResNet(nn.Module):
    """A ResNet-style CNN small enough that a CPU step stays in the tens of milliseconds."""

    def __init__(self, width: int = 8, num_classes: int = NUM_CLASSES) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, width, 3, 2, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True)
        )
        self.blocks = nn.Sequential(
            ResidualBlock(width, width, 1),
            ResidualBlock(width, width * 2, 2),
            ResidualBlock(width * 2, width * 4, 2),
        )
        self.head = nn.Linear(width * 4, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = self.blocks(self.stem(x))
        return self.head(features.mean(dim=(2, 3)))


class VisionWorkload(ClassifierWorkload):
    """Synthetic JPEG classification with a small ResNet; input-bound when naive."""

    name = "vision"
    defaults = DEFAULTS
    collate_fn = staticmethod(collate)
    channels_last_applies = True

    def __init__(self, *, seed: int, torch_threads: int, dataset_images: int | None = None) -> None:
        super().__init__(seed=seed, torch_threads=torch_threads, dataset_images=dataset_images)
        self._data: tuple[torch.Tensor, list[int], list[int]] | None = None

    def prepare(self, log: Log) -> None:
        count = self.config["dataset_images"]
        log(f"building vision dataset: {count} synthetic {STORED_SIZE}x{STORED_SIZE} JPEGs")
        self._data = build_jpegs(count, self.seed)

    def dataset(self, config: dict[str, Any]) -> JpegDataset:
        if self._data is None:
            raise RuntimeError("VisionWorkload.prepare() must run before the dataset is used")
        blob, offsets, labels = self._data
        return JpegDataset(blob, offsets, labels, build_transform(config["image_size"]))

    def build_model(self, device: torch.device) -> nn.Module:
        torch.manual_seed(self.seed)
        return SmallResNet(width=self.config["model_width"]).to(device).train()


WORKLOAD = VisionWorkload
