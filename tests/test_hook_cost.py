"""The zero-code hook path: what it measures of itself, how that travels, and that its cheaper
path (inner modules without our global hooks) changes nothing the script computes.

Speed is priced in ``bench/overhead.py --script``; nothing here asserts a time.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from fake_runner_link import FakeLink
from torch import nn
from torch.nn.modules import module as torch_modules
from torch.utils.data import DataLoader, TensorDataset

from gpuwatch import protocol
from gpuwatch.core.model.store import StepStore
from gpuwatch.core.run.run_model import RunModel
from gpuwatch.runner.autohooks import HOLD_LEARNING
from gpuwatch.runner.script_instruments import ScriptInstruments
from gpuwatch.runner.step_columns import SpentTime, StepColumns
from gpuwatch.runner.timing import HostBackend

BENCH = Path(__file__).resolve().parent.parent / "bench"


def steps_message(n: int, *, step_ns: int, spent: list[int] | None, first: int = 0) -> dict:
    host = [[first + i * step_ns + k * step_ns // 7 for k in range(6)] for i in range(n)]
    for i, row in enumerate(host):
        row.append(first + (i + 1) * step_ns)
    fields: dict[str, Any] = {
        "step": list(range(n)),
        "config": [0] * n,
        "samples": [1] * n,
        "host": host,
    }
    if spent is not None:
        fields["instrument_ns"] = spent
    return fields


# --- the wire ---------------------------------------------------------------------------------


def test_steps_carry_instrument_ns_and_older_messages_still_decode() -> None:
    with_column = steps_message(3, step_ns=1_000_000, spent=[10, 20, 30])
    decoded = protocol.decode(protocol.encode("steps", **with_column))
    assert decoded["instrument_ns"] == [10, 20, 30]
    without = steps_message(3, step_ns=1_000_000, spent=None)
    assert "instrument_ns" not in protocol.decode(protocol.encode("steps", **without))


@pytest.mark.parametrize(
    "bad",
    [
        {"instrument_ns": [1, 2]},  # one short
        {"instrument_ns": [1, True, 3]},
        {"instrument_ns": [1.5, 2, 3]},
        {"instrument_ns": "123"},
        {"host": [[1] * 6] * 3},
        {"host": [[1, 2, 3, 4, 5, 6, False]] * 3},
        {"samples": [1, 2, 3.0]},
    ],
)
def test_malformed_steps_columns_are_refused(bad: dict[str, Any]) -> None:
    message = {**steps_message(3, step_ns=1_000_000, spent=[1, 2, 3]), **bad}
    with pytest.raises(protocol.ProtocolError):
        protocol.encode("steps", **message)


# --- the runner's bookkeeping -------------------------------------------------------------------


def test_each_step_takes_the_time_spent_since_the_last_one() -> None:
    columns = StepColumns()
    columns.add_step(0, 0, 1, [0] * protocol.N_MARKS)  # not measured yet: no column
    spent = SpentTime()
    columns.spent = spent
    link = FakeLink()
    columns.send(link)
    assert "instrument_ns" not in link.kinds("steps")[0]
    spent.ns += 700
    columns.add_step(1, 0, 1, [0] * protocol.N_MARKS)
    spent.ns += 50
    spent.ns += 25
    columns.add_step(2, 0, 1, [0] * protocol.N_MARKS)
    columns.add_step(3, 0, 1, [0] * protocol.N_MARKS)
    columns.send(link)
    assert link.kinds("steps")[1]["instrument_ns"] == [700, 75, 0]


def test_the_boundary_time_is_not_counted() -> None:
    """The step boundary (controls, pause) runs inside a timed hook: its own time comes off."""
    watch = ScriptInstruments.build(
        FakeLink(), torch, torch.device("cpu"), HostBackend(), max_steps=None
    )
    spent = watch.hooks.spent
    assert watch.control.spent is spent and watch.recorder.columns.spent is spent
    watch.control.at_boundary(0)
    assert spent.ns < 0  # taken off, to be added back by the hook that called it
    watch.recorder.columns.add_step(0, 0, 1, [0] * protocol.N_MARKS)
    assert watch.recorder.columns.instrument_ns == [0] and spent.ns == 0  # never negative


# --- the GUI side -------------------------------------------------------------------------------


def test_share_of_step_time_over_the_recent_past() -> None:
    store = StepStore(capacity=64)
    assert store.instrument_share(10**10) is None
    store.append(**steps_message(4, step_ns=1_000_000, spent=None))
    assert store.instrument_share(10**10) is None  # a runner that does not measure
    later = steps_message(4, step_ns=1_000_000, spent=[10_000] * 4, first=4_000_000)
    later["step"] = [4, 5, 6, 7]
    store.append(**later)
    assert store.instrument_share(10**10) == pytest.approx(0.01)
    # only the steps ending in the window count: the newest one, at 2 % of its step
    last = steps_message(1, step_ns=1_000_000, spent=[20_000], first=8_000_000)
    last["step"] = [8]
    store.append(**last)
    assert store.instrument_share(1) == pytest.approx(0.02)


def test_run_model_and_its_owners_expose_the_share() -> None:
    model = RunModel()
    assert model.instrumentation_share() is None
    model.fold({"kind": "steps", **steps_message(5, step_ns=2_000_000, spent=[50_000] * 5)})
    assert model.instrumentation_share() == pytest.approx(0.025)
    replayed = RunModel()  # a recording's steps carry no such column
    replayed.fold({"kind": "steps", **steps_message(5, step_ns=2_000_000, spent=None)})
    assert replayed.instrumentation_share() is None


# --- a script's loop under the real instruments --------------------------------------------------


class Net(nn.Module):
    """A model with inner modules that record whether our global hooks were in place."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
        self.global_hooks_inside: list[int] = []
        self.fail_next = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.global_hooks_inside.append(
            len(torch_modules._global_forward_pre_hooks) + len(torch_modules._global_forward_hooks)
        )
        if self.fail_next:
            self.fail_next = False
            raise ValueError("the script's own error")
        return self.body(x)


