"""Knob changes at a step boundary: validate a ``set``, apply it, answer ``config``/``refused``.

A ``set`` is all or nothing (docs/knobs.md §2): ``KnobSchema.validate`` refuses the whole of it
with one sentence, and training goes on under the old configuration. A valid change rebuilds
what it must (the loader through ``BatchSource``, everything else through ``TrainingState``) and
becomes a new config id whose first step is the next one.

Applying never crashes the run. What was decided, and why:

* **Applying raises at the boundary** (e.g. a loader option this torch rejects, a compile
  wrapper that cannot be built): the change never ran a step, so it is answered like any other
  change that was not made: the previous settings are restored and a ``refused`` carries the
  reason (plus an ``error`` log line). No config id is spent.
* **A step fails while a change is on trial** (its first ``warmup_steps`` steps, where lazy
  costs such as compilation or worker start-up surface): the step is dropped, an ``error`` log
  line gives the reason, the settings of the last configuration that trained fine come back,
  and a ``config`` (``request`` null) announces that reverted state, because the GUI has
  already seen the failed configuration begin. The reverted configuration is not on trial: if
  it fails too, the fault is not the change's and the run fails with the error.
* **Going back fails as well**: nothing sane is left to train with; the run fails with a clear
  ``error`` naming both reasons.

A change whose new loader runs worker processes is **prepared in the background**: its loader's
workers start and deliver a first batch while training goes on under the current
configuration (spawned workers take seconds to import torch). When the batch is there, a
message on the link's control queue brings the change to the next step boundary, where it is
applied as a whole and announced: ``t_ns`` is that boundary, ``apply_s`` runs from the moment
the ``set`` was taken up (so it includes the preparation), and ``first_step`` is the next step.
A ``set`` arriving meanwhile first completes the pending change (waiting for it), so changes
stay in order. A preparation that fails is answered like a change that could not be applied.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from gpuwatch.runner.knobs import KNOB_NAMES, SPECS, KnobError, KnobSchema, rebuilt, warmup_steps
from gpuwatch.runner.worker_start import WorkerStart, announce_start

if TYPE_CHECKING:  # both import torch, which the runner imports only after connecting
    from gpuwatch.runner.batch_source import BatchSource
    from gpuwatch.runner.training_state import TrainingState


class AnswerLink(Protocol):
    """What answering a change needs from ``gpuwatch.runner.link.Link``."""

    def send(self, kind: str, **fields: Any) -> None: ...

    def log(self, level: str, text: str) -> None: ...


class ReconfigureError(RuntimeError):
    """A change could not be applied and the previous settings could not be restored."""


@dataclass(eq=False)
class _Pending:
    """A valid change waiting for its new loader's workers (identity is its token)."""

    request: int | None
    asked: Any
    changed: dict[str, Any]
    previous: dict[str, Any]
    taken_ns: int
    start: WorkerStart | None = None  # its workers' start, announced and measured


@dataclass
class _Trial:
    """A change whose first steps have not all run yet, and the settings to go back to."""

    previous: dict[str, Any]
    steps_left: int


