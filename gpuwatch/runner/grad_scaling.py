"""fp16 for a watched script: a GradScaler inserted around its backward() and optimizer.step().

float16 gradients underflow without loss scaling
(https://docs.pytorch.org/docs/stable/amp.html#gradient-scaling), so the zero-code ``amp = fp16``
needs a ``torch.amp.GradScaler`` in the script's loop. gpuwatch inserts one only where what the
step hooks saw is the plain loop it can be inserted into without changing what the script
means: **one optimizer, one ``backward()`` per ``optimizer.step()``, no GradScaler of the
script's own**. Until the first optimizer step nothing is known (fp16 waits for it); a departure
seen at any time (a second optimizer, a second backward before a step, a step without one, a
GradScaler the script makes) ends fp16 for the run, with that reason.

While fp16 is on, each step:

* the ``backward()`` call's tensors are ``scaler.scale()``-d (``Tensor.backward`` calls
  ``torch.autograd.backward``, which the step hooks wrap);
* right after it returns, ``scaler.unscale_(optimizer)``: code the script runs between backward
  and step (``clip_grad_norm_``, gradient logging) sees the true gradients;
* ``optimizer.step()`` (an instance attribute of the one optimizer while fp16 is on) goes through
  ``scaler.step``, which skips it when the unscale found inf/NaN, then ``scaler.update()``; a
  skipped step is still reported to the step hooks as the step it is.

Off takes it all away. The ``step`` wrapper is removed unless something wrapped it since (an LR
scheduler made later does); then it stays as a pass-through. A failure of gpuwatch's here ends
fp16 with one notice and never raises into the script: gradients already scaled are divided
back before the script sees them.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable
from typing import Any

WAITING = "waits for the script's first optimizer.step() (a GradScaler goes only into a loop seen)"
OWN_SCALER = "the script uses a GradScaler of its own: it owns its precision"
SEVERAL_OPTIMIZERS = "the script steps several optimizers: a GradScaler is inserted around one only"
NO_BACKWARD = "the script steps its optimizer without a backward() of its own"
ACCUMULATES = (
    "the script runs {n} backward() per optimizer.step() (gradient accumulation): a GradScaler "
    "is inserted only where each step has one"
)


class GradScaling:
    """Watches the script's backward/optimizer calls (always) and, while ``scaler`` is set,
    scales, unscales and steps through it (see the module docstring)."""

    def __init__(self, torch: Any, device_type: str, *, on_change: Callable[[], None]) -> None:
        self.torch = torch
        self.device_type = device_type
        #: Called (never raising) when ``problem`` changes.
        self.on_change = on_change
        #: Why fp16 cannot be inserted now (None: it can).
        self.problem: str | None = WAITING
        #: Every optimizer seen stepping (``channels_last`` restrides their state).
        self.optimizers: weakref.WeakSet[Any] = weakref.WeakSet()
        #: The step hooks' optimizer-step report, for a step the scaler skipped.
        self.skipped_step: Callable[[Any], None] = lambda optimizer: None
        #: The inserted scaler while fp16 is on.
        self.scaler: Any = None
        self._optimizer: weakref.ref[Any] | None = None
        self._backwards = 0  # backward() calls since the last optimizer step
        self._scaled = False  # this step's backward ran scaled and is not yet unscaled
        self._unscaled = False  # ... and was unscaled: its optimizer step goes through the scaler
        self._in_step = False
        self._entered = False  # scaler.step called the optimizer's own step
        self._making = False
        self._wrapper: Any = None
        self._wrapped: weakref.ref[Any] | None = None

    # --- what the step hooks report (each never raises) --------------------------------------

    def saw_grad_scaler(self, scaler: Any) -> None:
        """A GradScaler was made; an enabled one that is not ours is the script's own."""
        if self._making:
            return
        try:
            enabled = scaler.is_enabled()
        except Exception:
            enabled = True
        if enabled:
            self._break(OWN_SCALER)

    def before_backward(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """``torch.autograd.backward``'s arguments, with its tensors scaled while fp16 is on."""
        self._backwards += 1
        scaler = self.scaler
        if scaler is None:
            return args, kwargs
        if self._backwards > 1:  # the previous backward's gradients are unscaled already
            self._break(ACCUMULATES.format(n="several"))
            return args, kwargs
        try:
            if args:
                args = (scaler.scale(args[0]), *args[1:])
            else:
                kwargs = {**kwargs, "tensors": scaler.scale(kwargs["tensors"])}
        except Exception as exc:
            self._fail(exc)
            return args, kwargs
        self._scaled = True
        return args, kwargs

    def after_backward(self) -> None:
        """The scaled backward returned (or raised): its gradients unscaled at once."""
        if not self._scaled:
            return
        self._scaled = False
        try:
            self.scaler.unscale_(self._the_optimizer())
        except Exception as exc:
            self._fail(exc, scaled=True)
            return
        self._unscaled = True

    def optimizer_stepped(self, optimizer: Any) -> None:
        """An optimizer step ended (the global post hook, or a step the scaler skipped)."""
        if self._in_step:
            self._entered = True
        backwards, self._backwards = self._backwards, 0
        known = self._optimizer() if self._optimizer is not None else None
        if known is not optimizer:  # the known one is in the set since its first step
            self.optimizers.add(optimizer)
        if self.problem not in (None, WAITING):
            return
        if known is None:
            self._optimizer = weakref.ref(optimizer)
        elif known is not optimizer:
            self._break(SEVERAL_OPTIMIZERS)
            return
        if backwards != 1:
            self._break(NO_BACKWARD if backwards == 0 else ACCUMULATES.format(n=backwards))
            return
        if self.problem == WAITING:
            self._set_problem(None)

    # --- fp16 on and off (at a step boundary) -----------------------------------------------

    def start(self) -> None:
        """Insert a new GradScaler around the script's one optimizer; raises if it cannot."""
        if self.problem is not None:
            raise RuntimeError(self.problem)
        optimizer = self._the_optimizer()
        self._making = True
        try:
            scaler = self.torch.amp.GradScaler(self.device_type)
        finally:
            self._making = False
        self._wrap(optimizer)
        self.scaler = scaler
        self._scaled = self._unscaled = False

    def stop(self) -> None:
        """No scaler from the next backward on; the optimizer's own ``step`` back."""
        self.scaler = None
        self._scaled = self._unscaled = False
        optimizer = self._wrapped() if self._wrapped is not None else None
        wrapper = self._wrapper
        if optimizer is None or optimizer.__dict__.get("step") is not wrapper:
            return  # gone, or wrapped again since: ours stays, as a pass-through
        if wrapper.had_own:
            optimizer.step = wrapper.inner
        else:
            del optimizer.step  # the class's own method again
        self._wrapper = self._wrapped = None

    # --- the optimizer's step -----------------------------------------------------------------

    def _wrap(self, optimizer: Any) -> None:
        if self._wrapped is not None and self._wrapped() is optimizer:
            return  # still in place from an earlier fp16 (a pass-through while off)
        inner = optimizer.step
        ref = weakref.ref(optimizer)

        def step(*args: Any, **kwargs: Any) -> Any:
            if self._in_step:  # scaler.step calling the optimizer
                return inner(*args, **kwargs)
            scaler = self.scaler
            if scaler is None or not self._unscaled:
                return inner(*args, **kwargs)
            self._unscaled = False
            if args or "closure" in kwargs:
                self._break("the script steps its optimizer with a closure")
                return inner(*args, **kwargs)  # its gradients are unscaled already
            return self._scaled_step(scaler, ref(), inner)

        step.inner = inner  # type: ignore[attr-defined]
        step.had_own = "step" in optimizer.__dict__  # type: ignore[attr-defined]
        optimizer.step = step
        self._wrapper = step
        self._wrapped = ref

    def _scaled_step(self, scaler: Any, optimizer: Any, inner: Any) -> Any:
        self._in_step, self._entered = True, False
        try:
            result = scaler.step(optimizer)
            failure = None
        except Exception as exc:
            if self._entered:
                raise  # the optimizer's own error: the script's
            failure = exc
        finally:
            self._in_step = False
        if failure is not None:
            self._fail(failure)
            return inner()  # its gradients are unscaled already: a plain step
        try:
            scaler.update()
        except Exception as exc:
            self._fail(exc)
        if not self._entered:  # inf/NaN found: skipped, still a step of the script's loop
            with contextlib.suppress(Exception):
                self.skipped_step(optimizer)
        return result

    # --- problems ------------------------------------------------------------------------------

    def _the_optimizer(self) -> Any:
        optimizer = self._optimizer() if self._optimizer is not None else None
        if optimizer is None:
            raise RuntimeError("the script's optimizer is gone")
        return optimizer

    def _break(self, reason: str) -> None:
        """What was seen rules fp16 out for the run."""
        if self.scaler is not None:
            with contextlib.suppress(Exception):
                self.stop()
            self.scaler = None
        self._set_problem(reason)

    def _fail(self, exc: Exception, *, scaled: bool = False) -> None:
        """A failure of ours: gradients left scaled are divided back, fp16 ends."""
        if scaled:
            with contextlib.suppress(Exception):
                self._divide_gradients()
        self._break(f"gpuwatch's GradScaler failed: {type(exc).__name__}: {exc}")

    def _divide_gradients(self) -> None:
        inverse = 1.0 / float(self.scaler.get_scale())
        for group in self._the_optimizer().param_groups:
            for param in group["params"]:
                if param.grad is not None:
                    param.grad.mul_(inverse)

    def _set_problem(self, problem: str | None) -> None:
        """The first reason that rules fp16 out stays for the run."""
        if problem == self.problem or self.problem not in (None, WAITING):
            return
        self.problem = problem
        with contextlib.suppress(Exception):
            self.on_change()
