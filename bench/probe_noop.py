"""Cost of the probe API when no gpuwatch runner is attached (``python bench/probe_noop.py``).

Prints nanoseconds per call for ``with gw.step():``, ``with gw.phase(...)`` and ``gw.knob(...)``
next to an empty ``with`` of a null context, the floor any context manager costs.
"""

import contextlib
import time

import gpuwatch.probe as gw

N = 200_000


def per_call(body, n: int = N) -> float:
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter_ns()
        body(n)
        best = min(best, (time.perf_counter_ns() - start) / n)
    return best


def empty_with(n: int) -> None:
    null = contextlib.nullcontext()
    for _ in range(n):
        with null:
            pass


def step(n: int) -> None:
    for _ in range(n):
        with gw.step():
            pass


def phase(n: int) -> None:
    for _ in range(n):
        with gw.phase("forward"):
            pass


def knob(n: int) -> None:
    for _ in range(n):
        gw.knob("num_workers", default=0, choices=[0, 1, 2, 4])


def loop(n: int) -> None:
    for _ in range(n):
        pass


if __name__ == "__main__":
    assert not gw.active()
    floor = per_call(loop)
    for name, body in (
        ("empty with nullcontext", empty_with),
        ("with gw.step()", step),
        ("with gw.phase('forward')", phase),
        ("gw.knob(choices=...)", knob),
    ):
        print(f"{name:28s} {per_call(body) - floor:7.0f} ns/call")