def train(steps: int, *, link: FakeLink | None) -> tuple[Net, ScriptInstruments | None]:
    """``steps`` batches of a seeded loop, watched by the real instruments when ``link``."""
    torch.manual_seed(0)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = nn.CrossEntropyLoss()
    data = TensorDataset(torch.randn(64, 4), torch.randint(0, 3, (64,)))
    loader = DataLoader(
        data, batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(1)
    )
    watch = None
    if link is not None:
        watch = ScriptInstruments.build(
            link, torch, torch.device("cpu"), HostBackend(), max_steps=None
        )
        watch.install()
    try:
        done = 0
        while done < steps:
            for x, y in loader:
                if done == steps // 2:  # a forward that raises, caught by the script
                    model.fail_next = True
                    with pytest.raises(ValueError):
                        model(x)
                loss = loss_fn(model(x), y)
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                done += 1
                if done == steps:
                    break
        if watch is not None:
            watch.recorder.finish()
    finally:
        if watch is not None:
            watch.remove()
    return model, watch


def test_watched_loop_computes_the_same_weights_and_measures_its_hooks() -> None:
    plain, _ = train(30, link=None)
    link = FakeLink()
    watched, watch = train(30, link=link)
    assert watch is not None
    for a, b in zip(plain.parameters(), watched.parameters(), strict=True):
        assert torch.equal(a, b)
    # inside each outermost forward our global hooks stood aside; outside they are back
    assert set(watched.global_hooks_inside) == {0}
    assert not torch_modules._global_forward_pre_hooks and not torch_modules._global_forward_hooks
    assert not watched._forward_hooks and not watched._forward_hooks_always_called
    batches = link.kinds("steps")
    spent = [ns for batch in batches for ns in batch["instrument_ns"]]
    steps = [step for batch in batches for step in batch["step"]]
    assert len(spent) == len(steps) >= 25  # the raised forward did not end step detection
    assert all(ns >= 0 for ns in spent) and sum(1 for ns in spent if ns > 0) >= len(spent) - 1
    model = RunModel()
    for batch in batches:
        model.fold({"kind": "steps", **protocol.decode(protocol.encode("steps", **batch))})
    share = model.instrumentation_share()
    assert share is not None and 0 < share < 1


