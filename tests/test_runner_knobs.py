"""Knobs in the runner (docs/knobs.md §1–§2), in-process on the CPU with the real loop.

A ``Script`` stands in for ``link.controls``: it hands the loop each ``set`` when a given number
of steps is done, and runs probes (plain callables) right at that step boundary, so a test can
look at the loader's workers or the model while training is under way.
"""

from __future__ import annotations

import multiprocessing
import pickle
import queue
import threading
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

from gpuwatch.protocol import (
    BUILTIN_KNOB_NAMES,
    KNOB_GROUPS,
    KNOB_TYPES,
    PROTOCOL_VERSION,
    encode,
)
from gpuwatch.runner import session
from gpuwatch.runner.availability import check_availability, knob_schema
from gpuwatch.runner.knobs import (
    KNOB_NAMES,
    NAIVE_DEFAULTS,
    REBUILDS,
    KnobError,
    initial_warmup,
    warmup_steps,
)
from gpuwatch.runner.loop import TrainingLoop
from gpuwatch.runner.reconfigure import ReconfigureError
from gpuwatch.runner.timing import HostBackend
from gpuwatch.runner.training_state import TrainingState
from gpuwatch.runner.workloads import load_workload
from gpuwatch.runner.workloads.dataset_workload import DatasetWorkload
from gpuwatch.runner.workloads.demo_dials import DemoDials, burn_cpu

CPU = torch.device("cpu")
pytestmark = pytest.mark.filterwarnings("ignore:The image decoding:DeprecationWarning")
#: Small data: vision has 2 steps per epoch (batch 32), mlp 1 (batch 128), gpt 4 (batch 8).
SMALL: dict[str, dict[str, int]] = {
    "vision": {"dataset_images": 64},
    "mlp": {"dataset_images": 160},
    "gpt": {"dataset_sequences": 32},
}
Plan = dict[int, list[Any]]


class Script:
    """``link.controls`` whose items become due at a step count; callables are probes."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.steps_done: Callable[[], int] = lambda: 0

    def get_nowait(self) -> dict[str, Any]:
        due = self.plan.get(self.steps_done(), [])
        while due:
            item = due.pop(0)
            if not callable(item):
                return item  # type: ignore[no-any-return]
            item()
        raise queue.Empty

    def get(self, timeout: float | None = None) -> dict[str, Any]:
        return self.get_nowait()


class RecordingLink:
    """Stands in for ``runner.link.Link``; every message must pass ``protocol.encode``."""

    def __init__(self, plan: Plan) -> None:
        self.controls = Script(plan)
        self.lost = threading.Event()
        self.messages: list[dict[str, Any]] = []

    def send(self, kind: str, **fields: Any) -> None:
        encode(kind, **fields)
        self.messages.append({"kind": kind, **fields})

    send_batch = send

    def log(self, level: str, text: str) -> None:
        self.send("log", level=level, text=text)

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [m for m in self.messages if m["kind"] == kind]

    def texts(self, level: str) -> list[str]:
        return [m["text"] for m in self.of("log") if m["level"] == level]

    def steps(self) -> list[tuple[int, int, int, list[int]]]:
        """(step id, config id, samples, host marks) of every step sent."""
        return [
            row
            for m in self.of("steps")
            for row in zip(m["step"], m["config"], m["samples"], m["host"], strict=True)
        ]


def setting(request: int | None = None, **values: Any) -> dict[str, Any]:
    return {"kind": "set", "values": values, "request": request}


@pytest.fixture(scope="module")
def prepared() -> Callable[[str], DatasetWorkload]:
    """Each workload's small data built once for the module (the loop never changes it)."""
    cache: dict[str, DatasetWorkload] = {}

    def get(name: str) -> DatasetWorkload:
        if name not in cache:
            work: DatasetWorkload = load_workload(name)(seed=0, torch_threads=1, **SMALL[name])
            work.config["epoch_samples"] = next(iter(SMALL[name].values()))  # one pass
            work.prepare(lambda _text: None)
            cache[name] = work
        return cache[name]

    return get


