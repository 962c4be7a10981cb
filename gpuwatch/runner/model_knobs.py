"""Zero-code model knobs for a watched script: ``amp`` (bf16 autocast) and ``channels_last``.

The step hooks report each module whose forward is an outermost one (``autohooks``); one with
parameters is taken as a model of the script (a loss module without parameters is not). The
first model seen announces the knobs, with the built-in knobs' names, so the advisor's
suggestions reach them. Until one is changed nothing is attached to any module.

* ``amp = bf16``: the model's outermost forward runs under ``torch.autocast(device,
  dtype=torch.bfloat16)`` (entered by a forward pre-hook, left by a forward hook that always
  runs), and its floating outputs come back as float32, so the loss computed from them is
  computed in float32, as autocast itself does for losses. A forward the script already runs
  under its own autocast is left alone (the script owns its precision). bf16 is checked on the
  device as for the built-in knob: a bf16 that works but is emulated (slower than float32) is
  offered with that reason in ``slow_choices``.
* ``amp = fp16``: the same autocast in float16, with a GradScaler inserted around the script's
  backward() and optimizer.step() (``grad_scaling``) where that is safe: one optimizer, one
  backward per step, no GradScaler of the script's own. Until then, or where it is not, fp16 is
  offered as unavailable with the reason (``knobs`` messages follow what the hooks see); off
  CUDA it "needs CUDA", as for the built-in knob (the mechanism itself works on any device that
  has fp16 autocast and a GradScaler).
* ``channels_last = on``: the models' 4-D parameters are restrided to channels_last
  (``Module.to(memory_format=...)``, gradients included), and so is the per-element state of
  every optimizer seen stepping (``exp_avg``, ``momentum_buffer``...: a fused optimizer walks a
  parameter and its state as flat memory, docs/knobs.md §1); a forward pre-hook gives the model
  its 4-D tensor inputs in channels_last; off restores the contiguous layout (state included)
  and removes the hook. Offered only for a model with 2-D convolutions.

Both change at a step boundary (``rebuilds: "model"``, 3 warm-up steps) and revert cleanly.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Mapping
from typing import Any

from gpuwatch.runner.availability import NEEDS_CUDA, Bf16Check, check_bf16
from gpuwatch.runner.grad_scaling import GradScaling
from gpuwatch.runner.knobs import SPECS
from gpuwatch.runner.probe_knobs import ProbeKnobs
from gpuwatch.runner.seen_modules import SeenModules
from gpuwatch.runner.training_state import state_follows_parameters

MODEL_WARMUP_STEPS = 3
NO_CONVOLUTIONS = "needs a model with 2-D convolutions (4-D image inputs)"


class ModelKnobs:
    """``amp`` and ``channels_last`` as a ``ProbeKnobs`` owner (``KnobOwner``)."""

    rebuilds = "model"

    def __init__(
        self, torch: Any, knobs: ProbeKnobs, *, device: Any, fp16_needs_cuda: bool = True
    ) -> None:
        self.torch = torch
        self.knobs = knobs
        self.device = device
        self.names = {"amp": "amp", "channels_last": "channels_last"}
        self.models: weakref.WeakSet[Any] = weakref.WeakSet()
        #: Every outermost module examined (a model, or a loss without parameters): each once.
        self._known: SeenModules[bool] = SeenModules()
        self.amp = "off"
        self.channels_last = False
        self.announced = False
        self._amp_hooks: list[Any] = []
        self._layout_hooks: list[Any] = []
        self._active: tuple[Any, Any] | None = None  # (module, its autocast) inside a forward
        self._failed = False
        self._bf16: Bf16Check | None = None  # probed once, when the knobs are first listed
        #: The availability rule of the built-in knob; False lets a test run fp16 on a CPU.
        self.fp16_needs_cuda = fp16_needs_cuda
        #: Watches backward/optimizer steps; the GradScaler of ``amp = fp16``.
        self.scaling = GradScaling(torch, device.type, on_change=self._scaling_changed)
        self._amp_off_shown: dict[str, str] = {}  # the amp choices the panel shows disabled

    # --- the models -----------------------------------------------------------------------

    def saw_outermost(self, module: Any) -> None:
        """An outermost forward starts (step hooks); never raises into the script."""
        if self._failed or self._known.get(module, False):
            return
        try:
            if next(iter(module.parameters()), None) is None:
                self._known.add(module, True)
                return  # a loss or another stateless module
            convolutions_before = self._has_convolutions()
            self.models.add(module)
            self._known.add(module, True)
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

    def _amp_disabled(self) -> dict[str, str]:
        """The ``amp`` choices not available now, with their reasons."""
        if self._bf16 is None:
            self._bf16 = check_bf16(self.torch, self.device)
        out = {}
        if self.fp16_needs_cuda and self.device.type != "cuda":
            out["fp16"] = NEEDS_CUDA
        elif self.scaling.problem is not None:
            out["fp16"] = self.scaling.problem
        if self._bf16.problem is not None:
            out["bf16"] = self._bf16.problem
        return out

    def _scaling_changed(self) -> None:
        """What the hooks saw made fp16 available or ruled it out (never raises)."""
        if not self.announced:
            return
        try:
            if self.amp == "fp16" and self.scaling.problem is not None:
                self._set_amp("off")
                self.knobs.link.log(
                    "warning",
                    f"fp16 is off from here on (the model runs in float32): {self.scaling.problem}",
                )
            else:
                disabled = self._amp_disabled()
                if disabled == self._amp_off_shown:
                    return  # e.g. fp16 "needs CUDA" whatever the hooks see
            self._amp_off_shown = self._amp_disabled()
            self.knobs.update_entry(
                self.names["amp"], value=self.amp, disabled_choices=self._amp_off_shown
            )
        except Exception as exc:
            with contextlib.suppress(Exception):
                self.knobs.link.log("warning", f"the fp16 knob could not be updated: {exc}")

    def entries(self) -> list[dict[str, Any]]:
        amp_off = self._amp_off_shown = self._amp_disabled()
        bf16 = self._bf16
        assert bf16 is not None
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
                "in float32; fp16 adds a GradScaler around its backward() and step())",
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
        with contextlib.suppress(Exception):
            self.scaling.stop()

    # --- amp ------------------------------------------------------------------------------

    def _set_amp(self, value: str) -> None:
        if value == self.amp:
            return
        if value == "fp16":
            self.scaling.start()  # raises, changing nothing, where it cannot be inserted
        elif self.amp == "fp16":
            self.scaling.stop()
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
        self._state_follows_parameters()

    def _state_follows_parameters(self) -> None:
        """The optimizers' per-element state in its parameter's layout again."""
        for optimizer in list(self.scaling.optimizers):
            state_follows_parameters(optimizer)

    def _to_channels_last(self, module: Any) -> None:
        torch = self.torch
        layout = torch.channels_last
        module.to(memory_format=layout)
        self._state_follows_parameters()

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
