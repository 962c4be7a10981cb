"""Zero-code knobs that reach into a watched script's training, in-process on the CPU through the
real step hooks: ``amp = fp16`` with its inserted GradScaler (``grad_scaling``), and
``channels_last`` carrying the optimizer's state along.

fp16's availability rule is the built-in knob's (CUDA only), so the tests lift it
(``fp16_needs_cuda=False``): the mechanism is the same on any device with fp16 autocast and a
GradScaler, and torch has both on the CPU."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from fake_runner_link import FakeLink
from torch import nn

from gpuwatch.runner import model_knobs
from gpuwatch.runner.autohooks import AutoHooks
from gpuwatch.runner.availability import Bf16Check
from gpuwatch.runner.grad_scaling import OWN_SCALER, SEVERAL_OPTIMIZERS, WAITING
from gpuwatch.runner.model_knobs import ModelKnobs
from gpuwatch.runner.probe_knobs import ProbeKnobs
from gpuwatch.runner.step_recorder import StepRecorder
from gpuwatch.runner.timing import HostBackend

STEPS = 6


@pytest.fixture(autouse=True)
def no_bf16_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    """bf16 is not what these tests are about: skip its timing probe."""
    monkeypatch.setattr(model_knobs, "check_bf16", lambda torch, device: Bf16Check())


class SmallCnn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.head = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.conv(x)).mean(dim=(2, 3)))


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(step)
    x = torch.randn(4, 3, 8, 8, generator=generator)
    return x, torch.randint(0, 4, (4,), generator=generator)


@dataclass
class Watched:
    """A model knobs owner fed by the real step hooks, as ``script_instruments`` wires them."""

    link: FakeLink
    knobs: ProbeKnobs
    owner: ModelKnobs
    recorder: StepRecorder

    def set(self, **values: Any) -> None:
        """A ``set`` at a step boundary, as the panel or the advisor sends it."""
        self.knobs.handle_set({"kind": "set", "values": values}, first_step=0, flush=lambda: None)

    def amp_entry(self) -> dict[str, Any]:
        *_, last = self.link.kinds("knobs")
        return next(entry for entry in last["knobs"] if entry["name"] == "amp")

    def warnings(self) -> list[str]:
        return [log["text"] for log in self.link.kinds("log") if log["level"] == "warning"]


@contextlib.contextmanager
def watched() -> Iterator[Watched]:
    link = FakeLink()
    knobs = ProbeKnobs(link)
    owner = ModelKnobs(torch, knobs, device=torch.device("cpu"), fp16_needs_cuda=False)
    recorder = StepRecorder(
        link, HostBackend(), boundary=lambda step: None, config_id=lambda: knobs.config_id
    )
    hooks = AutoHooks(torch, recorder)
    hooks.on_first_outermost = owner.saw_outermost
    hooks.scaling = owner.scaling
    hooks.install()
    try:
        yield Watched(link, knobs, owner, recorder)
    finally:
        hooks.remove()
        owner.remove()


def script_step(
    model: nn.Module, optimizer: torch.optim.Optimizer, step: int, seen: list[float]
) -> None:
    """One step of the user's loop, unchanged by gpuwatch: it clips and logs the gradient norm
    between backward and step (what it logs must be the true norm)."""
    x, y = batch(step)
    optimizer.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    seen.append(float(nn.utils.clip_grad_norm_(model.parameters(), 10.0)))
    optimizer.step()


def by_hand(steps_fp16: range, steps: int) -> tuple[SmallCnn, list[float], list[float]]:
    """The same loop written with autocast and a GradScaler by hand (fp16 from the 2nd step)."""
    model = SmallCnn()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scaler = torch.amp.GradScaler("cpu")
    norms: list[float] = []
    for step in range(steps):
        x, y = batch(step)
        optimizer.zero_grad()
        fp16 = step in steps_fp16
        with torch.autocast("cpu", dtype=torch.float16, enabled=fp16):
            out = model(x)
        loss = nn.functional.cross_entropy(out.float(), y)
        if fp16:
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
        else:
            loss.backward()
        norms.append(float(nn.utils.clip_grad_norm_(model.parameters(), 10.0)))
        if fp16:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
    return model, norms, [float(scaler.get_scale())]


def test_fp16_waits_for_a_step_then_trains_as_autocast_and_gradscaler_by_hand() -> None:
    model = SmallCnn()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    norms: list[float] = []
    with watched() as run:
        x, _ = batch(0)
        model(x)  # the hooks see the model: the knobs are announced, fp16 waits
        assert run.amp_entry()["disabled_choices"] == {"fp16": WAITING}
        run.set(amp="fp16")
        assert "not available here" in run.link.kinds("refused")[-1]["message"]
        script_step(model, optimizer, 0, norms)  # one backward, one optimizer: fp16 offered
        assert run.amp_entry()["disabled_choices"] == {}
        run.set(amp="fp16")
        assert run.link.kinds("config")[-1]["changed"] == {"amp": "fp16"}
        conv_dtypes = []
        model.conv.register_forward_hook(lambda m, a, out: conv_dtypes.append(out.dtype))
        for step in range(1, STEPS):
            script_step(model, optimizer, step, norms)
        scale = float(run.owner.scaling.scaler.get_scale())
        assert run.recorder.optimizer_steps == STEPS and not run.warnings()
    reference, reference_norms, (reference_scale,) = by_hand(range(1, STEPS), STEPS)
    assert conv_dtypes == [torch.float16] * (STEPS - 1)
    assert scale == reference_scale == 65536.0  # no inf met: the scale kept its start
    # the user's code between backward and step saw true gradient norms, not scaled ones
    assert norms == pytest.approx(reference_norms, rel=1e-3)
    for ours, theirs in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-3, atol=1e-3)
    plain, _, _ = by_hand(range(0), STEPS)
    differs = any(
        not torch.equal(ours, fp32)
        for ours, fp32 in zip(model.parameters(), plain.parameters(), strict=True)
    )
    assert differs, "the fp16 steps trained exactly as float32 ones: autocast never ran"


def test_an_inf_gradient_skips_the_step_and_the_run_goes_on() -> None:
    model = SmallCnn()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    norms: list[float] = []
    with watched() as run:
        script_step(model, optimizer, 0, norms)
        run.set(amp="fp16")
        scaler = run.owner.scaling.scaler
        before = [p.detach().clone() for p in model.parameters()]
        x, y = batch(1)
        x[0, 0, 0, 0] = float("inf")
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()  # found inf: skipped
        assert all(torch.equal(p, b) for p, b in zip(model.parameters(), before, strict=True))
        assert float(scaler.get_scale()) == 32768.0  # halved by update()
        script_step(model, optimizer, 2, norms)  # and the next step trains
        assert not all(torch.equal(p, b) for p, b in zip(model.parameters(), before, strict=True))
        assert all(torch.isfinite(p).all() for p in model.parameters())
        assert run.recorder.optimizer_steps == 3  # the skipped step still counts as a step
        assert run.owner.amp == "fp16" and not run.warnings()


def test_off_takes_the_scaler_and_the_optimizer_wrapper_away() -> None:
    model = SmallCnn()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with watched() as run:
        script_step(model, optimizer, 0, [])
        run.set(amp="fp16")
        assert "step" in optimizer.__dict__
        script_step(model, optimizer, 1, [])
        run.set(amp="off")
        assert "step" not in optimizer.__dict__ and run.owner.scaling.scaler is None
        x, y = batch(2)
        params = list(model.parameters())
        want = torch.autograd.grad(nn.functional.cross_entropy(model(x), y), params)
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()  # float32, not scaled
        for param, expected in zip(params, want, strict=True):
            assert torch.equal(param.grad, expected)


@pytest.mark.parametrize(
    ("loop", "reason"),
    [
        ("own_scaler", OWN_SCALER),
        ("two_optimizers", SEVERAL_OPTIMIZERS),
        ("accumulates", "the script runs 2 backward() per optimizer.step()"),
    ],
)
def test_fp16_is_unavailable_with_the_reason_where_a_scaler_cannot_go(
    loop: str, reason: str
) -> None:
    model = SmallCnn()
    optimizer = torch.optim.SGD(model.conv.parameters(), lr=0.1)
    other = torch.optim.SGD(model.head.parameters(), lr=0.1)
    with watched() as run:
        for step in range(2):
            x, y = batch(step)
            if loop == "own_scaler":
                scaler = torch.amp.GradScaler("cpu")
                scaler.scale(nn.functional.cross_entropy(model(x), y)).backward()
                scaler.step(optimizer)
                scaler.update()
            elif loop == "two_optimizers":
                nn.functional.cross_entropy(model(x), y).backward()
                optimizer.step()
                other.step()
            else:
                for half in (x[:2], x[2:]):
                    (nn.functional.cross_entropy(model(half), y[:2]) / 2).backward()
                optimizer.step()
        assert run.amp_entry()["disabled_choices"]["fp16"].startswith(reason)
        run.set(amp="fp16")
        assert run.owner.amp == "off" and "step" not in optimizer.__dict__


def fp16_on(run: Watched, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    script_step(model, optimizer, 0, [])
    run.set(amp="fp16")
    assert run.owner.amp == "fp16"


def true_gradients(model: nn.Module, step: int) -> list[torch.Tensor]:
    """The step's gradients under fp16 autocast without any scaling."""
    x, y = batch(step)
    with torch.autocast("cpu", dtype=torch.float16):
        out = model(x)
    loss = nn.functional.cross_entropy(out.float(), y)
    return list(torch.autograd.grad(loss, list(model.parameters())))


