"""Zero-code model knobs for a watched script: ``amp`` (bf16 autocast) and ``channels_last``.

The step hooks report each module whose forward is an outermost one (``autohooks``); one with
parameters is taken as a model of the script (a loss module without parameters is not). The
first model seen announces the knobs, with the built-in knobs' names, so the advisor's
suggestions reach them. Until one is changed nothing is attached to any module.

* ``amp = bf16``: the model's outermost forward runs under ``torch.autocast(device,
  dtype=torch.bfloat16)`` (entered by a forward pre-hook, left by a forward hook that always
  runs), and its floating outputs come back as float32, so the loss computed from them is
  computed in float32, as autocast itself does for losses. A forward the script already runs
  under its own autocast is left alone (the script owns its precision). ``fp16`` would need a
  GradScaler around the script's own ``backward()`` and ``optimizer.step()``, which cannot be
  inserted safely from outside (the script may clip, accumulate or step several optimizers), so
  it is offered as unavailable with that reason (and "needs CUDA" off CUDA). bf16 is checked on
  the device as for the built-in knob: a bf16 that works but is emulated (slower than float32)
  is offered with that reason in ``slow_choices``.
* ``channels_last = on``: the models' 4-D parameters are restrided to channels_last
  (``Module.to(memory_format=...)``, gradients included) and a forward pre-hook gives the model
  its 4-D tensor inputs in channels_last; off restores the contiguous layout and removes the
  hook. Offered only for a model with 2-D convolutions. The optimizer's per-element state keeps
  its layout (elementwise updates do not care; a fused optimizer walking flat memory would, as
  docs/knobs.md §1 explains for the built-in knob).

Both change at a step boundary (``rebuilds: "model"``, 3 warm-up steps) and revert cleanly.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Mapping
from typing import Any

from gpuwatch.runner.availability import NEEDS_CUDA, Bf16Check, check_bf16
from gpuwatch.runner.knobs import SPECS
from gpuwatch.runner.probe_knobs import ProbeKnobs

MODEL_WARMUP_STEPS = 3
NO_SCALER = (
    "needs a GradScaler around the script's backward() and optimizer.step(): "
    "gpuwatch cannot insert one safely"
)
NO_CONVOLUTIONS = "needs a model with 2-D convolutions (4-D image inputs)"


class ModelKnobs:
    """``amp`` and ``channels_last`` as a ``ProbeKnobs`` owner (``KnobOwner``)."""

    rebuilds = "model"

    def __init__(self, torch: Any, knobs: ProbeKnobs, *, device: Any) -> None:
        self.torch = torch
        self.knobs = knobs
        self.device = device
        self.names = {"amp": "amp", "channels_last": "channels_last"}
        self.models: weakref.WeakSet[Any] = weakref.WeakSet()
        #: Outermost modules seen without parameters (a loss): asked once, not every step.
        self._stateless: weakref.WeakSet[Any] = weakref.WeakSet()
        self.amp = "off"
        self.channels_last = False
        self.announced = False
        self._amp_hooks: list[Any] = []
        self._layout_hooks: list[Any] = []
        self._active: tuple[Any, Any] | None = None  # (module, its autocast) inside a forward
        self._failed = False
        self._bf16: Bf16Check | None = None  # probed once, when the knobs are first listed

    # --- the models -----------------------------------------------------------------------

    def saw_outermost(self, module: Any) -> None:
        """An outermost forward starts (step hooks); never raises into the script."""
        if self._failed or module in self.models or module in self._stateless:
            return
        try:
            if next(iter(module.parameters()), None) is None:
                self._stateless.add(module)
                return  # a loss or another stateless module
            convolutions_before = self._has_convolutions()
            self.models.add(module)
            if self.amp != "off":
                self._hook_amp(module)
            if self.channels_last:
                self._to_channels_last(module)
            if not self.announced:
                self.announced = True
                self.knobs.add_knobs(self.entries(), self)
            elif not convolutions_before and self._has_convolutions():
                self.knobs.update_entry(
                    self.names["channels_last"],
                    enabled=True,
                    reason=None,
                    value=self.channels_last,
                )
        except Exception as exc:
            self._failed = True
            with contextlib.suppress(Exception):
                self.knobs.link.log("warning", f"the model knobs are off: {exc}")

    def _has_convolutions(self) -> bool:
        conv = self.torch.nn.Conv2d
        return any(isinstance(m, conv) for model in self.models for m in model.modules())

    def entries(self) -> list[dict[str, Any]]:
        torch, device = self.torch, self.device
        amp_off = {"fp16": NEEDS_CUDA if device.type != "cuda" else NO_SCALER}
        if self._bf16 is None:
            self._bf16 = check_bf16(torch, device)
        bf16 = self._bf16
        if bf16.problem is not None:
            amp_off["bf16"] = bf16.problem
        layout = None if self._has_convolutions() else NO_CONVOLUTIONS
        amp, layout_spec = SPECS["amp"], SPECS["channels_last"]
        return [
            {
                "name": self.names["amp"],
                "label": amp.label,
                "group": amp.group,
                "type": "choice",
                "default": "off",
                "min": None,
                "max": None,
                "choices": list(amp.choices or ()),
                "unit": None,
                "enabled": True,
                "reason": None,
                "disabled_choices": amp_off,
                "slow_choices": {"bf16": bf16.slow} if bf16.slow is not None else {},
                "rebuilds": "model",
                "help": f"{amp.help} (autocast around the script's model; its outputs go on "
                "in float32)",
            },
            {
                "name": self.names["channels_last"],
                "label": layout_spec.label,
                "group": layout_spec.group,
                "type": "bool",
                "default": False,
                "min": None,
                "max": None,
                "choices": None,
                "unit": None,
                "enabled": layout is None,
                "reason": layout,
                "disabled_choices": {},
                "rebuilds": "model",
                "help": layout_spec.help,
            },
        ]

    # --- KnobOwner ------------------------------------------------------------------------

    def apply(self, changed: Mapping[str, Any]) -> str | None:
        knob_of = {name: knob for knob, name in self.names.items()}
        wanted = {knob_of[name]: value for name, value in changed.items()}
        before = (self.amp, self.channels_last)
        try:
            if "amp" in wanted:
                self._set_amp(wanted["amp"])
            if "channels_last" in wanted:
                self._set_channels_last(bool(wanted["channels_last"]))
        except BaseException:
            with contextlib.suppress(Exception):
                self._set_amp(before[0])
                self._set_channels_last(before[1])
            raise
        return None

    def warmup_steps(self) -> int:
        return MODEL_WARMUP_STEPS

    def rename(self, name: str) -> str:
        knob = next(k for k, n in self.names.items() if n == name)
        self.names[knob] = f"{knob}@model"
        return self.names[knob]

    def remove(self) -> None:
        """The script ended: take our hooks off its modules (their layout stays as it is)."""
        for handle in self._amp_hooks + self._layout_hooks:
            with contextlib.suppress(Exception):
                handle.remove()
        self._amp_hooks, self._layout_hooks = [], []

    # --- amp ------------------------------------------------------------------------------

    def _set_amp(self, value: str) -> None:
        if value == self.amp:
            return
        for handle in self._amp_hooks:
            handle.remove()
        self._amp_hooks = []
        self.amp = value
        if value != "off":
            for model in list(self.models):
                self._hook_amp(model)

    def _hook_amp(self, module: Any) -> None:
        torch, kind = self.torch, self.device.type
        dtype = torch.bfloat16 if self.amp == "bf16" else torch.float16

        def enter(module: Any, args: Any) -> None:
            if self._active is not None or torch.is_autocast_enabled(kind):
                return  # a nested call, or the script's own autocast
            autocast = torch.autocast(kind, dtype=dtype)
            autocast.__enter__()
            self._active = (module, autocast)

        def leave(module: Any, args: Any, output: Any) -> Any:
            active = self._active
            if active is None or active[0] is not module:
                return None
            self._active = None
            active[1].__exit__(None, None, None)
            return _float32(torch, output)

        self._amp_hooks += [
            module.register_forward_pre_hook(enter),
            module.register_forward_hook(leave, always_call=True),
        ]

    # --- channels_last --------------------------------------------------------------------

    def _set_channels_last(self, on: bool) -> None:
        if on == self.channels_last:
            return
        self.channels_last = on
        if on:
            for model in list(self.models):
                self._to_channels_last(model)
            return
        for handle in self._layout_hooks:
            handle.remove()
        self._layout_hooks = []
        for model in list(self.models):
            model.to(memory_format=self.torch.contiguous_format)

    def _to_channels_last(self, module: Any) -> None:
        torch = self.torch
        layout = torch.channels_last
        module.to(memory_format=layout)

        def inputs(module: Any, args: Any) -> Any:
            return tuple(
                arg.contiguous(memory_format=layout)
                if isinstance(arg, torch.Tensor) and arg.dim() == 4
                else arg
                for arg in args
            )

        self._layout_hooks.append(module.register_forward_pre_hook(inputs))


def _float32(torch: Any, output: Any) -> Any:
    """``output`` with its 16-bit floating tensors as float32 (tensors, tuples, lists, dicts)."""
    if isinstance(output, torch.Tensor):
        return output.float() if output.dtype in (torch.bfloat16, torch.float16) else output
    if isinstance(output, tuple) and not hasattr(output, "_fields"):
        return tuple(_float32(torch, item) for item in output)
    if isinstance(output, list):
        return [_float32(torch, item) for item in output]
    if isinstance(output, dict):
        return {key: _float32(torch, item) for key, item in output.items()}
    return output
