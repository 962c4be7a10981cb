"""Zero-code instrumentation: PyTorch's own hooks report a script's step boundaries.

Installed in the runner's main process only, before the script runs, and removed after it:

* ``torch.utils.data.dataloader._BaseDataLoaderIter.__next__`` is wrapped (every DataLoader
  iterator inherits it; the subclasses override ``_next_data`` only): the call, its return and
  ``StopIteration``. Nested calls (a dataset that iterates another loader in-process) count once.
* global module forward pre/post hooks (``register_module_forward_pre_hook``,
  ``register_module_forward_hook(always_call=True)``) with a depth count, so only the outermost
  forward counts; forwards run inside ``backward()`` (activation checkpointing) are ignored.
* ``torch.autograd.backward`` is wrapped (``Tensor.backward`` calls it); re-entrant calls count
  once.
* the global optimizer step post hook (``register_optimizer_step_post_hook``).
* with ``scaling`` set (the zero-code fp16, ``grad_scaling``): ``torch.amp.GradScaler.__init__``,
  to notice a GradScaler of the script's own; ``scaling`` is told each backward and optimizer
  step, and may scale the backward's tensors (its work is the knob's, not counted as the hooks').

Only the main thread is observed, while installed and while step detection is on: each hook
asks so in place (these hooks run at every step, and each Python call they make costs). The
hooks are class attributes and module globals of *this* process: spawned DataLoader workers
import torch fresh and never see them, and in a forked worker ``os.register_at_fork`` (where
the platform has it) switches them off. They add no device
synchronization; the global forward hooks do cost every module call a little (torch's hook path
instead of its fast path).

**The cheaper path.** While an outermost forward runs, the global hooks stand aside (its inner
modules run on torch's fast path) and an always-called hook of its module's own marks its end.
In training, what runs after it until ``backward()`` (the loss, a second look at the same model)
marks nothing a step keeps: ``backward()`` moves ``forward_end`` to its own start. So once
``HOLD_LEARNING`` such windows have shown only modules with nothing to tell and nothing new for
the model knobs (a loss, a model seen before), the global hooks stay aside from the outermost
forward's end until the backward begins or the step's next boundary (``next()``, an optimizer
step). Not with gradients off (an evaluation under ``no_grad``: its loss is forward time), not
in probe mode, and never once a window showed a new module with parameters or a DDP module.

**Compiled and exported code.** TorchDynamo traces the global hooks into every module it
compiles. Each hook therefore first asks ``torch.compiler.is_compiling()`` (constant-folded to
True while Dynamo traces, and True during ``torch.export``'s non-strict tracing too:
https://docs.pytorch.org/docs/stable/generated/torch.compiler.is_compiling.html) and returns at
once, calling nothing Dynamo cannot trace (``threading.get_ident`` breaks the graph), so a
compiled model gets the graph it gets without gpuwatch and ``fullgraph=True`` or
``torch.export.export(strict=True)`` still succeed. The forward is then marked where it runs
eagerly: ``torch.compile(model)`` returns an ``OptimizedModule``, whose own (eager) call fires
the hooks once; ``model.compile()`` leaves no eager module call, so ``Module.compile`` is wrapped
to mark around the compiled call it installs. Torch warns at every ``OptimizedModule`` call that
global hooks exist; ``OptimizedModule.__call__`` gets the same body without that warning once
``torch.compile`` has imported Dynamo (``torch.compile`` is wrapped for that only). Strict
``torch.export.export`` fails whenever any global forward hook exists, whatever it does, so it
runs with ours taken out (exporting is no training step). A function compiled as a whole
(``torch.compile(train_step)``, or a compiled ``optimizer.step()``) shows no boundary inside it.

**Failures.** A hook catches every ``Exception`` of gpuwatch's (never the script's own: the
call it wraps runs outside the ``try``) and switches step detection off with one notice
(``instrument_switch``); a stop's ``KeyboardInterrupt`` passes through.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from gpuwatch.runner.seen_modules import SeenModules
from gpuwatch.runner.step_columns import SpentTime
from gpuwatch.runner.step_recorder import StepRecorder

#: The hooks time themselves with it (``AutoHooks.spent``).
_clock = time.perf_counter_ns
_get_ident = threading.get_ident
#: Where each hook is, as its failure notice names it.
LOADER_HOOK = "DataLoader hook"
FORWARD_HOOK = "forward hook"
BACKWARD_HOOK = "backward hook"
OPTIMIZER_HOOK = "optimizer step hook"
#: Training windows (an outermost forward's end to its backward) watched before the global
#: hooks may stay aside through them (``AutoHooks._hold``).
HOLD_LEARNING = 8


class BackwardScaling(Protocol):
    """What the hooks tell the zero-code fp16 (``grad_scaling.GradScaling``); none raises."""

    skipped_step: Callable[[Any], None]

    def saw_grad_scaler(self, scaler: Any) -> None: ...

    def before_backward(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]: ...

    def after_backward(self) -> None: ...

    def optimizer_stepped(self, optimizer: Any) -> None: ...


def compiling_predicate(torch: Any) -> Callable[[], bool]:
    """``torch.compiler.is_compiling`` (a torch without it compiles nothing)."""
    predicate = getattr(getattr(torch, "compiler", None), "is_compiling", None)
    return predicate if callable(predicate) else _never


def _never() -> bool:
    return False


def _has_parameters(module: Any) -> bool:
    """Whether ``module`` has a parameter (a module that fails to say is taken as having one)."""
    try:
        return next(iter(module.parameters()), None) is not None
    except Exception:
        return True


def _unseen(module: Any) -> None:
    """Stands for "not seen yet" in ``AutoHooks._seen`` (None means "nothing to tell")."""


class GlobalHooksAside:
    """Where our global module hooks sit in torch's hook dictionaries: ``entries`` are
    (dictionary, hook id, hook), which ``AutoHooks._step_aside`` takes out and
    ``AutoHooks._back_in_place`` puts back, as their ``RemovableHandle`` would, without making
    new handles. ``key`` is an id no other hook has, for the outermost module's own hook."""

    def __init__(self, entries: list[tuple[dict[Any, Any], Any, Any]], key: int) -> None:
        self.entries = entries
        self.key = key

    @classmethod
    def of(cls, handles: list[Any]) -> GlobalHooksAside | None:
        """From the handles' dictionaries, or None if torch's handles are not as expected."""
        try:
            from torch.utils.hooks import RemovableHandle

            entries: list[tuple[dict[Any, Any], Any, Any]] = []
            for handle in handles:
                refs = (handle.hooks_dict_ref, *getattr(handle, "extra_dict_ref", ()))
                for ref in refs:
                    table = ref()
                    if not isinstance(table, dict):
                        return None
                    entries.append((table, handle.id, table[handle.id]))
            return cls(entries, RemovableHandle(collections.OrderedDict()).id)
        except Exception:
            return None


