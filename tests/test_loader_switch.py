"""A loader change that starts workers is prepared while training goes on (docs/knobs.md §2).

The real loop and ``Reconfigurer`` on the CPU, with a real ``queue.Queue`` as the link's control
queue (as in the runner). The new loader is *gated*: its first batch comes only when the test
opens the gate, standing in for spawned workers that take seconds to import torch. So what is
checked does not depend on timing: steps go on under the old configuration until the gate
opens, then the change applies at a step boundary with its first batch ready.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from gpuwatch.protocol import encode
from gpuwatch.runner.availability import knob_schema
from gpuwatch.runner.loop import TrainingLoop
from gpuwatch.runner.timing import HostBackend
from gpuwatch.runner.training_state import TrainingState
from gpuwatch.runner.workloads.mlp import MlpWorkload

CPU = torch.device("cpu")


class Gated:
    """A loader whose iterator delivers nothing until ``gate`` is set (or raises ``error``)."""

    def __init__(self, inner: Any, gate: threading.Event, error: Exception | None) -> None:
        self.inner, self.gate, self.error = inner, gate, error
        self.iterators = 0

    def __iter__(self) -> Iterator[Any]:
        self.iterators += 1
        self.gate.wait(30)
        if self.error is not None:
            raise self.error
        return iter(self.inner)


class Boundaries(queue.Queue):
    """The control queue, counting the loop's looks at it (one or more per step boundary)."""

    def __init__(self) -> None:
        super().__init__()
        self.looks = 0
        self.on_look: list[Any] = []

    def get_nowait(self) -> Any:
        self.looks += 1
        for hook in list(self.on_look):
            hook(self.looks)
        return super().get_nowait()


class QueueLink:
    def __init__(self) -> None:
        self.controls = Boundaries()
        self.lost = threading.Event()
        self.messages: list[dict[str, Any]] = []

    def send(self, kind: str, **fields: Any) -> None:
        encode(kind, **fields)
        self.messages.append({"kind": kind, "at_ns": time.perf_counter_ns(), **fields})

    send_batch = send

    def log(self, level: str, text: str) -> None:
        self.send("log", level=level, text=text)

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [m for m in self.messages if m["kind"] == kind]

    def step_configs(self) -> list[tuple[int, int]]:
        return [
            (s, c) for m in self.of("steps") for s, c in zip(m["step"], m["config"], strict=True)
        ]


@pytest.fixture(scope="module")
def workload() -> MlpWorkload:
    work = MlpWorkload(seed=0, torch_threads=1, dataset_images=256)
    work.config["batch_size"] = 8
    work.prepare(lambda _text: None)
    return work


def _loop(
    work: MlpWorkload,
    gate: threading.Event,
    monkeypatch: pytest.MonkeyPatch,
    error: Exception | None = None,
) -> tuple[TrainingLoop, QueueLink, list[Gated]]:
    built: list[Gated] = []
    real_build = MlpWorkload.build_loader

    def build_loader(self: MlpWorkload, knobs: dict[str, Any]) -> Any:
        if knobs["num_workers"] == 0:
            return real_build(self, knobs)
        loader = Gated(real_build(self, {**knobs, "num_workers": 0}), gate, error)
        built.append(loader)
        return loader

    monkeypatch.setattr(MlpWorkload, "build_loader", build_loader)
    link = QueueLink()
    model = work.build_model(CPU)
    state = TrainingState(
        work,
        model=model,
        optimizer=work.build_optimizer(model),
        device=CPU,
        values=work.knob_values(),
    )
    loop = TrainingLoop(
        work, state=state, schema=knob_schema(torch, work, CPU), backend=HostBackend(), link=link
    )
    return loop, link, built


def test_training_goes_on_until_the_new_loader_is_ready(
    workload: MlpWorkload, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = threading.Event()
    loop, link, built = _loop(workload, gate, monkeypatch)
    opened: list[int] = []

    def drive(looks: int) -> None:
        if looks == 15:
            opened.append(time.perf_counter_ns())
            gate.set()
        if link.of("config"):
            link.controls.on_look.clear()
            link.controls.put({"kind": "stop"})

    link.controls.on_look.append(drive)
    link.controls.put({"kind": "set", "values": {"num_workers": 1}, "request": 4})
    assert loop.run() == "stopped"

    (config,) = link.of("config")
    assert config["request"] == 4 and config["changed"] == {"num_workers": 1}
    assert any("preparing num_workers=1" in m["text"] for m in link.of("log"))
    # Steps went on under config 0 while the loader was prepared; the switch came after.
    assert config["first_step"] >= 10
    assert config["t_ns"] >= opened[0]
    set_taken = next(m["at_ns"] for m in link.of("log") if "preparing" in m["text"])
    assert config["apply_s"] * 1e9 >= opened[0] - set_taken
    configs = dict(link.step_configs())
    assert all(c == 0 for s, c in configs.items() if s < config["first_step"])
    assert all(c == 1 for s, c in configs.items() if s >= config["first_step"])
    assert loop.knobs.values["num_workers"] == 1
    assert built[0].iterators == 1  # the prepared iterator is the one trained from


def test_a_loader_that_fails_to_start_is_refused_and_training_goes_on(
    workload: MlpWorkload, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = threading.Event()
    gate.set()
    loop, link, _ = _loop(workload, gate, monkeypatch, error=OSError("worker died"))
    seen: list[int] = []

    def drive(looks: int) -> None:
        if link.of("refused") and not seen:
            seen.append(looks)
        if seen and looks >= seen[0] + 5:  # a few more steps under the old loader
            link.controls.on_look.clear()
            link.controls.put({"kind": "stop"})

    link.controls.on_look.append(drive)
    link.controls.put({"kind": "set", "values": {"num_workers": 2}, "request": 9})
    assert loop.run() == "stopped"
    (refused,) = link.of("refused")
    assert refused["request"] == 9 and "OSError: worker died" in refused["message"]
    assert not link.of("config")
    assert loop.knobs.values["num_workers"] == 0 and loop.config_id == 0
    assert {c for _, c in link.step_configs()} == {0}


def test_a_set_during_preparation_waits_for_it_and_keeps_the_order(
    workload: MlpWorkload, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = threading.Event()
    loop, link, _ = _loop(workload, gate, monkeypatch)

    def drive(looks: int) -> None:
        if looks == 5:
            threading.Timer(0.2, gate.set).start()  # opens while the next set waits
            link.controls.put({"kind": "set", "values": {"log_every": 4}, "request": 2})
        if len(link.of("config")) == 2:
            link.controls.on_look.clear()
            link.controls.put({"kind": "stop"})

    link.controls.on_look.append(drive)
    link.controls.put({"kind": "set", "values": {"num_workers": 1}, "request": 1})
    assert loop.run() == "stopped"
    first, second = link.of("config")
    assert (first["request"], first["id"]) == (1, 1)
    assert (second["request"], second["id"]) == (2, 2)
    assert first["first_step"] == second["first_step"]  # both at the same boundary
    assert second["values"]["num_workers"] == 1 and second["values"]["log_every"] == 4
