"""Knobs change how a step computes, never what (docs/knobs.md §1).

Every knob meant to be math-neutral is flipped in the real loop (``TrainingLoop`` with its
``Reconfigurer``, ``BatchSource`` and ``TrainingState``), alone, in every ordered pair and all
together, and the model after ``STEPS`` steps must equal, within float rounding, the model of a
run that never flipped anything. In-process, on the CPU, with a tiny ``vision`` workload
(convolutions, BatchNorm, JPEG decode and a random augmentation per sample) so that layout,
optimizer and data all matter. The CUDA-only knobs run on the simulated device
(``tests/simcuda``): the simulation executes the branch, its numbers are the CPU's.

Tolerance (``assert_same_model``): float32 has eps = 1.2e-7. A neutral knob may change the
*order* of float32 sums (channels_last picks other convolution kernels; foreach/fused group the
optimizer's arithmetic differently), which changes a result by a few eps relative; ``STEPS``
steps of AdamW at lr 1e-3 carry that into weights of magnitude 0.1-1. Measured over this whole
module: at most 1.2e-7, most runs bit-identical. ``ATOL`` = 2e-6 (plus ``RTOL`` = 1e-5) leaves
more than 10x margin and stays three orders of magnitude below the faults it catches: a fused
AdamW with moments in the old layout was 4e-3 off, a rebuilt loader that restarted the sample
sequence 7e-2. The
learning rate is small on purpose: at lr 1e-2 this tiny BatchNorm net is chaotic enough that two
correct implementations (for-loop and fused AdamW, each from the start) end 1e-3 apart after 8
steps, which no tolerance could tell from a fault. A run whose flipped knobs cannot reorder a
sum (all but ``ROUNDING``) must give the very same bits.
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

from gpuwatch.protocol import encode
from gpuwatch.runner.availability import knob_schema
from gpuwatch.runner.batch_source import BatchSource
from gpuwatch.runner.knobs import CHANGES_THE_WEIGHTS, KNOB_NAMES, SPECS
from gpuwatch.runner.loop import TrainingLoop
from gpuwatch.runner.timing import HostBackend
from gpuwatch.runner.training_state import OPTIMIZER_FLAGS, TrainingState
from gpuwatch.runner.worker_start import warm_up
from gpuwatch.runner.workloads.vision import VisionWorkload

CPU = torch.device("cpu")
pytestmark = pytest.mark.filterwarnings("ignore:The image decoding:DeprecationWarning")

STEPS = 8
#: The steps at whose start the first and the second change apply.
FIRST, SECOND = 2, 5
ATOL, RTOL = 2e-6, 1e-5
#: The knobs that may change the order of float32 sums; the others must give the very same bits.
ROUNDING = frozenset({"channels_last", "optimizer_impl", "cudnn_benchmark"})

#: Each math-neutral knob that can change on a CPU, and the value it is flipped to from the
#: naive start. ``optimizer_impl`` goes to ``fused``, the implementation that needs the
#: optimizer state to follow the parameters' layout.
CPU_FLIPS: dict[str, dict[str, Any]] = {
    "channels_last": {"channels_last": True},
    "optimizer_impl": {"optimizer_impl": "fused"},
    "num_workers": {"num_workers": 1},
    "persistent_workers": {"persistent_workers": True},
    "prefetch_factor": {"prefetch_factor": 3},
    "log_every": {"log_every": 3},
    "zero_grad_set_to_none": {"zero_grad_set_to_none": True},
    "storage_latency_ms": {"storage_latency_ms": 0.1},
    "augment_cost": {"augment_cost": 1},
}
#: The CUDA-only ones, flipped on the simulated device.
CUDA_FLIPS: dict[str, dict[str, Any]] = {
    "pin_memory": {"pin_memory": True},
    "non_blocking": {"non_blocking": True},
    "cudnn_benchmark": {"cudnn_benchmark": True},
}


def tiny_vision(optimizer: str = "adamw") -> VisionWorkload:
    """16 JPEGs of 96 px cropped to 32, batches of 4, an epoch of 14 samples: 3 batches and a
    dropped tail, so an 8-step run crosses two epoch ends (persistent workers reset there)."""
    work = VisionWorkload(seed=3, torch_threads=1, dataset_images=16)
    work.config.update(
        batch_size=4, image_size=32, model_width=4, epoch_samples=14, optimizer=optimizer, lr=1e-3
    )
    work.prepare(lambda _text: None)
    return work


class PlannedLink:
    """``runner.link.Link`` for the loop: hands it each ``set`` at the boundary before step
    ``k`` and records what it answers (every message must pass ``protocol.encode``)."""

    def __init__(self, plan: dict[int, dict[str, Any]]) -> None:
        self.plan = dict(plan)
        self.lost = threading.Event()
        self.messages: list[dict[str, Any]] = []
        self.steps_done: Callable[[], int] = lambda: 0
        self.controls = self

    def get_nowait(self) -> dict[str, Any]:
        values = self.plan.pop(self.steps_done(), None)
        if values is None:
            raise queue.Empty
        return {"kind": "set", "values": values, "request": None}

    def send(self, kind: str, **fields: Any) -> None:
        encode(kind, **fields)
        self.messages.append({"kind": kind, **fields})

    send_batch = send

    def log(self, level: str, text: str) -> None:
        self.send("log", level=level, text=text)

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [m for m in self.messages if m["kind"] == kind]


def train(
    work: VisionWorkload,
    plan: dict[int, dict[str, Any]],
    *,
    start: dict[str, Any] | None = None,
    device: torch.device = CPU,
) -> dict[str, torch.Tensor]:
    """The model's weights and buffers after ``STEPS`` steps under ``plan``; every change in
    it must have been applied (a refused one would make the comparison vacuous)."""
    values = dict(work.knob_values(), **(start or {}))
    model = work.build_model(device)
    optimizer = work.build_optimizer(model, **OPTIMIZER_FLAGS[values["optimizer_impl"]])
    state = TrainingState(work, model=model, optimizer=optimizer, device=device, values=values)
    link = PlannedLink(plan)
    loop = TrainingLoop(
        work,
        state=state,
        schema=knob_schema(torch, work, device),
        backend=HostBackend(),
        link=link,  # type: ignore[arg-type]
        max_steps=STEPS,
    )
    link.steps_done = lambda: loop.steps_done
    assert loop.run() == "max_steps"
    problems = link.of("refused") + [m for m in link.of("log") if m["level"] == "error"]
    assert problems == [], problems
    assert [c["first_step"] for c in link.of("config")] == sorted(plan)
    assert loop.batches.workers() == []
    return {name: tensor.detach().to(CPU).clone() for name, tensor in model.state_dict().items()}


def assert_same_model(
    got: dict[str, torch.Tensor], want: dict[str, torch.Tensor], *flipped_knobs: str
) -> None:
    """Equal within float rounding if one of ``flipped_knobs`` may reorder sums (none named:
    assume one may), else bit for bit."""
    exact = bool(flipped_knobs) and not set(flipped_knobs) & ROUNDING
    atol, rtol = (0.0, 0.0) if exact else (ATOL, RTOL)
    assert got.keys() == want.keys()
    worst = max(((got[k].float() - want[k].float()).abs().max().item(), k) for k in want)
    for name, tensor in want.items():
        assert torch.allclose(got[name].float(), tensor.float(), atol=atol, rtol=rtol), (
            f"{name} is off by {(got[name].float() - tensor.float()).abs().max().item():.2e} "
            f"(largest difference: {worst[0]:.2e} in {worst[1]}; exact: {exact})"
        )


@pytest.fixture(scope="module", autouse=True)
def _warm_workers() -> None:
    """Workers fork from a server that imported torch once (as the runner does at start)."""
    warm_up(["torch", "gpuwatch.runner.workloads.vision_data"])


@pytest.fixture(scope="module")
def work() -> VisionWorkload:
    return tiny_vision()


@pytest.fixture(scope="module")
def reference(work: VisionWorkload) -> dict[str, torch.Tensor]:
    """The run that never changes a knob."""
    return train(work, {})


def flipped(name: str) -> dict[str, Any]:
    return dict(CPU_FLIPS, **CUDA_FLIPS)[name]


def naive(work: VisionWorkload, name: str) -> dict[str, Any]:
    return {knob: work.knob_values()[knob] for knob in flipped(name)}


def test_the_matrix_covers_every_knob_said_to_leave_the_weights_alone() -> None:
    """What the knob panel's help promises is what this module tests, knob for knob."""
    assert set(CPU_FLIPS) | set(CUDA_FLIPS) == set(KNOB_NAMES) - CHANGES_THE_WEIGHTS
    for name in KNOB_NAMES:
        says = "changes the weights" if name in CHANGES_THE_WEIGHTS else "same weights"
        assert says in SPECS[name].help, (name, SPECS[name].help)


