"""Does watching slow a compiled training step? (``python bench/compiled_step.py``).

A script's ``torch.compile``d model must get the same graph, and so the same
speed, under ``gpuwatch run`` as alone. One process trains a compiled MLP (AdamW, a
DataLoader); rounds alternate between *watched* (gpuwatch's ``AutoHooks`` installed, feeding a
real ``StepRecorder`` whose link discards what it is sent, as in script mode on a CPU) and
*unwatched* (no hook at all), each side timing ``--steps`` loop iterations after a few warm-up
ones. Printed: the median and IQR of the step time on each side (all rounds pooled), each
round's watched/unwatched ratio of medians (goal: <= 1.05), and Dynamo's graph and graph-break
counts, which must not grow when the hooks come and go.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import machine
import torch
from torch._dynamo.utils import counters
from torch.utils.data import DataLoader, TensorDataset

from gpuwatch.runner.autohooks import AutoHooks
from gpuwatch.runner.step_recorder import StepRecorder
from gpuwatch.runner.timing import HostBackend


class DiscardLink:
    """The runner's link, reduced to counting what the recorder sends."""

    def __init__(self) -> None:
        self.messages = 0
        self.notices: list[str] = []

    def send(self, kind: str, **fields: Any) -> None:
        self.messages += 1
        if kind == "log" and "off" in fields:
            self.notices.append(str(fields["text"]))

    def send_batch(self, kind: str, **fields: Any) -> None:
        self.messages += 1

    def log(self, level: str, text: str) -> None:
        self.messages += 1


class Trainer:
    """A compiled MLP trained from a DataLoader that never runs out."""

    def __init__(self, width: int, batch: int, backend: str) -> None:
        model = torch.nn.Sequential(
            torch.nn.Linear(width, width),
            torch.nn.ReLU(),
            torch.nn.Linear(width, width),
            torch.nn.ReLU(),
            torch.nn.Linear(width, 1),
        )
        self.model = torch.compile(model, backend=backend)
        self.opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        data = TensorDataset(torch.randn(batch * 32, width), torch.randn(batch * 32, 1))
        self.loader = DataLoader(data, batch_size=batch, shuffle=True)
        self._batches = iter(self.loader)

    def _next(self) -> Any:
        try:
            return next(self._batches)
        except StopIteration:
            self._batches = iter(self.loader)
            return next(self._batches)

    def timed(self, steps: int) -> list[int]:
        """Per loop iteration: next(loader), forward, backward, optimizer step."""
        out = []
        for _ in range(steps):
            t0 = time.perf_counter_ns()
            x, y = self._next()
            loss = torch.nn.functional.mse_loss(self.model(x), y)
            loss.backward()
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)
            out.append(time.perf_counter_ns() - t0)
        return out


def graph_counts() -> tuple[int, int]:
    return counters["stats"]["unique_graphs"], sum(counters["graph_break"].values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=300, help="timed steps per side and round")
    parser.add_argument("--warmup", type=int, default=30, help="untimed steps after a switch")
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--backend", default="inductor", help="torch.compile backend")
    args = parser.parse_args()
    torch.set_num_threads(1)  # a shared machine: one core's worth of work
    link = DiscardLink()
    recorder = StepRecorder(link, HostBackend(), boundary=lambda step: None, config_id=lambda: 0)
    hooks = AutoHooks(torch, recorder)
    hooks.install()  # as in a watched script: torch.compile runs with the hooks in place
    trainer = Trainer(args.width, args.batch, args.backend)
    started = time.perf_counter()
    trainer.timed(args.warmup)  # compiles
    compile_s = time.perf_counter() - started
    first = graph_counts()
    hooks.remove()
    trainer.timed(args.warmup)
    watched: list[int] = []
    alone: list[int] = []
    ratios = []
    for index in range(args.rounds):
        order = ("watched", "alone") if index % 2 == 0 else ("alone", "watched")
        sides: dict[str, list[int]] = {}
        for side in order:
            if side == "watched":
                hooks.install()
            trainer.timed(args.warmup)
            sides[side] = trainer.timed(args.steps)
            if side == "watched":
                hooks.remove()
        watched += sides["watched"]
        alone += sides["alone"]
        ratios.append(statistics.median(sides["watched"]) / statistics.median(sides["alone"]))
    last = graph_counts()
    print(machine.header("compiled step: watched vs unwatched (bench/compiled_step.py)"))
    print(
        f"compiled step ({args.backend}, MLP width {args.width}, batch {args.batch}, AdamW, "
        f"DataLoader): {args.rounds} interleaved rounds of {args.steps} steps each side; "
        f"first compile {compile_s:.1f} s"
    )
    print(f"  unwatched: {machine.step_spread(alone)}")
    print(f"  watched:   {machine.step_spread(watched)}")
    print(
        f"  watched/unwatched per round (median of each side): "
        f"{machine.spread(ratios, '{:.3f}')} (goal: <= 1.05)"
    )
    print(
        f"  Dynamo: {first[0]} graph(s), {first[1]} graph break(s) after the first compile; "
        f"{last[0]} and {last[1]} after all rounds; {recorder.steps} steps recorded watched"
    )
    for text in link.notices:
        print(f"  note: {text}")


if __name__ == "__main__":
    main()
