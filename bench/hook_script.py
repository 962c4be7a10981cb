"""A small user training script for pricing the zero-code hooks (``bench/overhead.py --script``).

Run as ``python bench/hook_script.py`` or ``gpuwatch run --headless bench/hook_script.py``: it
knows nothing of gpuwatch. It times its own loop (``perf_counter_ns`` around every batch) so
gpuwatch is judged by the script's clock, not by gpuwatch's own figures, and prints one JSON
line at the end (prefixed ``HOOK_SCRIPT``): the mean and median ns per batch over the timed
batches and a checksum of the final weights (watched = unwatched: the same seed gives the same
weights).

``--dataset iterable``: an ``IterableDataset`` of seeded random batches with gradient
accumulation (one optimizer step every ``--accumulate`` batches), like the issue's hold-out
script; ``--dataset map``: a ``TensorDataset`` in a plain shuffled map-style ``DataLoader``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

FEATURES = 128
HIDDEN = 512
CLASSES = 10


class RandomBatches(IterableDataset):
    """``n`` seeded random samples, generated one at a time as a real stream would be."""

    def __init__(self, n: int, seed: int) -> None:
        self.n = n
        self.seed = seed

    def __iter__(self):  # type: ignore[no-untyped-def]
        generator = torch.Generator().manual_seed(self.seed)
        for _ in range(self.n):
            x = torch.randn(FEATURES, generator=generator)
            yield x, int(x[0] > 0) + int(x[1] > 0)


class Training:
    """The script's model, optimizer and loader; ``batches(n)`` trains on the next ``n``
    batches (a new epoch starts when the loader runs out) and returns each one's time.
    ``hidden`` and ``batch_size`` small make a step of the same shape that costs little, so
    what the hooks add stands out (``bench/script_overhead.py``)."""

    def __init__(
        self,
        dataset: str,
        *,
        batches: int,
        batch_size: int | None,
        accumulate: int,
        seed: int,
        hidden: int = HIDDEN,
    ) -> None:
        torch.manual_seed(seed)
        self.model = nn.Sequential(
            nn.Linear(FEATURES, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, CLASSES),
        )
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        self.loss_fn = nn.CrossEntropyLoss()
        size = batch_size or (176 if dataset == "iterable" else 256)
        samples = batches * size
        self.loader: DataLoader
        if dataset == "iterable":
            self.loader = DataLoader(RandomBatches(samples, seed), batch_size=size)
            self.accumulate = accumulate
        else:
            generator = torch.Generator().manual_seed(seed)
            x = torch.randn(samples, FEATURES, generator=generator)
            y = (x[:, 0] > 0).long() + (x[:, 1] > 0).long()
            self.loader = DataLoader(
                TensorDataset(x, y),
                batch_size=size,
                shuffle=True,
                generator=torch.Generator().manual_seed(seed),
            )
            self.accumulate = 1
        self.index = 0
        self._batches = iter(self.loader)

    def batches(self, n: int | None = None) -> list[int]:
        """Train on ``n`` batches (None: the rest of this epoch); ns per batch, ``next()``
        included."""
        times: list[int] = []
        started = time.perf_counter_ns()
        while n is None or len(times) < n:
            try:
                x, y = next(self._batches)
            except StopIteration:
                self._batches = iter(self.loader)
                if n is None:
                    break
                continue
            loss = self.loss_fn(self.model(x), y) / self.accumulate
            loss.backward()
            self.index += 1
            if self.index % self.accumulate == 0:
                self.optimizer.step()
                self.optimizer.zero_grad()
            now = time.perf_counter_ns()
            times.append(now - started)
            started = now
        return times

    def weights(self) -> float:
        return sum(float(p.detach().double().sum()) for p in self.model.parameters())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dataset", choices=("iterable", "map"), default="iterable")
    parser.add_argument("--batches", type=int, default=600)
    parser.add_argument("--warmup", type=int, default=40)
    parser.add_argument("--batch-size", type=int, help="default: about 5 ms a batch here")
    parser.add_argument("--accumulate", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    training = Training(
        args.dataset,
        batches=args.batches,
        batch_size=args.batch_size,
        accumulate=args.accumulate,
        seed=args.seed,
    )
    times = training.batches()
    timed = times[args.warmup :]
    report = {
        "dataset": args.dataset,
        "batches": len(times),
        "timed": len(timed),
        "mean_ns": sum(timed) / len(timed),
        "median_ns": statistics.median(timed),
        "weights": training.weights(),
    }
    print("HOOK_SCRIPT " + json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
