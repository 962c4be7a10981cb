"""A plain PyTorch training loop with no gpuwatch code in it.

    python examples/plain_loop.py --epochs 3        # trains, prints the loss
    gpuwatch run examples/plain_loop.py -- --epochs 3   # the same, watched

gpuwatch finds its steps by itself: each ``next()`` on the DataLoader starts one, and the
forward, ``backward()`` and ``optimizer.step()`` calls mark its phases. Two worker processes
prepare the batches (each sample costs ~1 ms of CPU, like decoding an image).
"""

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class NoisyDigits(Dataset):
    """Synthetic 28x28 "images" whose class is the brightest of ten stripes."""

    def __init__(self, size: int = 2048) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        generator = torch.Generator().manual_seed(index)
        label = index % 10
        image = torch.rand(1, 28, 28, generator=generator)
        image[:, :, label * 2 : label * 2 + 3] += 1.0
        deadline = time.perf_counter() + 0.001  # stand-in for decoding and augmenting
        while time.perf_counter() < deadline:
            pass
        return image, label


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, 256), nn.ReLU(), nn.Linear(256, 10)).to(
        device
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = DataLoader(
        NoisyDigits(),
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=2,
        persistent_workers=True,
    )
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
