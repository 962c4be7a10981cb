"""The instrumentation adds zero device synchronizations.

Counted, not timed: every entry point that makes the host wait for a device or read a device
value back is patched, and calls are counted only while the training thread is inside one of
gpuwatch's instrumentation paths (timing backend, step columns, link sends, the loop's
between-step bookkeeping) or on the link's sender thread. The workload's own loss read is
pushed past the run (``log_every``), so it cannot hide anything.

On a GPU, the same can be confirmed with ``torch.cuda.set_sync_debug_mode("warn")``
(docs/performance.md).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from multiprocessing import Pipe
from typing import Any

import pytest
import torch
from simulated_stream import FakeClock, SimulatedStream

from gpuwatch.runner import link as runner_link
from gpuwatch.runner import loop as runner_loop
from gpuwatch.runner import step_columns, timing
from gpuwatch.runner.availability import knob_schema
from gpuwatch.runner.training_state import TrainingState
from gpuwatch.runner.workloads.mlp import MlpWorkload

CPU = torch.device("cpu")
STEPS = 40

SYNC_ENTRY_POINTS: tuple[tuple[Any, str], ...] = (
    (torch.cuda, "synchronize"),
    (torch.cuda.Event, "synchronize"),
    (torch.cuda.Event, "wait"),
    (torch.cuda.Stream, "synchronize"),
    (torch.Tensor, "item"),
    (torch.Tensor, "cpu"),
    (torch.Tensor, "tolist"),
)
INSTRUMENTATION: tuple[tuple[Any, str], ...] = (
    (timing.HostBackend, "begin"),
    (timing.HostBackend, "mark"),
    (timing.HostBackend, "end"),
    (timing.HostBackend, "poll"),
    (timing.CudaEventBackend, "begin"),
    (timing.CudaEventBackend, "mark"),
    (timing.CudaEventBackend, "end"),
    (timing.CudaEventBackend, "poll"),
    (step_columns.StepColumns, "add_step"),
    (step_columns.StepColumns, "add_device"),
    (step_columns.StepColumns, "send"),
    (runner_link.Link, "send_batch"),
    (runner_link.Link, "log"),
    (runner_loop.TrainingLoop, "_between_steps"),
    (runner_loop.TrainingLoop, "_after_step"),
)


class SyncCounter:
    """Sync-like calls made inside instrumentation (see the module docstring)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[str] = []
        self._inside = threading.local()
        self._lock = threading.Lock()
        for owner, attr in SYNC_ENTRY_POINTS:
            monkeypatch.setattr(owner, attr, self._counting(attr, getattr(owner, attr)))
        for owner, attr in INSTRUMENTATION:
            monkeypatch.setattr(owner, attr, self._instrumented(getattr(owner, attr)))

    def _counting(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            thread = threading.current_thread().name
            if getattr(self._inside, "depth", 0) or thread == "gpuwatch-link-send":
                with self._lock:
                    self.calls.append(name)
            return original(*args, **kwargs)

        return counted

    def _instrumented(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            self._inside.depth = getattr(self._inside, "depth", 0) + 1
            try:
                return original(*args, **kwargs)
            finally:
                self._inside.depth -= 1

        return wrapped


@pytest.fixture
def drained_link() -> Iterator[runner_link.Link]:
    """The runner's real ``Link`` (sender thread, JSON encoding) over a pipe, drained."""
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
    link = runner_link.Link(ours, grace_s=60)
    yield link
    link.finished()
    link.close()
    ours.close()  # the reader sees EOF and ends; closing ``gui`` under it would race its read
    reader.join(5)
    assert not reader.is_alive(), "the reader ended at EOF"
    gui.close()
    assert received, "the loop sent its steps over the link"


def _loop(link: runner_link.Link, backend: timing.TimingBackend) -> runner_loop.TrainingLoop:
    workload = MlpWorkload(seed=0, torch_threads=1, dataset_images=256)
    workload.config["batch_size"] = 8
    workload.prepare(lambda _text: None)
    model = workload.build_model(CPU)
    values = {**workload.knob_values(), "log_every": 1000}  # the loss read never falls due
    state = TrainingState(
        workload, model=model, optimizer=workload.build_optimizer(model), device=CPU, values=values
    )
    return runner_loop.TrainingLoop(
        workload,
        state=state,
        schema=knob_schema(torch, workload, CPU),
        backend=backend,
        link=link,
        max_steps=STEPS,
    )


def test_cpu_loop_instrumentation_adds_no_sync(
    monkeypatch: pytest.MonkeyPatch, drained_link: runner_link.Link
) -> None:
    loop = _loop(drained_link, timing.HostBackend())
    counter = SyncCounter(monkeypatch)
    assert loop.run() == "max_steps"
    assert loop.steps_done == STEPS
    assert counter.calls == []


def test_counter_sees_a_sync_made_inside_instrumentation(monkeypatch: pytest.MonkeyPatch) -> None:
    """The counter is not blind: a backend that reads a tensor back is caught."""

    class Leaky(timing.HostBackend):
        def end(self) -> None:
            torch.ones(1).item()

    counter = SyncCounter(monkeypatch)
    monkeypatch.setattr(Leaky, "end", counter._instrumented(Leaky.end))
    backend = Leaky()
    backend.begin(0)
    backend.end()
    torch.ones(1).item()  # outside instrumentation: not counted
    assert counter.calls == ["item"]


def test_cuda_event_backend_never_synchronizes_inside_the_loop(
    monkeypatch: pytest.MonkeyPatch, drained_link: runner_link.Link
) -> None:
    """SIMULATED stream (no GPU): the event backend waits for the device only before the loop
    (initial calibration) and after it (the final drain), never during a step."""
    clock = FakeClock()
    stream = SimulatedStream(clock)
    syncs: list[int] = []
    loop_ref: list[runner_loop.TrainingLoop] = []

    def synchronize() -> None:
        syncs.append(loop_ref[0].steps_done if loop_ref else -1)
        stream.synchronize()

    backend = timing.CudaEventBackend(
        event_factory=stream.event, clock=clock, synchronize=synchronize
    )
    loop = _loop(drained_link, backend)
    loop_ref.append(loop)
    counter = SyncCounter(monkeypatch)

    original_run_step = loop._run_step

    def run_step() -> None:  # the simulated device advances with the host's steps
        clock.advance(1_000_000)
        original_run_step()

    loop._run_step = run_step  # type: ignore[method-assign]
    assert loop.run() == "max_steps"
    assert counter.calls == []
    assert syncs[0] == -1, "the initial calibration, before the loop"
    assert all(done == STEPS for done in syncs[1:]), f"synchronized during the loop: {syncs}"
    assert backend.skipped == 0
