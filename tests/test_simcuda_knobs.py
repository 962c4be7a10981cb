"""Every CUDA-only knob branch of the runner, executed on the SIMULATED device (in-process,
``tests/simcuda``; a model, not a GPU): the availability checks, and the built-in loop
training under pin_memory, non_blocking, amp fp16 with a GradScaler, cudnn_benchmark, tf32 and
a fused optimizer, switched through the runner's own ``set`` handling. What the simulation can
show is asserted (flags set, tensors pinned and on the device, which host waits happen); what
needs a real GPU is listed in docs/design.md."""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Iterator
from multiprocessing import Pipe
from typing import Any

import pytest
import torch
from simcuda.fixtures import installed
from simcuda.model import SimConfig, SimGpu

from gpuwatch.runner import link as runner_link
from gpuwatch.runner.availability import knob_schema
from gpuwatch.runner.loop import TrainingLoop
from gpuwatch.runner.session import make_backend, resolve_device
from gpuwatch.runner.training_state import TrainingState
from gpuwatch.runner.workloads.mlp import MlpWorkload

CUDA_KNOBS = {
    "pin_memory": True,
    "non_blocking": True,
    "amp": "fp16",
    "tf32": True,
    "cudnn_benchmark": True,
    "optimizer_impl": "fused",
    "log_every": 1000,
}


@pytest.fixture
def sim() -> Iterator[SimGpu]:
    flags = (
        torch.backends.cuda.matmul.allow_tf32,
        torch.backends.cudnn.allow_tf32,
        torch.backends.cudnn.benchmark,
    )
    with installed(SimConfig(kernel_factor=1.5)) as gpu:
        yield gpu
    (
        torch.backends.cuda.matmul.allow_tf32,
        torch.backends.cudnn.allow_tf32,
        torch.backends.cudnn.benchmark,
    ) = flags


@pytest.fixture
def link() -> Iterator[runner_link.Link]:
    """The runner's real ``Link`` over a pipe, its messages collected."""
    ours, gui = Pipe()
    received: list[bytes] = []

    def drain() -> None:
        try:
            while True:
                received.append(gui.recv_bytes())
        except (EOFError, OSError):
            pass

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    lnk = runner_link.Link(ours, grace_s=60)
    lnk.received = received  # type: ignore[attr-defined]
    yield lnk
    lnk.finished()
    lnk.close()
    gui.close()
    reader.join(5)


def _workload() -> MlpWorkload:
    workload = MlpWorkload(seed=0, torch_threads=1, dataset_images=256)
    workload.config.update(batch_size=16, optimizer="adamw", hidden=64)
    workload.prepare(lambda _text: None)
    return workload


def _messages(link: runner_link.Link, kind: str) -> list[dict[str, Any]]:
    import json

    out = []
    for raw in link.received:  # type: ignore[attr-defined]
        message = json.loads(raw)
        out.extend(
            m
            for m in (message if isinstance(message, list) else [message])
            if m.get("kind") == kind
        )
    return out


def test_availability_on_cuda(sim: SimGpu) -> None:
    device = resolve_device(torch, "auto")
    assert device == torch.device("cuda", 0)
    schema = knob_schema(torch, _workload(), device).as_hello()
    knobs = {k["name"]: k for k in schema}
    for name in ("pin_memory", "non_blocking", "tf32", "cudnn_benchmark"):
        assert knobs[name]["enabled"], (name, knobs[name]["reason"])
    assert "fp16" not in knobs["amp"]["disabled_choices"]
    assert "bf16" not in knobs["amp"]["disabled_choices"]
    assert "fused" not in knobs["optimizer_impl"]["disabled_choices"]
    if importlib.util.find_spec("triton") is None:
        assert knobs["compile"]["reason"] == "Triton is not installed"
    else:  # reduce-overhead (CUDA graphs) is offered on CUDA, unlike on a CPU
        assert knobs["compile"]["enabled"]
        assert "reduce-overhead" not in knobs["compile"]["disabled_choices"]


def test_old_gpu_gets_reasons() -> None:
    with installed(SimConfig(capability=(7, 5))):
        schema = knob_schema(torch, _workload(), torch.device("cuda", 0)).as_hello()
    knobs = {k["name"]: k for k in schema}
    assert knobs["tf32"]["reason"] == ("needs compute capability 8.0 or newer (this GPU has 7.5)")
    assert knobs["amp"]["disabled_choices"]["bf16"] == "bf16 is not supported by this GPU"


def test_cuda_knobs_train_in_the_built_in_loop(sim: SimGpu, link: runner_link.Link) -> None:
    device = torch.device("cuda", 0)
    workload = _workload()
    model = workload.build_model(device)
    state = TrainingState(
        workload,
        model=model,
        optimizer=workload.build_optimizer(model),
        device=device,
        values=workload.knob_values(),
    )
    loop = TrainingLoop(
        workload,
        state=state,
        schema=knob_schema(torch, workload, device),
        backend=make_backend(torch, device),
        link=link,
        max_steps=7,
    )
    link.controls.put({"kind": "set", "values": CUDA_KNOBS, "request": 1})
    seen: dict[str, Any] = {}
    after_step = loop._after_step

    def fourth_step_then_switch() -> None:
        """After 4 steps under the CUDA knobs, look, then switch the optimizer back."""
        after_step()
        if loop.steps_done == 4:
            seen["waits"] = [w.kind for w in sim.waits]
            seen["fused_step_device"] = state.optimizer.state[param]["step"].device
            seen["fused"] = state.optimizer.param_groups[0]["fused"]
            seen["scaler"] = state.scaler is not None and state.scaler.is_enabled()
            sim.waits.clear()
            link.controls.put(
                {"kind": "set", "values": {"optimizer_impl": "foreach"}, "request": 2}
            )

    loop._after_step = fourth_step_then_switch  # type: ignore[method-assign]
    param = next(model.parameters())
    sim.waits.clear()  # the model's copy to the device waited (blocking copies)
    assert loop.run() == "max_steps", _messages(link, "log")
    assert _messages(link, "config")[0]["changed"] == CUDA_KNOBS
    assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
    assert torch.backends.cudnn.benchmark
    assert seen["scaler"] and seen["fused"]
    assert param.device == device and seen["fused_step_device"] == device
    # pinned + non_blocking copies, a fused optimizer taking the scaler's found_inf on the
    # device, the loss read beyond the run: no host wait in the first 4 steps.
    assert seen["waits"] == [], seen["waits"]
    assert loop.batches.next_batch()[0].is_pinned(), "the DataLoader's pin thread pinned it"

    # Back to a foreach AdamW: the fused optimizer's device-side step counters came to the
    # host once (one read each), and the GradScaler checks for infs on the host every step.
    assert not state.optimizer.param_groups[0]["fused"]
    assert state.optimizer.state[param]["step"].device.type == "cpu"
    kinds = [w.kind for w in sim.waits]
    assert kinds.count("d2h_copy") == len(state.optimizer.state), kinds
    assert kinds.count("item") == 3, kinds
