"""Zero-code DataLoader knobs of a watched script, in-process (``loader_swap``, ``script_knobs``,
``probe_knobs``): the epoch goes on with exactly its remaining batches, unchanged loaders are
untouched, refusals change nothing."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info

from gpuwatch.runner.loader_swap import LoaderHooks, LoaderSettings
from gpuwatch.runner.probe_knobs import ProbeKnobs
from gpuwatch.runner.script_knobs import ScriptLoaderKnobs

SIZE = 48
BATCH = 4


class Served(Dataset):
    """Each sample is (its index, the pid of the process that fetched it)."""

    def __len__(self) -> int:
        return SIZE

    def __getitem__(self, index: int) -> tuple[int, int]:
        return index, os.getpid()


class Stream(IterableDataset):
    def __iter__(self) -> Iterator[tuple[int, int]]:
        info = get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        for index in range(start, 16, step):
            yield index, os.getpid()


class FakeLink:
    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.logs: list[tuple[str, str]] = []

    def send(self, kind: str, **fields: Any) -> None:
        self.sent.append((kind, fields))

    def log(self, level: str, text: str) -> None:
        self.logs.append((level, text))

    def kinds(self, kind: str) -> list[dict[str, Any]]:
        return [fields for sent, fields in self.sent if sent == kind]


@pytest.fixture
def hooks() -> Iterator[LoaderHooks]:
    installed = LoaderHooks(torch, on_created=lambda *a: None, on_first_iter=lambda *a: None)
    installed.install()
    try:
        yield installed
    finally:
        installed.remove()


def make_loader(**options: Any) -> DataLoader:
    generator = torch.Generator().manual_seed(7)
    return DataLoader(Served(), batch_size=BATCH, shuffle=True, generator=generator, **options)


def batches(iterator: Any, n: int | None = None) -> list[tuple[list[int], set[int]]]:
    """(indices, pids that served them) of the next ``n`` batches (all if None)."""
    out = []
    for index, pids in iterator:
        out.append((index.tolist(), set(pids.tolist())))
        if n is not None and len(out) == n:
            break
    return out


def indices(rows: list[tuple[list[int], set[int]]]) -> list[list[int]]:
    return [row[0] for row in rows]


def reference(epochs: int = 2, **options: Any) -> list[list[list[int]]]:
    """The batches of two epochs of an unwatched loader, no hooks installed (a persistent
    loader draws no new worker seed at its second epoch, so its shuffle differs from one that
    is not)."""
    loader = make_loader(**options)
    torch.manual_seed(3)
    return [indices(batches(iter(loader))) for _ in range(epochs)]


def test_an_unchanged_loader_gives_the_batches_and_workers_it_gives_unwatched() -> None:
    expected = reference()
    unwatched_workers = make_loader(num_workers=2)
    plain = indices(batches(iter(unwatched_workers)))
    installed = LoaderHooks(torch, on_created=lambda *a: None, on_first_iter=lambda *a: None)
    installed.install()
    try:
        loader = make_loader()
        torch.manual_seed(3)
        watched = [indices(batches(iter(loader))) for _ in range(2)]
        with_workers = batches(iter(make_loader(num_workers=2)))
    finally:
        installed.remove()
    assert watched == expected
    assert indices(with_workers) == plain
    assert all(os.getpid() not in pids for _, pids in with_workers)  # served by its workers


@pytest.mark.parametrize(
    ("start", "then"),
    [
        ({}, LoaderSettings(2, False, False, 2)),
        ({"num_workers": 2}, LoaderSettings(0, False, False, 2)),
        ({"num_workers": 2, "persistent_workers": True}, LoaderSettings(1, False, True, 3)),
    ],
    ids=["0->2 workers", "2->0 workers", "persistent 2->1 workers"],
)
def test_a_change_mid_epoch_goes_on_with_exactly_the_remaining_batches(
    hooks: LoaderHooks, start: dict[str, Any], then: LoaderSettings
) -> None:
    expected = reference(**start)
    loader = make_loader(**start)
    torch.manual_seed(3)
    iterator = iter(loader)
    before = batches(iterator, 3)
    old_workers = list(getattr(iterator, "_workers", []))
    assert hooks.reconfigure(loader, then) is True
    after = batches(iterator)  # the script's own iterator answers from the new one
    assert indices(before + after) == expected[0]  # none twice, none skipped, same order
    own = [os.getpid() in pids for _, pids in after]
    assert own == [then.num_workers == 0] * len(after)
    assert not any(worker.is_alive() for worker in old_workers)  # old workers shut down
    assert indices(batches(iter(loader))) == expected[1]  # next epoch: same shuffle
    assert LoaderSettings.of(loader) == LoaderSettings(
        then.num_workers, then.pin_memory, then.persistent_workers, then.prefetch_factor
    )


def test_two_changes_in_one_epoch_and_an_unchanged_second_loader(hooks: LoaderHooks) -> None:
    expected = reference(1)[0]
    loader, other = make_loader(), make_loader()
    torch.manual_seed(3)
    iterator, untouched = iter(loader), iter(other)
    first = batches(iterator, 2)
    hooks.reconfigure(loader, LoaderSettings(2, False, False, 1))
    second = batches(iterator, 2)
    hooks.reconfigure(loader, LoaderSettings(2, False, False, 4))
    rest = batches(iterator)
    assert indices(first + second + rest) == expected
    assert all(os.getpid() not in pids for _, pids in second + rest)
    assert all(os.getpid() in pids for _, pids in batches(untouched))
    assert other.num_workers == 0


def test_a_persistent_loader_left_mid_epoch_and_iterated_again_is_changed_once(
    hooks: LoaderHooks,
) -> None:
    def run(changes: bool) -> list[list[int]]:
        loader = make_loader(num_workers=2, persistent_workers=True)
        torch.manual_seed(3)
        first = iter(loader)
        seen = batches(first, 3)
        if changes:
            hooks.reconfigure(loader, LoaderSettings(2, False, True, 3))
        seen += batches(first, 2)  # the script leaves this epoch here (a break)
        second = iter(loader)  # the replacement itself, reset for a new epoch
        seen += batches(second, 2)
        if changes:  # first and second both answer from one iterator: one replacement
            assert hooks.reconfigure(loader, LoaderSettings(1, False, True, 2))
            one = first.__dict__["_gpuwatch_replaced_by"]
            assert one is second.__dict__["_gpuwatch_replaced_by"] and one is loader._iterator
        seen += batches(second)
        return indices(seen)

    assert run(changes=True) == run(changes=False)


def test_an_iterable_dataset_takes_the_change_at_its_next_epoch(hooks: LoaderHooks) -> None:
    loader = DataLoader(Stream(), batch_size=4)
    iterator = iter(loader)
    first = [next(iterator)]
    assert hooks.reconfigure(loader, LoaderSettings(2, False, False, 2)) is False
    rest = list(iterator)
    assert all(os.getpid() in batch[1].tolist() for batch in first + rest)  # this epoch: as is
    assert sorted(i for b in first + rest for i in b[0].tolist()) == list(range(16))
    again = list(iter(loader))
    assert sorted(i for b in again for i in b[0].tolist()) == list(range(16))
    assert all(os.getpid() not in batch[1].tolist() for batch in again)  # its workers now


def _site_knobs() -> tuple[FakeLink, ProbeKnobs, ScriptLoaderKnobs]:
    link = FakeLink()
    knobs = ProbeKnobs(link, preset={"prefetch_factor": "4"})
    return link, knobs, ScriptLoaderKnobs(torch, knobs, cuda=False)


def test_the_first_loader_iterated_gets_the_plain_knob_names_and_a_set_applies() -> None:
    link, knobs, loaders = _site_knobs()
    loaders.install()
    try:
        loader = make_loader()  # this line is the loader's site
        line = make_loader.__code__.co_firstlineno + 2
        iterator = iter(loader)
        head = batches(iterator, 2)
        (announced,) = link.kinds("knobs")
        names = [entry["name"] for entry in announced["knobs"]]
        assert names == ["num_workers", "pin_memory", "persistent_workers", "prefetch_factor"]
        assert announced["knobs"][0]["label"] == f"DataLoader workers (test_script_knobs.py:{line})"
        # --set prefetch_factor=4 is the starting value; it matters once there are workers
        assert announced["values"] == {
            "num_workers": 0,
            "pin_memory": False,
            "persistent_workers": False,
            "prefetch_factor": 4,
        }
        pin = announced["knobs"][1]
        assert not pin["enabled"] and pin["reason"] == "needs CUDA"
        knobs.handle_set(
            {"kind": "set", "values": {"num_workers": 2}, "request": 5},
            first_step=2,
            flush=lambda: None,
        )
        (config,) = link.kinds("config")
        assert config["changed"] == {"num_workers": 2} and config["rebuilt"] == ["loader"]
        assert config["warmup_steps"] == 2 + 2 * 4
        assert loader.num_workers == 2 and loader.prefetch_factor == 4
        rest = batches(iterator)
        assert sorted(i for row in indices(head + rest) for i in row) == list(range(SIZE))
        assert all(os.getpid() not in pids for _, pids in rest)
        # a loader made later at the same place follows the change
        assert make_loader().num_workers == 2
    finally:
        loaders.remove()


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"pin_memory": True}, "pin_memory cannot be changed here: needs CUDA"),
        ({"num_workers": 2, "prefetch_factor": 0}, "prefetch_factor must be an integer from 1"),
        ({"num_workers": "two"}, "num_workers must be an integer from 0 to 16, got 'two'"),
        ({"amp": "bf16"}, "unknown knob 'amp'"),
    ],
)
def test_a_refused_set_leaves_the_loader_untouched(values: dict[str, Any], message: str) -> None:
    link, knobs, loaders = _site_knobs()
    loaders.install()
    try:
        loader = make_loader()
        iterator = iter(loader)
        batches(iterator, 1)
        knobs.handle_set(
            {"kind": "set", "values": values, "request": 1}, first_step=1, flush=lambda: None
        )
        (refused,) = link.kinds("refused")
        assert refused["message"].startswith(message)
        assert not link.kinds("config")
        assert LoaderSettings.of(loader) == LoaderSettings(0, False, False, 2)
        assert "_gpuwatch_replaced_by" not in iterator.__dict__
    finally:
        loaders.remove()


class NoProcesses:
    """A multiprocessing context that cannot start workers (as when the OS refuses)."""

    def Queue(self) -> None:  # multiprocessing's name
        raise OSError("no worker processes here")


# torch's own __del__ of the iterator whose workers never started complains, as it would unwatched
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_change_that_cannot_be_applied_is_refused_and_undone() -> None:
    link = FakeLink()
    knobs = ProbeKnobs(link)
    loaders = ScriptLoaderKnobs(torch, knobs, cuda=False)
    loaders.install()
    try:
        loader = DataLoader(Served(), batch_size=BATCH)
        object.__setattr__(loader, "_DataLoader__multiprocessing_context", NoProcesses())
        iterator = iter(loader)
        batches(iterator, 1)
        knobs.handle_set(
            {"kind": "set", "values": {"num_workers": 2}}, first_step=1, flush=lambda: None
        )
    finally:
        loaders.remove()
    (refused,) = link.kinds("refused")
    assert refused["message"].startswith("could not apply num_workers=2:")
    assert loader.num_workers == 0 and knobs.values["num_workers"] == 0
    assert len(batches(iterator)) == SIZE // BATCH - 1


def test_the_advisors_apply_for_an_input_bound_script_changes_its_loader() -> None:
    from test_advisor import row

    from gpuwatch.core.figures.advisor import Context, advise

    link, knobs, loaders = _site_knobs()
    loaders.install()
    try:
        loader = make_loader()
        iterator = iter(loader)
        head = batches(iterator, 1)
        announced = link.kinds("knobs")[-1]
        context = Context(announced["knobs"], announced["values"], "cpu", 2)
        (top, *_) = advise([row(data=62, kernel=38, settings=announced["values"])], context)
        assert top.rule == "input-bound" and top.suggestion == {"num_workers": 2}
        knobs.handle_set(  # what the Apply button sends
            {"kind": "set", "values": top.suggestion, "request": 3},
            first_step=1,
            flush=lambda: None,
        )
        (config,) = link.kinds("config")
        assert config["request"] == 3 and loader.num_workers == 2
        rest = batches(iterator)
        assert sorted(i for row_ in indices(head + rest) for i in row_) == list(range(SIZE))
    finally:
        loaders.remove()


def test_a_change_that_starts_workers_says_so_and_how_long_they_took() -> None:
    """The script waits for the new workers' first batch (seconds when they are spawned):
    the log says they are starting, how (the loader's start method), with the estimate, and
    then how long they took."""
    link, knobs, loaders = _site_knobs()
    loaders.install()
    try:
        loader = make_loader()
        iterator = iter(loader)
        head = batches(iterator, 2)
        knobs.handle_set(
            {"kind": "set", "values": {"num_workers": 2}, "request": 1},
            first_step=2,
            flush=lambda: None,
        )
        chosen = multiprocessing.get_start_method(allow_none=True)  # by an earlier test
        method = chosen or multiprocessing.get_all_start_methods()[0]
        said = [text for _, text in link.logs]
        assert any(text.startswith(f"starting 2 workers ({method}): ~") for text in said), said
        assert not any("delivered the first batch" in text for text in said)
        rest = batches(iterator)
        said = [text for _, text in link.logs]
        delivered = [text for text in said if "delivered the first batch" in text]
        assert len(delivered) == 1 and delivered[0].startswith(f"2 workers ({method}) ")
        assert sorted(i for row_ in indices(head + rest) for i in row_) == list(range(SIZE))
    finally:
        loaders.remove()


def test_reading_a_loaders_start_method_does_not_fix_the_scripts_default() -> None:
    """``multiprocessing.get_start_method()`` would set the default, and the script's own
    ``set_start_method`` later would fail: the method is read without that."""
    code = (
        "import multiprocessing, torch\n"
        "from torch.utils.data import DataLoader\n"
        "from gpuwatch.runner.worker_start import loader_start_method\n"
        "print(loader_start_method(DataLoader(range(4))))\n"
        "print(loader_start_method(DataLoader(range(4), num_workers=1,\n"
        "      multiprocessing_context='spawn')))\n"
        "multiprocessing.set_start_method('spawn')\n"  # raises if the default was fixed
        "print(loader_start_method(DataLoader(range(4))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    ).stdout.split()
    assert out == [multiprocessing.get_all_start_methods()[0], "spawn", "spawn"]
