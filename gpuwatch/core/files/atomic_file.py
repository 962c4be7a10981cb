"""Write an output file whole or not at all: a temp file beside the target, renamed on success.

An export that fails half-way (a full disk, a bug, a kill) must neither leave a truncated file
that looks complete nor destroy the good file it was replacing. ``os.replace`` within one
folder is atomic on POSIX and Windows, so a reader sees the old file or the new one, never a
mixture. The temp file is named after the target and its writer's pid, so the next write to
the same target removes what a killed writer left.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

import psutil

PARTIAL_SUFFIX = ".partial"


def partial_name(target: Path, pid: int | None = None) -> str:
    """``.NAME.PID.RANDOM.partial``: hidden, beside the target, saying whose it is."""
    pid = os.getpid() if pid is None else pid
    return f".{target.name}.{pid}.{secrets.token_hex(4)}{PARTIAL_SUFFIX}"


@contextlib.contextmanager
def atomic_output(target: str | Path) -> Iterator[TextIO]:
    """A text stream whose content replaces ``target`` only if the block ends without error.

    The new file gets the permissions a plain ``open(target, "w")`` would give it.
    """
    target = Path(target)
    remove_stale_partials(target)
    temp = target.with_name(partial_name(target))
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as stream:
            yield stream
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            temp.unlink()
        raise


def remove_stale_partials(target: Path) -> list[Path]:
    """Remove the temp files of writers to ``target`` that are no longer running."""
    pattern = re.compile(
        rf"^\.{re.escape(target.name)}\.(\d+)\.[0-9a-f]+"
        rf"{re.escape(PARTIAL_SUFFIX)}$"
    )
    removed = []
    with contextlib.suppress(OSError):
        for entry in target.parent.iterdir():
            match = pattern.match(entry.name)
            if match is None or _alive(int(match.group(1))):
                continue
            with contextlib.suppress(OSError):
                entry.unlink()
                removed.append(entry)
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        return psutil.pid_exists(pid)
    except Exception:  # cannot tell: leave its file alone
        return True
