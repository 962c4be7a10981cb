"""``runner.session.run`` in-process: hello first, bye reasons, errors and exit codes."""

from __future__ import annotations

import functools
import queue
import threading
from typing import Any

import pytest
import torch

from gpuwatch.protocol import RUNNER_KINDS, encode
from gpuwatch.runner import session
from gpuwatch.runner.workloads.vision import VisionWorkload

pytestmark = pytest.mark.filterwarnings("ignore:The image decoding:DeprecationWarning")


class SessionLink:
    """The parts of ``runner.link.Link`` the session uses, recording what it sends."""

    def __init__(self) -> None:
        self.controls: queue.Queue[dict[str, Any]] = queue.Queue()
        self.lost = threading.Event()
        self.messages: list[dict[str, Any]] = []
        self.closed = False
        self.is_finished = False

    def send(self, kind: str, **fields: Any) -> None:
        assert kind in RUNNER_KINDS
        encode(kind, **fields)
        self.messages.append({"kind": kind, **fields})

    send_batch = send

    def log(self, level: str, text: str) -> None:
        self.send("log", level=level, text=text)

    def finished(self) -> None:
        self.is_finished = True

    def close(self) -> None:
        self.closed = True

    def kinds(self) -> list[str]:
        return [m["kind"] for m in self.messages]


class BrokenWorkload(VisionWorkload):
    def loss(self, model: torch.nn.Module, batch: Any) -> torch.Tensor:
        raise ValueError("the user's model exploded")


def small(cls: type[VisionWorkload]) -> Any:
    return functools.partial(cls, dataset_images=64)


def run(
    monkeypatch: pytest.MonkeyPatch, workload: Any, device: str = "cpu", max_steps: int | None = 3
) -> tuple[int, SessionLink]:
    monkeypatch.setattr(session, "load_workload", lambda _name: workload)
    link = SessionLink()
    code = session.run(
        link,
        workload_name="vision",
        device_spec=device,  # type: ignore[arg-type]
        max_steps=max_steps,
        seed=0,
    )
    assert link.closed and link.is_finished
    return code, link


def test_max_steps_ends_with_bye(monkeypatch: pytest.MonkeyPatch) -> None:
    code, link = run(monkeypatch, small(VisionWorkload))
    assert code == 0
    assert link.kinds()[0] == "hello" and link.kinds()[-1] == "bye"
    assert link.messages[-1]["reason"] == "max_steps"
    assert sum(len(m["step"]) for m in link.messages if m["kind"] == "steps") == 3
    texts = [m["text"] for m in link.messages if m["kind"] == "log"]
    assert any(t.startswith("building vision dataset: 64 synthetic") for t in texts)


def test_training_exception_sends_its_traceback_and_exits_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, link = run(monkeypatch, small(BrokenWorkload))
    assert code == 1
    error = next(m for m in link.messages if m["kind"] == "error")
    assert error["type"] == "ValueError" and error["message"] == "the user's model exploded"
    assert "in loss" in error["traceback"] and "Traceback" in error["traceback"]
    assert link.messages[-1] == {"kind": "bye", "reason": "error"}
    stderr = capsys.readouterr().err
    assert stderr == ("gpuwatch runner: training failed: ValueError: the user's model exploded\n")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_unavailable_cuda_device_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, link = run(monkeypatch, small(VisionWorkload), device="cuda:1")
    assert code == 2
    assert link.kinds() == ["error", "bye"]
    assert capsys.readouterr().err.startswith("gpuwatch runner: --device cuda:1: CUDA is not")
