"""Spec tests of the simulated CUDA device (``tests/simcuda``): what it must do like torch.

The event and stream cases are adapted from PyTorch's open-registration reference tests,
``test/cpp_extensions/open_registration_extension/torch_openreg/tests/test_event.py``
(commit 0f73d8fb15625b81f8035a82b1f15ba535e592de) and ``tests/test_streams.py`` (commit
07ddd06eb45abc5dbdd57bbacb10aed83d5165ff) of https://github.com/pytorch/pytorch, rewritten
against ``torch.cuda.Event``/``torch.cuda.Stream``; the error cases follow torch 2.14's
``c10/cuda/CUDAEvent.h`` and the sync debug mode ``c10/cuda/CUDAFunctions.h``. PyTorch's
notice for the adapted logic:

    Copyright (c) 2015 Google Inc. Copyright (c) 2015 Yangqing Jia.
    Copyright (c) 2013, 2014, 2015, the respective contributors (Caffe).
    Copyright (c) 2015, the respective contributors. All rights reserved.

    Redistribution and use in source and binary forms, with or without modification, are
    permitted provided that the following conditions are met:
    1. Redistributions of source code must retain the above copyright notice, this list of
       conditions and the following disclaimer.
    2. Redistributions in binary form must reproduce the above copyright notice, this list of
       conditions and the following disclaimer in the documentation and/or other materials
       provided with the distribution.

    THIS SOFTWARE IS PROVIDED BY THE COPYRIGHT HOLDERS AND CONTRIBUTORS "AS IS" AND ANY EXPRESS
    OR IMPLIED WARRANTIES, INCLUDING, BUT NOT LIMITED TO, THE IMPLIED WARRANTIES OF
    MERCHANTABILITY AND FITNESS FOR A PARTICULAR PURPOSE ARE DISCLAIMED. IN NO EVENT SHALL THE
    COPYRIGHT OWNER OR CONTRIBUTORS BE LIABLE FOR ANY DIRECT, INDIRECT, INCIDENTAL, SPECIAL,
    EXEMPLARY, OR CONSEQUENTIAL DAMAGES (INCLUDING, BUT NOT LIMITED TO, PROCUREMENT OF
    SUBSTITUTE GOODS OR SERVICES; LOSS OF USE, DATA, OR PROFITS; OR BUSINESS INTERRUPTION)
    HOWEVER CAUSED AND ON ANY THEORY OF LIABILITY, WHETHER IN CONTRACT, STRICT LIABILITY, OR
    TORT (INCLUDING NEGLIGENCE OR OTHERWISE) ARISING IN ANY WAY OUT OF THE USE OF THIS
    SOFTWARE, EVEN IF ADVISED OF THE POSSIBILITY OF SUCH DAMAGE.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterator

import pytest
import torch
from simcuda.cuda_api import float32
from simcuda.fixtures import installed
from simcuda.model import SYNC_ERROR, SimConfig, SimGpu

#: 20 ms of ``torch.cuda._sleep`` at the simulated clock rate.
CLOCK_HZ = 1.0e9
SLEEP_20MS = 20_000_000


@pytest.fixture
def sim() -> Iterator[SimGpu]:
    with installed(SimConfig(devices=2, sleep_clock_hz=CLOCK_HZ)) as gpu:
        yield gpu


# --- ported from torch_openreg tests/test_event.py and tests/test_streams.py ---------------


def test_event_create(sim: SimGpu) -> None:
    event = torch.cuda.Event()
    assert event.device is None
    assert event.event_id == 0
    event = torch.cuda.Stream(device="cuda:1").record_event()
    assert event.device == torch.device("cuda", 1)
    assert event.event_id != 0


def test_event_query_and_record(sim: SimGpu) -> None:
    assert torch.cuda.Event().query(), "query() is True before any record"
    stream = torch.cuda.Stream(device="cuda:1")
    first, second = stream.record_event(), stream.record_event()
    assert 0 != first.event_id != second.event_id != 0
    second.synchronize()
    assert first.query()
    assert second.query()


def test_event_elapsed_time_is_float32_ms(sim: SimGpu) -> None:
    stream = torch.cuda.Stream(device="cuda:1")
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record(stream)
    with torch.cuda.stream(stream):
        torch.cuda._sleep(SLEEP_20MS // 10)
    end.record(stream)
    stream.synchronize()
    ms = start.elapsed_time(end)
    first, last = list(sim.devices[1].markers)[-2:]
    assert ms == float32((last.complete_ns - first.complete_ns) / 1e6)
    assert ms >= 2.0, "the 2 ms kernel ran between the two markers"


def test_elapsed_time_errors(sim: SimGpu) -> None:
    untimed = [torch.cuda.Event(), torch.cuda.Event()]
    for event in untimed:
        event.record()
    torch.cuda.synchronize()
    with pytest.raises(ValueError, match="enable_timing=True"):
        untimed[0].elapsed_time(untimed[1])
    recorded = torch.cuda.Event(enable_timing=True)
    recorded.record()
    with pytest.raises(ValueError, match="must be recorded"):
        recorded.elapsed_time(torch.cuda.Event(enable_timing=True))
    torch.cuda._sleep(SLEEP_20MS * 10)  # 200 ms: still running when asked below
    unfinished = torch.cuda.Event(enable_timing=True)
    unfinished.record()
    assert not unfinished.query()
    with pytest.raises(RuntimeError, match="must be completed"):
        recorded.elapsed_time(unfinished)


def test_event_wait_orders_another_stream(sim: SimGpu) -> None:
    first, second = torch.cuda.Stream(), torch.cuda.Stream()
    with torch.cuda.stream(first):
        torch.cuda._sleep(SLEEP_20MS)
    second.wait_event(first.record_event())
    with torch.cuda.stream(second):
        torch.cuda._sleep(1000)
    long, short = list(sim.devices[0].kernels)[-2:]
    assert (long.stream, short.stream) == (first.stream_id, second.stream_id)
    assert short.start_ns >= long.end_ns, "the waiting stream starts after the event"
    second.synchronize()
    assert first.query()


def test_recording_on_another_devices_stream_is_refused(sim: SimGpu) -> None:
    event = torch.cuda.Event()
    event.record(torch.cuda.Stream(device="cuda:0"))
    with pytest.raises(RuntimeError, match="does not match recording stream's device 1"):
        event.record(torch.cuda.Stream(device="cuda:1"))
    other = torch.cuda.Event()
    other.record(torch.cuda.Stream(device="cuda:1"))
    assert (event.device.index, other.device.index) == (0, 1)  # type: ignore[union-attr]


def test_device_selection_and_synchronize(sim: SimGpu) -> None:
    torch.cuda.set_device(1)
    try:
        z = torch.randn(50, 50, device="cuda") @ torch.randn(50, 50, device="cuda")
        torch.cuda.synchronize()
        assert torch.cuda.current_device() == 1
        assert torch.sum(z).device == torch.device("cuda", 1)
        assert sim.devices[1].kernels and not sim.devices[0].kernels
    finally:
        torch.cuda.set_device(0)


def test_stream_create_context_and_query(sim: SimGpu) -> None:
    one, two = torch.cuda.Stream(), torch.cuda.Stream()
    assert one.stream_id != two.stream_id
    assert one.device_index == torch.cuda.current_device()
    with torch.cuda.Stream(device="cuda:1") as stream:
        assert torch.cuda.current_stream() == stream
        assert torch.cuda.current_device() == 1
    assert torch.cuda.current_stream() == torch.cuda.default_stream()
    assert torch.cuda.current_device() == 0
    assert stream.query()
    with torch.cuda.stream(stream):
        torch.cuda._sleep(SLEEP_20MS)
    assert not stream.query()
    stream.synchronize()
    assert stream.query()
    assert "device=cuda:1" in repr(stream)


# --- what the notes and torch's C++ add ------------------------------------------------------


def test_host_runs_ahead_and_item_waits_for_the_device(sim: SimGpu) -> None:
    x = torch.ones(4, device="cuda")
    torch.cuda._sleep(SLEEP_20MS)
    total = x.sum()
    end = sim.devices[0].kernels[-1].end_ns
    assert time.perf_counter_ns() < end, "the host is ahead of the device"
    assert total.item() == 4.0
    assert time.perf_counter_ns() >= end, "item() waited for the stream"
    assert [w.kind for w in sim.waits] == ["item"]


def test_sleep_kernel_lasts_cycles_over_the_clock_rate(sim: SimGpu) -> None:
    torch.cuda._sleep(3_000_000)
    kernel = sim.devices[0].kernels[-1]
    assert kernel.end_ns - kernel.start_ns == 3_000_000  # 3 ms at 1 GHz


def test_sync_debug_mode(sim: SimGpu) -> None:
    x = torch.ones(3, device="cuda")
    torch.cuda.set_sync_debug_mode("error")
    assert torch.cuda.get_sync_debug_mode() == 2
    for host_read in (
        x.sum().item,
        x.tolist,
        x.cpu,
        lambda: bool(x[0]),
        lambda: x.to("cpu"),
        torch.cuda.current_stream().synchronize,
        lambda: torch.ones(3).to("cuda"),
    ):
        with pytest.raises(RuntimeError, match=SYNC_ERROR):
            host_read()
    torch.cuda.synchronize()  # device_synchronize: not reported (CUDAFunctions.cpp)
    event = torch.cuda.current_stream().record_event()
    event.synchronize()  # cudaEventSynchronize: not reported (CUDAEvent.h)
    pinned = torch.ones(3).pin_memory()
    pinned.to("cuda", non_blocking=True)  # async: no sync
    torch.cuda.set_sync_debug_mode("warn")
    with pytest.warns(UserWarning, match=SYNC_ERROR):
        x.sum().item()
    torch.cuda.set_sync_debug_mode(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        x.sum().item()
    with pytest.raises(RuntimeError, match="invalid value of debug_mode"):
        torch.cuda.set_sync_debug_mode("loud")


def test_numpy_of_a_device_tensor_raises_like_torch(sim: SimGpu) -> None:
    with pytest.raises(TypeError, match="cuda:0 device type tensor to numpy"):
        torch.ones(2, device="cuda").numpy()


def test_mixing_devices_is_refused(sim: SimGpu) -> None:
    a = torch.ones(2, device="cuda:0")
    with pytest.raises(RuntimeError, match="cuda:0 and cuda:1"):
        a + torch.ones(2, device="cuda:1")
    with pytest.raises(RuntimeError, match="cuda:0 and cpu"):
        a + torch.ones(2)
    assert (a + torch.tensor(1.0)).device.type == "cuda", "a CPU scalar is allowed"


def test_device_clock_drift(sim: SimGpu) -> None:
    with _reinstalled(SimConfig(drift_ppm=2000, sleep_clock_hz=CLOCK_HZ)) as drifting:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(SLEEP_20MS)
        end.record()
        end.synchronize()
        marker_start, marker_end = list(drifting.devices[0].markers)[-2:]
        host_ms = (marker_end.complete_ns - marker_start.complete_ns) / 1e6
        assert host_ms >= 20.0
        assert start.elapsed_time(end) == pytest.approx(host_ms * 1.002, rel=1e-6)


def test_capture(sim: SimGpu) -> None:
    model = torch.nn.Linear(8, 8).to("cuda")
    x = torch.ones(4, 8, device="cuda")
    graph = torch.cuda.CUDAGraph()
    before = len(sim.devices[0].kernels)
    with torch.cuda.graph(graph):
        assert torch.cuda.is_current_stream_capturing()
        y = model(x)
        with pytest.raises(RuntimeError, match="capturing"):
            y.sum().item()
    assert not torch.cuda.is_current_stream_capturing()
    assert len(sim.devices[0].kernels) == before, "captured work does not run"
    assert graph.graph.kernels
    graph.replay()
    assert len(sim.devices[0].kernels) == before + len(graph.graph.kernels)
    with pytest.raises(RuntimeError, match="non-default stream"):
        torch.cuda.CUDAGraph().capture_begin()


def test_pinned_memory_and_non_blocking_copies(sim: SimGpu) -> None:
    pageable, pinned = torch.ones(1000), torch.ones(1000).pin_memory()
    assert pinned.is_pinned() and not pageable.is_pinned()
    pinned.to("cuda", non_blocking=True)
    assert not sim.waits, "pinned + non_blocking: the host does not wait"
    pageable.to("cuda", non_blocking=True)
    pinned.to("cuda")
    assert [w.kind for w in sim.waits] == ["h2d_copy", "h2d_copy"]
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(torch.ones(8, 2)), batch_size=4, pin_memory=True
    )
    (batch,) = next(iter(loader))
    assert batch.is_pinned(), "the DataLoader's pin thread pinned the batch"


def test_properties_memory_and_module_placement(sim: SimGpu) -> None:
    assert torch.cuda.is_available() and torch.cuda.device_count() == 2
    assert torch.accelerator.is_available()
    props = [torch.cuda.get_device_properties(i) for i in range(2)]
    assert props[0].uuid != props[1].uuid
    assert (props[1].major, props[1].minor) == torch.cuda.get_device_capability(1) == (8, 0)
    assert props[0].total_memory > 0 and props[0].multi_processor_count > 0
    assert torch.cuda.is_bf16_supported()
    assert torch.cuda.max_memory_allocated(0) == 0
    model = torch.nn.Linear(256, 256).to("cuda")
    assert model.weight.device == torch.device("cuda", 0)
    assert model.weight.is_cuda and not torch.ones(1).is_cuda
    assert torch.cuda.max_memory_allocated(0) >= 256 * 256 * 4
    out = model(torch.ones(2, 256, device="cuda"))
    out.sum().backward()
    assert model.weight.grad is not None and model.weight.grad.device.type == "cuda"
    assert out.cpu().device.type == "cpu"


class _reinstalled:
    """Swap the test's simulation for another one inside a block."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config

    def __enter__(self) -> SimGpu:
        from simcuda import install, uninstall

        uninstall()
        return install(self.config)

    def __exit__(self, *exc: object) -> None:
        from simcuda import install, uninstall

        uninstall()
        install(SimConfig(devices=2, sleep_clock_hz=CLOCK_HZ))


