"""The vision workload and the instrumented loop, in-process on the CPU (no link, no GUI)."""

from __future__ import annotations

import functools
import multiprocessing
import pickle
import queue
import threading
import time
from typing import Any

import pytest
import torch
from spawn_probe import collate_with_modules

from gpuwatch.protocol import N_MARKS, PROTOCOL_VERSION, encode
from gpuwatch.runner.availability import knob_schema
from gpuwatch.runner.loop import TrainingLoop
from gpuwatch.runner.session import configure_threads, device_info, resolve_device
from gpuwatch.runner.timing import HostBackend, TimingBackend
from gpuwatch.runner.training_state import TrainingState
from gpuwatch.runner.workloads import WORKLOAD_NAMES, load_workload
from gpuwatch.runner.workloads.vision import (
    NUM_CLASSES,
    STORED_SIZE,
    VisionWorkload,
    build_jpegs,
    collate,
    synth_image,
)
from gpuwatch.runner.workloads.vision_data import (
    Augment,
    decode_jpeg,
    encode_jpeg,
    shift_hue,
    tensor_bytes,
)

CPU = torch.device("cpu")


class RecordingLink:
    """Stands in for ``runner.link.Link``; every message must pass ``protocol.encode``."""

    def __init__(self) -> None:
        self.controls: queue.Queue[dict[str, Any]] = queue.Queue()
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


@pytest.fixture(scope="module")
def workload() -> VisionWorkload:
    """64 images, batch 32: an epoch is 2 steps, so short runs cross epoch boundaries."""
    work = VisionWorkload(seed=0, torch_threads=1, dataset_images=64)
    work.config["epoch_samples"] = 64  # one pass per epoch
    work.prepare(lambda _text: None)
    return work


class SlowMarks(HostBackend):
    """A backend whose every call takes ``MARK_NS`` (as CUDA event records take time)."""

    inert = False

    def begin(self, step_id: int) -> None:
        spin(MARK_NS)

    def mark(self, index: int) -> None:
        spin(MARK_NS)

    def end(self) -> None:
        spin(MARK_NS)


MARK_NS = 200_000


def spin(ns: int) -> None:
    until = time.perf_counter_ns() + ns
    while time.perf_counter_ns() < until:
        pass


def make_loop(
    work: VisionWorkload,
    link: RecordingLink,
    max_steps: int | None,
    backend: TimingBackend | None = None,
    **config: Any,
) -> TrainingLoop:
    work.config.update(config)
    model = work.build_model(CPU)
    state = TrainingState(
        work,
        model=model,
        optimizer=work.build_optimizer(model),
        device=CPU,
        values=work.knob_values(),
    )
    return TrainingLoop(
        work,
        state=state,
        schema=knob_schema(torch, work, CPU),
        backend=backend or HostBackend(),
        link=link,
        max_steps=max_steps,
    )


def test_synthetic_jpegs_are_deterministic_per_seed() -> None:
    blob, offsets, labels = build_jpegs(12, seed=3)
    again, _, _ = build_jpegs(12, seed=3)
    other, _, _ = build_jpegs(12, seed=4)
    assert torch.equal(blob, again) and not torch.equal(blob, other)
    assert blob[:2].tolist() == [0xFF, 0xD8]  # a JPEG start-of-image marker
    assert len(offsets) == 13 and labels == [i % NUM_CLASSES for i in range(12)]


def test_dataset_pickles_and_yields_augmented_float_images(workload: VisionWorkload) -> None:
    dataset = pickle.loads(pickle.dumps(workload.dataset(workload.config)))
    image, label = dataset[5]
    assert type(image) is torch.Tensor
    assert image.shape == (3, 64, 64) and image.dtype == torch.float32
    assert 0 <= label < NUM_CLASSES
    assert -4 < float(image.mean()) < 4  # normalized, not 0..255
    assert not torch.equal(dataset[5][0], image)  # augmentation is random per access
    images, labels = collate([dataset[i] for i in range(4)])
    assert images.shape == (4, 3, 64, 64) and labels.dtype == torch.long
    assert pickle.loads(pickle.dumps(collate)) is collate  # top-level: spawn workers find it