def make_loop(
    work: DatasetWorkload,
    plan: Plan,
    max_steps: int,
) -> tuple[TrainingLoop, RecordingLink]:
    link = RecordingLink(plan)
    model = work.build_model(CPU)
    state = TrainingState(
        work,
        model=model,
        optimizer=work.build_optimizer(model),
        device=CPU,
        values=work.knob_values(),
    )
    loop = TrainingLoop(
        work,
        state=state,
        schema=knob_schema(torch, work, CPU),
        backend=HostBackend(),
        link=link,
        max_steps=max_steps,
    )
    link.controls.steps_done = lambda: loop.steps_done
    return loop, link


# --- the schema -----------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "batch"), [("vision", 32), ("mlp", 128), ("gpt", 8)])
def test_schema_lists_every_knob_with_its_naive_default(name: str, batch: int) -> None:
    work = load_workload(name)(seed=0, torch_threads=1)
    knobs = knob_schema(torch, work, CPU).as_hello()
    assert [k["name"] for k in knobs] == list(KNOB_NAMES) == list(BUILTIN_KNOB_NAMES)
    for knob in knobs:
        assert knob["type"] in KNOB_TYPES and knob["group"] in KNOB_GROUPS
        assert knob["rebuilds"] in REBUILDS and knob["label"] and knob["help"]
        default = knob["default"]
        if knob["type"] == "choice":
            assert default in knob["choices"] and knob["min"] is None
            assert set(knob["disabled_choices"]) <= set(knob["choices"]) - {default}
        elif knob["type"] == "bool":
            assert isinstance(default, bool) and knob["choices"] is None
        else:
            assert knob["min"] <= default <= knob["max"] and knob["choices"] is None
        assert knob["enabled"] == (knob["reason"] is None)
        expected = batch if knob["name"] == "batch_size" else NAIVE_DEFAULTS[knob["name"]]
        assert default == expected
    encode(
        "hello",
        protocol=PROTOCOL_VERSION,
        pid=1,
        workload=name,
        device={},
        versions={},
        knobs=knobs,
        config={"id": 0, "values": work.knob_values()},
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU's reasons")
@pytest.mark.parametrize("name", ["vision", "mlp", "gpt"])
def test_what_cannot_work_on_a_cpu_is_disabled_with_its_reason(name: str) -> None:
    work = load_workload(name)(seed=0, torch_threads=1)
    knobs = {k["name"]: k for k in knob_schema(torch, work, CPU).as_hello()}
    for cuda_only in ("pin_memory", "non_blocking", "tf32", "cudnn_benchmark"):
        assert not knobs[cuda_only]["enabled"] and knobs[cuda_only]["reason"] == "needs CUDA"
    assert knobs["amp"]["disabled_choices"] == {"fp16": "needs CUDA"}  # bf16 runs on a CPU
    assert knobs["channels_last"]["enabled"] == (name == "vision")
    if name != "vision":
        assert "4-D image inputs" in knobs["channels_last"]["reason"]
    assert knobs["num_workers"]["enabled"] and knobs["optimizer_impl"]["disabled_choices"] == {}
    size = work.config["dataset_sequences" if name == "gpt" else "dataset_images"]
    assert knobs["batch_size"]["max"] == min(4096, size)  # drop_last: one batch at most


def test_availability_reports_a_missing_compiler_and_a_failing_bf16(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CXX", "no-such-compiler-gpuwatch")

    def no_bf16(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError("bf16 autocast is not built in")

    monkeypatch.setattr(torch, "autocast", no_bf16)
    found = check_availability(torch, CPU, optimizer_cls=torch.optim.SGD, channels_last=True)
    assert found.disabled["compile"] == (
        "no C++ compiler found (inductor needs no-such-compiler-gpuwatch; set CXX)"
    )
    assert found.disabled_choices["amp"]["bf16"].startswith("bf16 autocast fails here")


# --- validation -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"workers": 2}, "unknown knob 'workers'; the knobs are: num_workers, pin_memory, "),
        ({"num_workers": "two"}, "num_workers must be an integer from 0 to 16, got 'two'"),
        ({"num_workers": 1.5}, "num_workers must be an integer from 0 to 16, got 1.5"),
        ({"num_workers": True}, "num_workers must be an integer from 0 to 16, got True"),
        ({"num_workers": 17}, "num_workers must be an integer from 0 to 16, got 17"),
        (
            {"zero_grad_set_to_none": "yes"},
            "zero_grad_set_to_none must be true or false, got 'yes'",
        ),
        ({"storage_latency_ms": -1}, "storage_latency_ms must be a number from 0 to 200, got -1"),
        ({"batch_size": 100}, "batch_size must be an integer from 1 to 64, got 100"),  # 64 images
        ({"amp": "fp8"}, "amp must be one of off, fp16, bf16, got 'fp8'"),
        ({"amp": "fp16"}, "amp=fp16 is not available here: needs CUDA"),
        ({"pin_memory": True}, "pin_memory cannot be changed here: needs CUDA"),
        ({"log_every": 5, "tf32": True}, "tf32 cannot be changed here: needs CUDA"),
    ],
)
@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU availability")
def test_a_bad_set_is_refused_whole_with_one_sentence(values: dict[str, Any], message: str) -> None:
    work = load_workload("vision")(seed=0, torch_threads=1, **SMALL["vision"])
    schema = knob_schema(torch, work, CPU)
    with pytest.raises(KnobError) as refused:
        schema.validate(values, work.knob_values())
    assert str(refused.value).startswith(message)


def test_validation_cleans_numbers_and_allows_a_disabled_knob_at_its_value() -> None:
    work = load_workload("mlp")(seed=0, torch_threads=1)
    schema = knob_schema(torch, work, CPU)
    clean = schema.validate(
        {"num_workers": 2.0, "storage_latency_ms": 3, "pin_memory": False}, work.knob_values()
    )
    assert clean == {"num_workers": 2, "storage_latency_ms": 3.0, "pin_memory": False}
    assert type(clean["num_workers"]) is int and type(clean["storage_latency_ms"]) is float


def test_refused_set_keeps_training_on_the_old_config(
    prepared: Callable[[str], DatasetWorkload],
) -> None:
    loop, link = make_loop(
        prepared("mlp"),
        {
            1: [setting(3, num_workers="two", log_every=5)],
            2: [setting(4, amp="fp16")] if not torch.cuda.is_available() else [],
        },
        max_steps=4,
    )
    assert loop.run() == "max_steps"
    refusals = link.of("refused")
    assert refusals[0] == {
        "kind": "refused",
        "request": 3,
        "values": {"num_workers": "two", "log_every": 5},
        "message": "num_workers must be an integer from 0 to 16, got 'two'",
    }
    assert link.of("config") == [] and loop.state.values["log_every"] == 1  # all or nothing
    assert [config for _, config, _, _ in link.steps()] == [0, 0, 0, 0]
    assert loop.batches.workers() == []


# --- the config message and the warm-up rule ---------------------------------------------


def test_warmup_rule() -> None:
    values = dict(NAIVE_DEFAULTS, num_workers=4, prefetch_factor=3, log_every=50)
    assert warmup_steps({"num_workers": 4}, values) == 2 + 4 * 3
    assert warmup_steps({"batch_size": 64, "amp": "bf16"}, values) == 14
    assert warmup_steps({"compile": "default"}, dict(values, compile="default")) == 3
    assert warmup_steps({"compile": "off"}, values) == 1
    assert warmup_steps({"amp": "bf16"}, values) == 3
    assert warmup_steps({"log_every": 50}, values) == 50
    assert warmup_steps({"zero_grad_set_to_none": True, "optimizer_impl": "foreach"}, values) == 1
    assert initial_warmup(NAIVE_DEFAULTS) == 5


def test_config_messages_number_changes_and_steps_carry_the_new_id(
    prepared: Callable[[str], DatasetWorkload],
) -> None:
    loop, link = make_loop(
        prepared("mlp"),
        {
            2: [setting(7, batch_size=16)],
            4: [
                setting(8, log_every=2),
                setting(9, zero_grad_set_to_none=True),
                setting(10, log_every=2),
            ],
        },
        max_steps=7,
    )
    assert loop.run() == "max_steps"
    configs = link.of("config")
    first, second, third = configs
    assert first["id"] == 1 and first["request"] == 7 and first["first_step"] == 2
    assert first["changed"] == {"batch_size": 16} and first["rebuilt"] == ["loader"]
    assert first["warmup_steps"] == 2 and first["values"]["batch_size"] == 16
    assert set(first["values"]) == set(KNOB_NAMES)
    assert (second["id"], second["first_step"], second["warmup_steps"]) == (2, 4, 2)
    assert second["rebuilt"] == ["loop"] and second["changed"] == {"log_every": 2}
    assert (third["id"], third["first_step"], third["warmup_steps"]) == (3, 4, 1)
    assert first["t_ns"] <= second["t_ns"] <= third["t_ns"] and first["apply_s"] >= 0
    assert "nothing to change: log_every=2 is already in effect" in link.texts("info")
    steps = link.steps()
    assert [(step, config, samples) for step, config, samples, _ in steps] == [
        (0, 0, 128),
        (1, 0, 128),
        (2, 1, 16),
        (3, 1, 16),
        (4, 3, 16),
        (5, 3, 16),
        (6, 3, 16),
    ]
    # The steps before a change are sent before its config message, the later ones after it.

    def sent_at(step_id: int) -> int:
        return next(
            i for i, m in enumerate(link.messages) if m["kind"] == "steps" and step_id in m["step"]
        )

    assert sent_at(1) < link.messages.index(first) < sent_at(2)


# --- each knob really changes what the runner does --------------------------------------


def test_workers_start_after_a_change_persist_across_epochs_and_are_gone_after(
    prepared: Callable[[str], DatasetWorkload],
) -> None:
    seen: dict[str, list[tuple[int, bool]]] = {}
    processes: list[Any] = []

    def record(label: str) -> Callable[[], None]:
        def probe() -> None:
            workers = loop.batches.workers()
            processes.extend(workers)
            seen[label] = [(worker.pid, worker.is_alive()) for worker in workers]

        return probe

    loop, link = make_loop(
        prepared("vision"),
        {
            1: [setting(1, num_workers=2, persistent_workers=True)],
            3: [record("epoch 2")],  # 2 steps per epoch: step 3 starts the next epoch
            5: [record("epoch 3"), setting(2, num_workers=0)],
            6: [record("after")],
        },
        max_steps=7,
    )
    assert loop.run() == "max_steps"
    started = seen["epoch 2"]
    assert len(started) == 2 and all(alive for _pid, alive in started)
    assert seen["epoch 3"] == started  # the same live processes: not respawned
    assert seen["after"] == [] and not any(worker.is_alive() for worker in processes)
    assert multiprocessing.active_children() == []
    first, second = link.of("config")
    assert first["warmup_steps"] == 2 + 2 * 2 and second["warmup_steps"] == 2
    assert {c for _, c, _, _ in link.steps()} == {0, 1, 2}


def test_channels_last_changes_the_layout_the_model_sees(
    prepared: Callable[[str], DatasetWorkload],
) -> None:
    layouts: list[bool] = []
    loop, link = make_loop(
        prepared("vision"),
        {2: [setting(channels_last=True)], 4: [setting(channels_last=False)]},
        max_steps=6,
    )

    def remember(_module: nn.Module, args: tuple[torch.Tensor, ...]) -> None:
        layouts.append(args[0].is_contiguous(memory_format=torch.channels_last))

    loop.state.base_model.register_forward_pre_hook(remember)
    conv = next(m for m in loop.state.base_model.modules() if isinstance(m, nn.Conv2d))
    assert loop.run() == "max_steps"
    assert layouts == [False, False, True, True, False, False]
    assert conv.weight.is_contiguous()
    assert [c["rebuilt"] for c in link.of("config")] == [["model"], ["model"]]
    assert [c["warmup_steps"] for c in link.of("config")] == [3, 3]


def test_log_every_sets_how_often_the_loss_is_read(
    prepared: Callable[[str], DatasetWorkload], monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[int] = []
    item = torch.Tensor.item

    def counted(tensor: torch.Tensor) -> Any:
        if tensor.is_floating_point():  # the loss (a new DataLoader pass draws an int seed)
            reads.append(loop.steps_done)
        return item(tensor)

    loop, _link = make_loop(prepared("mlp"), {4: [setting(log_every=4)]}, max_steps=12)
    monkeypatch.setattr(torch.Tensor, "item", counted)
    assert loop.run() == "max_steps"
    assert reads == [0, 1, 2, 3, 7, 11]  # every step, then every 4th


@pytest.mark.parametrize(("name", "state_key"), [("mlp", "momentum_buffer"), ("gpt", "exp_avg")])
def test_optimizer_impl_rebuilds_the_optimizer_and_keeps_its_state(
    prepared: Callable[[str], DatasetWorkload], name: str, state_key: str
) -> None:
    seen: list[tuple[bool, bool, torch.Tensor]] = []

    def record() -> None:
        optimizer = loop.state.optimizer
        first = optimizer.param_groups[0]["params"][0]
        seen.append(
            (
                optimizer.param_groups[0]["foreach"],
                optimizer.param_groups[0]["fused"],
                optimizer.state[first][state_key].clone(),
            )
        )

    loop, link = make_loop(
        prepared(name),
        {
            2: [record, setting(optimizer_impl="foreach"), record],
            3: [setting(optimizer_impl="fused"), record],
        },
        max_steps=4,
    )
    original = loop.state.optimizer
    assert loop.run() == "max_steps"
    before, foreach, fused = seen
    assert before[:2] == (False, False) and foreach[:2] == (True, False)
    assert fused[:2] == (False, True)
    assert torch.equal(before[2], foreach[2])  # the state survived the rebuild
    assert loop.state.optimizer is not original
    assert type(loop.state.optimizer) is type(original)
    params = set(map(id, loop.state.base_model.parameters()))
    assert {id(p) for g in loop.state.optimizer.param_groups for p in g["params"]} == params
    assert [c["rebuilt"] for c in link.of("config")] == [["optimizer"], ["optimizer"]]


def test_zero_grad_set_to_none_leaves_grads_none_instead_of_zero(
    prepared: Callable[[str], DatasetWorkload],
) -> None:
    grads: list[list[str]] = []

    def record() -> None:
        grads.append(
            [
                "none" if p.grad is None else "zero" if not p.grad.any() else "set"
                for p in loop.state.base_model.parameters()
            ]
        )

    loop, _link = make_loop(
        prepared("mlp"),
        {1: [record, setting(zero_grad_set_to_none=True)], 2: [record]},
        max_steps=3,
    )
    assert loop.run() == "max_steps"
    zeroed, dropped = grads
    assert set(zeroed) == {"zero"} and set(dropped) == {"none"}


def test_amp_bf16_runs_the_forward_in_bf16(prepared: Callable[[str], DatasetWorkload]) -> None:
    dtypes: list[torch.dtype] = []
    loop, link = make_loop(
        prepared("mlp"), {1: [setting(amp="bf16")], 3: [setting(amp="off")]}, max_steps=4
    )
    first_linear = next(m for m in loop.state.base_model.modules() if isinstance(m, nn.Linear))
    first_linear.register_forward_hook(lambda _m, _a, out: dtypes.append(out.dtype))
    assert loop.run() == "max_steps"
    assert dtypes == [torch.float32, torch.bfloat16, torch.bfloat16, torch.float32]
    assert loop.state.scaler is None and link.of("config")[0]["warmup_steps"] == 3


def test_amp_fp16_steps_through_a_grad_scaler() -> None:
    """fp16 is disabled on a CPU, but its wiring (scale, step, update) runs here regardless."""
    work = load_workload("mlp")(seed=0, torch_threads=1, **SMALL["mlp"])
    work.prepare(lambda _text: None)
    model = work.build_model(CPU)
    state = TrainingState(
        work,
        model=model,
        optimizer=work.build_optimizer(model),
        device=CPU,
        values=work.knob_values(),
    )
    state.apply(dict(state.values, amp="fp16"), ["amp"])  # fp16 autocast does run on a CPU
    assert state.scaler is not None
    before = [p.detach().clone() for p in model.parameters()]
    batch = state.to_device(next(iter(work.build_loader(state.values))))
    loss = state.loss(batch)
    assert loss.dtype == torch.float32  # cross-entropy autocasts to float32
    state.backward(loss)
    state.optimizer_step()
    assert any(not torch.equal(a, p) for a, p in zip(before, model.parameters(), strict=True))
    state.apply(dict(state.values, amp="off"), ["amp"])
    assert state.scaler is None


def test_storage_latency_lengthens_the_data_phase_per_sample(
    prepared: Callable[[str], DatasetWorkload],
) -> None:
    loop, link = make_loop(
        prepared("mlp"),
        {0: [setting(batch_size=16)], 2: [setting(storage_latency_ms=5)]},
        max_steps=4,
    )
    assert loop.run() == "max_steps"
    data_ms = [(host[1] - host[0]) / 1e6 for _, _, _, host in link.steps()]
    assert all(ms >= 16 * 5 for ms in data_ms[2:])  # 16 samples × 5 ms of sleep each
    assert data_ms[1] < 16 * 5


def test_augment_cost_adds_cpu_work_to_the_data_phase(
    prepared: Callable[[str], DatasetWorkload],
) -> None:
    loop, link = make_loop(
        prepared("mlp"), {0: [setting(batch_size=16)], 2: [setting(augment_cost=20)]}, max_steps=4
    )
    assert loop.run() == "max_steps"
    data_ms = [(host[1] - host[0]) / 1e6 for _, _, _, host in link.steps()]
    # An in-memory index is a fraction of a millisecond; 16 samples × 20 units of fixed CPU
    # work is two orders of magnitude more on any machine (~160 ms here).
    assert min(data_ms[2:]) > 20 * data_ms[1]


def test_an_epoch_is_epoch_samples_long_whatever_the_dataset_size() -> None:
    work = load_workload("mlp")(seed=0, torch_threads=1, dataset_images=40)
    work.prepare(lambda _text: None)
    work.config["epoch_samples"] = 100
    labels = torch.cat(
        [labels for _, labels in work.build_loader(dict(work.knob_values(), batch_size=10))]
    )
    assert labels.numel() == 100  # two full reshuffled passes and part of a third
    counts = torch.bincount(labels, minlength=10)
    assert counts.sum() == 100 and counts.min() >= 8  # 4 per class per pass


def test_demo_dials_wrap_the_dataset_picklably(prepared: Callable[[str], DatasetWorkload]) -> None:
    work = prepared("mlp")
    loader = work.build_loader(dict(work.knob_values(), augment_cost=2, storage_latency_ms=0.5))
    dials = loader.dataset.dataset  # inside the sample stream's positions
    assert isinstance(dials, DemoDials) and dials.augment_cost == 2
    copy = pickle.loads(pickle.dumps(dials))  # what a spawned worker receives
    assert all(
        torch.equal(a, b) for a, b in zip(copy[3], work.dataset(work.config)[3], strict=True)
    )
    assert burn_cpu(1) == burn_cpu(1)  # fixed work: the same result every time
    assert not isinstance(work.build_loader(work.knob_values()).dataset.dataset, DemoDials)


def test_worker_only_loader_options_are_left_out_without_workers(
    prepared: Callable[[str], DatasetWorkload],
) -> None:
    """DataLoader refuses prefetch_factor/persistent_workers without workers: they wait."""
    work = prepared("gpt")
    values = dict(work.knob_values(), prefetch_factor=4, persistent_workers=True)
    loader = work.build_loader(values)
    assert loader.num_workers == 0 and not loader.persistent_workers
    assert next(iter(loader))[0].shape == (8, work.config["context"])
    with_workers = work.build_loader(dict(values, num_workers=1))
    assert with_workers.prefetch_factor == 4 and with_workers.persistent_workers


def test_compile_wraps_the_model_and_reuses_it_per_mode(
    prepared: Callable[[str], DatasetWorkload],
) -> None:
    """No compiled forward runs here: inductor on this CPU takes ~30 s for the first one."""
    work = prepared("mlp")
    model = work.build_model(CPU)
    state = TrainingState(
        work,
        model=model,
        optimizer=work.build_optimizer(model),
        device=CPU,
        values=work.knob_values(),
    )
    modes = []
    for mode in ("default", "off", "default", "max-autotune"):
        state.apply(dict(state.values, compile=mode), ["compile"])
        modes.append((state.model, state.take_compiled()))
    (first, new), (plain, none), (again, reused), (autotuned, other) = modes
    assert isinstance(first, torch._dynamo.eval_frame.OptimizedModule) and new == "default"
    assert plain is model and none is None
    assert again is first and reused is None  # cached: no new compilation to report
    assert autotuned is not first and other == "max-autotune"
    assert first._orig_mod is model  # one set of parameters under every mode
    state.forget_compiled("default")
    state.apply(dict(state.values, compile="default"), ["compile"])
    assert state.model is not first and state.take_compiled() == "default"


def test_compile_change_is_announced_at_the_boundary(
    prepared: Callable[[str], DatasetWorkload],
) -> None:
    loop, link = make_loop(
        prepared("mlp"), {1: [setting(11, compile="default"), {"kind": "stop"}]}, max_steps=3
    )
    assert loop.run() == "stopped"
    (config,) = link.of("config")
    assert config["changed"] == {"compile": "default"} and config["rebuilt"] == ["model"]
    assert config["warmup_steps"] == 3 and config["first_step"] == 1
    assert isinstance(loop.state.model, torch._dynamo.eval_frame.OptimizedModule)


def test_backend_flags_start_at_the_naive_baseline() -> None:
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark
    try:
        torch.backends.cudnn.allow_tf32 = True  # torch's own default
        work = load_workload("mlp")(seed=0, torch_threads=1)
        model = work.build_model(CPU)
        state = TrainingState(
            work,
            model=model,
            optimizer=work.build_optimizer(model),
            device=CPU,
            values=work.knob_values(),
        )
        assert torch.backends.cudnn.allow_tf32 is False
        assert torch.backends.cuda.matmul.allow_tf32 is False
        state.apply(
            dict(state.values, tf32=True, cudnn_benchmark=True), ["tf32", "cudnn_benchmark"]
        )
        assert torch.backends.cudnn.allow_tf32 and torch.backends.cudnn.benchmark
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark = saved
        torch.backends.cuda.matmul.allow_tf32 = False


# --- applying never crashes the run ----------------------------------------------------------


class FragileMlp:
    """Wraps the prepared mlp workload: its forward fails under bf16, its loader at batch 7."""

    def __init__(self, work: DatasetWorkload) -> None:
        self.work = work

    def __getattr__(self, name: str) -> Any:
        return getattr(self.work, name)

    def loss(self, model: nn.Module, batch: Any) -> torch.Tensor:
        if torch.is_autocast_enabled("cpu"):
            raise RuntimeError("this backend cannot run the model in bf16\nsecond line")
        return self.work.loss(model, batch)

    def build_loader(self, knobs: dict[str, Any]) -> Any:
        if knobs["batch_size"] == 7:
            raise ValueError("a loader option this torch rejects")
        return self.work.build_loader(knobs)


def test_a_change_that_fails_at_the_boundary_is_refused_and_undone(
    prepared: Callable[[str], DatasetWorkload],
) -> None:
    loop, link = make_loop(
        FragileMlp(prepared("mlp")),  # type: ignore[arg-type]
        {1: [setting(5, batch_size=7, log_every=3)]},
        max_steps=3,
    )
    assert loop.run() == "max_steps"
    (refused,) = link.of("refused")
    assert refused["request"] == 5 and refused["message"] == (
        "could not apply batch_size=7, log_every=3: ValueError: a loader option this torch rejects"
    )
    assert any(t.startswith("could not apply batch_size=7") for t in link.texts("error"))
    assert link.of("config") == [] and loop.state.values["batch_size"] == 128
    assert [(c, n) for _, c, n, _ in link.steps()] == [(0, 128)] * 3


def test_a_change_whose_first_step_fails_is_reverted_with_a_config(
    prepared: Callable[[str], DatasetWorkload],
) -> None:
    loop, link = make_loop(
        FragileMlp(prepared("mlp")),  # type: ignore[arg-type]
        {2: [setting(6, amp="bf16", log_every=2)]},
        max_steps=4,
    )
    assert loop.run() == "max_steps"
    applied, reverted = link.of("config")
    assert applied["id"] == 1 and applied["request"] == 6 and applied["first_step"] == 2
    assert reverted["id"] == 2 and reverted["request"] is None and reverted["first_step"] == 2
    assert reverted["changed"] == {"amp": "off", "log_every": 1}
    assert reverted["values"] == dict(applied["values"], amp="off", log_every=1)
    (error,) = link.texts("error")
    assert error == (
        "step 2 failed under config 1: RuntimeError: this backend cannot run the "
        "model in bf16; going back to amp=off, log_every=1"
    )
    assert [(s, c) for s, c, _, _ in link.steps()] == [(0, 0), (1, 0), (2, 2), (3, 2)]


def test_a_compile_that_fails_in_its_first_step_is_reverted_and_forgotten(
    prepared: Callable[[str], DatasetWorkload], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stands in for an inductor failure, which surfaces lazily in the first forward."""
    compiled: list[str | None] = []

    class Uncompilable(nn.Module):
        def forward(self, *_args: Any) -> torch.Tensor:
            raise RuntimeError("InductorError: C++ compile error")

    def failing_compile(_model: nn.Module, mode: str | None = None) -> nn.Module:
        compiled.append(mode)
        return Uncompilable()

    monkeypatch.setattr(torch, "compile", failing_compile)
    loop, link = make_loop(
        prepared("mlp"),
        {1: [setting(1, compile="max-autotune")], 2: [setting(2, compile="max-autotune")]},
        max_steps=4,
    )
    assert loop.run() == "max_steps"
    assert compiled == ["max-autotune", "max-autotune"]  # the failed one was not reused
    assert [(c["id"], c["request"], c["changed"]) for c in link.of("config")] == [
        (1, 1, {"compile": "max-autotune"}),
        (2, None, {"compile": "off"}),
        (3, 2, {"compile": "max-autotune"}),
        (4, None, {"compile": "off"}),
    ]
    assert len(link.texts("error")) == 2 and "InductorError" in link.texts("error")[0]
    assert [c for _, c, _, _ in link.steps()] == [0, 2, 4, 4]
    assert loop.state.model is loop.state.base_model


def test_a_failure_outside_a_changes_trial_ends_the_run(
    prepared: Callable[[str], DatasetWorkload],
) -> None:
    work = FragileMlp(prepared("mlp"))
    loop, _link = make_loop(work, {}, max_steps=3)  # type: ignore[arg-type]
    loop.state.values["amp"] = "bf16"  # not a change: as if the run had started in bf16
    with pytest.raises(RuntimeError, match="cannot run the model in bf16"):
        loop.run()


def test_when_going_back_fails_too_the_run_fails_with_both_reasons(
    prepared: Callable[[str], DatasetWorkload], monkeypatch: pytest.MonkeyPatch
) -> None:
    loop, _link = make_loop(
        FragileMlp(prepared("mlp")),  # type: ignore[arg-type]
        {1: [setting(amp="bf16")]},
        max_steps=3,
    )

    def broken(*_args: Any) -> None:
        raise OSError("the device went away")

    monkeypatch.setattr(loop.knobs, "_apply", broken)
    with pytest.raises(ReconfigureError, match=r"could not apply amp=bf16: OSError"):
        loop.run()


# --- hello -----------------------------------------------------------------------------------


class SessionLink(RecordingLink):
    def __init__(self) -> None:
        super().__init__({})

    def finished(self) -> None:
        pass

    def close(self) -> None:
        pass


def test_hello_carries_schema_config_workload_config_cores_and_os(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(
        session,
        "load_workload",
        lambda _name: lambda **kw: load_workload("gpt")(dataset_sequences=32, **kw),
    )
    link = SessionLink()
    assert (
        session.run(
            link,
            workload_name="gpt",
            device_spec="cpu",  # type: ignore[arg-type]
            max_steps=2,
            seed=0,
        )
        == 0
    )
    hello = link.messages[0]
    assert hello["kind"] == "hello"
    assert [k["name"] for k in hello["knobs"]] == list(KNOB_NAMES)
    assert hello["config"] == {
        "id": 0,
        "values": dict(NAIVE_DEFAULTS, batch_size=8),
        "warmup_steps": initial_warmup(dict(NAIVE_DEFAULTS, batch_size=8)),
    }
    assert hello["workload_config"]["d_model"] == 128
    assert not set(hello["workload_config"]) & set(KNOB_NAMES)
    assert hello["device"]["cores"] == session.usable_cores() >= 1 and hello["os"]
