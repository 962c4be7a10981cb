"""Everything that watches a user's script, built, installed and removed as one.

The hooks time their own bodies (``perf_counter_ns``, the script's calls they wrap and the
step boundary's controls left out) into one ``SpentTime``, and each step carries what was
spent on it to the GUI (``steps.instrument_ns``): gpuwatch's footprint measured where it is
spent. What this cannot see is torch's own slower path for a module call while a global hook
exists (``autohooks`` keeps that to the outermost modules).

``script_session`` runs the script between ``install`` and ``remove``; ``bench/overhead.py
--script`` installs and removes the same set around blocks of a script's loop in one process,
to price the hook path alone.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpuwatch.runner.autohooks import AutoHooks
from gpuwatch.runner.ddp_timing import DdpTiming
from gpuwatch.runner.global_flags import GlobalFlags
from gpuwatch.runner.link import Link
from gpuwatch.runner.model_knobs import ModelKnobs
from gpuwatch.runner.probe_agent import ProbeAgent
from gpuwatch.runner.probe_knobs import ProbeKnobs
from gpuwatch.runner.script_control import ScriptControl
from gpuwatch.runner.script_knobs import ScriptLoaderKnobs, take_preset
from gpuwatch.runner.step_columns import SpentTime
from gpuwatch.runner.step_recorder import StepRecorder
from gpuwatch.runner.timing import TimingBackend


@dataclass
class ScriptInstruments:
    """The step hooks, the step recorder, the zero-code knobs and the controls of one script."""

    knobs: ProbeKnobs
    loader_knobs: ScriptLoaderKnobs
    flags: GlobalFlags
    model_knobs: ModelKnobs
    control: ScriptControl
    recorder: StepRecorder
    hooks: AutoHooks
    agent: ProbeAgent

    @classmethod
    def build(
        cls,
        link: Link,
        torch: Any,
        device: Any,
        backend: TimingBackend,
        *,
        max_steps: int | None,
    ) -> ScriptInstruments:
        knobs = ProbeKnobs(link, preset=take_preset(link))
        loader_knobs = ScriptLoaderKnobs(torch, knobs, cuda=device.type == "cuda")
        flags = GlobalFlags(torch, knobs, device=device)
        model_knobs = ModelKnobs(torch, knobs, device=device)
        control = ScriptControl(link, knobs, max_steps=max_steps, device=device.type)
        spent = SpentTime()  # the hooks' own time, each step's share sent with it
        control.spent = spent
        recorder = StepRecorder(
            link,
            backend,
            boundary=control.at_boundary,
            config_id=functools.partial(getattr, knobs, "config_id"),  # read in C, every step
        )
        recorder.columns.spent = spent
        control.flush = recorder.flush
        hooks = AutoHooks(torch, recorder, spent)
        ddp_timing = DdpTiming(link)

        def first_outermost(module: Any) -> Callable[[Any], None] | None:
            model_knobs.saw_outermost(module)
            return ddp_timing.saw_outermost if ddp_timing.follows(module) else None

        hooks.on_first_outermost = first_outermost
        hooks.scaling = model_knobs.scaling  # fp16's GradScaler sees backward and step
        return cls(
            knobs,
            loader_knobs,
            flags,
            model_knobs,
            control,
            recorder,
            hooks,
            ProbeAgent(recorder, knobs, spent),
        )

    def install(self) -> None:
        """Attach the probe, watch the flags, hook the loaders and the steps, start the
        controls and the flush timer (the script runs next)."""
        from gpuwatch import probe

        probe.attach_runner(self.agent)
        self.flags.install()  # announces the flags as torch has them (a --set value applies now)
        self.loader_knobs.install()  # first: the step hooks' DataLoader wrapper calls into it
        self.hooks.install()
        self.control.start()
        self.recorder.flush_timer.start()

    def remove(self) -> None:
        """The script is over: no interrupt from now on, every patch undone."""
        from gpuwatch import probe

        self.control.script_done()
        self.hooks.remove()
        self.loader_knobs.remove()
        self.flags.remove()
        self.model_knobs.remove()
        probe.attach_runner(None)
