"""Gradient accumulation in zero-code mode: a step ends at ``optimizer.step()``.

The recorder gets the hooks' calls from a fake loop on a clock the test sets, so every mark of
an accumulating step can be checked against the phase times the loop spent.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from test_probe import FakeLink, FakeTensor

from gpuwatch.protocol import N_MARKS
from gpuwatch.runner.step_recorder import StepRecorder
from gpuwatch.runner.timing import DeviceMarks, TimingBackend

# Phase times of one micro-batch (ns on the test's clock): data, h2d (to the forward), forward,
# backward, optimizer (the accumulating step's last micro-batch only), time after it.
DATA, H2D, FORWARD, BACKWARD, OPTIMIZER, TAIL = 400, 10, 100, 200, 50, 30


class SetClock:
    def __init__(self) -> None:
        self.now = 1_000

    def __call__(self) -> int:
        return self.now


@dataclass
class CountingBackend(TimingBackend):
    """Records which device marks each step got (as a CUDA backend would record events)."""

    kind: str = "counting"
    marks: list[list[int]] = field(default_factory=list)

    def begin(self, step_id: int) -> None:
        self.marks.append([])

    def mark(self, index: int) -> None:
        self.marks[-1].append(index)

    def end(self) -> None:
        pass

    def poll(self, *, wait: bool = False) -> list[DeviceMarks]:
        return []


class Loop:
    """A training loop's calls, as autohooks reports them, on a clock it advances."""

    def __init__(self) -> None:
        self.clock = SetClock()
        self.link = FakeLink()
        self.backend = CountingBackend()
        self.rec = StepRecorder(
            self.link, self.backend, boundary=lambda _: None, config_id=lambda: 0, clock=self.clock
        )

    def tick(self, ns: int) -> None:
        self.clock.now += ns

    def batch(self, iterator: int, samples: int, *, step: bool) -> None:
        rec = self.rec
        rec.next_called(iterator)
        self.tick(DATA)
        rec.next_returned(iterator, FakeTensor(samples))
        self.tick(H2D)
        rec.forward_started()
        self.tick(FORWARD)
        rec.forward_returned()
        rec.backward_started()
        self.tick(BACKWARD)
        rec.backward_returned()
        if step:
            self.tick(OPTIMIZER)
            rec.optimizer_stepped()
        self.tick(TAIL)

    def epoch(self, iterator: int, batches: int, every: int) -> None:
        for i in range(batches):
            self.batch(iterator, 64, step=(i + 1) % every == 0)
        self.rec.next_called(iterator)
        self.rec.loader_exhausted(iterator)

    def steps(self) -> list[tuple[int, list[int]]]:
        out = []
        for batch in self.link.kinds("steps"):
            out += list(zip(batch["samples"], batch["host"], strict=True))
        return out


def phases(host: list[int]) -> list[int]:
    return [host[i + 1] - host[i] for i in range(N_MARKS - 1)]


def test_a_step_ends_at_the_optimizer_step_with_its_phases_summed() -> None:
    loop = Loop()
    loop.epoch(iterator=1, batches=40, every=4)  # 10 optimizer steps
    loop.rec.finish()
    steps = loop.steps()
    # The first cycle shows as single batches (no optimizer had stepped yet), then 9 steps.
    assert [samples for samples, _ in steps] == [64] * 4 + [256] * 9
    first = steps[0][1]
    assert phases(first) == [DATA, H2D, FORWARD, BACKWARD, 0, TAIL]
    one = DATA + H2D + FORWARD + BACKWARD + TAIL
    for _, host in steps[4:]:
        assert host == sorted(host)
        assert phases(host) == [4 * DATA, 4 * H2D, 4 * FORWARD, 4 * BACKWARD, OPTIMIZER, 4 * TAIL]
        assert host[-1] - host[0] == 4 * one + OPTIMIZER
    # Back to back: each step starts where the last ended, and the run's time is all there.
    assert all(a[1][-1] == b[1][0] for a, b in itertools.pairwise(steps))
    assert steps[-1][1][-1] - steps[0][1][0] == 40 * one + 10 * OPTIMIZER
    assert loop.rec.bye_fields() == {
        "step_definition": "accumulation",
        "batches_per_step": 4,
        "optimizer_steps": 10,
        "backward_passes": 40,
    }
    said = [m["text"] for m in loop.link.kinds("log")]
    assert sum("accumulates gradients" in text for text in said) == 1


def test_device_marks_of_an_accumulating_step_are_its_first_batch_and_its_optimizer_step() -> None:
    loop = Loop()
    loop.epoch(iterator=1, batches=8, every=4)
    loop.rec.finish()
    # As a one-batch step records them (forward_end again at backward()): the later
    # micro-batches' boundaries are not recorded again.
    assert loop.backend.marks[3] == [0, 1, 2, 3, 3, 4, 5, 6]
    assert loop.backend.marks[4] == loop.backend.marks[3]


def test_an_epoch_that_ends_between_optimizer_steps_ends_its_step_there() -> None:
    loop = Loop()
    loop.epoch(iterator=1, batches=10, every=4)  # 2 batches left without an optimizer step
    loop.tick(5_000)  # between epochs (validation, logging)
    loop.epoch(iterator=2, batches=8, every=4)
    loop.rec.finish()
    steps = loop.steps()
    samples = [n for n, _ in steps]
    assert samples == [64] * 4 + [256, 128, 256, 256]
    leftover = steps[5][1]
    assert phases(leftover) == [2 * DATA, 2 * H2D, 2 * FORWARD, 2 * BACKWARD, 0, 2 * TAIL]
    assert steps[6][1][0] - leftover[-1] == 5_000  # the gap between epochs is in no step


def test_training_without_accumulation_and_evaluation_keep_one_batch_a_step() -> None:
    loop = Loop()
    loop.epoch(iterator=1, batches=6, every=1)
    for _ in range(5):  # an evaluation loop: forward only
        loop.rec.next_called(2)
        loop.tick(DATA)
        loop.rec.next_returned(2, FakeTensor(64))
        loop.rec.forward_started()
        loop.tick(FORWARD)
        loop.rec.forward_returned()
    loop.rec.finish()
    assert [n for n, _ in loop.steps()] == [64] * 11
    assert loop.rec.bye_fields()["step_definition"] == "loader"
    assert not loop.rec.accumulating


def test_backward_without_any_optimizer_step_is_not_accumulation() -> None:
    loop = Loop()
    loop.epoch(iterator=1, batches=6, every=10**9)
    loop.rec.finish()
    assert [n for n, _ in loop.steps()] == [64] * 6
    fields = loop.rec.bye_fields()
    assert fields["optimizer_steps"] == 0 and fields["backward_passes"] == 6
