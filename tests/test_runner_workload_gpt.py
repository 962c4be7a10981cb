"""The gpt workload: token data, a causal transformer step, and a real run through the Session."""

from __future__ import annotations

import math
import pickle

import torch

from gpuwatch.runner.workloads import load_workload
from gpuwatch.runner.workloads.gpt import GptWorkload, TinyGpt

CPU = torch.device("cpu")


def _prepared() -> GptWorkload:
    work = GptWorkload(seed=0, torch_threads=1, dataset_sequences=32)
    work.prepare(lambda _text: None)
    return work


def test_registered_and_dataset_shifts_targets_by_one() -> None:
    assert load_workload("gpt") is GptWorkload
    work = _prepared()
    dataset = pickle.loads(pickle.dumps(work.dataset(work.config)))  # what spawn workers get
    inputs, targets = dataset[5]
    context = work.config["context"]
    assert inputs.shape == targets.shape == (context,)
    assert inputs.dtype == torch.int64
    assert torch.equal(inputs[1:], targets[:-1])


def test_attention_is_causal() -> None:
    """Changing a later token must not change earlier positions' logits."""
    torch.manual_seed(0)
    model = TinyGpt(vocab=50, context=16, d_model=32, n_heads=4, n_layers=2).eval()
    idx = torch.randint(50, (1, 16))
    changed = idx.clone()
    changed[0, 10] = (idx[0, 10] + 1) % 50
    with torch.no_grad():
        a, b = model(idx), model(changed)
    assert torch.allclose(a[0, :10], b[0, :10], atol=1e-5)
    assert not torch.allclose(a[0, 10:], b[0, 10:], atol=1e-5)


def test_one_step_starts_near_uniform_and_trains() -> None:
    work = _prepared()
    model = work.build_model(CPU)
    opt = work.build_optimizer(model)
    batch = work.to_device(next(iter(work.build_loader(work.config))), CPU)
    loss = work.loss(model, batch)
    assert abs(loss.item() - math.log(work.config["vocab"])) < 0.5
    opt.zero_grad()
    loss.backward()
    opt.step()
    assert work.loss(model, batch).item() < loss.item()  # same batch: one step must help
