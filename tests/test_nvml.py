"""NVML wrapper, device matching and sampler against a fake NVML driver library.

The fake (``tests/fake_nvml``) is a C stand-in for ``libnvidia-ml.so.1`` written from the NVML
API reference (https://docs.nvidia.com/deploy/nvml-api/) and driven through the real
``pynvml`` binding, so struct layouts, versioned symbols and NVMLError classes are the
shipped ones. Every failure must read "n/a — reason", never 0.
"""

from __future__ import annotations

import ctypes
import logging
import math
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pynvml
import pytest
from fake_nvml import BOOT_CLOCK, FakeDevice, FakeNvml, build, compiler
from waiting import wait_until

from gpuwatch.core.model.messages import DeviceInfo, RankInfo
from gpuwatch.core.model.metrics import (
    NVML_GPU_UTIL,
    NVML_MEM_USED,
    NVML_METRICS,
    NVML_POWER,
    NVML_SM_CLOCK,
)
from gpuwatch.core.model.store import SeriesStore
from gpuwatch.core.run import nvml
from gpuwatch.core.run.gpu_mismatch import GpuView, check_python
from gpuwatch.core.run.rank_devices import RankDevices
from gpuwatch.core.run.rank_links import RankRun
from gpuwatch.core.run.run_model import RunModel
from gpuwatch.core.run.samplers import PERIOD_UNKNOWN, NvmlSampler, nvml_unavailable_statuses

UUID0 = "GPU-8f0e1a2b-0000-1111-2222-333344445555"
UUID1 = "GPU-deadbeef-aaaa-bbbb-cccc-ddddeeeeffff"
UUID2 = "GPU-0badf00d-1234-5678-9abc-def012345678"
MIG_UUID = "MIG-5c1b6a2e-7d3f-5e8a-9b0c-1d2e3f405162"
PERIOD_US = 166_667  # a 1/6 s product


