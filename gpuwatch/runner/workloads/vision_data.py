"""The ``vision`` demo's data pipeline: what a DataLoader worker unpickles and runs.

This module imports only the standard library, torch and PIL (Pillow, which every torchvision
install brings), never torchvision: a ``spawn`` worker (the start method gpuwatch uses on every
OS, as Windows has it) is a fresh interpreter that
imports what unpickling its dataset needs, and torchvision's package ``__init__`` pulls
``torchvision.models`` → ``ops`` → all of ``torch._dynamo`` (5–6 s of a worker's start-up on the
development machine, docs/performance.md §5). So JPEGs are decoded with PIL and the
augmentation (random resized crop, flip, colour jitter, normalisation, like torchvision's v2
``RandomResizedCrop`` + ``RandomHorizontalFlip`` + ``ColorJitter``) is written with plain torch
ops, keeping the per-sample CPU cost that makes the naive loop input-bound.

Randomness comes from torch's global generator, which the DataLoader seeds per worker.
"""

from __future__ import annotations

import ctypes
import io
import math
from collections.abc import Sequence

import torch
from PIL import Image
from torch.nn import functional
from torch.utils.data import Dataset

#: Per-channel statistics of the synthetic images (measured once; exactness does not matter).
MEAN = (0.45, 0.42, 0.40)
STD = (0.25, 0.25, 0.26)
#: ITU-R 601 luma weights, as torchvision's and PIL's greyscale use.
_LUMA = (0.2989, 0.587, 0.114)
#: Uniform draws one sample may consume (10 crop tries of 4, flip, 4 jitter factors, 4 orders).
_DRAWS = 49


def tensor_bytes(tensor: torch.Tensor, start: int = 0, stop: int | None = None) -> bytes:
    """A copy of bytes ``start:stop`` of a contiguous ``uint8`` CPU tensor.

    Without numpy (the runner may not have it) and without iterating element by element
    (``bytes(tensor.untyped_storage())`` does, ~0.1 s per image).
    """
    if tensor.dtype != torch.uint8 or tensor.device.type != "cpu" or not tensor.is_contiguous():
        raise ValueError("expected a contiguous uint8 CPU tensor")
    size = tensor.numel()
    stop = size if stop is None else stop
    if not 0 <= start <= stop <= size:
        raise IndexError(f"bytes {start}:{stop} outside a tensor of {size}")
    return ctypes.string_at(tensor.data_ptr() + start, stop - start)


def encode_jpeg(image: torch.Tensor, quality: int) -> bytes:
    """JPEG bytes of a ``uint8`` CHW RGB image."""
    height, width = image.shape[1:]
    pixels = tensor_bytes(image.permute(1, 2, 0).contiguous())
    out = io.BytesIO()
    Image.frombytes("RGB", (width, height), pixels).save(out, format="JPEG", quality=quality)
    return out.getvalue()


def decode_jpeg(data: bytes) -> torch.Tensor:
    """A ``uint8`` CHW RGB tensor from JPEG bytes."""
    with Image.open(io.BytesIO(data)) as image:
        rgb = image.convert("RGB")
        width, height = rgb.size
        pixels = bytearray(rgb.tobytes())  # writable: torch.frombuffer warns on read-only
    return torch.frombuffer(pixels, dtype=torch.uint8).view(height, width, 3).permute(2, 0, 1)


def _luma(image: torch.Tensor) -> torch.Tensor:
    """Per-pixel grey level of a float CHW image, shape 1HW."""
    red, green, blue = image.unbind(0)
    return red.mul(_LUMA[0]).add_(green, alpha=_LUMA[1]).add_(blue, alpha=_LUMA[2])[None]


def _blend(image: torch.Tensor, other: torch.Tensor, factor: float) -> torch.Tensor:
    return image.mul(factor).add_(other, alpha=1.0 - factor).clamp_(0.0, 1.0)


def shift_hue(image: torch.Tensor, shift: float) -> torch.Tensor:
    """Rotate the hue of a float CHW RGB image in [0, 1] by ``shift`` turns (via HSV)."""
    value, _ = image.max(dim=0)
    low, _ = image.min(dim=0)
    chroma = value - low
    grey = chroma == 0
    safe_chroma = torch.where(grey, torch.ones_like(chroma), chroma)
    saturation = chroma / torch.where(grey, torch.ones_like(value), value)
    red, green, blue = ((value[None] - image) / safe_chroma[None]).unbind(0)
    is_red = value == image[0]
    is_green = (value == image[1]) & ~is_red
    is_blue = ~(is_red | is_green)
    hue = (blue - green) * is_red + (2.0 + red - blue) * is_green + (4.0 + green - red) * is_blue
    hue = (hue / 6.0 + 1.0 + shift).remainder_(1.0)
    # Back to RGB: each channel n is v - v·s·clamp(min(k, 4 - k), 0, 1), k = (n + 6h) mod 6.
    sixths = hue.mul_(6.0)[None] + torch.tensor([5.0, 3.0, 1.0])[:, None, None]
    k = sixths.remainder_(6.0)
    ramp = torch.minimum(k, 4.0 - k).clamp_(0.0, 1.0)
    return value[None] - (value * saturation)[None] * ramp


