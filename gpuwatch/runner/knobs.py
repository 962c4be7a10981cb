"""The knobs (docs/knobs.md §1–§2): their schema, validation of a ``set``, and the warm-up rule.

Pure data and rules, no torch: what a knob *is* lives here; probing whether it can work on this
device is ``availability``'s job and making it take effect is the loop's (``training_state``,
``batch_source``). A ``set`` is validated as a whole against the current values, so a single bad
value refuses it with one sentence and nothing half-applied.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

#: What a change of the knob rebuilds at the next step boundary, in the order ``rebuilt`` lists.
REBUILDS = ("loader", "model", "optimizer", "loop", "global")


@dataclass(frozen=True)
class KnobSpec:
    """One knob as the GUI sees it (the device-independent part of its schema entry)."""

    name: str
    label: str
    group: str
    type: str
    rebuilds: str
    help: str
    min: float | None = None
    max: float | None = None
    choices: tuple[str, ...] | None = None
    unit: str | None = None


#: Every knob, in display order.
KNOBS: tuple[KnobSpec, ...] = (
    KnobSpec(
        "num_workers",
        "DataLoader workers",
        "loader",
        "int",
        "loader",
        "decode and augment in worker processes, in parallel with training "
        "(same samples, same weights)",
        0,
        16,
    ),
    KnobSpec(
        "pin_memory",
        "Pinned memory",
        "loader",
        "bool",
        "loader",
        "collate batches into page-locked memory so host-to-device copies are faster "
        "(same weights)",
    ),
    KnobSpec(
        "persistent_workers",
        "Persistent workers",
        "loader",
        "bool",
        "loader",
        "keep the workers alive between epochs instead of restarting them "
        "(only matters with workers; same weights)",
    ),
    KnobSpec(
        "prefetch_factor",
        "Prefetch per worker",
        "loader",
        "int",
        "loader",
        "batches each worker prepares ahead (only matters with workers; same weights)",
        1,
        16,
    ),
    KnobSpec(
        "batch_size",
        "Batch size",
        "loader",
        "int",
        "loader",
        "samples per step: larger batches amortize per-step overhead; changes the weights "
        "(each step averages over other samples)",
        1,
        4096,
    ),
    KnobSpec(
        "non_blocking",
        "Non-blocking copies",
        "copies",
        "bool",
        "loop",
        "let host-to-device copies of pinned batches overlap with compute (same weights)",
    ),
    KnobSpec(
        "amp",
        "Mixed precision",
        "precision",
        "choice",
        "loop",
        "run the forward pass in 16-bit floats (fp16 adds a GradScaler); changes the "
        "weights: 16-bit results round far more coarsely than float32",
        choices=("off", "fp16", "bf16"),
    ),
    KnobSpec(
        "tf32",
        "TF32 matmuls",
        "precision",
        "bool",
        "global",
        "let float32 matmuls and convolutions use TF32 tensor cores; changes the weights: "
        "TF32 multiplies with a 10-bit mantissa",
    ),
    KnobSpec(
        "channels_last",
        "channels_last",
        "layout",
        "bool",
        "model",
        "store images and conv weights as NHWC, the layout fast conv kernels want "
        "(same weights up to float rounding)",
    ),
    KnobSpec(
        "cudnn_benchmark",
        "cuDNN benchmark",
        "kernels",
        "bool",
        "global",
        "time the cuDNN convolution algorithms once per shape and keep the fastest "
        "(same weights up to float rounding)",
    ),
    KnobSpec(
        "compile",
        "torch.compile",
        "kernels",
        "choice",
        "model",
        "compile the model into fused kernels (the first steps pay the compilation); "
        "changes the weights slightly: fused kernels round differently",
        choices=("off", "default", "reduce-overhead", "max-autotune"),
    ),
    KnobSpec(
        "log_every",
        "Read the loss every",
        "loop",
        "int",
        "loop",
        "steps between .item() calls: each one waits for the device to finish (same weights)",
        1,
        1000,
        unit="steps",
    ),
    KnobSpec(
        "zero_grad_set_to_none",
        "zero_grad(set_to_none)",
        "loop",
        "bool",
        "loop",
        "drop the gradients instead of writing zeros into them (same weights: every "
        "parameter of these models gets a gradient each step)",
    ),
    KnobSpec(
        "optimizer_impl",
        "Optimizer implementation",
        "loop",
        "choice",
        "optimizer",
        "one kernel per parameter, one per group of tensors, or a single fused kernel "
        "(same weights up to float rounding)",
        choices=("for-loop", "foreach", "fused"),
    ),
    KnobSpec(
        "storage_latency_ms",
        "Storage latency",
        "demo",
        "float",
        "loader",
        "sleep per sample in the Dataset, like reading from a slow disk (same samples, "
        "same weights)",
        0,
        200,
        unit="ms",
    ),
    KnobSpec(
        "augment_cost",
        "Augmentation cost",
        "demo",
        "int",
        "loader",
        "extra CPU work per sample (~0.5 ms each), like a heavy augmentation "
        "(same samples, same weights)",
        0,
        20,
    ),
)
KNOB_NAMES: tuple[str, ...] = tuple(spec.name for spec in KNOBS)
#: Knobs that change what a step computes, not only how: their help says so. Every other knob
#: leaves the weights those of a run that never changed it, up to float rounding
#: (docs/knobs.md §1, tests/test_knobs_neutral.py).
CHANGES_THE_WEIGHTS: frozenset[str] = frozenset({"batch_size", "amp", "tf32", "compile"})
SPECS: dict[str, KnobSpec] = {spec.name: spec for spec in KNOBS}

#: The naive baseline every workload starts from; a workload overrides ``batch_size``.
NAIVE_DEFAULTS: dict[str, Any] = {
    "num_workers": 0,
    "pin_memory": False,
    "persistent_workers": False,
    "prefetch_factor": 2,
    "batch_size": 32,
    "non_blocking": False,
    "amp": "off",
    "tf32": False,
    "channels_last": False,
    "cudnn_benchmark": False,
    "compile": "off",
    "log_every": 1,
    "zero_grad_set_to_none": False,
    "optimizer_impl": "for-loop",
    "storage_latency_ms": 0.0,
    "augment_cost": 0,
}


class KnobError(ValueError):
    """A ``set`` that cannot be applied; the text is the one sentence the user sees."""


@dataclass(frozen=True)
class Availability:
    """What cannot work here: a whole knob (name → reason) or single choices of one; and the
    choices that work but were measured slower here (offered, with the reason)."""

    disabled: dict[str, str] = field(default_factory=dict)
    disabled_choices: dict[str, dict[str, str]] = field(default_factory=dict)
    slow_choices: dict[str, dict[str, str]] = field(default_factory=dict)


class KnobSchema:
    """The knobs of one run: the specs with this workload's defaults and limits and this
    device's availability. Sent in ``hello`` and used to validate every ``set``."""

    def __init__(
        self,
        defaults: Mapping[str, Any],
        availability: Availability,
        limits: Mapping[str, tuple[float, float]] | None = None,
    ) -> None:
        missing = set(KNOB_NAMES) - set(defaults)
        if missing:
            raise ValueError(f"no default for knob(s) {sorted(missing)}")
        self.defaults = {name: defaults[name] for name in KNOB_NAMES}
        self.availability = availability
        self._limits = {spec.name: (spec.min, spec.max) for spec in KNOBS}
        self._limits.update(limits or {})

    def limits(self, name: str) -> tuple[float | None, float | None]:
        return self._limits[name]

    def as_hello(self) -> list[dict[str, Any]]:
        """``hello.knobs``: the schema list in display order (docs/knobs.md §2)."""
        entries = []
        for spec in KNOBS:
            low, high = self._limits[spec.name]
            reason = self.availability.disabled.get(spec.name)
            entries.append(
                {
                    "name": spec.name,
                    "label": spec.label,
                    "group": spec.group,
                    "type": spec.type,
                    "default": self.defaults[spec.name],
                    "min": low,
                    "max": high,
                    "choices": list(spec.choices) if spec.choices is not None else None,
                    "unit": spec.unit,
                    "enabled": reason is None,
                    "reason": reason,
                    "disabled_choices": dict(self.availability.disabled_choices.get(spec.name, {})),
                    "slow_choices": dict(self.availability.slow_choices.get(spec.name, {})),
                    "rebuilds": spec.rebuilds,
                    "help": spec.help,
                }
            )
        return entries

    def validate(self, values: Any, current: Mapping[str, Any]) -> dict[str, Any]:
        """The clean values of a ``set`` (all of them), or ``KnobError`` for the first bad one.

        A disabled knob or choice may still be "set" to its current value (a no-op), so a GUI
        may send a whole configuration back.
        """
        if not isinstance(values, Mapping):
            raise KnobError("a set must carry an object of knob values")
        clean: dict[str, Any] = {}
        for name, value in values.items():
            if name not in SPECS:
                raise KnobError(f"unknown knob {name!r}; the knobs are: {', '.join(KNOB_NAMES)}")
            clean[name] = self._check(SPECS[name], value)
            if clean[name] == current[name]:
                continue
            reason = self.availability.disabled.get(name)
            if reason is not None:
                raise KnobError(f"{name} cannot be changed here: {reason}")
            choice_reason = self.availability.disabled_choices.get(name, {}).get(clean[name])
            if choice_reason is not None:
                raise KnobError(f"{name}={clean[name]} is not available here: {choice_reason}")
        return clean

    def _check(self, spec: KnobSpec, value: Any) -> Any:
        low, high = self._limits[spec.name]
        if spec.type == "bool":
            if not isinstance(value, bool):
                raise KnobError(f"{spec.name} must be true or false, got {value!r}")
            return value
        if spec.type == "choice":
            assert spec.choices is not None
            if not isinstance(value, str) or value not in spec.choices:
                raise KnobError(
                    f"{spec.name} must be one of {', '.join(spec.choices)}, got {value!r}"
                )
            return value
        number = _number(value, integer=spec.type == "int")
        if (
            number is None
            or (low is not None and number < low)
            or (high is not None and number > high)
        ):
            kind = "an integer" if spec.type == "int" else "a number"
            raise KnobError(
                f"{spec.name} must be {kind} from {_plain(low)} to {_plain(high)}, got {value!r}"
            )
        return number