@pytest.fixture(scope="session")
def fake_library(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> ctypes.CDLL:
    """The fake driver, compiled once (and cached across runs by source hash)."""
    if compiler() is None:
        pytest.skip("no C compiler (cc, gcc or clang) to build the fake NVML library")
    cache = getattr(request.config, "cache", None)
    cache_dir = (
        Path(cache.mkdir("fake_nvml"))
        if cache is not None
        else tmp_path_factory.mktemp("fake_nvml")
    )
    return ctypes.CDLL(str(build(cache_dir)))


@pytest.fixture
def machine(fake_library: ctypes.CDLL, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeNvml]:
    """An empty fake machine installed as pynvml's driver library; tests add GPUs to it."""
    nvml.shutdown()
    fake = FakeNvml(fake_library)
    monkeypatch.setattr(pynvml, "nvmlLib", fake.library)
    monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer_cache", {})
    yield fake
    nvml.shutdown()  # before monkeypatch takes the library away


@pytest.fixture
def two_gpus(machine: FakeNvml) -> tuple[FakeDevice, FakeDevice]:
    return machine.add_gpu(UUID0, 0x01), machine.add_gpu(UUID1, 0x3B)


@pytest.fixture(autouse=True)
def _fresh_nvml() -> Iterator[None]:
    nvml.shutdown()
    yield
    nvml.shutdown()


def _handle(index: int) -> object:
    return pynvml.nvmlDeviceGetHandleByIndex(index)


# ---- no library, failed init ------------------------------------------------------------


@pytest.fixture
def no_library(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """pynvml's own loader runs and dlopen fails, as on a machine without the driver."""
    attempts: list[str] = []

    def cdll(name: str, *args: object, **kwargs: object) -> ctypes.CDLL:
        attempts.append(name)
        raise OSError(f"{name}: cannot open shared object file")

    nvml.shutdown()
    monkeypatch.setattr(pynvml, "nvmlLib", None)
    monkeypatch.setattr(pynvml, "CDLL", cdll)
    return attempts


def test_library_missing_is_unavailable_with_reason_never_zero(no_library: list[str]) -> None:
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
    assert no_library == ["libnvidia-ml.so.1"]  # the failure is cached, not retried per call


def test_library_missing_gives_unavailable_statuses_and_no_samples(no_library: list[str]) -> None:
    store = SeriesStore()
    sampler = NvmlSampler.for_device(store, uuid=UUID0, index=0)
    sampler.start()
    assert sampler.join(timeout=10), "the sampler should end by itself without NVML"
    statuses = store.statuses()
    assert sorted(statuses) == sorted(NVML_METRICS)
    for name in NVML_METRICS:
        assert statuses[name].available is False
        assert statuses[name].reason == nvml.LIBRARY_NOT_FOUND
    assert store.names() == []


@pytest.mark.parametrize(
    ("code", "words"),
    [
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "driver not loaded"),
        (pynvml.NVML_ERROR_NO_PERMISSION, "no permission"),
    ],
)
def test_init_failures_have_their_own_reason(machine: FakeNvml, code: int, words: str) -> None:
    machine.fail(None, "nvmlInitWithFlags", code)
    assert words in (nvml.unavailable_reason() or "")
    assert machine.init_count == 0


def test_nvml_unavailable_statuses_helper() -> None:
    store = SeriesStore()
    statuses = nvml_unavailable_statuses(store, "because")
    assert [s.name for s in statuses] == list(NVML_METRICS)
    assert all(not s.available and s.reason == "because" for s in store.statuses().values())


# ---- per-call failures ------------------------------------------------------------------


def test_not_supported_is_na_with_reason_on_that_gpu_only(
    machine: FakeNvml, two_gpus: tuple[FakeDevice, FakeDevice]
) -> None:
    machine.fail(two_gpus[0], "nvmlDeviceGetPowerUsage", pynvml.NVML_ERROR_NOT_SUPPORTED)
    nvml.init()
    reply = nvml.query_with_reason("nvmlDeviceGetPowerUsage", _handle(0))
    assert reply.value is nvml.NA and reply.reason == nvml.NOT_SUPPORTED and not reply.ok
    assert nvml.query("nvmlDeviceGetPowerUsage", _handle(1)) == 123_456  # mW


def test_function_missing_from_the_driver_is_na_and_logged_once(
    machine: FakeNvml, two_gpus: tuple[FakeDevice, FakeDevice], caplog: pytest.LogCaptureFixture
) -> None:
    machine.hide("nvmlDeviceGetSamples")  # an older driver than the binding
    caplog.set_level(logging.WARNING, logger="gpuwatch.core.run.nvml")
    nvml.init()
    for _ in range(3):
        reply = nvml.query_with_reason("nvmlDeviceGetSamples", _handle(0), 1, 0)
        assert reply.value is nvml.NA and reply.reason == nvml.FUNCTION_NOT_FOUND
    warnings = [r for r in caplog.records if "nvmlDeviceGetSamples" in r.getMessage()]
    assert len(warnings) == 1
    assert "compatible with your driver" in warnings[0].getMessage()


def test_name_missing_from_binding(machine: FakeNvml) -> None:
    reply = nvml.query_with_reason("nvmlDeviceGetSomethingFromTheFuture")
    assert reply.value is nvml.NA and "nvidia-ml-py" in (reply.reason or "")


def test_energy_is_millijoules_since_load_and_not_supported_before_volta(
    machine: FakeNvml, two_gpus: tuple[FakeDevice, FakeDevice]
) -> None:
    volta, pascal = two_gpus
    machine.set_power(volta, 250_000)  # 250 W
    machine.fail(pascal, "nvmlDeviceGetTotalEnergyConsumption", pynvml.NVML_ERROR_NOT_SUPPORTED)
    nvml.init()
    t0 = time.perf_counter_ns()
    e0 = nvml.query("nvmlDeviceGetTotalEnergyConsumption", _handle(0))
    wait_until(lambda: time.perf_counter_ns() - t0 > 50_000_000, 5, "50 ms to pass")
    e1 = nvml.query("nvmlDeviceGetTotalEnergyConsumption", _handle(0))
    t1 = time.perf_counter_ns()
    assert e1 > e0 and (e1 - e0) <= 250 * (t1 - t0) / 1e9 * 1000 + 1  # mJ at most 250 W
    reply = nvml.query_with_reason("nvmlDeviceGetTotalEnergyConsumption", _handle(1))
    assert reply.reason == nvml.NOT_SUPPORTED


# ---- identity -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "want"),
    [
        ("GPU-8F0E1A2B-0000-1111-2222-333344445555", "8f0e1a2b-0000-1111-2222-333344445555"),
        ("8f0e1a2b-0000-1111-2222-333344445555", "8f0e1a2b-0000-1111-2222-333344445555"),
        (" MIG-5C1B6A2E-7D3F-5E8A-9B0C-1D2E3F405162 ", "5c1b6a2e-7d3f-5e8a-9b0c-1d2e3f405162"),
    ],
)
def test_normalize_uuid(given: str, want: str) -> None:
    assert nvml.normalize_uuid(given) == want


@pytest.mark.parametrize("given", ["00000000:3B:00.0", "0000:3b:00.0", "3B:00.0", "00000000:3b:00"])
def test_normalize_pci_bus_id(given: str) -> None:
    assert nvml.normalize_pci_bus_id(given) == "00000000:3b:00.0"