def test_a_second_backward_before_the_step_ends_fp16_with_one_notice() -> None:
    model = SmallCnn()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with watched() as run:
        fp16_on(run, model, optimizer)
        x, y = batch(1)
        optimizer.zero_grad()
        for half, target in ((x[:2], y[:2]), (x[2:], y[2:])):
            nn.functional.cross_entropy(model(half), target).backward()
        grads = [p.grad.clone() for p in model.parameters()]
        optimizer.step()
        (warning,) = run.warnings()
        assert warning.startswith("fp16 is off from here on") and "backward()" in warning
        assert run.owner.amp == "off" and run.amp_entry()["disabled_choices"]["fp16"]
        assert "step" not in optimizer.__dict__
    # the first half's gradients were unscaled, the second's never scaled: true gradients
    assert max(float(g.abs().max()) for g in grads) < 100.0


def test_a_failure_in_the_scaler_turns_fp16_off_and_never_reaches_the_script(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model = SmallCnn()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with watched() as run:
        fp16_on(run, model, optimizer)

        def broken(self: Any, optimizer: Any) -> None:
            raise RuntimeError("unscale broke")

        monkeypatch.setattr(torch.amp.GradScaler, "unscale_", broken)
        want = true_gradients(model, 1)
        x, y = batch(1)
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()  # no exception reaches the script
        for got, expected in zip((p.grad for p in model.parameters()), want, strict=True):
            torch.testing.assert_close(got, expected, rtol=1e-2, atol=1e-4)  # divided back
        optimizer.step()
        script_step(model, optimizer, 2, [])
        (warning,) = run.warnings()
        assert "gpuwatch's GradScaler failed: RuntimeError: unscale broke" in warning
        assert run.owner.amp == "off"


# --- channels_last and the optimizer's state ------------------------------------------------


OPTIMIZERS: dict[str, Callable[[Any], torch.optim.Optimizer]] = {
    "adam_fused": lambda params: torch.optim.Adam(params, lr=0.01, fused=True),
    "adam_foreach": lambda params: torch.optim.Adam(params, lr=0.01, foreach=True),
    "sgd_momentum": lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9, foreach=True),
}


