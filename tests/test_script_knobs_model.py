"""Zero-code model knobs of a watched script (``model_knobs``), in-process on the CPU: what the
model sees changes with ``amp=bf16`` and ``channels_last`` (and nothing before), both revert
cleanly, and what cannot work is refused with the reason, leaving the model as it was."""

from __future__ import annotations

from typing import Any

import torch
from test_script_knobs import FakeLink
from torch import nn

from gpuwatch.runner import model_knobs
from gpuwatch.runner.availability import Bf16Check
from gpuwatch.runner.model_knobs import NO_CONVOLUTIONS, ModelKnobs
from gpuwatch.runner.probe_knobs import ProbeKnobs


class SmallCnn(nn.Module):
    """Records, at each forward, what its convolution sees."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.head = nn.Linear(8, 4)
        self.seen: list[dict[str, Any]] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        self.seen.append(
            {
                "input_nhwc": x.is_contiguous(memory_format=torch.channels_last)
                and not x.is_contiguous(),
                "weight_nhwc": not self.conv.weight.is_contiguous(),
                "autocast": torch.is_autocast_enabled("cpu"),
                "conv_dtype": y.dtype,
            }
        )
        return self.head(y.mean(dim=(2, 3)))


def watched(model: nn.Module) -> tuple[FakeLink, ProbeKnobs, ModelKnobs]:
    link = FakeLink()
    knobs = ProbeKnobs(link)
    owner = ModelKnobs(torch, knobs, device=torch.device("cpu"))
    owner.saw_outermost(nn.CrossEntropyLoss())  # no parameters: not a model
    assert not link.kinds("knobs")
    owner.saw_outermost(model)  # as the step hooks report its first outermost forward
    return link, knobs, owner


def set_knobs(knobs: ProbeKnobs, **values: Any) -> None:
    knobs.handle_set({"kind": "set", "values": values}, first_step=0, flush=lambda: None)


def step(model: SmallCnn) -> torch.Tensor:
    """One training step; the loss dtype is what the script computes from the output."""
    x = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    loss = nn.functional.cross_entropy(model(x), torch.tensor([0, 1]))
    loss.backward()
    return loss


PLAIN = {"input_nhwc": False, "weight_nhwc": False, "autocast": False, "conv_dtype": torch.float32}


def test_bf16_autocast_runs_the_model_forward_in_bf16_and_reverts() -> None:
    model = SmallCnn()
    link, knobs, owner = watched(model)
    (announced,) = link.kinds("knobs")
    amp = {entry["name"]: entry for entry in announced["knobs"]}["amp"]
    assert amp["disabled_choices"] == {"fp16": "needs CUDA"}  # bf16 works on this CPU
    assert step(model).dtype == torch.float32
    assert model.seen[-1] == PLAIN  # nothing changes before the knob is flipped
    set_knobs(knobs, amp="bf16")
    (config,) = link.kinds("config")
    assert config["rebuilt"] == ["model"] and config["warmup_steps"] == 3
    loss = step(model)
    assert model.seen[-1] == {**PLAIN, "autocast": True, "conv_dtype": torch.bfloat16}
    assert loss.dtype == torch.float32  # the output came back in float32 for the loss
    assert model.conv.weight.grad is not None and model.conv.weight.dtype == torch.float32
    assert not torch.is_autocast_enabled("cpu")  # left after the forward
    set_knobs(knobs, amp="off")
    step(model)
    assert model.seen[-1] == PLAIN
    assert not model._forward_pre_hooks and not model._forward_hooks
    owner.remove()


def test_the_scripts_own_autocast_is_left_alone() -> None:
    model = SmallCnn()
    _, knobs, owner = watched(model)
    set_knobs(knobs, amp="bf16")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(torch.randn(1, 3, 8, 8))
    assert out.dtype == torch.bfloat16  # the script's autocast, its output as it made it
    owner.remove()


def test_channels_last_converts_weights_and_inputs_and_reverts() -> None:
    model = SmallCnn()
    _, knobs, owner = watched(model)
    step(model)
    assert model.seen[-1] == PLAIN
    set_knobs(knobs, channels_last=True)
    step(model)
    assert model.seen[-1] == {**PLAIN, "input_nhwc": True, "weight_nhwc": True}
    assert model.conv.weight.grad is not None
    set_knobs(knobs, channels_last=False)
    step(model)
    assert model.seen[-1] == PLAIN
    assert model.conv.weight.is_contiguous() and not model._forward_pre_hooks
    owner.remove()


def test_what_cannot_work_is_refused_and_the_model_stays_as_it_was() -> None:
    mlp = nn.Sequential(nn.Linear(4, 4))
    link, knobs, owner = watched(mlp)
    (announced,) = link.kinds("knobs")
    layout = {entry["name"]: entry for entry in announced["knobs"]}["channels_last"]
    assert not layout["enabled"] and layout["reason"] == NO_CONVOLUTIONS
    set_knobs(knobs, channels_last=True)
    set_knobs(knobs, amp="fp16")
    set_knobs(knobs, amp="bf16", channels_last=True)  # all or nothing
    messages = [refused["message"] for refused in link.kinds("refused")]
    assert messages == [
        f"channels_last cannot be changed here: {NO_CONVOLUTIONS}",
        "amp=fp16 is not available here: needs CUDA",
        f"channels_last cannot be changed here: {NO_CONVOLUTIONS}",
    ]
    assert not link.kinds("config") and not mlp._forward_pre_hooks
    assert knobs.values == {"amp": "off", "channels_last": False}
    owner.remove()


def test_an_emulated_bf16_is_offered_with_its_slowdown(monkeypatch) -> None:
    slow = "emulated here: slower (3.0× a float32 matmul)"
    checks: list[object] = []

    def check(torch_module: Any, device: Any) -> Bf16Check:
        checks.append(device)
        return Bf16Check(native=False, slowdown=3.0, slow=slow)

    monkeypatch.setattr(model_knobs, "check_bf16", check)
    link, _, owner = watched(SmallCnn())
    (announced,) = link.kinds("knobs")
    amp = {entry["name"]: entry for entry in announced["knobs"]}["amp"]
    assert amp["slow_choices"] == {"bf16": slow} and "bf16" not in amp["disabled_choices"]
    owner.entries()
    assert len(checks) == 1  # probed once, not every time the knobs are listed
    owner.remove()


class CountedLinear(nn.Linear):
    """Counts how often its parameters are asked for (``saw_outermost`` examines a module
    that way)."""

    asked = 0

    def parameters(self, recurse: bool = True) -> Any:
        CountedLinear.asked += 1
        return super().parameters(recurse)


def test_each_outermost_module_is_examined_once_while_it_lives() -> None:
    """The step hooks report every outermost forward of every step: a module is examined at
    its first only, and a module made later is examined even where it takes a dead one's id
    (a loss module built inside the loop each step)."""
    _, _, owner = watched(SmallCnn())
    model = CountedLinear(2, 2)
    owner.saw_outermost(model)
    first = CountedLinear.asked
    assert first >= 1
    for _ in range(3):
        owner.saw_outermost(model)
    assert CountedLinear.asked == first
    del model
    before = CountedLinear.asked
    ids = set()
    for _ in range(3):
        made = CountedLinear(2, 2)
        ids.add(id(made))
        owner.saw_outermost(made)
        del made  # freed here: the next one may take its id
    assert CountedLinear.asked >= before + 3, ids