def test_list_devices_and_describe(
    machine: FakeNvml, two_gpus: tuple[FakeDevice, FakeDevice]
) -> None:
    devices = nvml.list_devices()
    assert [d.as_dict() for d in devices] == [
        {
            "index": 0,
            "name": "NVIDIA A100-SXM4-40GB",
            "uuid": UUID0,
            "pci_bus_id": "00000000:01:00.0",
        },
        {
            "index": 1,
            "name": "NVIDIA A100-SXM4-40GB",
            "uuid": UUID1,
            "pci_bus_id": "00000000:3B:00.0",
        },
    ]
    info = nvml.describe()
    assert info["available"] is True and info["reason"] is None
    assert info["driver_version"] == "580.65.06"
    assert [d["driver_model"] for d in info["devices"]] == [None, None]  # Linux: n/a


def test_the_driver_s_cuda_version_and_each_gpu_s_capability(
    machine: FakeNvml, two_gpus: tuple[FakeDevice, FakeDevice]
) -> None:
    """``nvmlSystemGetCudaDriverVersion`` answers major * 1000 + minor * 10 (12080: 12.8)."""
    machine.set_capability(two_gpus[1], 6, 1)
    machine.set_cuda_driver_version(12080)
    assert nvml.cuda_driver_version() == (12, 8)
    caps = [nvml.compute_capability(d.handle) for d in nvml.list_devices()]
    assert caps == [(8, 0), (6, 1)]
    assert GpuView.from_nvml() == GpuView(((8, 0), (6, 1)), (12, 8))
    assert nvml.describe()["cuda_driver_version"] == "12.8"


def test_a_driver_without_the_cuda_version_call_leaves_it_unknown(
    machine: FakeNvml, two_gpus: tuple[FakeDevice, FakeDevice]
) -> None:
    machine.hide("nvmlSystemGetCudaDriverVersion")
    assert nvml.cuda_driver_version() is None
    assert GpuView.from_nvml() == GpuView(((8, 0), (8, 0)), None)


def test_no_driver_no_gpu_view(no_library: list[str]) -> None:
    assert nvml.cuda_driver_version() is None
    assert GpuView.from_nvml() == GpuView()


def test_linux_cu130_on_a_cuda_12_2_driver_seen_through_nvml(machine: FakeNvml) -> None:
    """The registry's Linux torch on driver 535 (CUDA 12.2): too old for every PyTorch CUDA
    build, so the sentence names the driver version to update to."""
    gpu = machine.add_gpu(UUID0, 0x01, name="NVIDIA GeForce RTX 3090")
    machine.set_capability(gpu, 8, 6)
    machine.set_cuda_driver_version(12020)
    report = {
        "python": "3.12.3",
        "prefix": "/home/ana/.venv",
        "torch": "2.14.1+cu130",
        "cuda": "13.0",
        "cuda_available": False,
        "arch_list": ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"],
    }
    found = check_python("/home/ana/.venv/bin/python", survey=lambda python, timeout: report)
    assert found is not None
    assert "built for CUDA 13.0 but the NVIDIA driver supports CUDA 12.2 at most" in (
        found.sentence
    )
    assert "update the NVIDIA driver to " in found.sentence
    assert found.fix_command is not None and found.fix_command.endswith("whl/cu126")


def test_a_gpu_without_permission_is_skipped_not_fatal(
    machine: FakeNvml, two_gpus: tuple[FakeDevice, FakeDevice]
) -> None:
    # nvmlDeviceGetCount_v2 counts devices that nvmlDeviceGetHandleByIndex_v2 then refuses
    machine.fail(two_gpus[0], "nvmlDeviceGetHandleByIndex_v2", pynvml.NVML_ERROR_NO_PERMISSION)
    assert [d.uuid for d in nvml.list_devices()] == [UUID1]
    assert nvml.find_device(uuid=UUID1, index=0).device.index == 1


def test_driver_model_on_windows_and_the_v1_symbol(
    machine: FakeNvml, two_gpus: tuple[FakeDevice, FakeDevice]
) -> None:
    nvml.init()
    machine.set_driver_model(two_gpus[0], pynvml.NVML_DRIVER_WDM)
    assert nvml.driver_model(_handle(0)) == "TCC"
    machine.hide("nvmlDeviceGetDriverModel_v2")  # an old driver: only the v1 symbol
    machine.set_driver_model(two_gpus[0], pynvml.NVML_DRIVER_WDDM)
    assert nvml.driver_model(_handle(0)) == "WDDM"
    assert nvml.driver_model(_handle(1)) is nvml.NA  # not Windows: NOT_SUPPORTED


# ---- matching the runner's device ---------------------------------------------------------
#
# The runner's hello carries torch's view of its device: index (CUDA's, after
# CUDA_VISIBLE_DEVICES renumbered them), uuid (spelled "GPU-<hex>" by the runner, also for a MIG
# device, whose CUDA UUID is its MIG UUID: cuDeviceGetUuid_v2) and the PCI bus id.


