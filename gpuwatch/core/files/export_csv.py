"""A recording as CSV, one row per step (columns in docs/recording-format.md).

Times are milliseconds from the run's t0 (the timeline's zero), so a spreadsheet and the
window read the same numbers. A figure that does not exist (no device marks) is an empty
cell, never 0.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import TextIO

import numpy as np

from gpuwatch.core.figures.analysis import phase_durations
from gpuwatch.core.files.atomic_file import atomic_output
from gpuwatch.core.files.recording_reader import Recording
from gpuwatch.protocol import ACTIVE_FIRST, ACTIVE_LAST, ALL_PHASES

COLUMNS: tuple[str, ...] = (
    "step",
    "config",
    "config_label",
    "samples",
    "start_ms",
    *(f"{phase}_ms" for phase in ALL_PHASES),
    "step_ms",
    "device_active_start_ms",
    "device_active_end_ms",
    "transition",
)


def write_csv(recording: Recording, out: str | Path) -> None:
    """Write ``out`` whole or not at all (an existing file stays until the new one is done)."""
    with atomic_output(out) as f:
        write_csv_to(recording, f)


def write_csv_to(recording: Recording, stream: TextIO) -> None:
    """Write ``recording``'s CSV to an open text stream (``write_csv`` writes a file safely)."""
    view = recording.steps
    t0 = recording.t0_ns
    labels = {c.id: c.label for c in recording.configs}
    warm_until = {c.id: c.first_step + c.warmup_steps for c in recording.configs}
    durations = phase_durations(view) / 1e6
    step_ms = durations.sum(axis=1)
    writer = csv.writer(stream, lineterminator="\n")
    writer.writerow(COLUMNS)
    for i in range(len(view)):
        step, config = int(view.step[i]), int(view.config[i])
        device = ["", ""]
        if view.has_device[i]:
            device = [
                _ms(int(view.device[i, ACTIVE_FIRST]) - t0),
                _ms(int(view.device[i, ACTIVE_LAST]) - t0),
            ]
        writer.writerow(
            [
                step,
                config,
                labels.get(config, ""),
                int(view.samples[i]),
                _ms(int(view.host[i, 0]) - t0),
                *(_fmt(v) for v in durations[i]),
                _fmt(step_ms[i]),
                *device,
                int(step < warm_until.get(config, 0)),
            ]
        )


def _ms(ns: int) -> str:
    return _fmt(ns / 1e6)


def _fmt(ms: float | np.floating) -> str:
    """Milliseconds to the nanosecond, without float noise in the text."""
    return f"{float(ms):.6f}".rstrip("0").rstrip(".")
