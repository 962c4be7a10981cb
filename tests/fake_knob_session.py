"""A stand-in for the Session's knob API (docs/knobs.md), driven by the test as the runner.

It implements only what the knob panel, scoreboard, markers and tour use: ``knobs``,
``config_values()``, ``config_changes()``, ``set_knobs()``, ``answer()``, ``last_refusal``,
``scoreboard()``, ``label_segment()``, ``baseline_id``, ``state`` and ``hello``. The test
plays the runner with ``apply()`` / ``refuse()`` and sets ``rows`` for the scoreboard.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from gpuwatch.core.figures.segments import SegmentStats
from gpuwatch.core.model.messages import ConfigChange, Hello, Refusal, describe_change
from gpuwatch.core.run.session import SessionError, SessionState

MS = 1_000_000
S = 1_000_000_000
T0 = 10 * S


def knob(name: str, kind: str, group: str, default: Any, **extra: Any) -> dict[str, Any]:
    spec = {
        "name": name,
        "label": extra.pop("label", name.replace("_", " ")),
        "group": group,
        "type": kind,
        "default": default,
        "min": None,
        "max": None,
        "choices": None,
        "unit": None,
        "enabled": True,
        "reason": None,
        "disabled_choices": {},
        "rebuilds": "loader",
        "help": f"what {name} does",
    }
    spec.update(extra)
    return spec


KNOBS: list[dict[str, Any]] = [
    knob("num_workers", "int", "loader", 0, min=0, max=16, label="DataLoader workers"),
    knob("pin_memory", "bool", "loader", False, enabled=False, reason="needs CUDA"),
    knob("persistent_workers", "bool", "loader", False),
    knob("prefetch_factor", "int", "loader", 2, min=1, max=16),
    knob(
        "non_blocking", "bool", "copies", False, enabled=False, reason="needs CUDA", rebuilds="loop"
    ),
    knob("log_every", "int", "loop", 1, min=1, max=1000, rebuilds="loop"),
    knob(
        "amp",
        "choice",
        "precision",
        "off",
        choices=["off", "fp16", "bf16"],
        disabled_choices={"fp16": "needs CUDA"},
        rebuilds="loop",
    ),
    knob("channels_last", "bool", "layout", False, rebuilds="model"),
    knob(
        "compile",
        "choice",
        "kernels",
        "off",
        choices=["off", "default", "reduce-overhead", "max-autotune"],
        rebuilds="model",
    ),
    knob("storage_latency_ms", "float", "demo", 0.0, min=0.0, max=200.0, unit="ms"),
]


def hello_for(knobs: list[dict[str, Any]], workload: str = "vision") -> dict[str, Any]:
    values = {k["name"]: k["default"] for k in knobs}
    return {
        "workload": workload,
        "device": {"kind": "cpu", "name": "fake CPU", "cores": 2},
        "knobs": knobs,
        "config": {"id": 0, "values": values},
    }


class FakeSession:
    """The knob half of a Session; ``state`` and ``hello`` are plain attributes."""

    def __init__(
        self, knobs: list[dict[str, Any]] | None = KNOBS, state: SessionState = SessionState.RUNNING
    ) -> None:
        self.state = state
        self.hello: Hello | None = None
        self.error: str | None = None
        self.bye_reason: str | None = None
        self.stopped = False
        self.sent: list[tuple[int, dict[str, Any], str | None]] = []
        self.rows: list[SegmentStats] = []
        self.baseline_id: int | None = None
        self.last_refusal: Refusal | None = None
        self._answers: dict[int, ConfigChange | Refusal] = {}
        self._changes: list[ConfigChange] = []
        if knobs is not None:
            self.new_run(knobs)

    def new_run(self, knobs: list[dict[str, Any]], workload: str = "vision") -> None:
        """A new run's hello arrives (e.g. the workload was switched)."""
        self.hello = Hello.from_message(hello_for(knobs, workload))
        self._changes = [
            ConfigChange(0, dict(self.hello.config_values), {}, T0, 0, 3, label="baseline")
        ]
        self._answers.clear()
        self.sent.clear()
        self.rows = []
        self.baseline_id = None
        self.last_refusal = None

    # ---- The Session API --------------------------------------------------------------

    @property
    def knobs(self) -> list[dict[str, Any]]:
        return [k.to_message() for k in self.hello.knobs] if self.hello else []

    def config_values(self) -> dict[str, Any]:
        return dict(self._changes[-1].values) if self._changes else {}

    def config_changes(self) -> list[ConfigChange]:
        return list(self._changes)

    def set_knobs(self, values: dict[str, Any], *, label: str | None = None) -> int | None:
        current = self.config_values()
        wanted = {
            k: v
            for k, v in values.items()
            if k not in current or current[k] != v or type(current[k]) is not type(v)
        }
        if not wanted:
            return None
        if self.state is not SessionState.RUNNING:
            raise SessionError("no training run is connected: start one first")
        request = len(self.sent) + 1
        self.sent.append((request, wanted, label))
        return request

    def answer(self, request: int) -> ConfigChange | Refusal | None:
        return self._answers.get(request)

    def label_segment(self, config_id: int, label: str) -> None:
        self._changes = [
            dataclasses.replace(c, label=label) if c.id == config_id else c for c in self._changes
        ]

    def scoreboard(self) -> list[SegmentStats]:
        return list(self.rows)

    def stop(self) -> None:
        self.stopped = True

    # ---- The runner's side, played by the test ---------------------------------------

    def apply(
        self, request: int, *, rebuilt: tuple[str, ...] = ("loader",), t_ns: int | None = None
    ) -> ConfigChange:
        _, values, label = next(s for s in self.sent if s[0] == request)
        previous = self._changes[-1]
        change = ConfigChange(
            id=previous.id + 1,
            values={**previous.values, **values},
            changed=dict(values),
            t_ns=t_ns if t_ns is not None else previous.t_ns + 20 * S,
            first_step=100 * (previous.id + 1),
            warmup_steps=4,
            apply_s=0.004,
            rebuilt=rebuilt,
            request=request,
            label=label or describe_change(values),
        )
        self._changes.append(change)
        self._answers[request] = change
        return change

    def refuse(self, request: int, message: str) -> Refusal:
        _, values, _ = next(s for s in self.sent if s[0] == request)
        refusal = Refusal(request, dict(values), message, T0 + 5 * S)
        self._answers[request] = refusal
        self.last_refusal = refusal
        return refusal


