"""gpuwatch.probe without a runner (no-ops, argument checks), the runner's probe knobs, and the
step rules of the script recorder driven by hand with a fake clock."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import gpuwatch.probe as gw
from gpuwatch.runner.probe_knobs import ProbeKnobs
from gpuwatch.runner.step_recorder import StepRecorder, batch_samples
from gpuwatch.runner.timing import HostBackend

REPO = Path(__file__).resolve().parents[1]


class FakeLink:
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def send(self, kind: str, **fields: Any) -> None:
        self.sent.append({"kind": kind, **fields})

    send_batch = send

    def log(self, level: str, text: str) -> None:
        self.send("log", level=level, text=text)

    def kinds(self, kind: str) -> list[dict[str, Any]]:
        return [m for m in self.sent if m["kind"] == kind]


def test_without_a_runner_every_call_is_a_no_op() -> None:
    assert not gw.active()
    with gw.step(), gw.phase("forward"):
        pass
    assert gw.knob("workers", default=2, choices=[0, 2]) == 2
    assert gw.knob("lr", default=0.1, min=0.0, max=1.0) == 0.1


def test_import_needs_nothing_but_the_standard_library() -> None:
    code = (
        "import sys, gpuwatch.probe; "
        "print(sorted(m for m in ('torch', 'numpy') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: gw.phase("fwd"), "gw.phase('fwd'): the phases are data, h2d, forward"),
        (lambda: gw.knob("w", default=3, choices=[0, 1]), "default 3 is not one of the choices"),
        (lambda: gw.knob("w", default=True, choices=[1]), "default True is not one of the choices"),
        (lambda: gw.knob("w", default="x"), "default must be a bool, int or float"),
        (lambda: gw.knob("w", default=5, max=4), "default 5 is outside min/max"),
        (lambda: gw.knob("not a name", default=1), "the name must be an identifier"),
    ],
)
def test_bad_arguments_fail_the_same_with_or_without_gpuwatch(call: Any, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        call()


def test_knob_entry_types() -> None:
    assert gw.knob_entry("a", True)["type"] == "bool"
    assert gw.knob_entry("a", 1, low=0, high=8)["type"] == "int"
    assert gw.knob_entry("a", 0.5)["type"] == "float"
    entry = gw.knob_entry("a", "sgd", choices=("sgd", "adam"), text="optimizer")
    assert entry["type"] == "choice" and entry["choices"] == ["sgd", "adam"]
    assert entry["group"] == "script" and entry["help"] == "optimizer" and entry["enabled"]


def test_probe_knobs_announce_validate_and_apply() -> None:
    link = FakeLink()
    knobs = ProbeKnobs(link, clock=lambda: 10)
    assert knobs.declare(gw.knob_entry("workers", 0, choices=[0, 2])) == 0
    assert knobs.declare(gw.knob_entry("lr", 0.1, low=0.0, high=1.0)) == 0.1
    assert [m["values"] for m in link.kinds("knobs")] == [{"workers": 0}, {"workers": 0, "lr": 0.1}]
    with pytest.raises(ValueError, match="declared before with other settings"):
        knobs.declare(gw.knob_entry("workers", 0, choices=[0, 4]))
    flushed: list[int] = []
    for values in (
        {"lr": 2.0},
        {"lr": "0.5"},
        {"workers": True},
        {"x": 1},
        {"workers": 2, "lr": -1},
    ):
        knobs.handle_set(
            {"values": values, "request": 1}, first_step=5, flush=lambda: flushed.append(1)
        )
    messages = [m["message"] for m in link.kinds("refused")]
    assert messages == [
        "lr must be a number from 0 to 1, got 2.0",
        "lr must be a number from 0 to 1, got '0.5'",
        "workers must be one of 0, 2, got True",
        "unknown knob 'x': this script declares workers, lr",
        "lr must be a number from 0 to 1, got -1",
    ]
    assert not link.kinds("config") and knobs.values == {"workers": 0, "lr": 0.1}
    knobs.handle_set(
        {"values": {"workers": "2", "lr": 0.1}, "request": 9},
        first_step=5,
        flush=lambda: flushed.append(1),
    )
    (config,) = link.kinds("config")
    assert config["id"] == 1 and config["request"] == 9 and config["first_step"] == 5
    assert config["changed"] == {"workers": 2} and config["values"] == {"workers": 2, "lr": 0.1}
    assert flushed == [1] and knobs.declare(gw.knob_entry("workers", 0, choices=[0, 2])) == 2
    knobs.handle_set({"values": {"workers": 2}}, first_step=6, flush=lambda: None)
    assert len(link.kinds("config")) == 1  # nothing changed: no new config


class Clock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        self.now += 10
        return self.now


def recorder() -> tuple[StepRecorder, FakeLink, list[int]]:
    link = FakeLink()
    boundaries: list[int] = []
    rec = StepRecorder(
        link, HostBackend(), boundary=boundaries.append, config_id=lambda: 0, clock=Clock()
    )
    return rec, link, boundaries


def rows(link: FakeLink) -> list[tuple[int, list[int]]]:
    out = []
    for batch in link.kinds("steps"):
        out += list(zip(batch["samples"], batch["host"], strict=True))
    return out


def test_loader_steps_zip_and_epoch_end() -> None:
    rec, link, boundaries = recorder()
    for _ in range(2):
        rec.next_called(1)
        rec.next_returned(1, (FakeTensor(8), FakeTensor(8)))
        rec.next_called(2)  # zip(a, b): the same step
        rec.next_returned(2, FakeTensor(3))
        rec.forward_started()
        rec.forward_returned()
        rec.backward_started()
        rec.backward_returned()
        rec.optimizer_stepped()
        rec.optimizer_stepped()  # a second optimizer: the last one wins
    rec.next_called(1)
    rec.loader_exhausted(1)  # end of the epoch
    rec.finish()
    steps = rows(link)
    assert len(steps) == 2 and rec.steps == 2 and boundaries == [0, 1, 2]
    for samples, host in steps:
        assert samples == 8 and host == sorted(host) and len(set(host)) == 7


def test_eval_step_collapses_and_optimizer_mode() -> None:
    rec, link, _ = recorder()
    rec.next_called(1)
    rec.next_returned(1, {"x": FakeTensor(4)})
    rec.forward_started()
    rec.forward_returned()
    rec.next_called(1)
    rec.next_returned(1, [1, 2])
    rec.finish()  # the open step never got past its data: dropped
    ((samples, host),) = rows(link)
    assert samples == 4 and host[3] == host[4] == host[5] < host[6]

    rec, link, _ = recorder()
    for _ in range(3):
        rec.forward_started()
        rec.forward_returned()
        rec.backward_started()
        rec.backward_returned()
        rec.optimizer_stepped()
    rec.forward_started()
    rec.finish()
    steps = rows(link)
    assert len(steps) == 3 and all(samples == 1 for samples, _ in steps)
    assert all(host[0] == host[1] for _, host in steps)  # no loader: no data phase
    assert all(host[2] > host[1] for _, host in steps[1:])  # from the optimizer to the forward


def test_probe_step_takes_the_data_wait_before_it() -> None:
    rec, link, _ = recorder()
    rec.next_called(1)
    rec.next_returned(1, FakeTensor(16))
    rec.forward_started()
    rec.next_called(1)
    rec.next_returned(1, FakeTensor(16))
    rec.step_enter(None)
    assert rec.instrumentation == "probe"
    rec.phase_enter(2)
    rec.phase_exit(2)
    rec.step_exit(True)
    rec.step_enter(5)
    rec.step_exit(False)  # the body raised: no step
    rec.finish()
    auto, (samples, host) = rows(link)  # the auto step before gw.step() was first used
    assert auto[1][2] > auto[1][1]
    assert samples == 16 and host[1] > host[0] and host[3] > host[2]


class FakeTensor:
    def __init__(self, n: int) -> None:
        self.shape = (n, 3)


def test_batch_samples() -> None:
    assert batch_samples(FakeTensor(5)) == 5
    assert batch_samples({"a": "text", "b": [FakeTensor(7)]}) == 7
    assert batch_samples([1, 2]) is None