class Reconfigurer:
    """Owns the config ids and applies knob changes to ``state`` and ``batches``."""

    def __init__(
        self,
        schema: KnobSchema,
        state: TrainingState,
        batches: BatchSource,
        link: AnswerLink,
        *,
        config_id: int = 0,
        clock: Callable[[], int] = time.perf_counter_ns,
    ) -> None:
        self.schema = schema
        self.state = state
        self.batches = batches
        self.link = link
        self.clock = clock
        #: The id the steps are trained under.
        self.config_id = config_id
        self._trial: _Trial | None = None
        self._pending: _Pending | None = None
        #: Where a prepared loader announces itself (the link's control queue); without one
        #: (a scripted stand-in), loader changes are applied at once.
        controls = getattr(link, "controls", None)
        self._controls: queue.Queue[dict[str, Any]] | None = (
            controls if isinstance(controls, queue.Queue) else None
        )

    @property
    def values(self) -> dict[str, Any]:
        """The knob values in effect."""
        return self.state.values

    def handle_set(
        self, message: Mapping[str, Any], *, first_step: int, flush: Callable[[], None]
    ) -> None:
        """Answer one ``set``: refuse it, say it changes nothing, or apply it (``flush`` sends
        the buffered steps first, so every earlier step precedes the ``config``)."""
        token = message.get("prepared")
        if token is not None:  # ours, not the GUI's: a pending change's loader is ready
            if token is self._pending:
                self._complete_pending(first_step=first_step, flush=flush)
            return
        if self._pending is not None:  # changes apply in order: the pending one goes first
            self._complete_pending(first_step=first_step, flush=flush)
        request = message.get("request")
        if not isinstance(request, int) or isinstance(request, bool):
            request = None
        asked = message.get("values")
        try:
            clean = self.schema.validate(asked, self.values)
        except KnobError as exc:
            self.link.send("refused", request=request, values=_as_sent(asked), message=str(exc))
            return
        changed = {name: value for name, value in clean.items() if self.values[name] != value}
        if not changed:
            self.link.log(
                "info",
                f"nothing to change: {_describe(clean) or 'an empty set'} is already in effect",
            )
            return
        previous = dict(self.values)
        t_ns = self.clock()
        if self._controls is not None and _prepares_loader(changed, {**previous, **changed}):
            self._prepare(_Pending(request, asked, changed, previous, t_ns))
            return
        try:
            self._apply({**previous, **changed}, changed)
        except Exception as exc:
            reason = f"could not apply {_describe(changed)}: {_reason(exc)}"
            self.link.log("error", f"{reason}; the previous settings stay in effect")
            self._restore(previous, changed, exc, reason)
            self.link.send("refused", request=request, values=_as_sent(asked), message=reason)
            return
        if self._trial is None:
            self._trial = _Trial(previous, 0)
        self._trial.steps_left = warmup_steps(changed, self.values)
        flush()
        self._announce(changed, request=request, t_ns=t_ns, first_step=first_step)

    def _prepare(self, pending: _Pending) -> None:
        """Start the new loader's workers; the change completes when its first batch is in."""
        controls = self._controls
        assert controls is not None
        values = {**pending.previous, **pending.changed}
        pending.start = announce_start(
            int(values["num_workers"]),
            lambda text: self.link.log("info", text),
            meanwhile=f"; preparing {_describe(pending.changed)} while training goes on",
        )

        def ready() -> None:
            if pending.start is not None:
                pending.start.ready()
            controls.put({"kind": "set", "prepared": pending})

        try:
            self.batches.prepare(values, on_ready=ready)
        except Exception as exc:  # building the loader failed: nothing changed
            reason = f"could not apply {_describe(pending.changed)}: {_reason(exc)}"
            self.link.log("error", f"{reason}; the previous settings stay in effect")
            self.link.send(
                "refused", request=pending.request, values=_as_sent(pending.asked), message=reason
            )
            return
        self._pending = pending

    def _complete_pending(self, *, first_step: int, flush: Callable[[], None]) -> None:
        """Switch to the prepared loader (waiting for it if need be) and apply the rest of
        the change at this boundary; or refuse it if preparing failed."""
        pending, self._pending = self._pending, None
        assert pending is not None
        t_ns = self.clock()
        values = {**pending.previous, **pending.changed}
        try:
            self.batches.switch()
        except Exception as exc:  # the workers failed: the old loader is still current
            self._refuse_pending(pending, exc)
            return
        try:
            self.state.apply(values, pending.changed)
        except Exception as exc:  # undo the loader switch too
            self._restore(
                pending.previous,
                pending.changed,
                exc,
                f"could not apply {_describe(pending.changed)}: {_reason(exc)}",
            )
            self._refuse_pending(pending, exc)
            return
        if pending.start is not None:
            pending.start.report()
        if self._trial is None:
            self._trial = _Trial(pending.previous, 0)
        self._trial.steps_left = warmup_steps(pending.changed, self.values)
        flush()
        self._announce(
            pending.changed,
            request=pending.request,
            t_ns=t_ns,
            first_step=first_step,
            taken_ns=pending.taken_ns,
        )

    def _refuse_pending(self, pending: _Pending, exc: BaseException) -> None:
        reason = f"could not apply {_describe(pending.changed)}: {_reason(exc)}"
        self.link.log("error", f"{reason}; the previous settings stay in effect")
        self.link.send(
            "refused", request=pending.request, values=_as_sent(pending.asked), message=reason
        )

    def step_done(self) -> None:
        """A step finished: one step less of the current change's trial."""
        if self._trial is not None:
            self._trial.steps_left -= 1
            if self._trial.steps_left <= 0:
                self._trial = None

    def step_failed(self, exc: BaseException, *, step_id: int, flush: Callable[[], None]) -> bool:
        """A step raised. True if it was a change on trial, now reverted (keep training);
        False if the failure is not a change's (the caller lets it end the run)."""
        trial, self._trial = self._trial, None
        if trial is None:
            return False
        if self._pending is not None:  # going back supersedes a change still preparing
            pending, self._pending = self._pending, None
            self.batches.discard_prepared()
            self._refuse_pending(
                pending, RuntimeError(f"step {step_id} of the previous change failed first")
            )
        back = {
            name: trial.previous[name]
            for name in KNOB_NAMES
            if self.values[name] != trial.previous[name]
        }
        reason = f"step {step_id} failed under config {self.config_id}: {_reason(exc)}"
        self.link.log("error", f"{reason}; going back to {_describe(back)}")
        self.state.optimizer.zero_grad(set_to_none=True)  # whatever the failed step left
        failed_mode = self.values["compile"]
        t_ns = self.clock()
        self._restore(trial.previous, back, exc, reason)
        if "compile" in back:  # choosing that mode again compiles afresh
            self.state.forget_compiled(failed_mode)
        flush()
        self._announce(back, request=None, t_ns=t_ns, first_step=step_id)
        return True

    def _apply(self, values: dict[str, Any], changed: Mapping[str, Any]) -> None:
        if any(SPECS[name].rebuilds == "loader" for name in changed):
            self.batches.rebuild(values)
        self.state.apply(values, changed)

    def _restore(
        self, previous: dict[str, Any], touched: Mapping[str, Any], exc: BaseException, reason: str
    ) -> None:
        """Redo ``previous`` for the ``touched`` knobs and any that differ, or end the run."""
        back = {
            name: previous[name]
            for name in KNOB_NAMES
            if name in touched or self.values[name] != previous[name]
        }
        try:
            self._apply(dict(previous), back)
        except Exception as again:
            raise ReconfigureError(
                f"{reason}, and going back to the previous settings failed too: {_reason(again)}"
            ) from exc

    def _announce(
        self,
        changed: Mapping[str, Any],
        *,
        request: int | None,
        t_ns: int,
        first_step: int,
        taken_ns: int | None = None,
    ) -> None:
        """``apply_s`` runs from ``taken_ns`` (a prepared change: when its ``set`` was taken
        up), else from ``t_ns``."""
        self.config_id += 1
        since = t_ns if taken_ns is None else taken_ns
        self.link.send(
            "config",
            id=self.config_id,
            request=request,
            values=dict(self.values),
            changed=dict(changed),
            t_ns=t_ns,
            apply_s=round((self.clock() - since) / 1e9, 6),
            first_step=first_step,
            warmup_steps=warmup_steps(changed, self.values),
            rebuilt=rebuilt(changed),
        )


def _prepares_loader(changed: Mapping[str, Any], values: Mapping[str, Any]) -> bool:
    """The change rebuilds the loader and the new one starts worker processes."""
    return (
        any(SPECS[name].rebuilds == "loader" for name in changed) and int(values["num_workers"]) > 0
    )


def _describe(values: Mapping[str, Any]) -> str:
    return ", ".join(f"{name}={value}" for name, value in values.items())


def _reason(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def _as_sent(values: Any) -> dict[str, Any]:
    """``refused.values`` must be an object even if the ``set`` carried something else."""
    return dict(values) if isinstance(values, Mapping) else {}
