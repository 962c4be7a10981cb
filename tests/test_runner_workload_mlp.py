"""The mlp workload: learnable synthetic digits, cheap data, and a real run through the Session."""

from __future__ import annotations

import pickle

import numpy as np
import torch

from gpuwatch.protocol import WORKLOADS
from gpuwatch.runner.workloads import WORKLOAD_NAMES, load_workload
from gpuwatch.runner.workloads.mlp import NUM_CLASSES, SIDE, MlpWorkload

CPU = torch.device("cpu")


def _prepared(images: int = 320) -> MlpWorkload:
    work = MlpWorkload(seed=0, torch_threads=1, dataset_images=images)
    work.prepare(lambda _text: None)
    return work


def test_runner_registry_matches_the_gui_list() -> None:
    assert WORKLOAD_NAMES == WORKLOADS
    assert load_workload("mlp") is MlpWorkload


def test_dataset_is_picklable_and_shaped_like_mnist() -> None:
    work = _prepared()
    dataset = pickle.loads(pickle.dumps(work.dataset(work.config)))  # what spawn workers get
    image, label = dataset[3]
    assert image.shape == (1, SIDE, SIDE) and image.dtype == torch.float32
    assert label.dtype == torch.int64 and 0 <= int(label) < NUM_CLASSES
    assert len(dataset) == 320


def test_digits_are_learnable() -> None:
    """The synthetic classes carry signal: 40 SGD steps cut the loss well below chance."""
    work = _prepared()
    work.config["batch_size"] = 32  # 10 steps per epoch of 320 images
    work.config["epoch_samples"] = 320
    model = work.build_model(CPU)
    opt = work.build_optimizer(model)
    losses = []
    for _ in range(4):
        for batch in work.build_loader(work.config):
            loss = work.loss(model, work.to_device(batch, CPU))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    chance = float(np.log(NUM_CLASSES))
    assert losses[0] > 0.8 * chance
    assert np.mean(losses[-5:]) < 0.5 * chance, losses
