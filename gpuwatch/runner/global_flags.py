"""Zero-code knobs for a watched script's process-wide backend flags: ``cudnn_benchmark`` and
``tf32`` (the built-in knobs' names, so the advisor's suggestions reach them).

On a CUDA device they are announced before the script runs, at the values torch has then
(reading changes nothing). Elsewhere neither can work, so they appear only once the script sets
one itself (shown as the script's, below) or ``--set`` names one (refused with the reason).

``tf32`` on lets float32 matmuls and convolutions use TF32 (``torch.backends.cuda.matmul.
allow_tf32``, the same switch as ``torch.set_float32_matmul_precision("high")``, and
``torch.backends.cudnn.allow_tf32``); back to its starting value restores both as they were.
Both need CUDA (TF32 a GPU of compute capability 8.0 or newer; benchmark cuDNN), as the
built-in knobs do.

**A flag the script sets itself is the script's.** The setters a script uses
(``torch.backends.cudnn.benchmark = ...``, ``torch.backends.cudnn.allow_tf32 = ...``,
``torch.backends.cuda.matmul.allow_tf32 = ...``, ``torch.set_float32_matmul_precision(...)``)
are wrapped to notice it: the knob then shows the script's value and is disabled with the reason
("set by the script at train.py:12"), since any change of ours would be overwritten by the
script's next assignment. The wrappers call the original setters; nothing else changes.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Mapping
from typing import Any

from gpuwatch.runner.availability import NEEDS_CUDA
from gpuwatch.runner.knobs import SPECS
from gpuwatch.runner.loader_swap import script_site
from gpuwatch.runner.probe_knobs import ProbeKnobs

#: Transition steps after a flag changes (docs/knobs.md §2 warm-up rule: settling kernels).
FLAG_WARMUP_STEPS = 3
FLAGS = ("cudnn_benchmark", "tf32")


class GlobalFlags:
    """The two flags as ``ProbeKnobs`` owners (``KnobOwner``), and the watch on the script's own
    setters."""

    rebuilds = "global"

    def __init__(self, torch: Any, knobs: ProbeKnobs, *, device: Any) -> None:
        self.torch = torch
        self.knobs = knobs
        self.device = device
        self.names = {flag: flag for flag in FLAGS}
        #: flag → where the script set it
        self.owned: dict[str, str] = {}
        self._start = (torch.get_float32_matmul_precision(), bool(torch.backends.cudnn.allow_tf32))
        self._pid = os.getpid()
        self._ours = False  # True while we set a flag (our own assignment is not the script's)
        self._restore: list[tuple[Any, str, Any]] = []
        self.announced = False

    # --- the knobs ----------------------------------------------------------------------------

    def values(self) -> dict[str, bool]:
        torch = self.torch
        return {
            "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
            "tf32": torch.get_float32_matmul_precision() != "highest",
        }

    def problems(self) -> dict[str, str]:
        """Why a flag cannot work on this device (the built-in knobs' reasons)."""
        torch, device = self.torch, self.device
        if device.type != "cuda":
            return dict.fromkeys(FLAGS, NEEDS_CUDA)
        out = {}
        # Reading the capability initializes CUDA, which must not happen before the script's
        # first line (it reads CUDA_VISIBLE_DEVICES once): until the script has started CUDA,
        # tf32 is offered and an old GPU refuses it when it is set (``_tf32_problem``).
        tf32 = self._tf32_problem() if torch.cuda.is_initialized() else None
        if tf32 is not None:
            out["tf32"] = tf32
        if not torch.backends.cudnn.is_available():
            out["cudnn_benchmark"] = "cuDNN is not available to this torch"
        return out

    def entries(self) -> list[dict[str, Any]]:
        values, problems = self.values(), self.problems()
        out = []
        for flag in FLAGS:
            spec = SPECS[flag]
            site = self.owned.get(flag)
            reason = (
                f"set by the script at {site}: the script owns this flag"
                if site is not None
                else problems.get(flag)
            )
            out.append(
                {
                    "name": self.names[flag],
                    "label": spec.label,
                    "group": spec.group,
                    "type": "bool",
                    "default": values[flag],
                    "min": None,
                    "max": None,
                    "choices": None,
                    "unit": None,
                    "enabled": reason is None,
                    "reason": reason,
                    "disabled_choices": {},
                    "rebuilds": "global",
                    "help": spec.help,
                }
            )
        return out

    def announce(self) -> None:
        self.announced = True
        self.knobs.add_knobs(self.entries(), self)

    # --- KnobOwner ------------------------------------------------------------------------------

    def apply(self, changed: Mapping[str, Any]) -> str | None:
        flag_of = {name: flag for flag, name in self.names.items()}
        self._ours = True
        try:
            for name, value in changed.items():
                self._set(flag_of[name], bool(value))
        finally:
            self._ours = False
        return None

    def _tf32_problem(self) -> str | None:
        """Why TF32 cannot work on this GPU, or None (reading it initializes CUDA)."""
        major, minor = self.torch.cuda.get_device_capability(self.device)
        if (major, minor) < (8, 0):
            return f"needs compute capability 8.0 or newer (this GPU has {major}.{minor})"
        return None

    def _set(self, flag: str, on: bool) -> None:
        torch = self.torch
        if flag == "cudnn_benchmark":
            torch.backends.cudnn.benchmark = on
            return
        if on and self.device.type == "cuda":
            problem = self._tf32_problem()
            if problem is not None:  # refused with this reason; nothing was changed
                raise ValueError(f"tf32 {problem}")
        precision, cudnn_tf32 = self._start
        if on:
            torch.set_float32_matmul_precision("high")
            torch.backends.cudnn.allow_tf32 = True
        elif precision == "highest":  # back to how the script started
            torch.set_float32_matmul_precision(precision)
            torch.backends.cudnn.allow_tf32 = cudnn_tf32
        else:
            torch.set_float32_matmul_precision("highest")
            torch.backends.cudnn.allow_tf32 = False

    def warmup_steps(self) -> int:
        return FLAG_WARMUP_STEPS

    def rename(self, name: str) -> str:
        flag = next(f for f, n in self.names.items() if n == name)
        self.names[flag] = f"{flag}@torch.backends"
        return self.names[flag]

    # --- the script's own setters -------------------------------------------------------------

    def install(self) -> None:
        """Watch the script's setters, then announce the knobs (``--set`` values apply now)."""
        torch = self.torch
        cudnn_class = type(torch.backends.cudnn)
        for attribute, flag in (("benchmark", "cudnn_benchmark"), ("allow_tf32", "tf32")):
            prop = cudnn_class.__dict__.get(attribute)
            if prop is not None:
                self._patch(cudnn_class, attribute, _Watched(prop, self, flag))
        matmul_class = type(torch.backends.cuda.matmul)
        self._patch(matmul_class, "__setattr__", self._wrap_matmul(matmul_class.__setattr__))
        self._patch(
            torch,
            "set_float32_matmul_precision",
            self._wrap_precision(torch.set_float32_matmul_precision),
        )
        if self.device.type == "cuda" or any(flag in self.knobs.preset for flag in FLAGS):
            self.announce()

    def remove(self) -> None:
        for owner, name, original in reversed(self._restore):
            with contextlib.suppress(Exception):
                setattr(owner, name, original)
        self._restore = []

    def _patch(self, owner: Any, name: str, replacement: Any) -> None:
        self._restore.append(
            (owner, name, owner.__dict__[name] if name in owner.__dict__ else getattr(owner, name))
        )
        setattr(owner, name, replacement)

    def _wrap_matmul(self, original: Any) -> Any:
        @functools.wraps(original)
        def __setattr__(module: Any, name: str, value: Any) -> Any:
            result = original(module, name, value)
            if name in ("allow_tf32", "fp32_precision"):
                self.script_set("tf32")
            return result

        return __setattr__

    def _wrap_precision(self, original: Any) -> Any:
        @functools.wraps(original)
        def set_float32_matmul_precision(precision: str) -> None:
            original(precision)
            self.script_set("tf32")

        return set_float32_matmul_precision

    def script_set(self, flag: str) -> None:
        """The script assigned ``flag`` (called after the original setter ran)."""
        if self._ours or os.getpid() != self._pid:
            return
        try:
            site = script_site(self.torch, sys._getframe(1))
            first = flag not in self.owned
            self.owned[flag] = site
            value = self.values()[flag]
            if not self.announced:
                self.announce()  # with the script's value, as the script's
            else:
                self.knobs.update_entry(
                    self.names[flag],
                    enabled=False,
                    reason=f"set by the script at {site}: the script owns this flag",
                    value=value,
                )
            if first:
                self.knobs.link.log(
                    "info",
                    f"the script sets {flag} itself ({site}): its knob shows the script's value",
                )
        except Exception as exc:  # ours must never reach the script's assignment
            with contextlib.suppress(Exception):
                self.knobs.link.log("warning", f"could not follow the script's {flag}: {exc}")


class _Watched:
    """A ``ContextProp`` of ``torch.backends.cudnn`` that tells ``flags`` the script set it."""

    def __init__(self, prop: Any, flags: GlobalFlags, flag: str) -> None:
        self.prop = prop
        self.flags = flags
        self.flag = flag

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        return self.prop.__get__(obj, objtype)

    def __set__(self, obj: Any, value: Any) -> None:
        self.prop.__set__(obj, value)
        self.flags.script_set(self.flag)