class AutoHooks:
    """Installs and removes the hooks that feed ``recorder`` (see the module docstring)."""

    def __init__(self, torch: Any, recorder: StepRecorder, spent: SpentTime | None = None) -> None:
        self.torch = torch
        self.recorder = recorder
        #: Where the hooks add the ns they spend (``perf_counter_ns`` around their bodies,
        #: the calls they wrap left out): each step carries its share (``step_columns``).
        self.spent = spent if spent is not None else SpentTime()
        self.enabled = False
        self._main = threading.get_ident()
        self._is_compiling = compiling_predicate(torch)
        self._next_depth = 0
        self._forward_depth = 0
        self._backward_depth = 0
        self._handles: list[Any] = []
        self._module_handles: list[Any] = []
        self._aside: GlobalHooksAside | None = None
        self._outermost: Any = None  # the module whose forward runs with our hooks aside
        #: The global hooks stay aside past the outermost forward, until the step's backward
        #: begins or its next boundary (``_hold``).
        self._held = False
        #: ``HOLD_LEARNING`` training windows watched before holding is allowed (``_learn``).
        self._windows_left = HOLD_LEARNING
        self._window_open = False  # a learning window: an outermost forward ended, no backward
        self._may_hold = False
        self._grad_enabled: Callable[[], bool] = getattr(torch, "is_grad_enabled", _never)
        self._restore: list[tuple[Any, str, Any]] = []  # (owner, attribute, original)
        #: The outermost module's own always-called forward hook while the global ones are
        #: aside (one bound method, made once).
        self._own_hook: Callable[[Any, Any, Any], None] = self._forward_ended
        self._quieted = False
        #: Told of each module the first time its forward is an outermost one (the zero-code
        #: model knobs); returns what to tell at each of its outermost forwards (DDP's timing
        #: of a DDP module), or None. Neither raises (each guards itself).
        self.on_first_outermost: Callable[[Any], Callable[[Any], None] | None] | None = None
        #: The modules whose outermost forward ran since ``install``, with what to tell.
        self._seen: SeenModules[Callable[[Any], None] | None] = SeenModules()
        #: Told each backward and optimizer step, and may scale the backward (fp16).
        self.scaling: BackwardScaling | None = None
        if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
            os.register_at_fork(after_in_child=self._forked)

    def _forked(self) -> None:
        self.enabled = False

    def install(self) -> None:
        torch = self.torch
        from torch.optim.optimizer import register_optimizer_step_post_hook
        from torch.utils.data import dataloader

        iterator_class = dataloader._BaseDataLoaderIter
        self._patch(iterator_class, "__next__", self._wrap_next(iterator_class.__next__))
        self._patch(torch.autograd, "backward", self._wrap_backward(torch.autograd.backward))
        self._patch(torch.nn.Module, "compile", self._wrap_module_compile(torch.nn.Module.compile))
        if callable(getattr(torch, "compile", None)):
            self._patch(torch, "compile", self._wrap_torch_compile(torch.compile))
        export = getattr(torch, "export", None)
        if callable(getattr(export, "export", None)):
            self._patch(export, "export", self._wrap_export(export.export))
        is_compiling = self._is_compiling
        spent, clock = self.spent, _clock
        scaling = self.scaling

        recorder, main = self.recorder, self._main

        def optimizer_post(optimizer: Any, args: Any, kwargs: Any) -> None:
            if is_compiling():  # first: nothing below may be traced (module docstring)
                return
            if self.enabled and recorder.detecting and _get_ident() == main:
                start = clock()
                if self._held or self._window_open:
                    self._step_boundary()
                if scaling is not None:  # first: a boundary in the step below may change amp
                    scaling.optimizer_stepped(optimizer)
                try:
                    recorder.optimizer_stepped()
                except Exception as exc:  # a stop's KeyboardInterrupt is no Exception
                    recorder.switch_off_detection(OPTIMIZER_HOOK, exc)
                spent.ns += clock() - start

        if scaling is not None:
            scaling.skipped_step = lambda optimizer: optimizer_post(optimizer, (), {})
            grad_scaler = torch.amp.GradScaler
            self._patch(grad_scaler, "__init__", self._wrap_scaler_init(grad_scaler.__init__))
        self._handles = [register_optimizer_step_post_hook(optimizer_post)]
        self._register_module_hooks()
        self._quiet_optimized_module()  # Dynamo may be imported already
        self.enabled = True

    def _register_module_hooks(self) -> None:
        from torch.nn.modules import module as modules

        self._module_handles = [
            modules.register_module_forward_pre_hook(self._forward_began),
            modules.register_module_forward_hook(self._forward_ended, always_call=True),
        ]
        self._aside = GlobalHooksAside.of(self._module_handles)

    def _step_aside(self, module: Any) -> None:
        """An outermost forward began: until it returns (or raises), the modules it calls run
        on torch's fast path, without our global hooks (their forwards are not marked anyway,
        and while any global hook exists torch runs every module call on its slow hook path,
        a cost that grows with the model's module count). The end of this forward is marked by
        an always-called hook of ``module``'s own, which puts the global hooks back.

        Both moves are dictionary entries (the ones ``RemovableHandle`` adds and removes):
        registering and removing handles each step would cost more than it saves on a small
        model. A module without children (a loss) keeps the global hooks (its caller asks): it
        calls no module whose hook could be spared. A torch whose hook dictionaries are not as
        expected keeps them too."""
        aside = self._aside
        if aside is None or self._outermost is not None:
            return
        key = aside.key
        self._outermost = module
        try:
            hooks = module._forward_hooks
            module._forward_hooks_always_called[key] = True
            hooks[key] = self._own_hook
            if len(hooks) > 1:
                hooks.move_to_end(key, last=False)  # first of its hooks, as a global one runs
        except Exception:  # not torch's module as expected: the global hooks stay
            self._back_in_place()  # takes off what of ours got onto the module
            return
        for table, hook_id, _ in aside.entries:
            table.pop(hook_id, None)

    def _back_in_place(self) -> None:
        """The global hooks again, and the outermost module without ours (never raises)."""
        module, self._outermost = self._outermost, None
        aside = self._aside
        if aside is None or (module is None and not self._held):
            return
        self._held = False
        for table, hook_id, value in aside.entries:
            table[hook_id] = value
        if module is not None:
            self._take_own_hook_off(module, aside.key)

    def _hold(self, module: Any) -> None:
        """The outermost forward of ``module`` ended in training: its own hook comes off, the
        global hooks stay aside until ``_back_in_place`` (see the module docstring)."""
        self._outermost = None
        self._held = True
        aside = self._aside
        if aside is not None:
            self._take_own_hook_off(module, aside.key)

    @staticmethod
    def _take_own_hook_off(module: Any, key: int) -> None:
        try:
            module._forward_hooks.pop(key, None)
            module._forward_hooks_always_called.pop(key, None)
        except Exception:
            pass

    def _learn(self, module: Any, every: Callable[[Any], None] | None, first: bool) -> None:
        """An outermost forward in a learning window (after another's end, before the
        backward): a DDP module's, or a new module with parameters (the model knobs must see
        its forwards), rules holding out for good."""
        if every is not None or (first and _has_parameters(module)):
            self._windows_left = -1
            self._window_open = False

    def _step_boundary(self) -> None:
        """``next()`` or an optimizer step: a held window ends, and a learning window that saw
        no backward (an evaluation) does not count."""
        self._window_open = False
        if self._held:
            self._back_in_place()

    def _window_ended(self) -> None:
        """A backward began: a learning window closed as a training window does."""
        self._window_open = False
        if self._windows_left > 0:
            self._windows_left -= 1
            if self._windows_left == 0:
                self._may_hold = True

    def _remove_module_hooks(self) -> None:
        self._back_in_place()
        self._aside = None
        for handle in self._module_handles:
            with contextlib.suppress(Exception):
                handle.remove()
        self._module_handles = []

    def remove(self) -> None:
        """Undo ``install``; never raises (the script's outcome is reported after this)."""
        self.enabled = False
        self._remove_module_hooks()
        for handle in self._handles:
            with contextlib.suppress(Exception):
                handle.remove()
        self._handles = []
        for owner, name, original in reversed(self._restore):
            with contextlib.suppress(Exception):
                setattr(owner, name, original)
        self._restore = []
        self._quieted = False
        self._seen.clear()

    def _patch(self, owner: Any, name: str, replacement: Any) -> None:
        self._restore.append((owner, name, owner.__dict__.get(name, getattr(owner, name))))
        setattr(owner, name, replacement)

    def _report(self, where: str, call: Callable[..., None], *args: Any) -> None:
        """Call the recorder; a failure of ours switches step detection off instead of
        raising into the script (a stop's ``KeyboardInterrupt`` is not an ``Exception``).
        The hooks that run at every step make the same ``try`` in place (a call less)."""
        try:
            call(*args)
        except Exception as exc:
            self.recorder.switch_off_detection(where, exc)

    # --- DataLoader, autograd -------------------------------------------------------------

    def _wrap_next(self, original: Any) -> Any:
        recorder, spent, clock, main = self.recorder, self.spent, _clock, self._main

        @functools.wraps(original)
        def __next__(iterator: Any) -> Any:
            if (
                self._next_depth
                or self._is_compiling()
                or not (self.enabled and recorder.detecting and _get_ident() == main)
            ):
                return original(iterator)
            start = clock()
            if self._held or self._window_open:
                self._step_boundary()
            self._next_depth += 1
            try:
                key = id(iterator)
                try:
                    recorder.next_called(key)  # a stop's KeyboardInterrupt raises here
                except Exception as exc:
                    recorder.switch_off_detection(LOADER_HOOK, exc)
                spent.ns += clock() - start
                try:
                    batch = original(iterator)
                except StopIteration:
                    self._report(LOADER_HOOK, recorder.loader_exhausted, key)
                    raise
                start = clock()
                try:
                    recorder.next_returned(key, batch)
                except Exception as exc:
                    recorder.switch_off_detection(LOADER_HOOK, exc)
                spent.ns += clock() - start
                return batch
            finally:
                self._next_depth -= 1

        return __next__

    def _wrap_backward(self, original: Any) -> Any:
        recorder, spent, clock, main = self.recorder, self.spent, _clock, self._main
        scaling = self.scaling

        @functools.wraps(original)
        def backward(*args: Any, **kwargs: Any) -> Any:
            if (
                self._backward_depth
                or self._is_compiling()
                or not (self.enabled and recorder.detecting and _get_ident() == main)
            ):
                return original(*args, **kwargs)
            start = clock()
            if self._held:
                self._back_in_place()
            if self._window_open:
                self._window_ended()
            self._backward_depth += 1
            try:
                recorder.backward_started()
            except Exception as exc:
                recorder.switch_off_detection(BACKWARD_HOOK, exc)
            spent.ns += clock() - start
            if scaling is not None:
                args, kwargs = scaling.before_backward(args, kwargs)
            try:
                return original(*args, **kwargs)
            finally:
                start = clock()
                self._backward_depth -= 1
                try:
                    recorder.backward_returned()
                except Exception as exc:
                    recorder.switch_off_detection(BACKWARD_HOOK, exc)
                spent.ns += clock() - start
                if scaling is not None:
                    scaling.after_backward()

        return backward

    def _wrap_scaler_init(self, original: Any) -> Any:
        """``GradScaler.__init__``: each scaler made is shown to ``scaling`` (fp16)."""

        @functools.wraps(original)
        def __init__(scaler: Any, *args: Any, **kwargs: Any) -> None:
            original(scaler, *args, **kwargs)
            if self.scaling is not None and threading.get_ident() == self._main:
                self.scaling.saw_grad_scaler(scaler)

        return __init__

    # --- forward --------------------------------------------------------------------------

    def _forward_began(self, module: Any, args: Any = None) -> None:
        """A module's forward begins: the global pre-hook (``module`` None: a
        ``Module.compile``'d call). The outermost one is marked, its module told of, and the
        global hooks stepped aside. Registered as it is, a call less at every module call."""
        if self._is_compiling():  # first: nothing below may be traced (module docstring)
            return
        if self._backward_depth or not (
            self.enabled and self.recorder.detecting and _get_ident() == self._main
        ):
            return
        start = _clock()
        self._forward_depth += 1
        if self._forward_depth == 1:
            recorder = self.recorder
            try:
                recorder.forward_started()
            except Exception as exc:
                recorder.switch_off_detection(FORWARD_HOOK, exc)
            if module is not None:
                # who wants to know of this outermost forward was asked at its module's first
                every = self._seen.get(module, _unseen)
                if every is _unseen:
                    every = self._first_outermost(module)
                elif every is not None and self._window_open:
                    self._learn(module, every, first=False)
                if every is not None:
                    every(module)
                if getattr(module, "_modules", 1):  # a loss calls no module to spare hooks
                    self._step_aside(module)
        self.spent.ns += _clock() - start

    def _first_outermost(self, module: Any) -> Callable[[Any], None] | None:
        """``module``'s first outermost forward: ask what to tell at each of them."""
        first = self.on_first_outermost
        every = first(module) if first is not None else None
        self._seen.add(module, every)
        if self._window_open:
            self._learn(module, every, first=True)
        return every

    def _forward_ended(self, module: Any = None, args: Any = None, output: Any = None) -> None:
        """A module's forward returned or raised: the global always-called hook, and the
        outermost module's own one while the global ones are aside, which it puts back or,
        in training once allowed, holds aside (module None: a ``Module.compile``'d call)."""
        if self._is_compiling():
            return
        if module is not None and module is self._outermost:
            if self._may_hold and self._grad_enabled() and self.recorder.instrumentation == "auto":
                self._hold(module)
            else:
                self._back_in_place()
                if self._windows_left > 0 and self._grad_enabled():
                    self._window_open = True
        if (
            self._backward_depth
            or not self._forward_depth
            or not (self.enabled and self.recorder.detecting and _get_ident() == self._main)
        ):
            return
        start = _clock()
        self._forward_depth -= 1
        if self._forward_depth == 0:
            recorder = self.recorder
            try:
                recorder.forward_returned()
            except Exception as exc:
                recorder.switch_off_detection(FORWARD_HOOK, exc)
        self.spent.ns += _clock() - start

    # --- torch.compile --------------------------------------------------------------------

    def _wrap_module_compile(self, original: Any) -> Any:
        """``model.compile()``: mark the forward around the compiled call it installs."""

        @functools.wraps(original)
        def compile(module: Any, *args: Any, **kwargs: Any) -> None:
            original(module, *args, **kwargs)
            compiled = module.__dict__.get("_compiled_call_impl")
            if compiled is not None:
                module._compiled_call_impl = self._marked_call(compiled)

        return compile

    def _marked_call(self, compiled: Any) -> Any:
        is_compiling = self._is_compiling

        def call(*args: Any, **kwargs: Any) -> Any:
            if is_compiling():  # called from code Dynamo traces: leave it to the outer call
                return compiled(*args, **kwargs)
            self._forward_began(None)
            try:
                return compiled(*args, **kwargs)
            finally:
                self._forward_ended()

        return call

    def _wrap_torch_compile(self, original: Any) -> Any:
        @functools.wraps(original)
        def compile(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            if not self._quieted:
                self._quiet_optimized_module()
            return result

        return compile

    def _wrap_export(self, original: Any) -> Any:
        """``torch.export.export`` without our global forward hooks: with any global hook
        registered, its strict (Dynamo) capture traces the ``__call__`` of its own wrapper
        module, whose ``forward`` Dynamo refuses to inline (``torch/_dynamo/convert_frame.py``
        ``_get_frame``), so strict export would fail. Exporting is no training step."""

        @functools.wraps(original)
        def export(*args: Any, **kwargs: Any) -> Any:
            if not self._module_handles or threading.get_ident() != self._main:
                return original(*args, **kwargs)
            self._remove_module_hooks()
            try:
                return original(*args, **kwargs)
            finally:
                if self.enabled or self._handles:
                    self._register_module_hooks()

        return export

    def _quiet_optimized_module(self) -> None:
        """``OptimizedModule.__call__`` without its warning about global hooks (ours), once
        Dynamo is imported; left as it is when torch's internals are not as expected."""
        eval_frame = sys.modules.get("torch._dynamo.eval_frame")
        if eval_frame is None:
            return
        self._quieted = True
        optimized = getattr(eval_frame, "OptimizedModule", None)
        in_optimized_module = getattr(eval_frame, "_set_in_optimized_module", None)
        if optimized is None or in_optimized_module is None or "__call__" not in optimized.__dict__:
            return
        module_call = self.torch.nn.Module.__call__

        def __call__(module: Any, *args: Any, **kwargs: Any) -> Any:
            with in_optimized_module():
                return module_call(module, *args, **kwargs)

        self._patch(optimized, "__call__", __call__)
