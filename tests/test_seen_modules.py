"""Modules known by identity: an entry lives as long as its module, and only for it."""

from __future__ import annotations

import gc

from torch import nn

from gpuwatch.runner.seen_modules import SeenModules


def test_a_module_is_known_with_its_value_until_it_is_gone() -> None:
    seen: SeenModules[str] = SeenModules()
    model, other = nn.Linear(2, 2), nn.Linear(2, 2)
    assert seen.get(model, "unseen") == "unseen"
    seen.add(model, "model")
    assert seen.get(model, "unseen") == "model"
    assert seen.get(other, "unseen") == "unseen"
    del model
    gc.collect()
    assert len(seen) == 0, "the entry left with its module"


def test_a_module_made_in_a_dead_ones_place_is_not_taken_for_it() -> None:
    """A loss module built inside the loop each step may take the id of the last one."""
    seen: SeenModules[str] = SeenModules()
    for _ in range(5):
        made = nn.ReLU()
        assert seen.get(made, "unseen") == "unseen"
        seen.add(made, "seen")
        del made  # freed here: the next one may take its id
    assert len(seen) == 0


def test_what_cannot_be_weakly_referenced_is_asked_about_again() -> None:
    seen: SeenModules[bool] = SeenModules()
    seen.add(3, True)
    assert seen.get(3, False) is False and len(seen) == 0
