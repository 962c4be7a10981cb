"""gpuwatch's hooks leave ``torch.compile`` and ``torch.export`` as they find them.

In-process, on the CPU: the same small training loop runs with and without ``AutoHooks``
installed, and Dynamo's own counters (``torch._dynamo.utils.counters``, reset between runs)
must agree: same graphs, same graph breaks, the same weights; with the hooks, the forward is
marked exactly once per step. Most cases compile with ``backend="eager"`` (Dynamo's tracing is
what the hooks can disturb; Inductor's C++ build would take tens of seconds each); the
``reduce-overhead`` case compiles with Inductor for real (on a CPU its CUDA graphs are skipped,
but the mode must still compile the same).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from fake_runner_link import FakeLink
from torch._dynamo.utils import counters

from gpuwatch.runner.autohooks import AutoHooks
from gpuwatch.runner.step_recorder import StepRecorder
from gpuwatch.runner.timing import HostBackend


class CountingRecorder(StepRecorder):
    """A real recorder that also counts the outermost forwards the hooks report."""

    def __init__(self) -> None:
        super().__init__(FakeLink(), HostBackend(), boundary=lambda step: None, config_id=lambda: 0)
        self.forwards = 0

    def forward_started(self) -> None:
        self.forwards += 1
        super().forward_started()


@dataclass
class Outcome:
    graphs: int
    breaks: int
    forwards: int
    steps: int
    weights: list[torch.Tensor]
    warned: list[str]


class Net(torch.nn.Module):
    """A small MLP; ``item_in_forward`` adds a data-dependent graph break of the user's own."""

    def __init__(self, item_in_forward: bool = False) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(
            torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)
        )
        self.item_in_forward = item_in_forward

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.body(x)
        if self.item_in_forward and y.sum().item() > 1e9:  # never true: only the break
            y = y * 0
        return y


def train(
    prepare: Callable[[torch.nn.Module], Any],
    *,
    hooked: bool,
    steps: int = 3,
    item_in_forward: bool = False,
) -> Outcome:
    torch._dynamo.reset()
    counters.clear()
    recorder = CountingRecorder()
    hooks = AutoHooks(torch, recorder)
    if hooked:
        hooks.install()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.manual_seed(0)
            model = Net(item_in_forward)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            call = prepare(model)
            x = torch.randn(4, 8)
            for _ in range(steps):
                loss = call(x).square().mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
    finally:
        hooks.remove()
    return Outcome(
        graphs=counters["stats"]["unique_graphs"],
        breaks=sum(counters["graph_break"].values()),
        forwards=recorder.forwards,
        steps=recorder.steps,
        weights=[p.detach().clone() for p in model.parameters()],
        warned=[str(w.message) for w in caught],
    )


def module_compile(model: torch.nn.Module, **options: Any) -> torch.nn.Module:
    model.compile(**options)
    return model


CASES: dict[str, Callable[[torch.nn.Module], Any]] = {
    "torch.compile(model)": lambda m: torch.compile(m, backend="eager"),
    "model.compile()": lambda m: module_compile(m, backend="eager"),
    "fullgraph=True": lambda m: torch.compile(m, backend="eager", fullgraph=True),
    "aot_eager": lambda m: torch.compile(m, backend="aot_eager"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_compiled_model_gets_the_same_graphs_weights_and_one_forward_mark(case: str) -> None:
    alone = train(CASES[case], hooked=False)
    watched = train(CASES[case], hooked=True)
    assert alone.graphs == 1 and alone.breaks == 0
    assert (watched.graphs, watched.breaks) == (alone.graphs, alone.breaks)
    assert all(torch.equal(a, b) for a, b in zip(alone.weights, watched.weights, strict=True))
    assert watched.forwards == 3, "the compiled forward is marked once per step, not twice"
    assert watched.steps == 3
    assert not [w for w in watched.warned if "global hooks" in w], watched.warned


def test_reduce_overhead_mode_compiles_the_same_with_inductor() -> None:
    def prepare(m: torch.nn.Module) -> Any:
        return torch.compile(m, mode="reduce-overhead")

    alone = train(prepare, hooked=False, steps=2)
    watched = train(prepare, hooked=True, steps=2)
    assert alone.graphs >= 1
    assert (watched.graphs, watched.breaks) == (alone.graphs, alone.breaks)
    assert watched.forwards == 2 and watched.steps == 2
    assert all(torch.allclose(a, b) for a, b in zip(alone.weights, watched.weights, strict=True))


def test_the_users_own_graph_break_stays_the_only_one() -> None:
    def prepare(m: torch.nn.Module) -> Any:
        return torch.compile(m, backend="eager")

    alone = train(prepare, hooked=False, item_in_forward=True)
    watched = train(prepare, hooked=True, item_in_forward=True)
    assert alone.breaks >= 1
    assert (watched.graphs, watched.breaks) == (alone.graphs, alone.breaks)
    assert watched.forwards == 3, "eager pieces between graphs add no forward marks"


@pytest.mark.parametrize("strict", [True, False])
def test_export_succeeds_with_the_hooks_installed(strict: bool) -> None:
    recorder = CountingRecorder()
    hooks = AutoHooks(torch, recorder)
    hooks.install()
    try:
        torch.manual_seed(0)
        model = Net()
        x = torch.randn(4, 8)
        with torch.no_grad():
            expected = model.body(x)  # the Sequential alone: the model's forward unmarked
        forwards = recorder.forwards
        exported = torch.export.export(model, (x,), strict=strict)
        assert recorder.forwards == forwards, "tracing for export is no training step"
        assert torch.equal(exported.module()(x), expected)
        assert recorder.forwards == forwards + 1, "running the exported module is a forward"
    finally:
        hooks.remove()


def test_remove_restores_what_install_replaced() -> None:
    from torch.utils.data import dataloader

    originals = (
        torch.compile,
        torch.nn.Module.compile,
        torch.autograd.backward,
        dataloader._BaseDataLoaderIter.__next__,
        torch.export.export,
    )
    torch.compile(torch.nn.Linear(1, 1), backend="eager")  # imports Dynamo
    from torch._dynamo.eval_frame import OptimizedModule

    optimized_call = OptimizedModule.__dict__["__call__"]
    hooks = AutoHooks(torch, CountingRecorder())
    hooks.install()
    torch.compile(torch.nn.Linear(1, 1), backend="eager")
    assert OptimizedModule.__dict__["__call__"] is not optimized_call
    hooks.remove()
    assert (
        torch.compile,
        torch.nn.Module.compile,
        torch.autograd.backward,
        dataloader._BaseDataLoaderIter.__next__,
        torch.export.export,
    ) == originals
    assert OptimizedModule.__dict__["__call__"] is optimized_call
    assert not torch.nn.modules.module._has_any_global_hook()


def test_hooks_install_where_os_has_no_register_at_fork(monkeypatch) -> None:
    monkeypatch.delattr(os, "register_at_fork")
    recorder = CountingRecorder()
    hooks = AutoHooks(torch, recorder)
    hooks.install()
    try:
        torch.nn.Linear(2, 1)(torch.ones(1, 2))
    finally:
        hooks.remove()
    assert recorder.forwards == 1