def test_hooks_mark_each_outermost_forward_with_a_model_of_many_modules() -> None:
    """Inner modules run without our hooks, yet every step still gets its forward marks."""
    link = FakeLink()
    train(12, link=link)
    rows = [row for batch in link.kinds("steps") for row in batch["host"]]
    start, data_end, h2d_end, forward_end = 0, 1, 2, 3
    assert rows and all(row[h2d_end] >= row[data_end] >= row[start] for row in rows)
    assert all(row[forward_end] > row[h2d_end] for row in rows)


class CountingLoss(nn.CrossEntropyLoss):
    """A loss (a module without children) that records whether our global hooks were in place."""

    def __init__(self) -> None:
        super().__init__()
        self.global_hooks_inside: list[int] = []

    def forward(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        self.global_hooks_inside.append(
            len(torch_modules._global_forward_pre_hooks) + len(torch_modules._global_forward_hooks)
        )
        return super().forward(output, target)


def test_each_outermost_module_is_asked_about_once_and_a_loss_keeps_the_global_hooks() -> None:
    """The first outermost forward of a module asks who wants to know of it; later ones call
    only what that returned. A module without children runs with our global hooks in place
    (stepping them aside would spare no inner call), and its forward is still marked."""
    link = FakeLink()
    watch = ScriptInstruments.build(link, torch, torch.device("cpu"), HostBackend(), max_steps=None)
    model, loss_fn = Net(), CountingLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    first: list[nn.Module] = []
    every: list[nn.Module] = []

    def first_outermost(module: Any) -> Any:
        first.append(module)
        return every.append if module is model else None

    watch.install()
    watch.hooks.on_first_outermost = first_outermost
    try:
        for _ in range(5):
            loss = loss_fn(model(torch.randn(4, 4)), torch.randint(0, 3, (4,)))
            loss.backward()
            optimizer.step()
        watch.recorder.finish()
    finally:
        watch.remove()
    assert first == [model, loss_fn]
    assert every == [model] * 5
    assert set(model.global_hooks_inside) == {0}
    assert min(loss_fn.global_hooks_inside) > 0
    rows = [row for batch in link.kinds("steps") for row in batch["host"]]
    h2d_end, forward_end = 2, 3
    assert len(rows) >= 4 and all(row[forward_end] > row[h2d_end] for row in rows)


def global_hooks_now() -> int:
    return len(torch_modules._global_forward_pre_hooks) + len(torch_modules._global_forward_hooks)


class Probe(nn.Module):
    """A second model with parameters, called after the first one's forward and before the
    backward (a discriminator, a teacher)."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale(x)


def hold_run(
    steps: int,
    *,
    second_model_from: int | None = None,
    eval_from: int | None = None,
    first_outermost: Any = None,
) -> tuple[Net, CountingLoss, list[int], list[list[int]], list[nn.Module]]:
    """``steps`` batches of a DataLoader loop, watched; the global hooks counted as each step's
    model call begins, the loss's view of them, the host marks, and the modules the model
    knobs were told of. ``second_model_from``: from that step on a ``Probe`` also runs between
    the forward and the backward; ``eval_from``: from that step on each step runs under
    ``no_grad``, without a backward (an evaluation)."""
    torch.manual_seed(0)
    link = FakeLink()
    watch = ScriptInstruments.build(link, torch, torch.device("cpu"), HostBackend(), max_steps=None)
    model, loss_fn, probe = Net(), CountingLoss(), Probe()
    optimizer = torch.optim.SGD([*model.parameters(), *probe.parameters()], lr=0.1)
    data = TensorDataset(torch.randn(4 * steps, 4), torch.randint(0, 3, (4 * steps,)))
    loader = DataLoader(data, batch_size=4)
    at_model_call: list[int] = []
    told: list[nn.Module] = []
    watch.install()
    if first_outermost is None:
        saw = watch.hooks.on_first_outermost
        assert saw is not None

        def first_outermost(module: Any) -> Any:
            told.append(module)
            return saw(module)

    watch.hooks.on_first_outermost = first_outermost
    try:
        for step, (x, y) in enumerate(loader):
            grad = eval_from is None or step < eval_from
            with torch.set_grad_enabled(grad):
                at_model_call.append(global_hooks_now())
                out = model(x)
                assert not model._forward_hooks  # our own hook never outlives the forward
                if second_model_from is not None and step >= second_model_from:
                    out = probe(out)
                loss = loss_fn(out, y)
            if grad:
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
        watch.recorder.finish()
    finally:
        watch.remove()
    rows = [row for batch in link.kinds("steps") for row in batch["host"]]
    return model, loss_fn, at_model_call, rows, told


def test_in_training_the_loss_runs_without_the_global_hooks_once_learned() -> None:
    """After ``HOLD_LEARNING`` training windows with nothing new in them, the global hooks stay
    aside from the model's forward end to the backward: the loss takes torch's fast path.
    Each step still begins with them in place, and its forward marks are as before (the
    backward's start ends the forward)."""
    steps = HOLD_LEARNING + 8
    model, loss_fn, at_model_call, rows, told = hold_run(steps)
    assert told == [model, loss_fn]
    assert min(at_model_call) > 0
    assert min(loss_fn.global_hooks_inside[:HOLD_LEARNING]) > 0
    assert set(loss_fn.global_hooks_inside[HOLD_LEARNING + 1 :]) == {0}
    assert set(model.global_hooks_inside) == {0}
    assert global_hooks_now() == 0  # removed with the instruments
    h2d_end, forward_end, backward_end = 2, 3, 4
    assert len(rows) >= steps - 1
    assert all(row[backward_end] > row[forward_end] > row[h2d_end] for row in rows)


def test_a_new_model_in_the_window_keeps_the_global_hooks_in_place() -> None:
    """A model with parameters first called after the forward (the model knobs must see it)
    rules holding out: its calls and the loss's keep the global hooks, and it is told of."""
    steps = HOLD_LEARNING + 8
    model, loss_fn, _, _, told = hold_run(steps, second_model_from=2)
    assert len(told) == 3 and told[:2] == [model, loss_fn] and isinstance(told[2], Probe)
    assert min(loss_fn.global_hooks_inside) > 0


def test_a_module_that_wants_each_forward_keeps_the_global_hooks_in_place() -> None:
    """A module whose every outermost forward is wanted (DDP's timing) called in the window
    rules holding out."""
    every: list[nn.Module] = []

    def first_outermost(module: Any) -> Any:
        return every.append if isinstance(module, Probe) else None

    steps = HOLD_LEARNING + 8
    _, loss_fn, _, _, _ = hold_run(steps, second_model_from=0, first_outermost=first_outermost)
    assert len(every) == steps
    assert min(loss_fn.global_hooks_inside) > 0


def test_without_gradients_the_loss_keeps_the_global_hooks() -> None:
    """An evaluation under ``no_grad`` after the training has no backward to end its forward:
    its loss stays forward time, marked by the global hooks."""
    trained = HOLD_LEARNING + 4
    _, loss_fn, _, rows, _ = hold_run(trained + 6, eval_from=trained)
    assert set(loss_fn.global_hooks_inside[HOLD_LEARNING + 1 : trained]) == {0}
    assert min(loss_fn.global_hooks_inside[trained:]) > 0
    h2d_end, forward_end = 2, 3
    assert rows and all(row[forward_end] > row[h2d_end] for row in rows)


# --- the bench's parsing and report -----------------------------------------------------------


def test_bench_reads_the_scripts_own_figures() -> None:
    sys.path.insert(0, str(BENCH))
    try:
        import script_overhead
    finally:
        sys.path.remove(str(BENCH))
    line = 'HOOK_SCRIPT {"mean_ns": 5000000.0, "median_ns": 4900000, "weights": 1.5}'
    run = script_overhead.parse_report("noise\n" + line + "\nmore noise")
    assert run == script_overhead.ScriptRun(5_000_000.0, 4_900_000.0, 1.5)
    with pytest.raises(ValueError):
        script_overhead.parse_report("no figures here")
    plain = [script_overhead.ScriptRun(5e6, 5e6, 1.0), script_overhead.ScriptRun(4e6, 4e6, 1.0)]
    watched = [
        script_overhead.ScriptRun(5.05e6, 5e6, 1.0),
        script_overhead.ScriptRun(4e6, 4e6, 2.0),
    ]
    pairs = script_overhead.ScriptPairs("map", plain, watched)
    summary = script_overhead.summary(pairs)
    assert summary["ratio_median"] == pytest.approx(1.005)
    assert summary["added_us_per_step_median"] == pytest.approx(25.0)
    assert summary["same_weights"] is False
    low, high = summary["ratio_median_ci90"]
    assert low == pytest.approx(1.0) and high == pytest.approx(1.01)  # medians of resampled pairs


def test_the_pairs_median_comes_with_an_interval_that_narrows_with_more_pairs() -> None:
    sys.path.insert(0, str(BENCH))
    try:
        import machine
    finally:
        sys.path.remove(str(BENCH))
    assert machine.median_interval([1.02] * 5) == (1.02, 1.02)
    scatter = [0.96, 1.05, 1.01, 0.99, 1.04, 1.00, 1.03, 0.98]
    few = machine.median_interval(scatter)
    many = machine.median_interval(scatter * 6)
    median = statistics.median(scatter)
    assert few[0] <= median <= few[1] and many[0] <= median <= many[1]
    assert many[1] - many[0] < few[1] - few[0]
    assert machine.median_interval(scatter) == few  # seeded: a report reads the same twice


def test_the_module_count_bench_times_both_sides_and_leaves_nothing_installed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.syspath_prepend(str(BENCH))
    import script_overhead

    cost = script_overhead.module_count_cost(FakeLink(), blocks=3, rounds=2, calls=12)
    assert cost.module_calls == 10  # the outer Sequential, 3 inner ones, 3 Linear, 3 ReLU
    assert len(cost.on_us) == len(cost.off_us) == 2
    assert all(us > 0 for us in cost.on_us + cost.off_us)
    assert not torch_modules._global_forward_pre_hooks and not torch_modules._global_forward_hooks


def test_the_in_situ_bench_times_each_side_and_leaves_the_script_unhooked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.syspath_prepend(str(BENCH))  # the bench imports its script from there
    import script_overhead

    cost = script_overhead.InSituCost(
        "map",
        on_ns=[110] * 10 + [130] * 10,
        off_ns=[100] * 20,
        first_on_ns=[400, 500, 600],
        first_off_ns=[200, 300, 250],
    )
    assert cost.added_ns == 20
    assert cost.added_ns_by_tenth() == [10] * 5 + [30] * 5
    assert cost.first_step_added_ns == 250
    link = FakeLink()
    measured = script_overhead.hook_path_in_situ("map", link, steps=12)
    kept = script_overhead.IN_SITU_BLOCK - script_overhead.IN_SITU_SETTLE
    blocks = len(measured.first_on_ns)
    assert blocks == len(measured.first_off_ns) >= 2, "the sides alternate block by block"
    assert len(measured.on_ns) == len(measured.off_ns) == blocks * kept >= 12
    assert all(ns > 0 for ns in measured.on_ns + measured.off_ns + measured.first_on_ns)
    assert link.kinds("steps"), "the steps on the hooked side were recorded"
    assert not torch_modules._global_forward_pre_hooks and not torch_modules._global_forward_hooks


def test_the_in_situ_figure_is_the_median_over_fresh_processes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each process reads differently: the bench runs the in-situ measure in fresh processes
    (the bench file itself, as a child) and reports their median and range."""
    monkeypatch.syspath_prepend(str(BENCH))
    import script_overhead

    [run] = script_overhead.in_situ_in_processes("map", steps=12, processes=1)
    kept = script_overhead.IN_SITU_BLOCK - script_overhead.IN_SITU_SETTLE
    assert run["dataset"] == "map" and run["steps_per_side"] >= 12
    assert run["steps_per_side"] % kept == 0 and run["step_us_off"] > 0
    runs = [
        {**run, "added_us_per_step": us, "step_us_off": off}
        for us, off in ((90.0, 6000.0), (70.0, 6200.0), (110.0, 5900.0))
    ]
    summary = script_overhead.in_situ_processes_summary("map", runs)
    assert summary["added_us_per_step"] == 90.0
    assert summary["added_us_per_step_range"] == [70.0, 110.0]
    assert summary["step_us_off"] == 6000.0 and summary["processes"] == runs
    usage = subprocess.run(
        [sys.executable, str(BENCH / "script_overhead.py")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert usage.returncode != 0 and "usage:" in usage.stderr and "Traceback" not in usage.stderr
