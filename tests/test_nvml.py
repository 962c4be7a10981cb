"""NVML wrapper and sampler against a monkeypatched ``pynvml``: every failure is n/a, never 0."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np
import pynvml
import pytest

from gpuwatch.core import nvml
from gpuwatch.core.samplers import (
    NVML_GPU_UTIL,
    NVML_MEM_USED,
    NVML_METRICS,
    NVML_POWER,
    NVML_SM_CLOCK,
    PERIOD_UNKNOWN,
    NvmlSampler,
    nvml_unavailable_statuses,
)
from gpuwatch.core.store import SeriesStore


def _error(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


@dataclass
class FakeGpu:
    """One fake device; ``fail`` maps a pynvml function name to the error code it raises."""

    index: int
    uuid: str
    pci: str
    name: str = "Fake RTX"
    fail: dict[str, int] = field(default_factory=dict)
    handle: object = field(default_factory=object)


class FakeNvml:
    """Installs fake pynvml functions; records how often each was called."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, gpus: list[FakeGpu]) -> None:
        self.gpus = gpus
        self.calls: dict[str, int] = {}
        self.samples_calls: list[int] = []  # last-seen timestamps passed to GetSamples
        self.sample_batches: list[list[tuple[int, int]]] = []
        self.init_error: int | None = None
        self.driver_model = {"nvmlDeviceGetDriverModel_v2": pynvml.NVML_ERROR_NOT_SUPPORTED}
        for name in ("nvmlInit", "nvmlShutdown", "nvmlDeviceGetCount",
                     "nvmlDeviceGetHandleByIndex", "nvmlDeviceGetName", "nvmlDeviceGetUUID",
                     "nvmlDeviceGetPciInfo", "nvmlSystemGetDriverVersion",
                     "nvmlDeviceGetSamples", "nvmlDeviceGetUtilizationRates",
                     "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetClockInfo",
                     "nvmlDeviceGetPowerUsage", "nvmlDeviceGetDriverModel_v2",
                     "nvmlDeviceGetDriverModel_v1"):
            monkeypatch.setattr(pynvml, name, self._wrap(name, getattr(self, "_" + name)))

    def _wrap(self, name: str, fn: Any) -> Any:
        def call(*args: Any) -> Any:
            self.calls[name] = self.calls.get(name, 0) + 1
            if args and not isinstance(args[0], int | bytes | str):
                gpu = self._gpu(args[0])
                if name in gpu.fail:
                    raise _error(gpu.fail[name])
            return fn(*args)
        call.__name__ = name
        return call

    def _gpu(self, handle: object) -> FakeGpu:
        return next(g for g in self.gpus if g.handle is handle)

    def _nvmlInit(self) -> None:
        if self.init_error is not None:
            raise _error(self.init_error)

    def _nvmlShutdown(self) -> None:
        pass

    def _nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def _nvmlDeviceGetHandleByIndex(self, index: int) -> object:
        return self.gpus[index].handle

    def _nvmlDeviceGetName(self, handle: object) -> str:
        return self._gpu(handle).name

    def _nvmlDeviceGetUUID(self, handle: object) -> str:
        return self._gpu(handle).uuid

    def _nvmlDeviceGetPciInfo(self, handle: object) -> SimpleNamespace:
        return SimpleNamespace(busId=self._gpu(handle).pci.encode())

    def _nvmlSystemGetDriverVersion(self) -> str:
        return "999.12"

    def _nvmlDeviceGetSamples(self, handle: object, kind: int, last_ts: int) -> tuple:
        assert kind == pynvml.NVML_GPU_UTILIZATION_SAMPLES
        self.samples_calls.append(last_ts)
        if not self.sample_batches:
            raise _error(pynvml.NVML_ERROR_NOT_FOUND)
        out = []
        for ts, value in self.sample_batches.pop(0):
            sample = pynvml.c_nvmlSample_t()
            sample.timeStamp = ts
            sample.sampleValue.uiVal = value
            out.append(sample)
        return pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, out

    def _nvmlDeviceGetUtilizationRates(self, handle: object) -> SimpleNamespace:
        return SimpleNamespace(gpu=42, memory=7)

    def _nvmlDeviceGetMemoryInfo(self, handle: object) -> SimpleNamespace:
        return SimpleNamespace(used=3 * 2**30, total=8 * 2**30)

    def _nvmlDeviceGetClockInfo(self, handle: object, clock: int) -> int:
        assert clock == pynvml.NVML_CLOCK_SM
        return 1800

    def _nvmlDeviceGetPowerUsage(self, handle: object) -> int:
        return 123_456  # mW

    def _nvmlDeviceGetDriverModel_v2(self, handle: object) -> list[int]:
        return self._driver_model("nvmlDeviceGetDriverModel_v2")

    def _nvmlDeviceGetDriverModel_v1(self, handle: object) -> list[int]:
        return self._driver_model("nvmlDeviceGetDriverModel_v1")

    def _driver_model(self, name: str) -> list[int]:
        result = self.driver_model.get(name, pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        if isinstance(result, int):
            raise _error(result)
        return result


GPU0 = dict(index=0, uuid="GPU-8f0e1a2b-0000-1111-2222-333344445555", pci="00000000:01:00.0")
GPU1 = dict(index=1, uuid="GPU-deadbeef-aaaa-bbbb-cccc-ddddeeeeffff", pci="00000000:3B:00.0")


@pytest.fixture(autouse=True)
def _fresh_nvml() -> Iterator[None]:
    nvml.shutdown()
    yield
    nvml.shutdown()


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeNvml]:
    fake = FakeNvml(monkeypatch, [FakeGpu(**GPU0), FakeGpu(**GPU1)])
    yield fake
    nvml.shutdown()  # before monkeypatch restores the real library


