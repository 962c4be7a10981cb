"""Modules known by identity for as long as they live, each with a value.

The step hooks ask at every outermost forward whether they know its module, and the model
knobs whether they have examined it. A ``WeakSet`` or ``WeakKeyDictionary`` lookup runs Python
code (and hashes the module); this is a dictionary lookup by ``id`` and a weak reference call.
An entry leaves with its module (a script that builds a loss module each step leaves nothing
behind), and a new module that reuses a dead one's id is not taken for it.
"""

from __future__ import annotations

import contextlib
import weakref
from typing import Any, Generic, TypeVar

V = TypeVar("V")


class SeenModules(Generic[V]):
    """id(module) → (weak reference, value)."""

    def __init__(self) -> None:
        self._entries: dict[int, tuple[weakref.ref[Any], V]] = {}

    def get(self, module: Any, default: V) -> V:
        """``module``'s value, or ``default`` for a module not seen (or not the one seen)."""
        entry = self._entries.get(id(module))
        if entry is not None and entry[0]() is module:
            return entry[1]
        return default

    def add(self, module: Any, value: V) -> None:
        """``module`` is known from now on with ``value``. Its entry leaves with it, unless a
        newer module with its id replaced it already. A module that cannot be weakly
        referenced is not remembered (it is asked about again)."""
        key, entries = id(module), self._entries

        def forget(ref: weakref.ref[Any]) -> None:
            entry = entries.get(key)
            if entry is not None and entry[0] is ref:
                del entries[key]

        with contextlib.suppress(TypeError):
            entries[key] = (weakref.ref(module, forget), value)

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)
