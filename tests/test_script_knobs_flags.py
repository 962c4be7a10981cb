"""Zero-code backend flags of a watched script (``global_flags``), in-process on the CPU:
a flag the script sets is shown as the script's, a change applies and reverts cleanly, and a
refused one changes nothing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
from test_script_knobs import FakeLink

from gpuwatch.runner.global_flags import GlobalFlags
from gpuwatch.runner.probe_knobs import ProbeKnobs


def flag_state() -> tuple[bool, str, bool]:
    return (
        torch.backends.cudnn.benchmark,
        torch.get_float32_matmul_precision(),
        torch.backends.cudnn.allow_tf32,
    )


@pytest.fixture
def clean_flags() -> Iterator[None]:
    before = flag_state()
    yield
    torch.backends.cudnn.benchmark = before[0]
    torch.set_float32_matmul_precision(before[1])
    torch.backends.cudnn.allow_tf32 = before[2]


def watched(preset: dict[str, str] | None = None) -> tuple[FakeLink, ProbeKnobs, GlobalFlags]:
    link = FakeLink()
    knobs = ProbeKnobs(link, preset=preset)
    flags = GlobalFlags(torch, knobs, device=torch.device("cpu"))
    flags.install()
    return link, knobs, flags


def by_name(message: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {entry["name"]: entry for entry in message["knobs"]}


def test_a_flag_the_script_sets_is_shown_with_its_value_as_the_scripts(clean_flags: None) -> None:
    before = flag_state()
    link, knobs, flags = watched()
    try:
        assert flag_state() == before  # watching changes nothing
        assert not link.kinds("knobs")  # on a CPU the flags are not offered by themselves
        torch.backends.cudnn.benchmark = True  # the script's own line
        line = test_a_flag_the_script_sets_is_shown_with_its_value_as_the_scripts.__code__
        site = f"test_script_knobs_flags.py:{line.co_firstlineno + 6}"
        torch.set_float32_matmul_precision("high")
    finally:
        flags.remove()
    assert torch.backends.cudnn.benchmark is True  # the script's assignment took effect
    assert torch.get_float32_matmul_precision() == "high"
    last = link.kinds("knobs")[-1]
    entries = by_name(last)
    assert last["values"] == {"cudnn_benchmark": True, "tf32": True}
    benchmark = entries["cudnn_benchmark"]
    assert not benchmark["enabled"]
    assert benchmark["reason"] == f"set by the script at {site}: the script owns this flag"
    assert (
        not entries["tf32"]["enabled"] and "the script owns this flag" in entries["tf32"]["reason"]
    )
    knobs.handle_set(
        {"kind": "set", "values": {"cudnn_benchmark": False}, "request": 2},
        first_step=1,
        flush=lambda: None,
    )
    (refused,) = link.kinds("refused")
    assert refused["message"].startswith(
        "cudnn_benchmark cannot be changed here: set by the script"
    )
    assert torch.backends.cudnn.benchmark is True


def test_a_set_on_a_device_without_cuda_is_refused_and_changes_nothing(clean_flags: None) -> None:
    before = flag_state()
    link, knobs, flags = watched(preset={"tf32": "on"})
    try:
        (announced,) = link.kinds("knobs")  # --set names a flag: offered, with the reason
        assert announced["values"] == {"cudnn_benchmark": before[0], "tf32": False}
        assert by_name(announced)["tf32"]["reason"] == "needs CUDA"
        assert any("tf32 cannot be changed here: needs CUDA" in text for _, text in link.logs)
        knobs.handle_set(
            {"kind": "set", "values": {"cudnn_benchmark": True}}, first_step=0, flush=lambda: None
        )
    finally:
        flags.remove()
    (refused,) = link.kinds("refused")
    assert refused["message"] == "cudnn_benchmark cannot be changed here: needs CUDA"
    assert flag_state() == before and not link.kinds("config")


def test_changing_the_flags_applies_and_reverts_cleanly(clean_flags: None) -> None:
    torch.set_float32_matmul_precision("highest")
    torch.backends.cudnn.allow_tf32 = True  # torch's defaults
    torch.backends.cudnn.benchmark = False
    _, _, flags = watched()
    try:
        flags.apply({"cudnn_benchmark": True, "tf32": True})  # as a set on a GPU applies them
        assert flag_state() == (True, "high", True)
        assert torch.backends.cuda.matmul.allow_tf32 is True
        flags.apply({"cudnn_benchmark": False, "tf32": False})
        assert flag_state() == (False, "highest", True)  # as they were, conv TF32 included
        assert not flags.owned  # our own assignments are not the script's
    finally:
        flags.remove()
    assert type(torch.backends.cudnn).__dict__["benchmark"].__class__.__name__ == "ContextProp"