# --- the CPU matrix -------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(CPU_FLIPS))
def test_one_knob_on_then_off_leaves_the_weights_alone(
    work: VisionWorkload, reference: dict[str, torch.Tensor], name: str
) -> None:
    plan = {FIRST: flipped(name), SECOND: naive(work, name)}
    assert_same_model(train(work, plan), reference, name)


@pytest.mark.parametrize(("first", "second"), list(itertools.permutations(CPU_FLIPS, 2)))
def test_two_knobs_in_either_order_leave_the_weights_alone(
    work: VisionWorkload, reference: dict[str, torch.Tensor], first: str, second: str
) -> None:
    plan = {FIRST: flipped(first), SECOND: flipped(second)}
    assert_same_model(train(work, plan), reference, first, second)


def test_every_cpu_knob_at_once_and_back_leaves_the_weights_alone(
    work: VisionWorkload, reference: dict[str, torch.Tensor]
) -> None:
    on = {knob: value for name in CPU_FLIPS for knob, value in flipped(name).items()}
    off = {knob: work.knob_values()[knob] for knob in on}
    assert_same_model(train(work, {FIRST: on, SECOND: off}), reference)


# --- the optimizer state follows the parameters' layout --------------------------------------


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
@pytest.mark.parametrize("impl", ["for-loop", "foreach", "fused"])
def test_optimizer_state_follows_the_layout_through_every_implementation(
    optimizer: str, impl: str
) -> None:
    """SGD momentum and AdamW moments, starting from each implementation: channels_last on,
    the next implementation, channels_last off, the one after."""
    work = tiny_vision(optimizer)
    order = ["for-loop", "foreach", "fused"]
    after = order[(order.index(impl) + 1) % 3]
    last = order[(order.index(impl) + 2) % 3]
    start = {"optimizer_impl": impl}
    plan = {
        1: {"channels_last": True},
        3: {"optimizer_impl": after},
        5: {"channels_last": False},
        6: {"optimizer_impl": last},
    }
    assert_same_model(train(work, plan, start=start), train(work, {}, start=start))