def test_jpegs_decode_back_to_the_synthetic_images() -> None:
    generator = torch.Generator().manual_seed(1)
    image, other = synth_image(3, STORED_SIZE, generator), synth_image(3, STORED_SIZE, generator)
    decoded = decode_jpeg(encode_jpeg(image, quality=90))
    assert decoded.shape == image.shape and decoded.dtype == torch.uint8

    def error(a: torch.Tensor, b: torch.Tensor) -> float:
        return float((a.float() - b.float()).abs().mean())

    # Lossy (it smooths the images' pixel noise), but far closer than another image of the class.
    assert error(decoded, image) < 12 and error(decoded, other) > 3 * error(decoded, image)
    blob, offsets, _ = build_jpegs(3, seed=0)
    assert tensor_bytes(blob, offsets[1], offsets[2])[:2] == b"\xff\xd8"
    with pytest.raises(IndexError):
        tensor_bytes(blob, 0, blob.numel() + 1)


def test_augmentation_crops_flips_and_jitters_each_sample_differently() -> None:
    image = synth_image(0, STORED_SIZE, torch.Generator().manual_seed(2))
    augment = Augment(48)
    torch.manual_seed(0)
    outs = [augment(image) for _ in range(8)]
    assert all(out.shape == (3, 48, 48) and out.dtype == torch.float32 for out in outs)
    assert all(torch.isfinite(out).all() for out in outs)
    assert len({out.sum().item() for out in outs}) == 8  # every sample differs
    torch.manual_seed(0)
    assert torch.equal(augment(image), outs[0])  # the RNG, seeded per worker, decides
    # Normalised with MEAN/STD: near zero mean, unit-ish spread, not 0..1 or 0..255.
    stacked = torch.stack(outs)
    assert abs(float(stacked.mean())) < 1.5 and 0.3 < float(stacked.std()) < 2
    for _ in range(200):  # every crop lies inside the image and keeps a sane aspect
        draws = torch.rand(49, dtype=torch.float64).tolist()
        top, left, h, w = augment.crop_box(96, 80, draws)
        assert 0 <= top <= 96 - h and 0 <= left <= 80 - w
        assert h * w >= 0.35 * 96 * 80 * 0.9 and 0.7 < w / h < 1.4


def test_hue_shift_rotates_colours_and_keeps_greys() -> None:
    red = torch.tensor([1.0, 0.0, 0.0])[:, None, None].expand(3, 2, 2)
    green = shift_hue(red, 1 / 3)
    assert torch.allclose(
        green, torch.tensor([0.0, 1.0, 0.0])[:, None, None].expand(3, 2, 2), atol=1e-6
    )
    image = torch.rand(3, 8, 8, generator=torch.Generator().manual_seed(3))
    assert torch.allclose(shift_hue(image, 0.0), image, atol=1e-6)
    assert torch.allclose(shift_hue(shift_hue(image, 0.2), -0.2), image, atol=1e-5)
    grey = torch.full((3, 4, 4), 0.4)
    assert torch.allclose(shift_hue(grey, 0.3), grey)


def test_a_spawned_vision_worker_never_imports_torchvision(workload: VisionWorkload) -> None:
    """What a worker imports is its start-up time (docs/performance.md §5): the real loader,
    demo dials on, one spawned worker; its modules are read after it built a batch."""
    knobs = dict(workload.knob_values(), num_workers=1, storage_latency_ms=0.1, augment_cost=1)
    loader = workload.build_loader(knobs)
    loader.collate_fn = functools.partial(collate_with_modules, loader.collate_fn)
    iterator = iter(loader)
    try:
        (images, labels), modules = next(iterator)
    finally:
        iterator._shutdown_workers()  # type: ignore[attr-defined]
    assert images.shape == (32, 3, 64, 64) and labels.shape == (32,)
    assert {
        "torch",
        "gpuwatch.runner.workloads.vision_data",
        "gpuwatch.runner.workloads.demo_dials",
        "PIL.JpegImagePlugin",
    } <= set(modules)
    heavy = [
        name
        for name in modules
        if name.split(".")[0] == "torchvision" or name.startswith("torch._dynamo")
    ]
    assert heavy == []
    assert "gpuwatch.runner.workloads.vision" not in modules  # the model side stays home


def test_loop_runs_real_steps_with_monotonic_marks(workload: VisionWorkload) -> None:
    link = RecordingLink()
    loop = make_loop(workload, link, max_steps=5)
    assert loop.run() == "max_steps"
    steps = link.of("steps")
    ids = [s for m in steps for s in m["step"]]
    rows = [r for m in steps for r in m["host"]]
    assert ids == [0, 1, 2, 3, 4]  # contiguous, across two epoch boundaries
    assert {c for m in steps for c in m["config"]} == {0}
    assert [n for m in steps for n in m["samples"]] == [32] * 5
    marks = [mark for row in rows for mark in row]
    assert all(len(row) == N_MARKS for row in rows)
    assert marks == sorted(marks)  # non-decreasing within and across steps
    assert link.of("device_marks") == []  # CPU: the host marks are the device truth
    assert loop.last_loss is not None and 0 < loop.last_loss < 10
    assert any("first step done" in m["text"] for m in link.of("log"))