def row(
    config_id: int,
    label: str,
    *,
    live: bool = False,
    steady: bool = True,
    transition_s: float | None = 1.0,
    t_ns: int | None = None,
    **figures: Any,
) -> SegmentStats:
    """A scoreboard row; figures default to plausible steady values (None if not steady)."""
    t = T0 + config_id * 20 * S if t_ns is None else t_ns
    base: dict[str, Any] = dict(
        samples_per_s=360.0,
        step_ms_p50=85.2,
        step_ms_p95=97.0,
        busy_share=0.43,
        input_wait_share=0.52,
        coarse_util=0.49,
        coarse_source="proc.cpu",
        energy_j_per_step=None,
        speedup=1.0,
        window_rates=(360.0, 361.0, 359.0),
        steady_since_ns=t + int((transition_s or 0) * S),
        steady_until_ns=t + 15 * S,
    )
    if not steady:
        base.update(
            samples_per_s=None,
            step_ms_p50=None,
            step_ms_p95=None,
            busy_share=None,
            input_wait_share=None,
            coarse_util=None,
            speedup=None,
            window_rates=(),
            steady_since_ns=None,
            steady_until_ns=None,
        )
    changed = figures.pop("changed", {})
    base.update(figures)
    return SegmentStats(
        config_id=config_id,
        label=label,
        settings={},
        changed=changed,
        t_ns=t,
        steps=200,
        steady_steps=190 if steady else 2,
        live=live,
        transition_s=transition_s,
        **base,
    )