def test_a_fused_adamw_keeps_its_moments_in_the_parameters_layout() -> None:
    """The case that once broke: fused AdamW, then channels_last. Without the state following the
    parameters, the fused kernel pairs a channels_last weight with a contiguous moment."""
    work = tiny_vision("adamw")
    model = work.build_model(CPU)
    state = TrainingState(
        work,
        model=model,
        device=CPU,
        optimizer=work.build_optimizer(model, **OPTIMIZER_FLAGS["fused"]),
        values=dict(work.knob_values(), optimizer_impl="fused"),
    )
    batch = state.to_device(next(iter(work.build_loader(state.values))))
    state.backward(state.loss(batch))
    state.optimizer_step()
    state.apply(dict(state.values, channels_last=True), ["channels_last"])
    conv = model.stem[0].weight
    assert conv.is_contiguous(memory_format=torch.channels_last)
    moments = state.optimizer.state[conv]
    assert moments["exp_avg"].stride() == moments["exp_avg_sq"].stride() == conv.stride()


# --- the data: a rebuilt loader continues the sample sequence ---------------------------------


def batches_of(source: BatchSource, count: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [source.next_batch() for _ in range(count)]


def assert_same_batches(got: list[Any], want: list[Any]) -> None:
    assert len(got) == len(want)
    for step, ((images, labels), (want_images, want_labels)) in enumerate(
        zip(got, want, strict=True)
    ):
        assert torch.equal(labels, want_labels), f"batch {step}: other samples"
        assert torch.equal(images, want_images), f"batch {step}: other pixels"


@pytest.fixture(scope="module")
def sequence(work: VisionWorkload) -> list[Any]:
    """The first 12 batches (4 epochs) of a loader that is never rebuilt."""
    source = BatchSource(work, work.knob_values())
    try:
        return batches_of(source, 12)
    finally:
        source.close()


@pytest.mark.parametrize("at", [1, 3, 5])  # mid-epoch, at an epoch's first batch, its last
@pytest.mark.parametrize(
    "change",
    [
        {"num_workers": 1},
        {"num_workers": 2, "prefetch_factor": 3},
        {"num_workers": 1, "persistent_workers": True},
        {"augment_cost": 1, "storage_latency_ms": 0.1},
    ],
)
def test_a_rebuilt_loader_continues_the_sequence(
    work: VisionWorkload, sequence: list[Any], at: int, change: dict[str, Any]
) -> None:
    source = BatchSource(work, work.knob_values())
    try:
        got = batches_of(source, at)
        source.rebuild(dict(work.knob_values(), **change))
        got += batches_of(source, len(sequence) - at)
    finally:
        source.close()
    assert_same_batches(got, sequence)


@pytest.mark.parametrize("meanwhile", [0, 1, 4])  # 4: the old loader crosses an epoch end
@pytest.mark.parametrize("persistent", [False, True])
def test_a_prepared_loader_skips_what_the_old_one_delivered_meanwhile(
    work: VisionWorkload, sequence: list[Any], meanwhile: int, persistent: bool
) -> None:
    """``prepare`` starts the new workers at the current position while training goes on with
    the old loader; ``switch`` continues after the batches the old one delivered."""
    source = BatchSource(work, work.knob_values())
    ready = threading.Event()
    try:
        got = batches_of(source, 1)
        source.prepare(
            dict(work.knob_values(), num_workers=2, persistent_workers=persistent),
            on_ready=ready.set,
        )
        assert ready.wait(60), "the prepared loader's first batch never came"
        got += batches_of(source, meanwhile)
        source.switch()
        got += batches_of(source, len(sequence) - len(got))
    finally:
        source.close()
    assert_same_batches(got, sequence)


class WaitingQueue(queue.Queue[dict[str, Any]]):
    """The link's control queue; at one boundary it waits (60 s at most) for a condition, so
    a change prepared in the background applies within the run however slow its workers."""

    def hold_at(
        self, step: int, steps_done: Callable[[], int], condition: Callable[[], bool]
    ) -> None:
        self._hold = (step, steps_done, condition)

    def get_nowait(self) -> dict[str, Any]:
        step, steps_done, condition = self._hold
        if steps_done() == step and not condition():
            return self.get(timeout=60)  # the preparation's message, once its batch is in
        return super().get_nowait()


def test_a_change_prepared_in_the_background_leaves_the_weights_alone(
    work: VisionWorkload, reference: dict[str, torch.Tensor]
) -> None:
    """The runner's own path for a loader with workers (a control queue: the change waits for
    its workers while training goes on, then applies at a later boundary)."""
    model = work.build_model(CPU)
    state = TrainingState(
        work,
        model=model,
        optimizer=work.build_optimizer(model),
        device=CPU,
        values=work.knob_values(),
    )
    link = PlannedLink({})
    controls = WaitingQueue()
    link.controls = controls  # type: ignore[assignment]
    loop = TrainingLoop(
        work,
        state=state,
        schema=knob_schema(torch, work, CPU),
        backend=HostBackend(),
        link=link,  # type: ignore[arg-type]
        max_steps=STEPS,
    )
    controls.hold_at(SECOND, lambda: loop.steps_done, lambda: not loop.batches.preparing)
    controls.put({"kind": "set", "values": {"num_workers": 2, "channels_last": True}, "request": 1})
    assert loop.run() == "max_steps"
    (config,) = link.of("config")
    assert config["changed"] == {"num_workers": 2, "channels_last": True}
    trained = {name: t.detach().clone() for name, t in model.state_dict().items()}
    assert_same_model(trained, reference)


# --- CUDA-only knobs on the simulated device --------------------------------------------------


@pytest.fixture(scope="module")
def sim() -> Iterator[None]:
    from simcuda.fixtures import installed
    from simcuda.model import SimConfig

    flags = (
        torch.backends.cuda.matmul.allow_tf32,
        torch.backends.cudnn.allow_tf32,
        torch.backends.cudnn.benchmark,
    )
    with installed(SimConfig(kernel_factor=0.1, min_kernel_ns=0, launch_latency_ns=0)):
        yield
    (
        torch.backends.cuda.matmul.allow_tf32,
        torch.backends.cudnn.allow_tf32,
        torch.backends.cudnn.benchmark,
    ) = flags


@pytest.fixture(scope="module")
def sim_reference(sim: None, work: VisionWorkload) -> dict[str, torch.Tensor]:
    return train(work, {}, device=torch.device("cuda", 0))


#: Each CUDA-only knob with each other knob whose device path it meets: the layout (inputs
#: copied to channels_last), the fused optimizer, and the loader.
SIM_PAIRS = [
    pair
    for pair in itertools.permutations(
        [*CUDA_FLIPS, "channels_last", "optimizer_impl", "num_workers"], 2
    )
    if set(pair) & set(CUDA_FLIPS)
]


@pytest.mark.parametrize("name", list(CUDA_FLIPS))
def test_a_cuda_knob_on_then_off_leaves_the_weights_alone(
    work: VisionWorkload, sim_reference: dict[str, torch.Tensor], name: str
) -> None:
    plan = {FIRST: flipped(name), SECOND: naive(work, name)}
    assert_same_model(train(work, plan, device=torch.device("cuda", 0)), sim_reference, name)


@pytest.mark.parametrize(("first", "second"), SIM_PAIRS)
def test_cuda_knob_pairs_in_either_order_leave_the_weights_alone(
    work: VisionWorkload, sim_reference: dict[str, torch.Tensor], first: str, second: str
) -> None:
    plan = {FIRST: flipped(first), SECOND: flipped(second)}
    trained = train(work, plan, device=torch.device("cuda", 0))
    assert_same_model(trained, sim_reference, first, second)


def test_every_neutral_knob_at_once_on_the_simulated_device(
    work: VisionWorkload, sim_reference: dict[str, torch.Tensor]
) -> None:
    on = {
        knob: value
        for flips in (CPU_FLIPS, CUDA_FLIPS)
        for name in flips
        for knob, value in flips[name].items()
    }
    off = {knob: work.knob_values()[knob] for knob in on}
    assert_same_model(
        train(work, {FIRST: on, SECOND: off}, device=torch.device("cuda", 0)), sim_reference
    )