def test_each_step_carries_what_the_loops_instruments_spent_on_it(
    workload: VisionWorkload,
) -> None:
    """The loop times its own instruments (``instrument_ns``): on a CPU only its bookkeeping
    (its backend does nothing and is not called); with a backend that takes time, its calls
    too (a step's ``begin`` and 7 marks; its ``end`` counts with the next step, as the
    bookkeeping after it does), and never a phase's own work."""
    link = RecordingLink()
    assert make_loop(workload, link, max_steps=6).run() == "max_steps"
    cpu = [ns for m in link.of("steps") for ns in m["instrument_ns"]]
    assert len(cpu) == 6 and all(ns >= 0 for ns in cpu) and any(ns > 0 for ns in cpu)
    link = RecordingLink()
    assert make_loop(workload, link, max_steps=6, backend=SlowMarks()).run() == "max_steps"
    batches = link.of("steps")
    for m in batches:
        assert len(m["instrument_ns"]) == len(m["host"])
    rows = [
        (ns, row) for m in batches for ns, row in zip(m["instrument_ns"], m["host"], strict=True)
    ]
    assert len(rows) == 6
    for spent, row in rows:
        assert spent >= 8 * MARK_NS
        assert spent < (row[-1] - row[0]) / 2  # the step's own work is not counted


def test_log_every_defers_the_loss_sync(workload: VisionWorkload) -> None:
    link = RecordingLink()
    loop = make_loop(workload, link, max_steps=3, log_every=4)
    try:
        assert loop.run() == "max_steps"
        assert loop.last_loss is None  # never read back: 3 steps < log_every
    finally:
        workload.config["log_every"] = 1


def test_controls_pause_warn_and_stop_between_steps(workload: VisionWorkload) -> None:
    link = RecordingLink()
    for kind, fields in [("capture", {"steps": 0}), ("pause", {})]:
        link.controls.put({"kind": kind, **fields})
    loop = make_loop(workload, link, max_steps=None)

    def resume_then_stop() -> None:
        link.controls.put({"kind": "resume"})
        link.controls.put({"kind": "stop"})

    timer = threading.Timer(0.3, resume_then_stop)
    timer.start()
    assert loop.run() == "stopped"
    timer.join()
    texts = [m["text"] for m in link.of("log") if m["level"] == "warning"]
    assert (
        "kernel capture refused: capture needs a whole number of steps from 1 to 50, not 0"
    ) in texts
    assert [m["status"] for m in link.of("kernels")] == ["refused"]
    assert [m["text"] for m in link.of("log") if m["level"] == "info"][:2] == [
        "paused after 0 step(s)",
        "resumed",
    ]
    assert loop.steps_done == 0  # stop was already queued when the loop resumed


def test_lost_link_ends_the_loop(workload: VisionWorkload) -> None:
    link = RecordingLink()
    link.lost.set()
    assert make_loop(workload, link, max_steps=None).run() == "link_closed"


def test_spawned_workers_are_shut_down_at_the_end(workload: VisionWorkload) -> None:
    link = RecordingLink()
    loop = make_loop(workload, link, max_steps=2, num_workers=1)  # one epoch: one spawn
    try:
        assert loop.run() == "max_steps"
    finally:
        workload.config["num_workers"] = 0
    assert len(link.of("steps")) >= 1
    assert multiprocessing.active_children() == []


def test_device_resolution_and_hello_fields() -> None:
    assert resolve_device(torch, "cpu") == CPU
    if not torch.cuda.is_available():
        assert resolve_device(torch, "auto") == CPU
        with pytest.raises(ValueError, match="CUDA is not available"):
            resolve_device(torch, "cuda:0")
    info = device_info(torch, CPU)
    assert info["kind"] == "cpu" and info["index"] is None and info["name"]
    assert configure_threads(torch, CPU) >= 1
    assert "vision" in WORKLOAD_NAMES and load_workload("vision") is VisionWorkload
    work = VisionWorkload(seed=0, torch_threads=1)
    encode(
        "hello",
        protocol=PROTOCOL_VERSION,
        pid=1,
        workload="vision",
        device=info,
        versions={},
        knobs=[],
        config={"id": 0, "values": work.config},
    )
    assert work.config["num_workers"] == 0 and work.config["log_every"] == 1
    assert work.config["pin_memory"] is False