@pytest.fixture
def three_gpus(machine: FakeNvml) -> list[FakeDevice]:
    return [
        machine.add_gpu(UUID0, 0x01),
        machine.add_gpu(UUID1, 0x3B),
        machine.add_gpu(UUID2, 0x86),
    ]


def _hello_device(dev: FakeDevice, cuda_index: int) -> dict[str, object]:
    """What the runner reports for ``dev`` (runner/survey.py: bare hex gets a "GPU-" prefix)."""
    bare = dev.uuid.split("-", 1)[1]
    parent = dev.parent or dev
    assert parent.pci_bus_id is not None
    domain, bus, rest = parent.pci_bus_id.split(":")
    return {
        "index": cuda_index,
        "uuid": f"GPU-{bare}",
        "pci_bus_id": f"{int(domain, 16):04X}:{bus}:{rest}",
    }


@pytest.mark.parametrize("visible", ["2", UUID2, "GPU-0badf00d"])
def test_cuda_visible_devices_renumbering_is_matched_by_identity(
    machine: FakeNvml, three_gpus: list[FakeDevice], visible: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # CUDA_VISIBLE_DEVICES as an index, a GPU UUID or a UUID prefix: the runner's cuda:0 is
    # NVML's GPU 2. The bare index 0 would name another GPU.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    hello = _hello_device(three_gpus[2], cuda_index=0)
    match = nvml.find_device(**hello)  # type: ignore[arg-type]
    assert match.matched_by == "uuid" and match.device.uuid == UUID2
    assert match.device.index == 2 and match.warning is None
    match = nvml.find_device(pci_bus_id=hello["pci_bus_id"], index=0)  # type: ignore[arg-type]
    assert match.matched_by == "pci_bus_id" and match.device.index == 2


def test_identity_that_matches_nothing_never_falls_back_to_the_index(
    machine: FakeNvml, three_gpus: list[FakeDevice]
) -> None:
    # e.g. NVML sees other GPUs than the runner (a container): GPU 0 is someone else's
    with pytest.raises(nvml.NvmlUnavailable, match="no NVML device matches"):
        nvml.find_device(
            uuid="GPU-11111111-2222-3333-4444-555555555555", pci_bus_id="0000:AF:00.0", index=0
        )


def test_index_is_the_last_resort_without_identity(
    machine: FakeNvml, three_gpus: list[FakeDevice]
) -> None:
    match = nvml.find_device(index=1)
    assert match.matched_by == "index" and match.device.uuid == UUID1
    assert match.warning is not None and "CUDA_DEVICE_ORDER=PCI_BUS_ID" in match.warning
    with pytest.raises(nvml.NvmlUnavailable, match="no NVML device matches"):
        nvml.find_device(index=7)


def test_single_gpu_index_match_needs_no_warning(machine: FakeNvml) -> None:
    machine.add_gpu(UUID0, 0x01)
    match = nvml.find_device(index=0)
    assert match.device.uuid == UUID0 and match.warning is None


@pytest.fixture
def mig_gpu(machine: FakeNvml) -> tuple[FakeDevice, list[FakeDevice]]:
    """GPU 0 plain; GPU 1 in MIG mode with MIG devices at slots 0 and 3 (1, 2 destroyed)."""
    machine.add_gpu(UUID0, 0x01)
    gpu = machine.add_gpu(UUID1, 0x3B)
    machine.set_mig_mode(gpu, enabled=True, max_devices=7)
    migs = [
        machine.add_mig(gpu, 0, "MIG-11111111-2222-5333-8444-555555555555"),
        machine.add_mig(gpu, 3, MIG_UUID),
    ]
    return gpu, migs


@pytest.mark.parametrize("spelling", ["runner", "nvml"])
def test_a_mig_device_is_matched_by_its_mig_uuid(
    machine: FakeNvml, mig_gpu: tuple[FakeDevice, list[FakeDevice]], spelling: str
) -> None:
    # CUDA_VISIBLE_DEVICES=MIG-...: the runner's cuda:0 is one MIG device of NVML's GPU 1
    _, migs = mig_gpu
    hello = _hello_device(migs[1], cuda_index=0)
    if spelling == "nvml":
        hello["uuid"] = MIG_UUID
    match = nvml.find_device(**hello)  # type: ignore[arg-type]
    assert match.matched_by == "uuid" and match.device.uuid == MIG_UUID
    assert match.device.index == 1 and match.device.mig_index == 3
    assert pynvml.nvmlDeviceIsMigDeviceHandle(match.handle).value == 1


@pytest.mark.usefixtures("mig_gpu")
def test_a_mig_gpu_matched_only_by_pci_bus_id_says_whose_figures_they_are(
    machine: FakeNvml,
) -> None:
    match = nvml.find_device(pci_bus_id="0000:3B:00.0", index=0)
    assert match.matched_by == "pci_bus_id" and match.device.uuid == UUID1
    assert match.warning is not None and "MIG" in match.warning


# ---- sampler ------------------------------------------------------------------------------


def _batch(
    last_us: int, n: int, first_value: int = 10, period_us: int = PERIOD_US
) -> list[tuple[int, int]]:
    return [(last_us - (n - 1 - k) * period_us, first_value + k) for k in range(n)]


def _sampler(store: SeriesStore, uuid: str = UUID0, **kwargs: object) -> NvmlSampler:
    sampler = NvmlSampler.for_device(store, uuid=uuid, **kwargs)  # type: ignore[arg-type]
    assert sampler.probe()
    return sampler


@pytest.mark.parametrize("period_us", [PERIOD_US, 1_000_000])  # 1/6 s to 1 s by product
def test_sampler_places_nvml_samples_on_perf_axis_with_their_period(
    machine: FakeNvml, two_gpus: tuple[FakeDevice, FakeDevice], period_us: int
) -> None:
    gpu = two_gpus[0]
    store = SeriesStore()
    now_us = time.time_ns() // 1000
    perf_at_now = time.perf_counter_ns()
    machine.push_samples(gpu, _batch(now_us, 6, period_us=period_us))
    sampler = _sampler(store, uuid=UUID0[4:])  # torch style: no prefix
    assert sampler.match is not None and sampler.match.device.index == 0
    status = store.statuses()[NVML_GPU_UTIL]
    assert status.available and status.period_s == pytest.approx(period_us / 1e6)
    view = store.snapshot(NVML_GPU_UTIL)
    assert view.value.tolist() == [10, 11, 12, 13, 14, 15]
    np.testing.assert_array_equal(view.t1 - view.t0, period_us * 1000)
    np.testing.assert_array_equal(np.diff(view.t1), period_us * 1000)
    # epoch µs -> perf ns: the newest sample sits at "now" on the perf axis (± a few ms)
    assert abs(int(view.t1[-1]) - perf_at_now) < 20_000_000

    # one period is lost; the driver hands out only what is newer than lastSeenTimeStamp
    machine.push_samples(gpu, [(now_us + 2 * period_us, 90), (now_us + 3 * period_us, 91)])
    assert sampler.poll()
    assert machine.last_seen(gpu) == now_us
    view = store.snapshot(NVML_GPU_UTIL)
    assert view.value.tolist()[6:] == [90, 91]
    np.testing.assert_array_equal(view.t1 - view.t0, period_us * 1000)  # gap not widened
    assert abs(int(view.t1[6] - view.t1[5]) - 2 * period_us * 1000) < 100_000

    assert sampler.poll()  # NVML_ERROR_NOT_FOUND: nothing new, not a failure
    assert machine.last_seen(gpu) == now_us + 3 * period_us
    assert len(store.snapshot(NVML_GPU_UTIL)) == 8
    assert store.statuses()[NVML_GPU_UTIL].available


def test_sampler_follows_a_live_driver_ring(
    machine: FakeNvml, two_gpus: tuple[FakeDevice, FakeDevice]
) -> None:
    gpu = two_gpus[0]
    machine.live_samples(gpu, 50_000, 30, history=4)  # a fast ring: the test stays short
    store = SeriesStore()
    sampler = NvmlSampler.for_device(store, uuid=UUID0, mean_interval_s=0.05)
    sampler.start()
    try:
        wait_until(lambda: len(store.snapshot(NVML_GPU_UTIL)) >= 8, 10, "eight samples")
        machine.set_live_value(gpu, 80)
        wait_until(lambda: 80 in store.snapshot(NVML_GPU_UTIL).value, 10, "the new value")
    finally:
        sampler.stop()
    view = store.snapshot(NVML_GPU_UTIL)
    assert set(view.value.tolist()) <= {30.0, 80.0}
    assert (view.t1 > view.t0).all() and (view.t0[1:] >= view.t1[:-1]).all()
    assert store.statuses()[NVML_GPU_UTIL].period_s == pytest.approx(0.05)


@pytest.mark.skipif(BOOT_CLOCK is None, reason="CLOCK_BOOTTIME is Linux's")
def test_sampler_recognises_stamps_counted_since_boot(
    machine: FakeNvml, two_gpus: tuple[FakeDevice, FakeDevice]
) -> None:
    # Some Linux drivers stamp samples with CLOCK_BOOTTIME µs, not the epoch: such samples
    # must still land at "now" on the perf axis, not in 1970.
    assert BOOT_CLOCK is not None
    machine.live_samples(two_gpus[0], PERIOD_US, 55, clock=BOOT_CLOCK, history=4)
    store = SeriesStore()
    before = time.perf_counter_ns()
    _sampler(store)
    after = time.perf_counter_ns()
    view = store.snapshot(NVML_GPU_UTIL)
    assert len(view) >= 4
    # the newest sample was stamped within one period before the read
    slack = 5_000_000
    assert before - PERIOD_US * 1000 - slack <= int(view.t1[-1]) <= after + slack
    np.testing.assert_array_equal(view.t1 - view.t0, PERIOD_US * 1000)


def test_sampler_holds_a_lone_first_sample_until_its_period_is_known(
    machine: FakeNvml, two_gpus: tuple[FakeDevice, FakeDevice]
) -> None:
    store = SeriesStore()
    now_us = time.time_ns() // 1000
    machine.push_samples(two_gpus[0], [(now_us, 50)])
    sampler = _sampler(store)
    assert len(store.snapshot(NVML_GPU_UTIL)) == 0
    assert store.statuses()[NVML_GPU_UTIL].period_s is None
    machine.push_samples(two_gpus[0], [(now_us + PERIOD_US, 60)])
    sampler.poll()
    view = store.snapshot(NVML_GPU_UTIL)
    assert view.value.tolist() == [50, 60]
    np.testing.assert_array_equal(view.t1 - view.t0, PERIOD_US * 1000)


def test_sampler_point_metrics_cover_the_poll_interval(
    machine: FakeNvml, two_gpus: tuple[FakeDevice, FakeDevice]
) -> None:
    store = SeriesStore()
    before = time.perf_counter_ns()
    sampler = _sampler(store)
    sampler.poll()
    sampler.poll()
    after = time.perf_counter_ns()
    mem = store.snapshot(NVML_MEM_USED)
    assert mem.value.tolist() == [3 * 2**30] * 2
    assert store.snapshot(NVML_SM_CLOCK).value.tolist() == [1410.0] * 2
    assert store.snapshot(NVML_POWER).value.tolist() == [123.456] * 2  # mW -> W
    assert before <= mem.t0[0] < mem.t1[0] == mem.t0[1] < mem.t1[1] <= after
    units = {n: s.unit for n, s in store.statuses().items()}
    assert units == {
        NVML_GPU_UTIL: "%",
        NVML_MEM_USED: "bytes",
        NVML_SM_CLOCK: "MHz",
        NVML_POWER: "W",
    }


@pytest.mark.parametrize("code", [pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_NO_PERMISSION])
def test_one_metric_na_others_fine(
    machine: FakeNvml, two_gpus: tuple[FakeDevice, FakeDevice], code: int
) -> None:
    gpu = two_gpus[0]
    machine.fail(gpu, "nvmlDeviceGetPowerUsage", code)
    machine.fail(gpu, "nvmlDeviceGetSamples", code)
    machine.fail(gpu, "nvmlDeviceGetUtilizationRates", code)
    store = SeriesStore()
    sampler = _sampler(store)  # memory and clock still work
    for _ in range(3):
        sampler.poll()
    statuses = store.statuses()
    want = nvml.NOT_SUPPORTED if code == pynvml.NVML_ERROR_NOT_SUPPORTED else nvml.NO_PERMISSION
    for name in (NVML_POWER, NVML_GPU_UTIL):
        assert statuses[name].available is False and statuses[name].reason == want
        assert len(store.snapshot(name)) == 0
    assert machine.calls("nvmlDeviceGetPowerUsage") == 1  # probed once, never polled
    assert len(store.snapshot(NVML_MEM_USED)) == 3
    assert statuses[NVML_MEM_USED].available and statuses[NVML_SM_CLOCK].available


def test_sampler_falls_back_to_utilization_rates(
    machine: FakeNvml, two_gpus: tuple[FakeDevice, FakeDevice]
) -> None:
    machine.hide("nvmlDeviceGetSamples")
    store = SeriesStore()
    sampler = _sampler(store)
    sampler.poll()
    sampler.poll()
    status = store.statuses()[NVML_GPU_UTIL]
    assert status.available and status.period_s is None
    assert PERIOD_UNKNOWN in status.label
    view = store.snapshot(NVML_GPU_UTIL)
    assert view.value.tolist() == [42.0, 42.0]
    assert view.t1[0] == view.t0[1]  # readings tile the axis: [previous poll, this poll]


def test_sampler_on_a_mig_device(
    machine: FakeNvml, mig_gpu: tuple[FakeDevice, list[FakeDevice]]
) -> None:
    # Utilization (samples and rates) is NOT_SUPPORTED on MIG-enabled GPUs (nvml.h); memory is
    # the MIG device's own.
    _, migs = mig_gpu
    store = SeriesStore()
    sampler = _sampler(store, uuid=_hello_device(migs[1], 0)["uuid"])  # type: ignore[arg-type]
    sampler.poll()
    statuses = store.statuses()
    util = statuses[NVML_GPU_UTIL]
    assert not util.available and util.reason == nvml.MIG_NO_UTILIZATION
    assert len(store.snapshot(NVML_GPU_UTIL)) == 0
    assert store.snapshot(NVML_MEM_USED).value.tolist() == [2**30]
    assert statuses[NVML_MEM_USED].available


def test_sampler_anchors_stamps_on_an_unknown_clock_at_read_time(
    machine: FakeNvml, two_gpus: tuple[FakeDevice, FakeDevice]
) -> None:
    alien_us = 5 * 10**15  # far from the epoch (~1.8e15 µs) and from time since boot
    machine.push_samples(two_gpus[0], _batch(alien_us, 3))
    store = SeriesStore()
    before = time.perf_counter_ns()
    sampler = _sampler(store)
    after = time.perf_counter_ns()
    view = store.snapshot(NVML_GPU_UTIL)
    assert before <= view.t1[-1] <= after  # the newest sample is "now", never the future
    machine.push_samples(two_gpus[0], [(alien_us + PERIOD_US, 77)])
    sampler.poll()
    view = store.snapshot(NVML_GPU_UTIL)
    assert view.value.tolist()[-1] == 77
    assert (view.t1 > view.t0).all()


def test_sampler_drops_impossible_utilization_values(
    machine: FakeNvml, two_gpus: tuple[FakeDevice, FakeDevice]
) -> None:
    now_us = time.time_ns() // 1000
    batch = _batch(now_us, 4)
    batch[1] = (batch[1][0], 4_294_967_295)  # a reported driver glitch
    machine.push_samples(two_gpus[0], [*batch, (2**64 - 1, 50)])  # and a garbage stamp
    store = SeriesStore()
    sampler = _sampler(store)
    view = store.snapshot(NVML_GPU_UTIL)
    assert view.value.tolist() == [batch[0][1], batch[2][1], batch[3][1]]
    np.testing.assert_array_equal(view.t1 - view.t0, PERIOD_US * 1000)
    sampler.poll()
    assert machine.last_seen(two_gpus[0]) == batch[-1][0]  # the garbage stamp did not stick


def test_sampler_reads_the_rate_when_the_sample_buffer_runs_dry(
    machine: FakeNvml, two_gpus: tuple[FakeDevice, FakeDevice]
) -> None:
    shift = [0]

    def clock() -> int:
        return time.perf_counter_ns() + shift[0]

    gpu = two_gpus[0]
    now_us = time.time_ns() // 1000
    machine.push_samples(gpu, _batch(now_us, 3))  # then NVML_ERROR_NOT_FOUND: the GPU idles
    store = SeriesStore()
    sampler = _sampler(store, clock=clock)
    sampler.poll()
    assert len(store.snapshot(NVML_GPU_UTIL)) == 3  # quiet for less than a second: wait
    shift[0] = 2 * 10**9  # two seconds later, still nothing new
    sampler.poll()
    view = store.snapshot(NVML_GPU_UTIL)
    assert view.value.tolist() == [10, 11, 12, 42.0]
    assert 0 <= view.t0[-1] - view.t1[-2] < 50_000_000  # covers the quiet time since then
    assert view.t1[-1] <= clock()
    sampler.poll()
    assert len(store.snapshot(NVML_GPU_UTIL)) == 4  # one reading per quiet second, not per poll
    # samples resume; one of them is stamped before the rate reading ended: already covered
    machine.push_samples(
        gpu,
        [(now_us + PERIOD_US, 5), (now_us + 3 * 10**6, 60), (now_us + 3 * 10**6 + PERIOD_US, 61)],
    )
    sampler.poll()
    view = store.snapshot(NVML_GPU_UTIL)
    assert view.value.tolist() == [10, 11, 12, 42.0, 60, 61]
    assert (view.t1 > view.t0).all()
    assert (view.t0[1:] >= view.t1[:-1]).all()  # a step series without overlaps


def test_sampler_thread_runs_and_stops(
    machine: FakeNvml, two_gpus: tuple[FakeDevice, FakeDevice]
) -> None:
    store = SeriesStore()
    sampler = NvmlSampler.for_device(store, uuid=UUID1, mean_interval_s=0.01)
    sampler.start()
    sampler.start()  # idempotent
    wait_until(lambda: len(store.snapshot(NVML_MEM_USED)) >= 3, 10, "three memory samples")
    sampler.stop()
    sampler.stop()  # idempotent
    assert not sampler.running


@pytest.mark.parametrize(
    "code",
    [
        pynvml.NVML_ERROR_GPU_IS_LOST,
        pynvml.NVML_ERROR_UNINITIALIZED,
        pynvml.NVML_ERROR_DRIVER_NOT_LOADED,
    ],
)
def test_a_driver_that_disappears_mid_run_ends_sampling_with_a_reason(
    machine: FakeNvml,
    two_gpus: tuple[FakeDevice, FakeDevice],
    code: int,
    caplog: pytest.LogCaptureFixture,
) -> None:
    gpu = two_gpus[0]
    machine.live_samples(gpu, PERIOD_US, 40, history=6)
    store = SeriesStore()
    sampler = NvmlSampler.for_device(store, uuid=UUID0, mean_interval_s=0.01)
    caplog.set_level(logging.INFO)
    sampler.start()
    try:
        wait_until(lambda: len(store.snapshot(NVML_MEM_USED)) >= 2, 10, "a running sampler")
        machine.remove_driver(code)
        assert sampler.join(timeout=10), "the sampler should stop once the driver is gone"
    finally:
        sampler.stop()
    calls_at_end = machine.total_calls()
    statuses = store.statuses()
    for name in NVML_METRICS:
        assert not statuses[name].available, name
        assert statuses[name].reason == nvml.DRIVER_GONE[code], name
    # it stopped at the first failed poll: at most one call per metric after the loss
    assert machine.calls("nvmlDeviceGetMemoryInfo") <= len(store.snapshot(NVML_MEM_USED)) + 2
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) <= 1
    assert nvml.query("nvmlDeviceGetCount") is nvml.NA  # later queries: n/a, never raise
    assert machine.total_calls() <= calls_at_end + 1


