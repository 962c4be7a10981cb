"""Zero-code knobs for a watched script: the worker settings of each DataLoader it iterates.

A script run by ``gpuwatch run`` gets, for every place that creates a DataLoader it iterates
(``train.py:88``), the loader knobs of docs/knobs.md §1: ``num_workers``, ``pin_memory``,
``persistent_workers`` and ``prefetch_factor``, starting at the values the script gave that
loader. They join the script's ``gw.knob`` knobs in one schema (``ProbeKnobs``) and travel in
the same ``knobs``/``set``/``config`` messages, so the window's panel, scoreboard, segments,
recordings and the advisor treat them as they treat the built-in ones. The first place iterated
gets the plain names (``num_workers``: what the advisor suggests and ``--set`` names); each
further place gets them suffixed with its site (``num_workers@train.py:120``).

A change applies to every loader created at that place, now and later; only the settings the
user changed are overridden, the others stay the script's. How a live loader takes it (the epoch
goes on with its remaining batches; an IterableDataset at its next epoch) is ``loader_swap``'s.
``pin_memory`` needs CUDA, as for the built-in knob.
"""

from __future__ import annotations

import dataclasses
import json
import os
import weakref
from collections.abc import Mapping
from typing import Any

from gpuwatch.runner.knobs import SPECS, loader_warmup
from gpuwatch.runner.loader_swap import LoaderHooks, LoaderRecord, LoaderSettings
from gpuwatch.runner.probe_knobs import ProbeKnobs
from gpuwatch.runner.worker_start import WorkerStart, announce_start

#: ``gpuwatch run --set k=v``: the runner reads the values (a JSON object of texts) from this
#: environment variable and removes it before the script runs.
PRESET_ENV = "GPUWATCH_SCRIPT_SET"
#: The knobs of each loader, in display order (their specs are the built-in ones).
LOADER_KNOBS = ("num_workers", "pin_memory", "persistent_workers", "prefetch_factor")
NEEDS_CUDA = "needs CUDA"


class LoaderSite:
    """The loader knobs of one place in the script that creates DataLoaders (a ``KnobOwner``)."""

    rebuilds = "loader"

    def __init__(
        self, hooks: LoaderHooks, site: str, first: LoaderRecord, *, plain: bool, cuda: bool
    ) -> None:
        self.hooks = hooks
        self.site = site
        self.iterable = first.iterable
        self.cuda = cuda
        #: knob → schema name
        self.names = {knob: knob if plain else f"{knob}@{site}" for knob in LOADER_KNOBS}
        self.shown = first.own
        #: The settings the user changed (knob → value); the others stay each loader's own.
        self.overrides: dict[str, Any] = {}
        self.loaders: weakref.WeakSet[Any] = weakref.WeakSet()

    def entries(self) -> list[dict[str, Any]]:
        """The schema entries (docs/knobs.md §2) of this place's knobs."""
        where = f"the DataLoader created at {self.site}"
        if self.iterable:
            where += "; an IterableDataset takes a change at its next epoch"
        else:
            where += "; the epoch goes on where it was"
        out = []
        for knob in LOADER_KNOBS:
            spec = SPECS[knob]
            default = getattr(self.shown, knob)
            high = None if spec.max is None else max(int(spec.max), int(default))
            reason = NEEDS_CUDA if knob == "pin_memory" and not self.cuda else None
            out.append(
                {
                    "name": self.names[knob],
                    "label": f"{spec.label} ({self.site})",
                    "group": "loader",
                    "type": spec.type,
                    "default": default,
                    "min": None if spec.min is None else int(spec.min),
                    "max": high,
                    "choices": None,
                    "unit": spec.unit,
                    "enabled": reason is None,
                    "reason": reason,
                    "disabled_choices": {},
                    "rebuilds": "loader",
                    "help": f"{spec.help} ({where})",
                }
            )
        return out

    def settings(self, own: LoaderSettings, overrides: Mapping[str, Any]) -> LoaderSettings:
        return dataclasses.replace(own, **overrides)

    def apply(self, changed: Mapping[str, Any]) -> str | None:
        knob_of = {name: knob for knob, name in self.names.items()}
        overrides = {**self.overrides, **{knob_of[name]: v for name, v in changed.items()}}
        done: list[Any] = []
        live = False
        try:
            for loader in list(self.loaders):
                record = self.hooks.loaders[loader]
                live |= self.hooks.reconfigure(loader, self.settings(record.own, overrides))
                done.append(loader)
        except BaseException:
            for loader in done:
                own = self.hooks.loaders[loader].own
                self.hooks.reconfigure(loader, self.settings(own, self.overrides))
            raise
        self.overrides = overrides
        self.shown = self.settings(self.shown, overrides)
        loader = f"the DataLoader from {self.site}"
        if self.iterable:
            return f"{loader} (an IterableDataset) takes the change at its next epoch"
        if live:
            return f"{loader} goes on with the rest of its epoch under the new settings"
        return None

    def warmup_steps(self) -> int:
        return loader_warmup(dataclasses.asdict(self.shown))

    def rename(self, name: str) -> str:
        knob = next(k for k, n in self.names.items() if n == name)
        self.names[knob] = f"{knob}@{self.site}"
        return self.names[knob]

    def adopt(self, loader: Any, record: LoaderRecord) -> None:
        """A loader created here: it follows the changes made to this place so far."""
        self.loaders.add(loader)
        if self.overrides:
            self.hooks.reconfigure(loader, self.settings(record.own, self.overrides))


