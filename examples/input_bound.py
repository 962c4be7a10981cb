"""An input-bound training loop, as many first scripts are: a slow Dataset and no workers.

    python examples/input_bound.py                                    # trains, prints the loss
    gpuwatch run examples/input_bound.py                              # change num_workers live
    gpuwatch run --headless --seconds 20 examples/input_bound.py      # before ...
    gpuwatch run --headless --seconds 20 --set num_workers=2 examples/input_bound.py  # ... after

There is no gpuwatch code in it. Each sample costs ~2 ms of CPU in ``__getitem__`` (like decoding
and augmenting an image) while the model is small, so most of each step waits for input. The
DataLoader below gets gpuwatch's loader knobs by itself, named after the line that creates it
("DataLoader workers (input_bound.py:…)" in the Knobs panel): raise ``num_workers`` while it
trains and the epoch goes on with the remaining samples, now prepared by worker processes.
"""

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class SlowImages(Dataset):
    """Synthetic 3x32x32 "images" whose class is the brightest colour channel."""

    def __init__(self, size: int = 4096) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        generator = torch.Generator().manual_seed(index)
        label = index % 3
        image = torch.rand(3, 32, 32, generator=generator)
        image[label] += 0.5
        deadline = time.perf_counter() + 0.002  # stand-in for decoding and augmenting
        while time.perf_counter() < deadline:
            pass
        return image, label


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20)
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(16, 3),
    ).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loader = DataLoader(SlowImages(), batch_size=32, shuffle=True)
    for epoch in range(args.epochs):
        total = 0.0
        for images, labels in loader:
            images, labels = images.to(device), labels.to(device)
            loss = nn.functional.cross_entropy(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item()
        print(f"epoch {epoch}: mean loss {total / len(loader):.3f}")


if __name__ == "__main__":
    main()
