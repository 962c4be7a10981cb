"""How one step computes under the current knobs: model (maybe compiled), layout, precision,
optimizer, and the backend flags.

``apply`` makes a set of changed knobs take effect between two steps; the loop then calls
``to_device``, ``loss``, ``backward`` and ``optimizer_step`` at its phase boundaries. Nothing
here reads a device value back: the only host syncs of a step stay the loop's ``log_every`` and,
with fp16, the GradScaler's own inf check (inherent to loss scaling, as in every fp16 recipe).

* ``compile``: ``torch.compile`` is lazy, so applying it costs only the wrapper (the first
  call also imports dynamo/inductor, a couple of seconds); the first step under a *newly*
  compiled mode pays the compilation and ``take_compiled`` hands the loop that mode to report.
  Compiled modules are kept per mode: switching back to a mode reuses its compiled code.
* ``channels_last``: the base module's parameters change layout in place, so the optimizer
  and every compiled wrapper keep seeing the same parameters (compiled code re-specializes
  lazily on the new strides). The optimizer's state (momentum, Adam moments) is given the
  parameters' new layout too: a fused optimizer walks each parameter and its state tensors as
  flat memory, so a moment left in the old layout would be paired with the wrong elements.
* ``optimizer_impl``: a new optimizer of the same class loads the old one's ``state_dict``
  (momentum/Adam moments survive) with the new ``foreach``/``fused`` flags.

The knobs that only change *how* a step computes (docs/knobs.md §1: layout, optimizer
implementation, loader, copies, logging, zero_grad) leave the weights what a run that never
changed them computes, up to float rounding; ``amp``, ``tf32``, ``compile`` and ``batch_size``
change the numbers themselves.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from typing import Any

import torch

from gpuwatch.runner.knobs import KNOB_NAMES
from gpuwatch.runner.workloads import Workload

#: ``optimizer_impl`` → the constructor flags that select it.
OPTIMIZER_FLAGS: dict[str, dict[str, bool]] = {
    "for-loop": {"foreach": False, "fused": False},
    "foreach": {"foreach": True, "fused": False},
    "fused": {"foreach": False, "fused": True},
}
AMP_DTYPES: dict[str, torch.dtype] = {"fp16": torch.float16, "bf16": torch.bfloat16}


def apply_backend_flags(values: Mapping[str, Any]) -> None:
    """``tf32`` and ``cudnn_benchmark`` are process-wide switches of torch's backends.

    Set at start too: cuDNN allows TF32 by default, which would not be the naive baseline.
    """
    torch.backends.cuda.matmul.allow_tf32 = bool(values["tf32"])
    torch.backends.cudnn.allow_tf32 = bool(values["tf32"])
    torch.backends.cudnn.benchmark = bool(values["cudnn_benchmark"])


class TrainingState:
    """The model, optimizer and precision settings one step runs with."""

    def __init__(
        self,
        workload: Workload,
        *,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        device: torch.device,
        values: Mapping[str, Any],
    ) -> None:
        self.workload = workload
        self.device = device
        #: The module as the workload built it; compiled wrappers share its parameters.
        self.base_model = model
        #: The module the forward calls: ``base_model`` or a compiled wrapper of it.
        self.model = model
        self.optimizer = optimizer
        self.scaler: torch.amp.GradScaler | None = None
        self.values: dict[str, Any] = dict(values)
        self._compiled: dict[str, torch.nn.Module] = {}
        self._compiled_untried: str | None = None
        self.apply(self.values, KNOB_NAMES)

    def apply(self, values: Mapping[str, Any], changed: Iterable[str]) -> None:
        """Make ``values`` the knobs in effect; only the ``changed`` ones are redone."""
        changed = set(changed)
        self.values = dict(values)
        if "channels_last" in changed and self.workload.channels_last_applies:
            layout = torch.channels_last if values["channels_last"] else torch.contiguous_format
            self.base_model.to(memory_format=layout)
            state_follows_parameters(self.optimizer)
        if "compile" in changed:
            self._select_compiled(values["compile"])
        if "amp" in changed:
            self.scaler = (
                torch.amp.GradScaler(self.device.type) if values["amp"] == "fp16" else None
            )
        if "optimizer_impl" in changed:
            self.optimizer = self._rebuilt_optimizer(values["optimizer_impl"])
        if changed & {"tf32", "cudnn_benchmark"}:
            apply_backend_flags(values)

    def take_compiled(self) -> str | None:
        """The mode compiled by the step that just ran, once (None if nothing was compiled)."""
        mode, self._compiled_untried = self._compiled_untried, None
        return mode

    def forget_compiled(self, mode: str) -> None:
        """Drop a mode's compiled module (it failed), so choosing it again compiles afresh;
        the module in use is kept."""
        if self.model is not self._compiled.get(mode):
            self._compiled.pop(mode, None)

    def to_device(self, batch: Any) -> Any:
        return self.workload.to_device(
            batch,
            self.device,
            non_blocking=self.values["non_blocking"],
            channels_last=self.values["channels_last"],
        )

    def loss(self, batch: Any) -> torch.Tensor:
        """Forward and loss, under autocast when ``amp`` is on."""
        dtype = AMP_DTYPES.get(self.values["amp"])
        context = (
            torch.autocast(self.device.type, dtype=dtype)
            if dtype is not None
            else contextlib.nullcontext()
        )
        with context:
            return self.workload.loss(self.model, batch)

    def backward(self, loss: torch.Tensor) -> None:
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()

    def optimizer_step(self) -> None:
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=self.values["zero_grad_set_to_none"])

    def _select_compiled(self, mode: str) -> None:
        self._compiled_untried = None
        if mode == "off":
            self.model = self.base_model
            return
        if mode not in self._compiled:
            self._compiled[mode] = torch.compile(  # type: ignore[assignment]
                self.base_model, mode=None if mode == "default" else mode
            )
            self._compiled_untried = mode
        self.model = self._compiled[mode]

    def _rebuilt_optimizer(self, impl: str) -> torch.optim.Optimizer:
        flags = OPTIMIZER_FLAGS[impl]
        state = self.optimizer.state_dict()
        # load_state_dict takes the group options from the saved groups: give them the new
        # flags, or the old implementation would come back.
        for group in state["param_groups"]:
            group.update(flags)
        optimizer = self.workload.build_optimizer(self.base_model, **flags)
        optimizer.load_state_dict(state)
        state_follows_parameters(optimizer)
        if not flags["fused"]:
            _steps_to_host(optimizer)
        return optimizer


def state_follows_parameters(optimizer: torch.optim.Optimizer) -> None:
    """Give every per-element state tensor (momentum buffer, ``exp_avg``, ``exp_avg_sq``...)
    its parameter's strides, values unchanged.

    ``Module.to(memory_format=...)`` restrides the parameters (and their gradients) but not the
    optimizer's state. Element-wise kernels that follow strides (for-loop, foreach) still pair
    the right elements; a fused AdamW does not (tests/test_knobs_neutral.py: 5e-2 off after a
    few steps without this).
    """
    for group in optimizer.param_groups:
        for param in group["params"]:
            state = optimizer.state.get(param)
            if not state:
                continue
            for key, value in state.items():
                if (
                    isinstance(value, torch.Tensor)
                    and value.shape == param.shape
                    and value.stride() != param.stride()
                ):
                    # empty_like keeps the strides of a dense parameter (preserve_format)
                    state[key] = torch.empty_like(
                        param, dtype=value.dtype, device=value.device
                    ).copy_(value)


def _steps_to_host(optimizer: torch.optim.Optimizer) -> None:
    """A fused Adam keeps its ``step`` counters on the device; the other implementations read
    them on the host (a device copy would cost an ``.item()`` sync per parameter per step)."""
    for state in optimizer.state.values():
        step = state.get("step")
        if isinstance(step, torch.Tensor) and step.device.type != "cpu":
            state["step"] = step.cpu()
