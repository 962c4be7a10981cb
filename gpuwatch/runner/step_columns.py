"""Step timing waiting to be sent: the columns of the ``steps`` and ``device_marks`` messages.

Shared by the built-in loop and a watched script (``step_recorder``): both append one row per
step and hand the lists to the link about every ``protocol.BATCH_INTERVAL_S``.
"""

from __future__ import annotations

from typing import Any, Protocol


class BatchLink(Protocol):
    """The part of ``gpuwatch.runner.link.Link`` that sends step batches (never waits)."""

    def send_batch(self, kind: str, **fields: Any) -> None: ...


class StepColumns:
    """Columnar buffers of the ``steps`` and ``device_marks`` messages not yet sent."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self.step: list[int] = []
        self.config: list[int] = []
        self.samples: list[int] = []
        self.host: list[list[int]] = []
        self.device_step: list[int] = []
        self.device: list[list[int]] = []

    def add_step(self, step_id: int, config_id: int, samples: int, host: list[int]) -> None:
        self.step.append(step_id)
        self.config.append(config_id)
        self.samples.append(samples)
        self.host.append(host)

    def add_device(self, step_id: int, marks: list[int]) -> None:
        self.device_step.append(step_id)
        self.device.append(marks)

    def __len__(self) -> int:
        return max(len(self.step), len(self.device_step))

    def send(self, link: BatchLink) -> None:
        """Hand the buffered columns to the link and start new lists (never mutate sent ones)."""
        if self.step:
            link.send_batch("steps", step=self.step, config=self.config,
                            samples=self.samples, host=self.host)
        if self.device_step:
            link.send_batch("device_marks", step=self.device_step, device=self.device)
        self._reset()
