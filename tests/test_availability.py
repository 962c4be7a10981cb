"""Availability tells "works" from "works but slow": the bf16 verdict from the CPU's instructions
and a timed matmul, what the schema offers with it, and the real probe on this machine."""

from __future__ import annotations

import itertools
import types
from typing import Any

import pytest
import torch

from gpuwatch.runner.availability import (
    SLOW_RATIO,
    Bf16Check,
    bf16_cpu_verdict,
    check_availability,
    check_bf16,
    cpu_has_bf16,
    time_matmuls,
)
from gpuwatch.runner.knobs import NAIVE_DEFAULTS, Availability, KnobSchema

CPU = torch.device("cpu")


@pytest.mark.parametrize(
    ("native", "fp32", "bf16", "slow"),
    [
        # No bf16 instructions and 3.4× slower: offered, with the reason.
        (False, [1.0, 1.1, 0.9], [3.4, 3.3, 9.0], "emulated here: slower (3.4× a float32 matmul)"),
        # Torch cannot tell (another architecture): the measurement alone decides.
        (None, [1.0] * 3, [2.0] * 3, "emulated here: slower (2.0× a float32 matmul)"),
        (None, [1.0] * 3, [1.1] * 3, None),
        # No instructions, but the emulation keeps up: nothing to say.
        (False, [1.0] * 3, [SLOW_RATIO * 0.99] * 3, None),
        # AVX512-BF16 or AMX: never called slow, whatever a disturbed probe measured.
        (True, [1.0] * 3, [5.0] * 3, None),
    ],
)
def test_bf16_verdict_from_instructions_and_timings(
    native: bool | None, fp32: list[float], bf16: list[float], slow: str | None
) -> None:
    verdict = bf16_cpu_verdict(native, "AVX2", fp32, bf16)
    assert verdict.slow == slow
    assert verdict.works and verdict.native is native and verdict.capability == "AVX2"
    assert verdict.slowdown == pytest.approx(sorted(bf16)[1] / sorted(fp32)[1])


def test_no_timings_give_no_slowdown() -> None:
    assert bf16_cpu_verdict(False, None, [], []) == Bf16Check(native=False)


def test_native_bf16_is_read_from_torchs_cpu_probes() -> None:
    def probes(**found: Any) -> Any:
        return types.SimpleNamespace(cpu=types.SimpleNamespace(**found))

    assert cpu_has_bf16(probes()) is None  # not x86, or a torch without them
    no = probes(_is_avx512_bf16_supported=lambda: False, _is_amx_tile_supported=lambda: False)
    assert cpu_has_bf16(no) is False
    amx = probes(_is_avx512_bf16_supported=lambda: False, _is_amx_tile_supported=lambda: True)
    assert cpu_has_bf16(amx) is True

    def broken() -> bool:
        raise RuntimeError("cpuinfo failed")

    assert cpu_has_bf16(probes(_is_avx512_bf16_supported=broken)) is None


def test_matmuls_are_timed_interleaved_with_a_clock() -> None:
    ticks = itertools.count()
    fp32, bf16 = time_matmuls(torch, CPU, size=8, reps=3, clock=lambda: float(next(ticks)))
    assert fp32 == [1.0, 1.0, 1.0] and bf16 == [1.0, 1.0, 1.0]


def test_an_emulated_bf16_is_offered_with_its_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    """A CPU without bf16 instructions whose bf16 matmul is slow: amp=bf16 stays a usable
    choice (a set is not refused) and the schema carries why it is slow."""
    from gpuwatch.runner import availability

    monkeypatch.setattr(availability, "cpu_has_bf16", lambda _torch: False)
    monkeypatch.setattr(
        availability, "time_matmuls", lambda _torch, _device: ([1.0] * 5, [4.0] * 5)
    )
    found = check_availability(torch, CPU, optimizer_cls=torch.optim.SGD, channels_last=True)
    reason = "emulated here: slower (4.0× a float32 matmul)"
    assert found.slow_choices == {"amp": {"bf16": reason}}
    assert "bf16" not in found.disabled_choices["amp"]
    schema = KnobSchema(dict(NAIVE_DEFAULTS), found)
    amp = next(k for k in schema.as_hello() if k["name"] == "amp")
    assert amp["slow_choices"] == {"bf16": reason}
    assert schema.validate({"amp": "bf16"}, schema.defaults) == {"amp": "bf16"}


def test_a_gpu_without_bf16_tensor_cores_calls_bf16_slow() -> None:
    fake = types.SimpleNamespace(
        cuda=types.SimpleNamespace(
            is_bf16_supported=lambda: True, get_device_capability=lambda _device: (7, 5)
        )
    )
    found = check_bf16(fake, torch.device("cuda", 0))
    assert found.slow == "emulated on this GPU (compute capability 7.5): slower"
    assert found.works and found.native is False


def test_the_real_probe_returns_a_typed_verdict_on_this_cpu() -> None:
    found = check_bf16(torch, CPU)
    assert isinstance(found, Bf16Check)
    assert found.works  # bf16 autocast runs on every CPU torch supports
    assert found.native in (True, False, None)
    assert found.slowdown is not None and found.slowdown > 0
    assert found.capability == torch.backends.cpu.get_cpu_capability()
    assert (found.slow is not None) == (found.native is not True and found.slowdown >= SLOW_RATIO)
    schema = KnobSchema(
        dict(NAIVE_DEFAULTS),
        check_availability(torch, CPU, optimizer_cls=torch.optim.SGD, channels_last=True),
    )
    assert isinstance(schema.availability, Availability)