# ---- wrapper ----------------------------------------------------------------------------


def test_library_missing_is_unavailable_with_reason_never_zero(fake: FakeNvml) -> None:
    fake.init_error = pynvml.NVML_ERROR_LIBRARY_NOT_FOUND
    assert nvml.unavailable_reason() == nvml.LIBRARY_NOT_FOUND
    reply = nvml.query_with_reason("nvmlDeviceGetCount")
    assert reply.value is nvml.NA and reply.reason == nvml.LIBRARY_NOT_FOUND
    value = nvml.query("nvmlDeviceGetUtilizationRates", object())
    assert value is nvml.NA
    assert value != 0 and math.isnan(float(value)) and str(value) == "N/A"
    assert nvml.list_devices() == []
    with pytest.raises(nvml.NvmlUnavailable, match="no NVIDIA driver"):
        nvml.find_device(index=0)
    info = nvml.describe()
    assert info["available"] is False and info["reason"] == nvml.LIBRARY_NOT_FOUND
    assert fake.calls["nvmlInit"] == 1  # the failure is cached, not retried per call


def test_library_missing_gives_unavailable_statuses_and_no_samples(fake: FakeNvml) -> None:
    fake.init_error = pynvml.NVML_ERROR_LIBRARY_NOT_FOUND
    store = SeriesStore()
    sampler = NvmlSampler.for_device(store, uuid=GPU0["uuid"], index=0)
    sampler.start()
    assert sampler.join(timeout=5), "the sampler should end by itself without NVML"
    statuses = store.statuses()
    assert sorted(statuses) == sorted(NVML_METRICS)
    for name in NVML_METRICS:
        assert statuses[name].available is False
        assert statuses[name].reason == nvml.LIBRARY_NOT_FOUND
    assert store.names() == []


def test_sampler_for_an_unmatched_device_says_so(fake: FakeNvml) -> None:
    store = SeriesStore()
    sampler = NvmlSampler.for_device(store, uuid="GPU-elsewhere")
    assert not sampler.probe()
    status = store.statuses()[NVML_GPU_UTIL]
    assert not status.available and "no NVML device matches" in (status.reason or "")
    assert store.names() == []


def test_nvml_unavailable_statuses_helper() -> None:
    store = SeriesStore()
    statuses = nvml_unavailable_statuses(store, "because")
    assert [s.name for s in statuses] == list(NVML_METRICS)
    assert all(not s.available and s.reason == "because" for s in store.statuses().values())


def test_other_init_failures_have_their_own_reason(fake: FakeNvml) -> None:
    fake.init_error = pynvml.NVML_ERROR_DRIVER_NOT_LOADED
    assert "driver not loaded" in (nvml.unavailable_reason() or "")