def test_a_driver_gone_before_the_run_says_so(
    machine: FakeNvml, two_gpus: tuple[FakeDevice, FakeDevice]
) -> None:
    nvml.init()  # the window initialised NVML earlier; the driver went away since
    machine.remove_driver(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    store = SeriesStore()
    assert not NvmlSampler.for_device(store, uuid=UUID0).probe()
    for name in NVML_METRICS:
        assert store.statuses()[name].reason == nvml.DRIVER_UNLOADED


# ---- one series per GPU of a run of many ranks ------------------------------------------


def _rank_run(rank: int, device: dict[str, object] | None, *, remote: bool = False) -> RankRun:
    """A rank that said hello on ``device`` (None: a script's device, named later)."""
    model = RunModel()
    named = {"kind": "cuda", "pending": True} if device is None else {"kind": "cuda", **device}
    model.fold(
        {
            "kind": "hello",
            "protocol": 1,
            "pid": 1,
            "workload": "train.py",
            "device": named,
            "versions": {},
            "knobs": [],
            "config": {},
        }
    )
    return RankRun(RankInfo(rank, rank, 5), model, pid=None, remote=remote)


def test_each_gpu_of_the_ranks_gets_one_series_matched_by_its_identity(
    machine: FakeNvml, three_gpus: list[FakeDevice]
) -> None:
    """Every rank sees its GPU as cuda:0 (torchrun-style CUDA_VISIBLE_DEVICES per rank): the
    series must still be each rank's own GPU, one per GPU, none for another machine's rank."""
    now_us = time.time_ns() // 1000
    for gpu, first in zip(three_gpus, (20, 50, 80), strict=True):
        machine.push_samples(gpu, _batch(now_us, 6, first_value=first))
    started: list[NvmlSampler] = []

    def start(store: SeriesStore, device: DeviceInfo) -> None:
        started.append(
            NvmlSampler.for_device(
                store, uuid=device.uuid, pci_bus_id=device.pci_bus_id, index=device.index
            )
        )

    primary = SeriesStore()  # the Session's own: it samples rank 0's GPU itself
    devices = RankDevices(start, primary)
    ranks = [
        _rank_run(0, _hello_device(three_gpus[0], 0)),
        _rank_run(1, _hello_device(three_gpus[1], 0)),
        _rank_run(2, _hello_device(three_gpus[1], 0)),  # shares rank 1's GPU
        _rank_run(3, _hello_device(three_gpus[2], 0), remote=True),  # NVML cannot reach it
        _rank_run(4, None),  # a script: its device is named at its first step
    ]
    for run in ranks:
        devices.saw(run)
    named = {"kind": "cuda", **_hello_device(three_gpus[2], 0)}
    ranks[4].model.fold({"kind": "device", "device": named})
    devices.saw(ranks[4])

    assert len(started) == 2  # rank 1's GPU (shared with rank 2) and rank 4's
    for sampler in started:
        assert sampler.probe()
    assert ranks[0].model.coarse is primary
    assert ranks[2].model.coarse is ranks[1].model.coarse
    assert not ranks[3].model.coarse.names()
    assert ranks[1].model.coarse.snapshot(NVML_GPU_UTIL).value.tolist() == list(range(50, 56))
    assert ranks[4].model.coarse.snapshot(NVML_GPU_UTIL).value.tolist() == list(range(80, 86))
    assert [(g.rank, g.label) for g in devices.gpus()] == [
        (0, "cuda:0 of rank 0"),
        (1, "cuda:0 of ranks 1, 2"),
        (4, "cuda:0 of rank 4"),
    ]