class Augment:
    """Random resized crop + horizontal flip + colour jitter + normalisation, in plain torch.

    Mirrors torchvision's ``RandomResizedCrop(size, scale, antialias=True)``,
    ``RandomHorizontalFlip()``, ``ColorJitter(brightness, contrast, saturation, hue)`` (random
    order of the four) and ``Normalize(MEAN, STD)``: ``uint8`` CHW in, normalised ``float32``
    CHW of ``size`` × ``size`` out.
    """

    def __init__(
        self,
        size: int,
        *,
        scale: tuple[float, float] = (0.35, 1.0),
        ratio: tuple[float, float] = (3 / 4, 4 / 3),
        brightness: float = 0.4,
        contrast: float = 0.4,
        saturation: float = 0.4,
        hue: float = 0.1,
        mean: Sequence[float] = MEAN,
        std: Sequence[float] = STD,
    ) -> None:
        self.size = size
        self.scale = scale
        self.log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
        self.brightness = brightness
        self.contrast = contrast
        self.saturation = saturation
        self.hue = hue
        self.mean = torch.tensor(mean, dtype=torch.float32)[:, None, None]
        self.std = torch.tensor(std, dtype=torch.float32)[:, None, None]

    def crop_box(self, height: int, width: int, draws: list[float]) -> tuple[int, int, int, int]:
        """``(top, left, h, w)`` like ``RandomResizedCrop.get_params``: 10 tries of an area in
        ``scale`` and a log-uniform aspect ratio, else the centre crop of the clamped ratio."""
        area = height * width
        for attempt in range(10):
            u_area, u_ratio, u_top, u_left = draws[4 * attempt : 4 * attempt + 4]
            target = area * (self.scale[0] + (self.scale[1] - self.scale[0]) * u_area)
            aspect = math.exp(self.log_ratio[0] + (self.log_ratio[1] - self.log_ratio[0]) * u_ratio)
            w = round(math.sqrt(target * aspect))
            h = round(math.sqrt(target / aspect))
            if 0 < w <= width and 0 < h <= height:
                return int(u_top * (height - h + 1)), int(u_left * (width - w + 1)), h, w
        in_ratio = width / height
        low, high = math.exp(self.log_ratio[0]), math.exp(self.log_ratio[1])
        if in_ratio < low:
            w, h = width, round(width / low)
        elif in_ratio > high:
            h, w = height, round(height * high)
        else:
            w, h = width, height
        return (height - h) // 2, (width - w) // 2, h, w

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        draws = torch.rand(_DRAWS, dtype=torch.float64).tolist()  # one RNG call per sample
        top, left, h, w = self.crop_box(image.shape[1], image.shape[2], draws)
        crop = image[:, top : top + h, left : left + w].to(torch.float32).div_(255.0)
        out = functional.interpolate(
            crop[None],
            size=(self.size, self.size),
            mode="bilinear",
            align_corners=False,
            antialias=True,
        )[0].clamp_(0.0, 1.0)
        if draws[40] < 0.5:
            out = out.flip(-1)
        factors = draws[41:45]
        for which in sorted(range(4), key=lambda k: draws[45 + k]):
            if which == 0:
                out = out.mul_(1 + self.brightness * (2 * factors[0] - 1)).clamp_(0.0, 1.0)
            elif which == 1:
                out = _blend(out, _luma(out).mean(), 1 + self.contrast * (2 * factors[1] - 1))
            elif which == 2:
                out = _blend(out, _luma(out), 1 + self.saturation * (2 * factors[2] - 1))
            else:
                out = shift_hue(out, self.hue * (2 * factors[3] - 1))
        return out.sub_(self.mean).div_(self.std)


class JpegDataset(Dataset[tuple[torch.Tensor, int]]):
    """Decodes and augments one in-memory JPEG per item (like reading photos from disk).

    ``blob`` is every JPEG back to back in one ``uint8`` tensor, not ``bytes``: pickled for a
    spawned worker it becomes a shared-memory handle, so the worker's pickle stays under the OS
    pipe buffer. A few MB of ``bytes`` would make ``Process.start()`` block until that worker
    has imported torch and read them, so the workers would start one after the other.
    """

    def __init__(
        self, blob: torch.Tensor, offsets: list[int], labels: list[int], transform: Augment
    ) -> None:
        self.blob = blob
        self.offsets = offsets
        self.labels = labels
        self.transform = transform

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        data = tensor_bytes(self.blob, self.offsets[index], self.offsets[index + 1])
        return self.transform(decode_jpeg(data)), self.labels[index]


def collate(items: list[tuple[torch.Tensor, int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack images and labels (top-level so spawned workers can unpickle it)."""
    images, labels = zip(*items, strict=True)
    return torch.stack(images), torch.tensor(labels, dtype=torch.long)