def train_layout(make: Callable[[Any], torch.optim.Optimizer], switch_at: int | None) -> Any:
    """``STEPS`` steps; channels_last from the start (None) or switched on before ``switch_at``;
    returns the model, its optimizer and whether each state tensor had its parameter's strides."""
    model = SmallCnn()
    optimizer = make(model.parameters())
    with watched() as run:
        model(batch(0)[0])  # the hooks see the model
        if switch_at is None:
            run.set(channels_last=True)
        for step in range(STEPS):
            if step == switch_at:
                run.set(channels_last=True)
            script_step(model, optimizer, step, [])
        follows = all(
            value.stride() == param.stride()
            for param in model.parameters()
            for value in optimizer.state[param].values()
            if value.shape == param.shape
        )
        run.set(channels_last=False)
        weight = model.conv.weight
        state = optimizer.state[weight]
        back = all(v.is_contiguous() for v in state.values() if v.shape == weight.shape)
        script_step(model, optimizer, STEPS, [])  # and a step after the switch back runs
    return model, follows, back


@pytest.mark.parametrize("kind", sorted(OPTIMIZERS))
def test_channels_last_mid_run_trains_as_channels_last_from_the_start(kind: str) -> None:
    switched, follows, back = train_layout(OPTIMIZERS[kind], switch_at=2)
    from_start, _, _ = train_layout(OPTIMIZERS[kind], switch_at=None)
    assert follows and back
    for ours, theirs in zip(switched.parameters(), from_start.parameters(), strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
