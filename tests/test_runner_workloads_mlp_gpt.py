"""mlp and gpt beyond their own test files: data made by seed, hello config, spawn workers.

The per-workload files (test_runner_workload_mlp.py / _gpt.py) cover shapes, learning and a
real run through the Session; this one covers what would only break on a second run or in a
spawned DataLoader worker.
"""

from __future__ import annotations

import multiprocessing
from typing import Any

import pytest
import torch

from gpuwatch.protocol import PROTOCOL_VERSION, encode
from gpuwatch.runner.batch_source import close_iterator
from gpuwatch.runner.workloads import load_workload
from gpuwatch.runner.workloads.dataset_workload import DatasetWorkload
from gpuwatch.runner.workloads.gpt import GptWorkload
from gpuwatch.runner.workloads.mlp import NUM_CLASSES, SIDE, MlpWorkload, build_digits

#: Small data so each test builds it in well under a second.
SMALL: dict[str, dict[str, int]] = {
    "mlp": {"dataset_images": 160},
    "gpt": {"dataset_sequences": 32},
}


def prepared(name: str, seed: int = 0) -> DatasetWorkload:
    work: DatasetWorkload = load_workload(name)(seed=seed, torch_threads=1, **SMALL[name])
    work.prepare(lambda _text: None)
    return work


def test_digits_are_deterministic_per_seed_and_balanced() -> None:
    images, labels = build_digits(40, seed=3)
    again, _ = build_digits(40, seed=3)
    other, _ = build_digits(40, seed=4)
    assert torch.equal(images, again) and not torch.equal(images, other)
    assert images.shape == (40, 1, SIDE, SIDE) and images.dtype == torch.float32
    assert torch.bincount(labels, minlength=NUM_CLASSES).tolist() == [4] * NUM_CLASSES
    # Normalized with MEAN/STD: roughly zero-mean, unit-spread over a balanced set.
    assert abs(float(images.mean())) < 0.3 and 0.7 < float(images.std()) < 1.3


def test_gpt_tokens_are_deterministic_per_seed() -> None:
    def first_item(seed: int) -> torch.Tensor:
        work = prepared("gpt", seed)
        return work.dataset(work.config)[0][0]

    assert torch.equal(first_item(1), first_item(1))
    assert not torch.equal(first_item(1), first_item(2))


@pytest.mark.parametrize(("name", "cls"), [("mlp", MlpWorkload), ("gpt", GptWorkload)])
def test_hello_config_describes_the_naive_baseline(name: str, cls: type[Any]) -> None:
    work = cls(seed=0, torch_threads=1)
    values = work.config
    assert work.name == name
    assert values["num_workers"] == 0 and values["log_every"] == 1
    assert values["pin_memory"] is False and values["batch_size"] >= 1
    encode(
        "hello",
        protocol=PROTOCOL_VERSION,
        pid=1,
        workload=name,
        device={},
        versions={},
        knobs=[],
        config={"id": 0, "values": values},
    )  # JSON-safe scalars


@pytest.mark.parametrize("name", ["mlp", "gpt"])
def test_a_spawned_worker_yields_the_same_batches(name: str) -> None:
    """The worker re-imports the workload module and unpickles the dataset (spawn);
    with the same seed its shuffled batches equal the in-process ones."""
    work = prepared(name)
    inline = next(iter(work.build_loader(work.config)))
    iterator = iter(work.build_loader(dict(work.config, num_workers=1)))
    try:
        spawned = next(iterator)
    finally:
        close_iterator(iterator)
    for ours, theirs in zip(inline, spawned, strict=True):
        assert torch.equal(ours, theirs)
    assert multiprocessing.active_children() == []