def test_not_supported_is_na_with_reason(fake: FakeNvml) -> None:
    fake.gpus[0].fail["nvmlDeviceGetPowerUsage"] = pynvml.NVML_ERROR_NOT_SUPPORTED
    reply = nvml.query_with_reason("nvmlDeviceGetPowerUsage", fake.gpus[0].handle)
    assert reply.value is nvml.NA and reply.reason == nvml.NOT_SUPPORTED
    assert not reply.ok
    assert nvml.query("nvmlDeviceGetPowerUsage", fake.gpus[1].handle) == 123_456


def test_function_not_found_is_na_and_logged_once(fake: FakeNvml,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    fake.gpus[0].fail["nvmlDeviceGetSamples"] = pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
    caplog.set_level(logging.WARNING, logger="gpuwatch.core.nvml")
    for _ in range(3):
        reply = nvml.query_with_reason("nvmlDeviceGetSamples", fake.gpus[0].handle, 1, 0)
        assert reply.value is nvml.NA and reply.reason == nvml.FUNCTION_NOT_FOUND
    warnings = [r for r in caplog.records if "nvmlDeviceGetSamples" in r.getMessage()]
    assert len(warnings) == 1
    assert "compatible with your driver" in warnings[0].getMessage()


def test_name_missing_from_binding(fake: FakeNvml) -> None:
    reply = nvml.query_with_reason("nvmlDeviceGetSomethingFromTheFuture")
    assert reply.value is nvml.NA and "nvidia-ml-py" in (reply.reason or "")


@pytest.mark.parametrize(("given", "want"), [
    ("GPU-8F0E1A2B-0000-1111-2222-333344445555", "8f0e1a2b-0000-1111-2222-333344445555"),
    ("8f0e1a2b-0000-1111-2222-333344445555", "8f0e1a2b-0000-1111-2222-333344445555"),
    (" MIG-abc ", "mig-abc"),
])
def test_normalize_uuid(given: str, want: str) -> None:
    assert nvml.normalize_uuid(given) == want


@pytest.mark.parametrize("given", ["00000000:3B:00.0", "0000:3b:00.0", "3B:00.0",
                                   "00000000:3b:00"])
def test_normalize_pci_bus_id(given: str) -> None:
    assert nvml.normalize_pci_bus_id(given) == "00000000:3b:00.0"


def test_find_device_prefers_uuid_then_pci_then_index(fake: FakeNvml) -> None:
    torch_uuid = GPU1["uuid"][4:].upper()  # torch style: no "GPU-" prefix
    match = nvml.find_device(uuid=torch_uuid, pci_bus_id="0000:01:00.0", index=0)
    assert match.matched_by == "uuid" and match.device.index == 1
    assert match.handle is fake.gpus[1].handle and match.warning is None
    match = nvml.find_device(uuid="GPU-not-here", pci_bus_id="0000:3b:00.0", index=0)
    assert match.matched_by == "pci_bus_id" and match.device.index == 1
    match = nvml.find_device(index=1)
    assert match.matched_by == "index" and match.device.index == 1
    assert match.warning is not None and "CUDA_DEVICE_ORDER=PCI_BUS_ID" in match.warning
    with pytest.raises(nvml.NvmlUnavailable, match="no NVML device matches"):
        nvml.find_device(uuid="GPU-nope", pci_bus_id="0000:99:00.0", index=7)


def test_single_gpu_index_match_needs_no_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml(monkeypatch, [FakeGpu(**GPU0)])
    match = nvml.find_device(index=0)
    assert match.handle is fake.gpus[0].handle and match.warning is None
    nvml.shutdown()


def test_list_devices_and_describe(fake: FakeNvml) -> None:
    devices = nvml.list_devices()
    assert [d.as_dict() for d in devices] == [
        {"index": 0, "name": "Fake RTX", "uuid": GPU0["uuid"], "pci_bus_id": GPU0["pci"]},
        {"index": 1, "name": "Fake RTX", "uuid": GPU1["uuid"], "pci_bus_id": GPU1["pci"]},
    ]
    info = nvml.describe()
    assert info["available"] is True and info["reason"] is None
    assert info["driver_version"] == "999.12"
    assert [d["driver_model"] for d in info["devices"]] == [None, None]  # Linux: n/a


def test_driver_model_falls_back_to_v1(fake: FakeNvml) -> None:
    fake.driver_model = {"nvmlDeviceGetDriverModel_v2": pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
                         "nvmlDeviceGetDriverModel_v1": [pynvml.NVML_DRIVER_WDDM, 0]}
    assert nvml.driver_model(fake.gpus[0].handle) == "WDDM"
    fake.driver_model = {"nvmlDeviceGetDriverModel_v2": [pynvml.NVML_DRIVER_WDM, 1]}
    assert nvml.driver_model(fake.gpus[0].handle) == "TCC"
    fake.driver_model = {"nvmlDeviceGetDriverModel_v2": pynvml.NVML_ERROR_NOT_SUPPORTED}
    assert nvml.driver_model(fake.gpus[0].handle) is nvml.NA


# ---- sampler ----------------------------------------------------------------------------

PERIOD_US = 166_667  # a 1/6 s product


def _batch(last_us: int, n: int, first_value: int = 10) -> list[tuple[int, int]]:
    return [(last_us - (n - 1 - k) * PERIOD_US, first_value + k) for k in range(n)]


def test_sampler_places_nvml_samples_on_perf_axis_with_their_period(fake: FakeNvml) -> None:
    store = SeriesStore()
    now_us = time.time_ns() // 1000
    perf_at_now = time.perf_counter_ns()
    first = _batch(now_us, 6)
    # the second batch repeats an old sample, and skips one period (a lost sample)
    second = [first[-1], (now_us + 2 * PERIOD_US, 90), (now_us + 3 * PERIOD_US, 91)]
    fake.sample_batches = [first, second]
    sampler = NvmlSampler.for_device(store, uuid=GPU0["uuid"][4:])
    assert sampler.probe()
    assert sampler.match is not None and sampler.match.device.index == 0
    statuses = store.statuses()
    assert statuses[NVML_GPU_UTIL].available
    assert statuses[NVML_GPU_UTIL].period_s == pytest.approx(PERIOD_US / 1e6)
    view = store.snapshot(NVML_GPU_UTIL)
    assert view.value.tolist() == [10, 11, 12, 13, 14, 15]
    np.testing.assert_array_equal(view.t1 - view.t0, PERIOD_US * 1000)
    np.testing.assert_array_equal(np.diff(view.t1), PERIOD_US * 1000)
    # epoch µs -> perf ns: the newest sample sits at "now" on the perf axis (± a few ms)
    assert abs(int(view.t1[-1]) - perf_at_now) < 20_000_000

    assert sampler.poll()
    assert fake.samples_calls == [0, now_us]  # asks only for samples newer than seen
    view = store.snapshot(NVML_GPU_UTIL)
    assert view.value.tolist()[6:] == [90, 91]  # the repeated sample is not stored twice
    np.testing.assert_array_equal(view.t1 - view.t0, PERIOD_US * 1000)  # gap not widened
    assert abs(int(view.t1[6] - view.t1[5]) - 2 * PERIOD_US * 1000) < 100_000

    assert sampler.poll()  # NVML_ERROR_NOT_FOUND: nothing new, not a failure
    assert len(store.snapshot(NVML_GPU_UTIL)) == 8
    assert store.statuses()[NVML_GPU_UTIL].available


def test_sampler_holds_a_lone_first_sample_until_its_period_is_known(fake: FakeNvml) -> None:
    store = SeriesStore()
    now_us = time.time_ns() // 1000
    fake.sample_batches = [[(now_us, 50)], [(now_us + PERIOD_US, 60)]]
    sampler = NvmlSampler(store, fake.gpus[0].handle)
    assert sampler.probe()
    assert len(store.snapshot(NVML_GPU_UTIL)) == 0
    assert store.statuses()[NVML_GPU_UTIL].period_s is None
    sampler.poll()
    view = store.snapshot(NVML_GPU_UTIL)
    assert view.value.tolist() == [50, 60]
    np.testing.assert_array_equal(view.t1 - view.t0, PERIOD_US * 1000)


def test_sampler_point_metrics_cover_the_poll_interval(fake: FakeNvml) -> None:
    store = SeriesStore()
    sampler = NvmlSampler(store, fake.gpus[0].handle)
    before = time.perf_counter_ns()
    sampler.probe()
    sampler.poll()
    sampler.poll()
    after = time.perf_counter_ns()
    mem = store.snapshot(NVML_MEM_USED)
    assert mem.value.tolist() == [3 * 2**30] * 2
    assert store.snapshot(NVML_SM_CLOCK).value.tolist() == [1800.0] * 2
    assert store.snapshot(NVML_POWER).value.tolist() == [123.456] * 2
    assert before <= mem.t0[0] < mem.t1[0] == mem.t0[1] < mem.t1[1] <= after
    units = {n: s.unit for n, s in store.statuses().items()}
    assert units == {NVML_GPU_UTIL: "%", NVML_MEM_USED: "bytes", NVML_SM_CLOCK: "MHz",
                     NVML_POWER: "W"}


def test_sampler_unsupported_metric_is_unavailable_and_has_no_samples(fake: FakeNvml) -> None:
    gpu = fake.gpus[0]
    gpu.fail["nvmlDeviceGetPowerUsage"] = pynvml.NVML_ERROR_NOT_SUPPORTED
    gpu.fail["nvmlDeviceGetSamples"] = pynvml.NVML_ERROR_NOT_SUPPORTED
    gpu.fail["nvmlDeviceGetUtilizationRates"] = pynvml.NVML_ERROR_NOT_SUPPORTED
    store = SeriesStore()
    sampler = NvmlSampler(store, gpu.handle)
    assert sampler.probe()  # memory and clock still work
    for _ in range(3):
        sampler.poll()
    statuses = store.statuses()
    for name in (NVML_POWER, NVML_GPU_UTIL):
        assert statuses[name].available is False
        assert statuses[name].reason == nvml.NOT_SUPPORTED
        assert len(store.snapshot(name)) == 0
    assert fake.calls["nvmlDeviceGetPowerUsage"] == 1  # probed once, never polled
    assert len(store.snapshot(NVML_MEM_USED)) == 3


def test_sampler_falls_back_to_utilization_rates(fake: FakeNvml) -> None:
    fake.gpus[0].fail["nvmlDeviceGetSamples"] = pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
    store = SeriesStore()
    sampler = NvmlSampler(store, fake.gpus[0].handle)
    sampler.probe()
    sampler.poll()
    sampler.poll()
    status = store.statuses()[NVML_GPU_UTIL]
    assert status.available and status.period_s is None
    assert PERIOD_UNKNOWN in status.label
    view = store.snapshot(NVML_GPU_UTIL)
    assert view.value.tolist() == [42.0, 42.0]
    assert view.t1[0] == view.t0[1]  # readings tile the axis: [previous poll, this poll]


def test_sampler_retires_metrics_when_the_gpu_is_lost(fake: FakeNvml) -> None:
    store = SeriesStore()
    gpu = fake.gpus[0]
    sampler = NvmlSampler(store, gpu.handle)
    assert sampler.probe()
    assert sampler.poll()
    for name in ("nvmlDeviceGetSamples", "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetClockInfo",
                 "nvmlDeviceGetPowerUsage"):
        gpu.fail[name] = pynvml.NVML_ERROR_GPU_IS_LOST
    assert not sampler.poll()  # nothing left to sample: the thread would end
    for name in NVML_METRICS:
        status = store.statuses()[name]
        assert not status.available and status.reason == nvml.GPU_LOST


def test_sampler_thread_runs_and_stops(fake: FakeNvml) -> None:
    store = SeriesStore()
    sampler = NvmlSampler(store, fake.gpus[0].handle, mean_interval_s=0.01)
    sampler.start()
    sampler.start()  # idempotent
    deadline = time.monotonic() + 5
    while len(store.snapshot(NVML_MEM_USED)) < 3 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert len(store.snapshot(NVML_MEM_USED)) >= 3
    sampler.stop()
    sampler.stop()  # idempotent
    assert not sampler.running


@pytest.mark.skipif(not hasattr(time, "CLOCK_BOOTTIME"), reason="Linux clock")
def test_sampler_recognises_stamps_counted_since_boot(fake: FakeNvml) -> None:
    # Some Linux drivers stamp samples with CLOCK_BOOTTIME µs, not the epoch: such samples
    # must still land at "now" on the perf axis, not in 1970.
    boot_us = time.clock_gettime_ns(time.CLOCK_BOOTTIME) // 1000
    perf_at_now = time.perf_counter_ns()
    fake.sample_batches = [_batch(boot_us, 4)]
    store = SeriesStore()
    sampler = NvmlSampler(store, fake.gpus[0].handle)
    sampler.probe()
    view = store.snapshot(NVML_GPU_UTIL)
    assert len(view) == 4
    assert abs(int(view.t1[-1]) - perf_at_now) < 20_000_000
    np.testing.assert_array_equal(view.t1 - view.t0, PERIOD_US * 1000)


def test_sampler_anchors_stamps_on_an_unknown_clock_at_read_time(fake: FakeNvml) -> None:
    alien_us = 5 * 10**15  # far from the epoch (~1.8e15 µs) and from time since boot
    fake.sample_batches = [_batch(alien_us, 3), [(alien_us + PERIOD_US, 77)]]
    store = SeriesStore()
    sampler = NvmlSampler(store, fake.gpus[0].handle)
    before = time.perf_counter_ns()
    sampler.probe()
    after = time.perf_counter_ns()
    view = store.snapshot(NVML_GPU_UTIL)
    assert before <= view.t1[-1] <= after  # the newest sample is "now", never the future
    sampler.poll()
    view = store.snapshot(NVML_GPU_UTIL)
    assert view.value.tolist()[-1] == 77
    assert (view.t1 > view.t0).all()


def test_sampler_drops_impossible_utilization_values(fake: FakeNvml) -> None:
    now_us = time.time_ns() // 1000
    batch = _batch(now_us, 4)
    batch[1] = (batch[1][0], 4_294_967_295)  # a reported driver glitch
    fake.sample_batches = [[*batch, (2**64 - 1, 50)]]  # and a garbage stamp
    store = SeriesStore()
    sampler = NvmlSampler(store, fake.gpus[0].handle)
    sampler.probe()
    view = store.snapshot(NVML_GPU_UTIL)
    assert view.value.tolist() == [batch[0][1], batch[2][1], batch[3][1]]
    np.testing.assert_array_equal(view.t1 - view.t0, PERIOD_US * 1000)
    sampler.poll()
    assert fake.samples_calls[-1] == batch[-1][0]  # the garbage stamp did not poison it


def test_sampler_reads_the_rate_when_the_sample_buffer_runs_dry(fake: FakeNvml) -> None:
    shift = [0]

    def clock() -> int:
        return time.perf_counter_ns() + shift[0]

    now_us = time.time_ns() // 1000
    fake.sample_batches = [_batch(now_us, 3)]  # then NVML_ERROR_NOT_FOUND: the GPU idles
    store = SeriesStore()
    sampler = NvmlSampler(store, fake.gpus[0].handle, clock=clock)
    sampler.probe()
    sampler.poll()
    assert len(store.snapshot(NVML_GPU_UTIL)) == 3  # quiet for less than a second: wait
    shift[0] = 2 * 10**9  # two seconds later, still nothing new
    sampler.poll()
    view = store.snapshot(NVML_GPU_UTIL)
    assert view.value.tolist() == [10, 11, 12, 42.0]
    # it covers the quiet time since the last sample (or since the sampler started)
    assert 0 <= view.t0[-1] - view.t1[-2] < 50_000_000
    assert view.t1[-1] <= clock()
    sampler.poll()
    assert len(store.snapshot(NVML_GPU_UTIL)) == 4  # one reading per quiet second, not per poll
    # samples resume; one of them is stamped before the rate reading ended: already covered
    fake.sample_batches = [[(now_us + PERIOD_US, 5), (now_us + 3 * 10**6, 60),
                            (now_us + 3 * 10**6 + PERIOD_US, 61)]]
    sampler.poll()
    view = store.snapshot(NVML_GPU_UTIL)
    assert view.value.tolist() == [10, 11, 12, 42.0, 60, 61]
    assert (view.t1 > view.t0).all()
    assert (view.t0[1:] >= view.t1[:-1]).all()  # a step series without overlaps
