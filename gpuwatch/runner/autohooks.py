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

Only the main thread is observed. The hooks are class attributes and module globals of *this*
process: spawned DataLoader workers import torch fresh and never see them, and in a forked
worker ``os.register_at_fork`` switches them off. They add no device synchronization; the
global forward hooks do cost every module call a little (torch's hook path instead of its
fast path).
"""

from __future__ import annotations

import functools
import os
import threading
from typing import Any

from gpuwatch.runner.step_recorder import StepRecorder


class AutoHooks:
    """Installs and removes the hooks that feed ``recorder`` (see the module docstring)."""

    def __init__(self, torch: Any, recorder: StepRecorder) -> None:
        self.torch = torch
        self.recorder = recorder
        self.enabled = False
        self._main = threading.get_ident()
        self._next_depth = 0
        self._forward_depth = 0
        self._backward_depth = 0
        self._handles: list[Any] = []
        self._iter_class: Any = None
        self._original_next: Any = None
        self._original_backward: Any = None
        os.register_at_fork(after_in_child=self._forked)

    def _forked(self) -> None:
        self.enabled = False

    def _watching(self) -> bool:
        return self.enabled and threading.get_ident() == self._main

    def install(self) -> None:
        torch = self.torch
        from torch.nn.modules import module as modules
        from torch.optim.optimizer import register_optimizer_step_post_hook
        from torch.utils.data import dataloader

        self._iter_class = dataloader._BaseDataLoaderIter
        self._original_next = self._iter_class.__next__
        self._iter_class.__next__ = self._wrap_next(self._original_next)
        self._original_backward = torch.autograd.backward
        torch.autograd.backward = self._wrap_backward(self._original_backward)
        self._handles = [
            modules.register_module_forward_pre_hook(self._forward_pre),
            modules.register_module_forward_hook(self._forward_post, always_call=True),
            register_optimizer_step_post_hook(self._optimizer_post),
        ]
        self.enabled = True

    def remove(self) -> None:
        self.enabled = False
        for handle in self._handles:
            handle.remove()
        self._handles = []
        if self._iter_class is not None:
            self._iter_class.__next__ = self._original_next
            self._iter_class = None
        if self._original_backward is not None:
            self.torch.autograd.backward = self._original_backward
            self._original_backward = None

    def _wrap_next(self, original: Any) -> Any:
        recorder = self.recorder

        @functools.wraps(original)
        def __next__(iterator: Any) -> Any:
            if self._next_depth or not self._watching():
                return original(iterator)
            self._next_depth += 1
            try:
                key = id(iterator)
                recorder.next_called(key)  # a stop raises KeyboardInterrupt here
                try:
                    batch = original(iterator)
                except StopIteration:
                    recorder.loader_exhausted(key)
                    raise
                recorder.next_returned(key, batch)
                return batch
            finally:
                self._next_depth -= 1

        return __next__

    def _wrap_backward(self, original: Any) -> Any:
        recorder = self.recorder

        @functools.wraps(original)
        def backward(*args: Any, **kwargs: Any) -> Any:
            if self._backward_depth or not self._watching():
                return original(*args, **kwargs)
            self._backward_depth += 1
            recorder.backward_started()
            try:
                return original(*args, **kwargs)
            finally:
                self._backward_depth -= 1
                recorder.backward_returned()

        return backward

    def _forward_pre(self, module: Any, args: Any) -> None:
        if self._backward_depth or not self._watching():
            return
        self._forward_depth += 1
        if self._forward_depth == 1:
            self.recorder.forward_started()

    def _forward_post(self, module: Any, args: Any, output: Any) -> None:
        if self._backward_depth or not self._watching() or not self._forward_depth:
            return
        self._forward_depth -= 1
        if self._forward_depth == 0:
            self.recorder.forward_returned()

    def _optimizer_post(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self._watching():
            self.recorder.optimizer_stepped()