def test_cuda_visible_devices_is_read_at_initialization(
    sim: SimGpu, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runner hides CUDA from a script watched on the CPU with ``CUDA_VISIBLE_DEVICES=""``
    before torch is imported; the simulation honours it like CUDA does."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with _reinstalled(SimConfig(devices=2)):
        assert not torch.cuda.is_available() and torch.cuda.device_count() == 0
        assert not torch.accelerator.is_available()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,7,0")
    with _reinstalled(SimConfig(devices=2)):
        assert torch.cuda.device_count() == 1, "the list ends at the first unknown device"
        assert torch.cuda.get_device_name(0) == "simcuda GPU 1"


def test_fused_optimizer_with_grad_scaler_stays_on_the_device(sim: SimGpu) -> None:
    """Optimizers group their tensors by the device C++ reports; the groups must name the
    simulated device, or the scaler's tensors would be copied to the host every step."""
    model = torch.nn.Linear(8, 8).to("cuda")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, fused=True)
    scaler = torch.amp.GradScaler("cuda")
    weight = model.weight
    assert weight.get_device() == 0 and not weight.is_cpu and torch.ones(1).is_cpu
    sim.waits.clear()
    for _ in range(2):
        scaler.scale(model(torch.ones(4, 8, device="cuda")).sum()).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
    assert not sim.waits, [w.kind for w in sim.waits]


def test_to_follows_torchs_rules(sim: SimGpu) -> None:
    x = torch.ones(3, device=0)  # an index names a GPU
    assert x.device == torch.device("cuda", 0)
    assert x.to("cuda") is x and x.to(torch.float32) is x and x.to(x) is x, "nothing to do"
    half = x.to(torch.float16)
    assert half is not x and half.device == x.device and half.dtype == torch.float16
    assert torch.ones(2).to(x).device == x.device
    assert x.to(torch.ones(1, dtype=torch.float64)).dtype == torch.float64
    assert x.to("cuda:1").device == torch.device("cuda", 1)
    assert torch.empty(4, pin_memory=True).is_pinned()
