"""Does a kernel capture leave anything behind? (``python bench/capture_after.py``).

After a capture window nothing of the profiler may stay attached, so the
training step must take as long after a capture as before it. One process runs a small MLP
training step; each round times ``--steps`` steps, runs one real capture window
(``runner.kernel_capture.KernelCapture``, ``--window`` recorded steps, the events discarded)
and times ``--steps`` steps again. Printed: median and IQR of the step time before and after
(all rounds pooled), and each round's after/before ratio of medians (goal: 1.00 within the
noise of a shared machine).

On a CPU this shows the CPU-op instrumentation is gone. What stays attached on CUDA is CUPTI
(Kineto detaches it only with ``TEARDOWN_CUPTI=1``, which the capture sets on CUDA >= 12.6):
that figure needs a GPU (``--device cuda``).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import machine
import torch

from gpuwatch.runner.kernel_capture import KernelCapture


class DiscardLink:
    """The runner's link, reduced to what the capture sends: windows are counted, not kept."""

    def __init__(self) -> None:
        self.windows: list[str] = []
        self.warnings: list[str] = []

    def send(self, kind: str, **fields: Any) -> None:
        if kind == "kernels":
            self.windows.append(str(fields.get("status")))

    def log(self, level: str, text: str) -> None:
        if level == "warning":
            self.warnings.append(text)


class Trainer:
    def __init__(self, device: torch.device, width: int) -> None:
        self.device = device
        self.model = torch.nn.Sequential(
            torch.nn.Linear(width, width),
            torch.nn.ReLU(),
            torch.nn.Linear(width, width),
            torch.nn.ReLU(),
            torch.nn.Linear(width, 1),
        ).to(device)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-3)
        self.batch = torch.randn(64, width, device=device)

    def step(self) -> None:
        loss = self.model(self.batch).pow(2).mean()
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        if self.device.type == "cuda":
            torch.cuda.synchronize()  # host time = the step's whole time

    def timed(self, steps: int) -> list[int]:
        out = []
        for _ in range(steps):
            t0 = time.perf_counter_ns()
            self.step()
            out.append(time.perf_counter_ns() - t0)
        return out


def capture_window(trainer: Trainer, capture: KernelCapture, window: int, first: int) -> int:
    """One capture window through the boundaries, as the runner drives it; the next step id."""
    capture.request(window)
    step = first
    while True:
        capture.at_boundary(step)
        if step > first and not capture.busy:
            return step
        trainer.step()
        step += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=300, help="timed steps per side")
    parser.add_argument("--window", type=int, default=3, help="recorded steps per capture")
    parser.add_argument("--width", type=int, default=256)
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda needs a GPU; none is visible here")
    torch.set_num_threads(1)  # a shared machine: one core's worth of work
    device = torch.device(args.device)
    trainer = Trainer(device, args.width)
    link = DiscardLink()
    capture = KernelCapture(link, device=device.type)
    trainer.timed(50)  # allocator, autograd and AdamW state warm
    before: list[int] = []
    after: list[int] = []
    ratios = []
    step = 0
    for _ in range(args.rounds):
        b = trainer.timed(args.steps)
        step = capture_window(trainer, capture, args.window, step)
        a = trainer.timed(args.steps)
        before += b
        after += a
        ratios.append(statistics.median(a) / statistics.median(b))
    capture.close()
    print(machine.header("kernel capture: step time before vs after (bench/capture_after.py)"))
    print(
        f"kernel capture: before vs after, {args.device}, {args.rounds} rounds of "
        f"{args.steps} steps each side, {args.window}-step windows "
        f"({link.windows.count('ok')}/{len(link.windows)} ok)"
    )
    print(f"  before: {machine.step_spread(before)}")
    print(f"  after:  {machine.step_spread(after)}")
    print(
        f"  after/before per round (median of each side): {machine.spread(ratios, '{:.3f}')}"
        " (goal: 1.00 within noise)"
    )
    for text in link.warnings:
        print(f"  note: {text}")
    if device.type != "cuda":
        print(
            "  a GPU figure needs a GPU: on CUDA what can stay attached is CUPTI "
            "(run with --device cuda on a GPU machine)"
        )


if __name__ == "__main__":
    main()