def _number(value: Any, *, integer: bool) -> int | float | None:
    """``value`` as an int (integral numbers only) or a finite float; None if it is neither."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not math.isfinite(value):
        return None
    if integer:
        return int(value) if float(value).is_integer() else None
    return float(value)


def _plain(limit: float | None) -> str:
    return "any" if limit is None else f"{limit:g}"


def rebuilt(changed: Iterable[str]) -> list[str]:
    """What a change rebuilds (``config.rebuilt``), in ``REBUILDS`` order."""
    parts = {SPECS[name].rebuilds for name in changed}
    return [part for part in REBUILDS if part in parts]


#: Knobs whose first steps after a change are slower while kernels or formats settle (compile
#: too, when it turns on: reduce-overhead records CUDA graphs over its first calls).
_SETTLING = frozenset({"amp", "channels_last", "cudnn_benchmark", "tf32"})


def loader_warmup(values: Mapping[str, Any]) -> int:
    """The first batch waits for worker start-up, then prefetched batches come out faster."""
    return 2 + int(values["num_workers"]) * int(values["prefetch_factor"])


def warmup_steps(changed: Mapping[str, Any], values: Mapping[str, Any]) -> int:
    """How many steps from ``first_step`` on are a transition (docs/knobs.md §2, warm-up rule)."""
    counts = [1]
    for name in changed:
        if SPECS[name].rebuilds == "loader":
            counts.append(loader_warmup(values))
        elif name in _SETTLING or (name == "compile" and values["compile"] != "off"):
            counts.append(3)
        elif name == "log_every":
            counts.append(int(values["log_every"]))
    return max(counts)


def initial_warmup(values: Mapping[str, Any]) -> int:
    """Config 0: the loader starts from scratch and the first steps warm everything up."""
    return loader_warmup(values) + 3
