"""Step-time breakdown that sums to the wall time (the old TensorBoard plugin's view).

Every nanosecond of the selected steps' wall time — each step from its start to the next
step's start (its loop overhead included), or to its own end when the next step is not the
next id — goes to exactly one category, by priority (device work first, as the plugin did):

* ``kernel``: the device runs our forward/backward/optimizer work (stream active outside
  the copy span; on CUDA an upper bound, as it may hide launch bubbles). On a CPU device
  this is the compute phases' host time: shown as "compute".
* ``memcpy``: the device's copy span (``h2d``), plus device idle while the host issues
  copies.
* ``data_loading``: the device idles while the host waits in ``next(loader)``.
* ``cpu_launch``: the device idles while the host runs forward/backward/optimizer code
  (launching work with nothing queued: launch-bound).
* ``sync``: the device idles while the host is in ``sync`` (``.item()``, logging).
* ``other``: the device idles during loop overhead or a knob change being applied, or its
  state is unknown (a step whose device marks never arrived).

Built on ``gap_causes.time_split``, so the idle part of this breakdown is exactly the
gap-cause split of the same steps.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuwatch.core.figures.gap_causes import (
    CAUSES,
    DEVICE_COPY,
    DEVICE_KERNEL,
    DEVICE_UNKNOWN,
    HOST_NONE,
    HOST_RECONFIGURE,
    N_HOST,
    TimeSplit,
    cause_of_host_state,
    time_split,
)
from gpuwatch.core.model.store import StepsView
from gpuwatch.protocol import ALL_PHASES

CATEGORIES: tuple[str, ...] = ("kernel", "memcpy", "data_loading", "cpu_launch", "sync", "other")
#: Words on screen; on a CPU "kernel" is the compute phases' time.
LABELS = {
    "kernel": "kernel",
    "memcpy": "memcpy",
    "data_loading": "data loading",
    "cpu_launch": "CPU/launch",
    "sync": "sync",
    "other": "other",
}
CPU_LABELS = {**LABELS, "kernel": "compute"}

#: Category of device-idle time per idle cause.
_CATEGORY_OF_CAUSE = {
    "input": "data_loading",
    "copy": "memcpy",
    "launch": "cpu_launch",
    "sync": "sync",
    "reconfigure": "other",
    "other": "other",
}


@dataclass(frozen=True)
class StepBreakdown:
    """Per-step means in ms over ``steps`` steps; the categories sum to ``wall_ms``."""

    steps: int
    wall_ms: float
    categories: dict[str, float]
    idle_causes: dict[str, float]
    host_phases: dict[str, float]

    @property
    def idle_ms(self) -> float:
        return sum(self.idle_causes.values())


def from_split(split: TimeSplit, steps: int) -> StepBreakdown:
    """The per-step breakdown of a ``gap_causes.TimeSplit`` covering ``steps`` steps."""
    scale = 1.0 / (steps * 1e6) if steps else 0.0
    idle_by_host = split.idle_by_host() * scale
    causes = dict.fromkeys(CAUSES, 0.0)
    for host_state, cause in enumerate(cause_of_host_state(np.arange(N_HOST))):
        if host_state != HOST_NONE:
            causes[CAUSES[cause]] += float(idle_by_host[host_state])
    device = split.device_ns * scale
    categories = dict.fromkeys(CATEGORIES, 0.0)
    categories["kernel"] = float(device[DEVICE_KERNEL])
    categories["memcpy"] = float(device[DEVICE_COPY])
    categories["other"] = float(device[DEVICE_UNKNOWN])
    for cause, ms in causes.items():
        categories[_CATEGORY_OF_CAUSE[cause]] += ms
    host = split.host_ns * scale
    phases = {name: float(host[i]) for i, name in enumerate(ALL_PHASES)}
    phases["other"] += float(host[HOST_RECONFIGURE])
    return StepBreakdown(
        steps=steps,
        wall_ms=split.wall_ns * scale,
        categories=categories,
        idle_causes=causes,
        host_phases=phases,
    )


def step_breakdown(
    view: StepsView, rows: np.ndarray | None = None, reconfiguring: np.ndarray | None = None
) -> StepBreakdown:
    """The breakdown over the selected steps of ``view`` (default: all of them)."""
    sel = np.ones(len(view), bool) if rows is None else np.asarray(rows, bool)
    return from_split(time_split(view, sel, reconfiguring), int(sel.sum()))


def summary(categories: dict[str, float], device_kind: str | None) -> str:
    """ "of 52.1 ms per step: 30.2 data loading, 20.0 compute, ..." (largest first)."""
    labels = CPU_LABELS if device_kind != "cuda" else LABELS
    parts = sorted(categories.items(), key=lambda kv: -kv[1])
    shown = ", ".join(f"{ms:.1f} {labels[name]}" for name, ms in parts if ms >= 0.05)
    total = sum(categories.values())
    return f"of {total:.1f} ms per step: {shown or 'nothing measured'}"


def idle_summary(idle_causes: dict[str, float]) -> str:
    """ "of 31.0 ms idle per step: 30.2 input, 0.8 sync" (largest first)."""
    total = sum(idle_causes.values())
    parts = sorted(idle_causes.items(), key=lambda kv: -kv[1])
    shown = ", ".join(f"{ms:.1f} {name}" for name, ms in parts if ms >= 0.05)
    return f"of {total:.1f} ms idle per step: {shown or 'none'}"