class ScriptLoaderKnobs:
    """Turns the loaders ``LoaderHooks`` sees into ``LoaderSite`` knobs in ``knobs``."""

    def __init__(self, torch: Any, knobs: ProbeKnobs, *, cuda: bool) -> None:
        self.knobs = knobs
        self.cuda = cuda
        self.hooks = LoaderHooks(
            torch,
            on_created=self._created,
            on_first_iter=self._first_iter,
            on_error=self._failed,
            on_workers_start=self._workers_start,
        )
        self.sites: dict[str, LoaderSite] = {}

    def install(self) -> None:
        self.hooks.install()

    def remove(self) -> None:
        self.hooks.remove()

    def end_workers(self) -> None:
        """The script is over: its loaders' workers leave now (``LoaderHooks.end_workers``)."""
        self.hooks.end_workers()

    def _failed(self, exc: Exception) -> None:
        self.knobs.link.log(
            "warning",
            f"the DataLoader knobs are off: {type(exc).__name__}: {exc} "
            "(the script's loaders go on as it made them)",
        )

    def _workers_start(self, workers: int, method: str) -> WorkerStart:
        """ "starting 2 workers (spawn): ~5 s" in the log while the script waits for their
        first batch, then how long they took."""
        return announce_start(
            workers, lambda text: self.knobs.link.log("info", text), method=method
        )

    def _created(self, loader: Any, record: LoaderRecord) -> None:
        site = self.sites.get(record.site)
        if site is not None:
            site.adopt(loader, record)

    def _first_iter(self, loader: Any, record: LoaderRecord) -> None:
        site = self.sites.get(record.site)
        if site is not None:
            site.loaders.add(loader)
            return
        plain = not self.sites and not any(self.knobs.taken(knob) for knob in LOADER_KNOBS)
        site = LoaderSite(self.hooks, record.site, record, plain=plain, cuda=self.cuda)
        self.sites[record.site] = site
        site.loaders.update(
            other for other, known in list(self.hooks.loaders.items()) if known.site == record.site
        )
        self.knobs.add_knobs(site.entries(), site)


def take_preset(link: Any) -> dict[str, str]:
    """The ``--set`` values from ``PRESET_ENV``, which is removed (the script does not see
    it); a value that is not a JSON object of texts is logged and ignored."""
    text = os.environ.pop(PRESET_ENV, None)
    if not text:
        return {}
    try:
        values = json.loads(text)
        if not isinstance(values, dict) or not all(isinstance(v, str) for v in values.values()):
            raise ValueError("not an object of texts")
    except ValueError as exc:
        link.log("error", f"{PRESET_ENV} is not usable ({exc}): no --set value applies")
        return {}
    return values
