"""A training loop that uses the probe API: explicit steps and phases, and a live knob.

    python examples/probe_knob.py                 # runs as usual: gw.* calls do nothing
    gpuwatch run examples/probe_knob.py           # change "num_workers" in the knob panel

``gw.knob("num_workers", ...)`` appears in gpuwatch's knob panel; a change made there is seen
at the next ``gw.knob`` call, and the loop rebuilds its DataLoader with the new worker count,
so the input wait on the timeline grows or shrinks while it runs.
"""

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

import gpuwatch.probe as gw


class SlowSamples(Dataset):
    """Random features whose every sample costs ~2 ms of CPU (a heavy input pipeline)."""

    def __len__(self) -> int:
        return 2048

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        deadline = time.perf_counter() + 0.002
        while time.perf_counter() < deadline:
            pass
        x = torch.randn(64, generator=torch.Generator().manual_seed(index))
        return x, x.sum(dim=0, keepdim=True)


def make_loader(workers: int) -> DataLoader:
    return DataLoader(
        SlowSamples(),
        batch_size=32,
        shuffle=True,
        num_workers=workers,
        persistent_workers=workers > 0,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 1)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    done = 0
    while done < args.steps:
        workers = gw.knob(
            "num_workers",
            default=0,
            choices=[0, 1, 2, 4],
            help="DataLoader worker processes preparing batches",
        )
        print(f"training with num_workers={workers}")
        for x, y in make_loader(workers):
            with gw.step():
                with gw.phase("h2d"):
                    x, y = x.to(device), y.to(device)
                with gw.phase("forward"):
                    loss = nn.functional.mse_loss(model(x), y)
                with gw.phase("backward"):
                    loss.backward()
                with gw.phase("optimizer"):
                    optimizer.step()
                    optimizer.zero_grad()
            done += 1
            if (
                done >= args.steps
                or gw.knob("num_workers", default=0, choices=[0, 1, 2, 4]) != workers
            ):
                break  # rebuild the loader with the new worker count
    print(f"{done} steps, last loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
